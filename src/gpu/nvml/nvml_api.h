// Our own declarations of the parts of the NVML C ABI that discovery uses.
//
// We do not include nvml.h: the backend must build on machines without the CUDA
// toolkit, and the library is loaded with dlopen anyway. Everything here must match the
// real libnvidia-ml.so.1 bit for bit (sizes, field order, enum values), because the
// same code runs against the real driver; the static_asserts pin the layouts.
//
// NVML enums are plain C enums (4 bytes, values below 2^31), so we pass them as int /
// unsigned int. Functions use the platform C calling convention.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpupool::gpu::nvml {

// nvmlReturn_t.
using Return = int;
inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorUninitialized = 1;
inline constexpr Return kErrorInvalidArgument = 2;
inline constexpr Return kErrorNotSupported = 3;
inline constexpr Return kErrorNoPermission = 4;
inline constexpr Return kErrorAlreadyInitialized = 5;
inline constexpr Return kErrorNotFound = 6;
inline constexpr Return kErrorInsufficientSize = 7;
inline constexpr Return kErrorInsufficientPower = 8;
inline constexpr Return kErrorDriverNotLoaded = 9;
inline constexpr Return kErrorTimeout = 10;
inline constexpr Return kErrorIrqIssue = 11;
inline constexpr Return kErrorLibraryNotFound = 12;
inline constexpr Return kErrorFunctionNotFound = 13;
inline constexpr Return kErrorCorruptedInforom = 14;
inline constexpr Return kErrorGpuIsLost = 15;
inline constexpr Return kErrorResetRequired = 16;
inline constexpr Return kErrorOperatingSystem = 17;
inline constexpr Return kErrorLibRmVersionMismatch = 18;
inline constexpr Return kErrorInUse = 19;
inline constexpr Return kErrorMemory = 20;
inline constexpr Return kErrorNoData = 21;
inline constexpr Return kErrorVgpuEccNotSupported = 22;
inline constexpr Return kErrorInsufficientResources = 23;
inline constexpr Return kErrorFreqNotSupported = 24;
inline constexpr Return kErrorArgumentVersionMismatch = 25;
inline constexpr Return kErrorDeprecated = 26;
inline constexpr Return kErrorNotReady = 27;
inline constexpr Return kErrorGpuNotFound = 28;
inline constexpr Return kErrorInvalidState = 29;
inline constexpr Return kErrorUnknown = 999;

// The NVML_ERROR_* name of a return code, or nullptr for codes we do not know.
const char* ReturnCodeName(Return code);

// nvmlDevice_t: an opaque handle owned by the library.
struct DeviceOpaque;
using Device = DeviceOpaque*;

// Buffer sizes from nvml.h (the _V2 sizes are the current, larger ones).
inline constexpr unsigned kDeviceNameBufferSize = 96;      // NVML_DEVICE_NAME_V2_BUFFER_SIZE
inline constexpr unsigned kDeviceUuidBufferSize = 96;      // NVML_DEVICE_UUID_V2_BUFFER_SIZE
inline constexpr unsigned kDriverVersionBufferSize = 80;   // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE
inline constexpr unsigned kPciBusIdBufferSize = 32;        // NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE
inline constexpr unsigned kPciBusIdLegacyBufferSize = 16;  // ..._BUS_ID_BUFFER_V2_SIZE
inline constexpr unsigned kNvLinkMaxLinks = 18;            // NVML_NVLINK_MAX_LINKS (R535+)

// nvmlPciInfo_t as filled by nvmlDeviceGetPciInfo_v2/_v3 and
// nvmlDeviceGetNvLinkRemotePciInfo_v2. The unversioned (v1) calls fill an older, shorter
// layout (busId[16], then the same domain/bus/device words); its prefix matches this one,
// so a zeroed PciInfo is a safe buffer for them if only that prefix is read.
struct PciInfo {
  char bus_id_legacy[kPciBusIdLegacyBufferSize];  // "0000:3b:00.0"
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pci_device_id;  // device id << 16 | vendor id
  unsigned int pci_subsystem_id;
  char bus_id[kPciBusIdBufferSize];  // "00000000:3b:00.0"
};
static_assert(sizeof(PciInfo) == 68, "nvmlPciInfo_t layout");

