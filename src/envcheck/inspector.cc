#include "envcheck/inspector.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>
#include <tuple>

#include "common/strings.h"
#include "envcheck/cuda_compat.h"
#include "envcheck/elf_file.h"

namespace gpupool::envcheck {
namespace {

namespace fs = std::filesystem;

// A read-only memory map of a file; unmapped on destruction.
class MappedFile {
 public:
  static Result<MappedFile> Open(const std::string& path, uint64_t max_bytes) {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::Unavailable("cannot open " + path);
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      close(fd);
      return Status::Unavailable("not a regular file: " + path);
    }
    if (static_cast<uint64_t>(st.st_size) > max_bytes) {
      close(fd);
      return Status::ResourceExhausted(path + " is larger than the inspection limit");
    }
    MappedFile m;
    m.size_ = static_cast<size_t>(st.st_size);
    if (m.size_ > 0) {
      void* p = mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        close(fd);
        return Status::Unavailable("cannot map " + path);
      }
      m.data_ = static_cast<const uint8_t*>(p);
    }
    close(fd);
    return m;
  }
  MappedFile(MappedFile&& o) noexcept : data_(o.data_), size_(o.size_) { o.data_ = nullptr; }
  MappedFile& operator=(MappedFile&&) = delete;
  ~MappedFile() {
    if (data_ != nullptr) munmap(const_cast<uint8_t*>(data_), size_);
  }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

struct LibraryPattern {
  const char* name;
  const char* prefix;  // file name up to the version, e.g. "libcudart.so."
  bool driver;         // belongs to the host driver: must not be in an image
};

const LibraryPattern kLibraries[] = {
    {"cudart", "libcudart.so.", false},
    {"cublas", "libcublas.so.", false},
    {"cublasLt", "libcublasLt.so.", false},
    {"cudnn", "libcudnn.so.", false},
    {"nccl", "libnccl.so.", false},
    {"cufft", "libcufft.so.", false},
    {"amdhip64", "libamdhip64.so.", false},
    {"rccl", "librccl.so.", false},
    {"libcuda", "libcuda.so.", true},
    {"libnvidia-ml", "libnvidia-ml.so.", true},
    {"libnvidia-ptxjitcompiler", "libnvidia-ptxjitcompiler.so.", true},
};

// The version after `prefix` in `file` when it is MAJOR.MINOR[.PATCH...][-BUILD], else "".
std::string VersionAfter(const std::string& file, std::string_view prefix) {
  if (!StartsWith(file, prefix)) return "";
  std::string v = file.substr(prefix.size());  // not const: returned, so moved
  int dots = 0;
  bool digit_before = false;
  for (size_t i = 0; i < v.size(); ++i) {
    const char c = v[i];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      digit_before = true;
    } else if (c == '.' && digit_before) {
      ++dots;
      digit_before = false;
    } else if (c == '-' && digit_before && dots >= 1) {
      // ROCm's "6.1.40091-a8dbc0c19" style build suffix
      for (size_t k = i + 1; k < v.size(); ++k) {
        if (!std::isalnum(static_cast<unsigned char>(v[k]))) return "";
      }
      return v;
    } else {
      return "";
    }
  }
  return dots >= 1 && digit_before ? v : "";
}

void AddUnique(std::vector<std::string>* v, const std::string& s) {
  if (std::find(v->begin(), v->end(), s) == v->end()) v->push_back(s);
}

