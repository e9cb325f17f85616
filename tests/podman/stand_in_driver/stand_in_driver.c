/* A stand-in for the NVIDIA driver's user-space libraries in the podman tests: built
 * twice, as libcuda.so.550.54.15 (SONAME libcuda.so.1) and libnvidia-ml.so.550.54.15
 * (SONAME libnvidia-ml.so.1), named and linked as the driver's are, so a container finds
 * it only the way it would find the real driver: by SONAME, through the linker cache. */

/* CUDA_ERROR_NO_DEVICE: what a driver without GPUs answers. */
int cuInit(unsigned int flags) {
  (void)flags;
  return 100;
}

/* NVML_ERROR_DRIVER_NOT_LOADED. */
int nvmlInit_v2(void) { return 9; }