// nvmlMemory_t (v1, as filled by nvmlDeviceGetMemoryInfo), in bytes.
struct Memory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
static_assert(sizeof(Memory) == 24, "nvmlMemory_t layout");

// nvmlUtilization_t, in percent over the last sample period.
struct Utilization {
  unsigned int gpu;
  unsigned int memory;
};
static_assert(sizeof(Utilization) == 8, "nvmlUtilization_t layout");

// nvmlProcessInfo_t as nvmlDeviceGetComputeRunningProcesses_v2/_v3 fill it.
struct ProcessInfo {
  unsigned int pid;
  unsigned long long used_gpu_memory;  // bytes; NVML_VALUE_NOT_AVAILABLE (~0) when unknown
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};
static_assert(sizeof(ProcessInfo) == 24, "nvmlProcessInfo_t layout");

// nvmlProcessUtilizationSample_t.
struct ProcessUtilizationSample {
  unsigned int pid;
  unsigned long long time_stamp;  // microseconds
  unsigned int sm_util;
  unsigned int mem_util;
  unsigned int enc_util;
  unsigned int dec_util;
};
static_assert(sizeof(ProcessUtilizationSample) == 32, "nvmlProcessUtilizationSample_t layout");

// nvmlEventSet_t: an opaque handle owned by the library (nvmlEventSetCreate / Free).
struct EventSetOpaque;
using EventSet = EventSetOpaque*;

// nvmlEventType* bits (nvmlDeviceRegisterEvents).
inline constexpr unsigned long long kEventTypeXidCriticalError = 0x8;
// nvmlEventData_t::eventData for an Xid the driver could not name.
inline constexpr unsigned long long kXidUnknown = 999;

// nvmlEventData_t as nvmlEventSetWait_v2 fills it. nvmlEventSetWait (v1, older drivers)
// fills only the first three fields (24 bytes); a zeroed EventData is a safe buffer for it.
struct EventData {
  Device device;                     // the device it happened on
  unsigned long long event_type;     // one kEventType* bit
  unsigned long long event_data;     // the Xid for kEventTypeXidCriticalError, else 0
  unsigned int gpu_instance_id;      // MIG: the GPU instance, else 0xFFFFFFFF
  unsigned int compute_instance_id;  // MIG: the compute instance, else 0xFFFFFFFF
};
static_assert(sizeof(EventData) == 32, "nvmlEventData_t layout");
static_assert(offsetof(EventData, event_data) == 16, "nvmlEventData_t layout");

// nvmlMemoryErrorType_t / nvmlEccCounterType_t.
inline constexpr int kMemoryErrorTypeUncorrected = 1;
inline constexpr int kVolatileEcc = 0;

// nvmlPageRetirementCause_t.
inline constexpr int kPageRetirementCauseMultipleSingleBitEcc = 0;
inline constexpr int kPageRetirementCauseDoubleBitEcc = 1;

// nvmlClocksEventReason* (formerly nvmlClocksThrottleReason*) bits that mean the hardware
// slows the clocks: HW slowdown, HW thermal slowdown, HW power brake slowdown.
inline constexpr unsigned long long kClocksEventReasonHwSlowdown = 0x8;
inline constexpr unsigned long long kClocksEventReasonHwThermalSlowdown = 0x40;
inline constexpr unsigned long long kClocksEventReasonHwPowerBrakeSlowdown = 0x80;

// nvmlEnableState_t.
inline constexpr unsigned kFeatureDisabled = 0;
inline constexpr unsigned kFeatureEnabled = 1;

// NVML_DEVICE_MIG_DISABLE / NVML_DEVICE_MIG_ENABLE.
inline constexpr unsigned kMigDisable = 0;
inline constexpr unsigned kMigEnable = 1;

// nvmlTemperatureSensors_t.
inline constexpr int kTemperatureGpu = 0;

// nvmlGpuTopologyLevel_t.
inline constexpr int kTopologyInternal = 0;
inline constexpr int kTopologySingle = 10;
inline constexpr int kTopologyMultiple = 20;
inline constexpr int kTopologyHostBridge = 30;
inline constexpr int kTopologyNode = 40;
inline constexpr int kTopologySystem = 50;