Result<BinaryFound> InspectBytes(std::span<const uint8_t> bytes, const std::string& source) {
  BinaryFound found;
  GP_ASSIGN_OR_RETURN(ElfFile elf, ParseElf(bytes, source));
  // The work is bounded by the file's size: GPU code sections of a real file do not
  // overlap, and a hostile one whose thousands of section headers all name the same
  // bytes would otherwise be parsed once per header.
  uint64_t gpu_bytes = 0;
  auto gpu_section = [&](const ElfSection& s) -> Result<std::span<const uint8_t>> {
    const std::span<const uint8_t> section = SectionBytes(bytes, s);
    gpu_bytes += section.size();
    if (gpu_bytes > bytes.size()) {
      return Status::InvalidArgument(source + ": GPU code sections overlap (" + s.name +
                                     " runs the total past the file's " +
                                     std::to_string(bytes.size()) + " bytes)");
    }
    return section;
  };
  // What found.cuda and found.gfx_targets hold, for de-duplication in O(n log n).
  std::set<std::tuple<CudaCode::Kind, int, std::string, int, int, bool>> seen;
  std::set<std::string> seen_gfx;
  for (const ElfSection& s : elf.sections) {
    if (s.name == ".nv_fatbin" || s.name == "__nv_relfatbin") {
      GP_ASSIGN_OR_RETURN(std::span<const uint8_t> section, gpu_section(s));
      GP_ASSIGN_OR_RETURN(std::vector<CudaCode> codes,
                          ParseFatbinary(section, source + " " + s.name));
      for (CudaCode& c : codes) {
        if (seen.emplace(c.kind, c.arch, c.suffix, c.ptx_major, c.ptx_minor, c.compressed).second) {
          found.cuda.push_back(std::move(c));
        }
      }
    } else if (s.name == ".hip_fatbin") {
      GP_ASSIGN_OR_RETURN(std::span<const uint8_t> section, gpu_section(s));
      GP_ASSIGN_OR_RETURN(std::vector<std::string> targets,
                          ParseOffloadBundles(section, source + " " + s.name));
      for (const std::string& t : targets) {
        std::string gfx = GfxTargetOf(t);
        if (!gfx.empty() && seen_gfx.insert(gfx).second) found.gfx_targets.push_back(gfx);
      }
    }
  }
  return found;
}

std::string MajorMinor(const std::string& version) {
  auto v = Version::Parse(version);
  if (!v || v->parts.size() < 2) return version;
  return std::to_string(v->parts[0]) + "." + std::to_string(v->parts[1]);
}

// Whether version `a` is newer than `b`. One that does not parse (from a file name such
// as "libcudart.so.12.4-x" or "libcudart.so.99999999.1") is never newer, and any that
// parses is newer than it.
bool Newer(const std::string& a, const std::string& b) {
  const std::optional<Version> va = Version::Parse(a);
  const std::optional<Version> vb = Version::Parse(b);
  return va && (!vb || *va > *vb);
}

void Derive(EnvReport* r) {
  for (const BinaryFound& b : r->binaries) {
    for (const CudaCode& c : b.cuda) {
      AddUnique(c.kind == CudaCode::Kind::kSass ? &r->sass : &r->ptx, CudaCodeName(c));
    }
    for (const std::string& g : b.gfx_targets) AddUnique(&r->gfx_targets, g);
  }
  std::sort(r->sass.begin(), r->sass.end());
  std::sort(r->ptx.begin(), r->ptx.end());
  std::sort(r->gfx_targets.begin(), r->gfx_targets.end());
  // The CUDA the environment needs: its runtime's, else the newest PTX ISA it carries.
  for (const LibraryFound& l : r->libraries) {
    if (l.name == "cudart" &&
        (r->cuda_version.empty() || Newer(MajorMinor(l.version), r->cuda_version))) {
      r->cuda_version = MajorMinor(l.version);
      r->needs_from = "CUDA runtime " + l.path;
    }
    if (l.name == "amdhip64") r->hip_version = l.version;
  }
  if (r->cuda_version.empty()) {
    for (const BinaryFound& b : r->binaries) {
      for (const CudaCode& c : b.cuda) {
        if (c.kind != CudaCode::Kind::kPtx) continue;
        const std::string cuda = CudaForPtx(c.ptx_major, c.ptx_minor);
        if (!cuda.empty() && (r->cuda_version.empty() || Newer(cuda, r->cuda_version))) {
          r->cuda_version = cuda;
          r->needs_from = "PTX ISA " + std::to_string(c.ptx_major) + "." +
                          std::to_string(c.ptx_minor) + " in " + b.path;
        }
      }
    }
  }
  if (!r->cuda_version.empty()) {
    Result<DriverNeed> need = DriverNeedFor(r->cuda_version);
    if (need.ok()) {
      r->min_driver = need->min_driver;
      r->min_driver_minor_compat = need->min_driver_minor_compat;
    } else {
      r->warnings.push_back(need.status().message());
    }
  }
}

}  // namespace

Result<BinaryFound> InspectElfFile(const std::string& path) {
  GP_ASSIGN_OR_RETURN(MappedFile m, MappedFile::Open(path, uint64_t{8} << 30));
  GP_ASSIGN_OR_RETURN(BinaryFound b, InspectBytes(m.bytes(), path));
  b.path = path;
  return b;
}

Result<BinaryFound> InspectElfBytes(std::span<const uint8_t> bytes, const std::string& source) {
  GP_ASSIGN_OR_RETURN(BinaryFound b, InspectBytes(bytes, source));
  b.path = source;
  return b;
}

Result<EnvReport> InspectTree(const std::string& root, const InspectOptions& options) {
  std::error_code ec;
  const fs::file_status st = fs::status(root, ec);
  if (ec || !fs::exists(st)) {
    return Status::NotFound("'" + root + "' does not exist: give a directory or an image");
  }
  EnvReport r;
  r.root = root;
  uint64_t total_bytes = 0;
  Status limit_hit;

  auto visit = [&](const fs::path& path) {
    const std::string rel =
        fs::is_directory(st) ? fs::relative(path, root, ec).string() : path.filename().string();
    const std::string file = path.filename().string();
    for (const LibraryPattern& lib : kLibraries) {
      if (std::string version = VersionAfter(file, lib.prefix); !version.empty()) {
        r.libraries.push_back({lib.name, version, rel});
        if (lib.driver) {
          r.warnings.push_back(
              rel +
              " is a host driver library baked into the environment: it must come from "
              "the node's driver at run time (remove it; mismatched copies break CUDA)");
        }
      }
    }
    Result<MappedFile> m = MappedFile::Open(path.string(), options.max_file_bytes);
    if (!m.ok()) {
      if (m.status().code() == StatusCode::kResourceExhausted)
        r.warnings.push_back(m.status().message());
      return;
    }
    total_bytes += m->bytes().size();
    if (options.max_total_bytes > 0 && total_bytes > options.max_total_bytes) {
      limit_hit = Status::ResourceExhausted(
          "'" + root + "' holds more than " + std::to_string(options.max_total_bytes >> 20) +
          " MiB of files, the limit for an inspection: inspect a smaller directory");
      return;
    }
    if (!LooksLikeElf(m->bytes())) return;
    Result<BinaryFound> b = InspectBytes(m->bytes(), rel);
    if (!b.ok()) {
      r.warnings.push_back(b.status().message());
      return;
    }
    if (b->cuda.empty() && b->gfx_targets.empty()) return;
    b->path = rel;
    r.binaries.push_back(std::move(*b));
  };

  if (fs::is_regular_file(st)) {
    ++r.files_scanned;
    visit(root);
  } else {
    fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec);
    if (ec) return Status::Unavailable("cannot read '" + root + "': " + ec.message());
    for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) {
        r.warnings.push_back("cannot read below " + it->path().string() + ": " + ec.message());
        ec.clear();
        continue;
      }
      if (!it->is_regular_file(ec) || it->is_symlink(ec)) continue;
      if (++r.files_scanned > options.max_files) {
        limit_hit = Status::ResourceExhausted(
            "'" + root + "' has more than " + std::to_string(options.max_files) +
            " files, the limit for an inspection: inspect a smaller directory");
        break;
      }
      if (options.deadline_ms > 0 && r.files_scanned % 64 == 0 &&
          std::chrono::duration_cast<std::chrono::milliseconds>(
              std::chrono::steady_clock::now().time_since_epoch())
                  .count() > options.deadline_ms) {
        limit_hit = Status::ResourceExhausted("inspecting '" + root +
                                              "' took longer than its time limit: inspect a "
                                              "smaller directory");
        break;
      }
      visit(it->path());
      if (!limit_hit.ok()) break;
    }
  }
  if (!limit_hit.ok()) {
    if (options.limits_are_errors) return limit_hit;
    r.warnings.push_back("stopped early: " + limit_hit.message());
  }
  std::sort(r.libraries.begin(), r.libraries.end(),
            [](const auto& a, const auto& b) { return a.path < b.path; });
  std::sort(r.binaries.begin(), r.binaries.end(),
            [](const auto& a, const auto& b) { return a.path < b.path; });
  Derive(&r);
  return r;
}