// nvmlIntNvLinkDeviceType_t.
inline constexpr int kNvLinkDeviceTypeGpu = 0;
inline constexpr int kNvLinkDeviceTypeIbmNpu = 1;
inline constexpr int kNvLinkDeviceTypeSwitch = 2;
inline constexpr int kNvLinkDeviceTypeUnknown = 0xFF;

// Function pointer types, one per entry point we use; the comment names the symbol.
using InitFn = Return (*)();                                   // nvmlInit_v2
using ShutdownFn = Return (*)();                               // nvmlShutdown
using ErrorStringFn = const char* (*)(Return);                 // nvmlErrorString
using GetCountFn = Return (*)(unsigned int*);                  // nvmlDeviceGetCount_v2
using GetHandleByIndexFn = Return (*)(unsigned int, Device*);  // nvmlDeviceGetHandleByIndex_v2
using GetStringFn = Return (*)(char*, unsigned int);           // nvmlSystemGetDriverVersion
using GetIntFn = Return (*)(int*);  // nvmlSystemGetCudaDriverVersion[_v2]
using DeviceStringFn = Return (*)(Device, char*, unsigned int);  // GetName, GetUUID
using DevicePciFn = Return (*)(Device, PciInfo*);                // GetPciInfo[_v2,_v3]
using DeviceMemoryFn = Return (*)(Device, Memory*);              // GetMemoryInfo
using DeviceUintFn = Return (*)(Device, unsigned int*);  // GetMinorNumber, GetNumaNodeId, ...
using DeviceTwoIntsFn = Return (*)(Device, int*, int*);  // GetCudaComputeCapability
using DeviceTwoUintsFn = Return (*)(Device, unsigned int*, unsigned int*);  // GetMigMode, EccMode
using DeviceCpuAffinityFn = Return (*)(Device, unsigned int, unsigned long*);  // GetCpuAffinity
using DeviceUtilizationFn = Return (*)(Device, Utilization*);        // GetUtilizationRates
using DeviceTemperatureFn = Return (*)(Device, int, unsigned int*);  // GetTemperature
using DeviceIndexedHandleFn = Return (*)(Device, unsigned int,
                                         Device*);  // GetMigDeviceHandleByIndex
using DeviceLinkUintFn = Return (*)(Device, unsigned int, unsigned int*);  // GetNvLinkState
using DeviceLinkPciFn = Return (*)(Device, unsigned int, PciInfo*);        // GetNvLinkRemotePciInfo
using DeviceLinkIntFn = Return (*)(Device, unsigned int, int*);  // GetNvLinkRemoteDeviceType
using DevicePairIntFn = Return (*)(Device, Device, int*);        // GetTopologyCommonAncestor
using DeviceEccCountFn = Return (*)(Device, int, int, unsigned long long*);  // GetTotalEccErrors
// nvmlDeviceGetRetiredPages(device, cause, &count, addresses): count 0 asks for the count.
using DeviceRetiredPagesFn = Return (*)(Device, int, unsigned int*, unsigned long long*);
// nvmlDeviceGetRemappedRows(device, &corrRows, &uncRows, &isPending, &failureOccurred).
using DeviceRemappedRowsFn = Return (*)(Device, unsigned int*, unsigned int*, unsigned int*,
                                        unsigned int*);
// nvmlDeviceGetCurrentClocksEventReasons, or (before R535) ...ThrottleReasons.
using DeviceUllFn = Return (*)(Device, unsigned long long*);
using DeviceProcessesFn = Return (*)(Device, unsigned int*,
                                     ProcessInfo*);  // GetComputeRunningProcesses_v3/_v2
using DeviceProcessUtilFn = Return (*)(Device, ProcessUtilizationSample*, unsigned int*,
                                       unsigned long long);  // GetProcessUtilization
using EventSetCreateFn = Return (*)(EventSet*);              // nvmlEventSetCreate
using DeviceRegisterEventsFn = Return (*)(Device, unsigned long long,
                                          EventSet);  // nvmlDeviceRegisterEvents
using EventSetWaitFn = Return (*)(EventSet, EventData*,
                                  unsigned int);  // nvmlEventSetWait_v2 / nvmlEventSetWait (ms)
using EventSetFreeFn = Return (*)(EventSet);      // nvmlEventSetFree

}  // namespace gpupool::gpu::nvml