OrderedJson ReportToJson(const EnvReport& r) {
  OrderedJson j;
  j["root"] = r.root;
  j["cuda_version"] = r.cuda_version;
  j["needs_from"] = r.needs_from;
  j["min_driver"] = r.min_driver;
  j["min_driver_minor_version_compat"] = r.min_driver_minor_compat;
  j["sass"] = r.sass;
  j["ptx"] = r.ptx;
  j["gfx_targets"] = r.gfx_targets;
  j["hip_version"] = r.hip_version;
  OrderedJson libs = OrderedJson::array();
  for (const LibraryFound& l : r.libraries) {
    libs.push_back({{"name", l.name}, {"version", l.version}, {"path", l.path}});
  }
  j["libraries"] = std::move(libs);
  OrderedJson bins = OrderedJson::array();
  for (const BinaryFound& b : r.binaries) {
    OrderedJson codes = OrderedJson::array();
    for (const CudaCode& c : b.cuda) {
      OrderedJson cj{{"code", CudaCodeName(c)}, {"compressed", c.compressed}};
      if (c.kind == CudaCode::Kind::kPtx) {
        cj["ptx_isa"] = std::to_string(c.ptx_major) + "." + std::to_string(c.ptx_minor);
      }
      codes.push_back(std::move(cj));
    }
    bins.push_back({{"path", b.path}, {"cuda", std::move(codes)}, {"gfx_targets", b.gfx_targets}});
  }
  j["binaries"] = std::move(bins);
  j["warnings"] = r.warnings;
  j["files_scanned"] = r.files_scanned;
  j["compat_source"] = CompatSource();
  return j;
}

Status CheckNode(const EnvReport& r, const NodeOffer& node) {
  const bool wants_cuda = !r.cuda_version.empty() || !r.sass.empty() || !r.ptx.empty();
  if (wants_cuda) {
    if (node.driver_version.empty()) {
      return Status::FailedPrecondition("needs CUDA " +
                                        (r.cuda_version.empty() ? "" : r.cuda_version) + "; node " +
                                        node.name + " has no NVIDIA driver");
    }
    if (!r.min_driver.empty()) {
      auto have = Version::Parse(node.driver_version);
      auto need = Version::Parse(r.min_driver);
      if (have && need && *have < *need) {
        return Status::FailedPrecondition(
            "needs CUDA " + r.cuda_version + " -> driver >= " + r.min_driver + "; node " +
            node.name + " has " + node.driver_version +
            ": upgrade the node's driver or use an image built for CUDA " +
            (node.cuda_driver_version.empty() ? "the driver's version" : node.cuda_driver_version) +
            " or older");
      }
    }
    // Some GPU of the node must run some of the code, natively or by JIT.
    std::vector<CudaCode> codes;
    for (const std::vector<std::string>* names : {&r.sass, &r.ptx}) {
      for (const std::string& name : *names) {
        if (std::optional<CudaCode> c = ParseCudaCodeName(name)) codes.push_back(*c);
      }
    }
    if (!codes.empty() && !node.capabilities.empty()) {
      const bool any =
          std::any_of(node.capabilities.begin(), node.capabilities.end(), [&](const auto& cap) {
            return std::any_of(codes.begin(), codes.end(),
                               [&](const CudaCode& c) { return RunsOn(c, cap.first, cap.second); });
          });
      if (!any) {
        std::string caps;
        for (const auto& [ma, mi] : node.capabilities) {
          caps += (caps.empty() ? "" : ", ") + std::to_string(ma) + "." + std::to_string(mi);
        }
        std::string have;
        for (const std::string& s : r.sass) have += (have.empty() ? "" : " ") + s;
        for (const std::string& s : r.ptx) have += (have.empty() ? "" : " ") + s;
        return Status::FailedPrecondition("carries GPU code for " + have + " only; node " +
                                          node.name + " has compute capability " + caps +
                                          ": rebuild with -gencode for it, or with PTX");
      }
    }
  }
  if (!r.gfx_targets.empty()) {
    const bool any =
        std::any_of(node.gfx_targets.begin(), node.gfx_targets.end(), [&](const auto& g) {
          return std::any_of(r.gfx_targets.begin(), r.gfx_targets.end(), [&](const std::string& t) {
            return t == g || StartsWith(t, g + ":");
          });
        });
    if (!any) {
      std::string want;
      for (const std::string& t : r.gfx_targets) want += (want.empty() ? "" : ", ") + t;
      std::string have;
      for (const std::string& t : node.gfx_targets) have += (have.empty() ? "" : ", ") + t;
      return Status::FailedPrecondition("carries AMD code for " + want + "; node " + node.name +
                                        " has " + (have.empty() ? "no AMD GPU" : have));
    }
  }
  return Status::Ok();
}

}  // namespace gpupool::envcheck
