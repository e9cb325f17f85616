#include "gpu/fake/stand_in_library.h"

#include <elf.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include "common/file_util.h"
#include "common/strings.h"

namespace gpupool::gpu {
namespace {

#if defined(__x86_64__)
constexpr uint16_t kMachine = EM_X86_64;
#elif defined(__aarch64__) && defined(__ORDER_LITTLE_ENDIAN__) && \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
constexpr uint16_t kMachine = EM_AARCH64;
#else
constexpr uint16_t kMachine = EM_NONE;
#endif

// A multiple of every page size Linux uses (4, 16 and 64 KiB), which the loader requires
// of a PT_LOAD's alignment.
constexpr uint64_t kSegmentAlign = 0x10000;

size_t AlignUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

template <typename T>
void Put(std::string* out, size_t offset, const T& value) {
  std::memcpy(out->data() + offset, &value, sizeof value);
}

}  // namespace

// Layout: ELF header, three program headers (one RW PT_LOAD covering the whole file,
// PT_DYNAMIC, PT_GNU_STACK so no executable stack is asked for), then .hash, .dynsym,
// .dynstr, .dynamic and .shstrtab, then a section table so readers that go by sections
// (readelf, envcheck) see the SONAME as well as those that go by segments (ld.so,
// ldconfig). Virtual addresses equal file offsets.
Result<std::string> StandInLibrary(std::string_view soname) {
  if (kMachine == EM_NONE) {
    return Status::Unimplemented("stand-in driver libraries are made for x86_64 and aarch64 only");
  }
  if (soname.empty() || soname.size() > 255 || soname.find('/') != std::string_view::npos ||
      soname.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument("'" + std::string(soname) +
                                   "' cannot be a stand-in library's SONAME (a file name of at "
                                   "most 255 bytes)");
  }
  constexpr size_t kPhnum = 3;
  const size_t hash_off = sizeof(Elf64_Ehdr) + kPhnum * sizeof(Elf64_Phdr);
  const size_t hash_size = 4 * sizeof(uint32_t);  // nbucket, nchain, bucket[0], chain[0]
  const size_t dynsym_off = AlignUp(hash_off + hash_size, 8);
  const size_t dynstr_off = dynsym_off + sizeof(Elf64_Sym);  // the null symbol only
  const size_t dynstr_size = 1 + soname.size() + 1;
  const size_t dynamic_off = AlignUp(dynstr_off + dynstr_size, 8);
  constexpr size_t kDynCount = 7;
  const size_t dynamic_size = kDynCount * sizeof(Elf64_Dyn);
  static constexpr char kShstr[] = "\0.hash\0.dynsym\0.dynstr\0.dynamic\0.shstrtab";
  const size_t shstr_off = dynamic_off + dynamic_size;
  const size_t shstr_size = sizeof kShstr;
  const size_t shdr_off = AlignUp(shstr_off + shstr_size, 8);
  constexpr size_t kShnum = 6;
  const size_t file_size = shdr_off + kShnum * sizeof(Elf64_Shdr);

  std::string out(file_size, '\0');

  Elf64_Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_ident[EI_VERSION] = EV_CURRENT;
  eh.e_ident[EI_OSABI] = ELFOSABI_NONE;
  eh.e_type = ET_DYN;
  eh.e_machine = kMachine;
  eh.e_version = EV_CURRENT;
  eh.e_phoff = sizeof(Elf64_Ehdr);
  eh.e_shoff = shdr_off;
  eh.e_ehsize = sizeof(Elf64_Ehdr);
  eh.e_phentsize = sizeof(Elf64_Phdr);
  eh.e_phnum = kPhnum;
  eh.e_shentsize = sizeof(Elf64_Shdr);
  eh.e_shnum = kShnum;
  eh.e_shstrndx = kShnum - 1;
  Put(&out, 0, eh);

  Elf64_Phdr load{};
  load.p_type = PT_LOAD;
  load.p_flags = PF_R | PF_W;
  load.p_filesz = load.p_memsz = file_size;
  load.p_align = kSegmentAlign;
  Elf64_Phdr dyn{};
  dyn.p_type = PT_DYNAMIC;
  dyn.p_flags = PF_R | PF_W;
  dyn.p_offset = dyn.p_vaddr = dyn.p_paddr = dynamic_off;
  dyn.p_filesz = dyn.p_memsz = dynamic_size;
  dyn.p_align = 8;
  Elf64_Phdr stack{};
  stack.p_type = PT_GNU_STACK;
  stack.p_flags = PF_R | PF_W;
  stack.p_align = 16;
  Put(&out, sizeof(Elf64_Ehdr), load);
  Put(&out, sizeof(Elf64_Ehdr) + sizeof(Elf64_Phdr), dyn);
  Put(&out, sizeof(Elf64_Ehdr) + 2 * sizeof(Elf64_Phdr), stack);

  // SysV hash: one bucket, one chain entry, both STN_UNDEF: no symbol is ever found.
  Put(&out, hash_off, uint32_t{1});
  Put(&out, hash_off + 4, uint32_t{1});
  // The null symbol (all zero) is already in place; so is .dynstr's leading NUL.
  std::memcpy(out.data() + dynstr_off + 1, soname.data(), soname.size());

  const Elf64_Dyn dynamic[kDynCount] = {
      {DT_SONAME, {1}},
      {DT_HASH, {hash_off}},
      {DT_STRTAB, {dynstr_off}},
      {DT_SYMTAB, {dynsym_off}},
      {DT_STRSZ, {dynstr_size}},
      {DT_SYMENT, {sizeof(Elf64_Sym)}},
      {DT_NULL, {0}},
  };
  std::memcpy(out.data() + dynamic_off, dynamic, sizeof dynamic);
  std::memcpy(out.data() + shstr_off, kShstr, shstr_size);

  auto section = [&](size_t index, uint32_t name, uint32_t type, uint64_t flags, size_t off,
                     size_t size, uint32_t link, uint32_t info, uint64_t align, uint64_t entsize) {
    Elf64_Shdr sh{};
    sh.sh_name = name;
    sh.sh_type = type;
    sh.sh_flags = flags;
    sh.sh_addr = flags & SHF_ALLOC ? off : 0;
    sh.sh_offset = off;
    sh.sh_size = size;
    sh.sh_link = link;
    sh.sh_info = info;
    sh.sh_addralign = align;
    sh.sh_entsize = entsize;
    Put(&out, shdr_off + index * sizeof(Elf64_Shdr), sh);
  };
  // Name offsets into kShstr: .hash 1, .dynsym 7, .dynstr 15, .dynamic 23, .shstrtab 32.
  section(1, 1, SHT_HASH, SHF_ALLOC, hash_off, hash_size, 2, 0, 8, 4);
  section(2, 7, SHT_DYNSYM, SHF_ALLOC, dynsym_off, sizeof(Elf64_Sym), 3, 1, 8, sizeof(Elf64_Sym));
  section(3, 15, SHT_STRTAB, SHF_ALLOC, dynstr_off, dynstr_size, 0, 0, 1, 0);
  section(4, 23, SHT_DYNAMIC, SHF_ALLOC | SHF_WRITE, dynamic_off, dynamic_size, 3, 0, 8,
          sizeof(Elf64_Dyn));
  section(5, 32, SHT_STRTAB, 0, shstr_off, shstr_size, 0, 0, 1, 0);
  return out;
}

std::string StandInSoname(std::string_view file_name) {
  const size_t so = file_name.find(".so.");
  if (so == std::string_view::npos) return std::string(file_name);
  const std::string_view stem = file_name.substr(0, so);
  const std::string_view version = file_name.substr(so + 4);
  // NVIDIA names its user-space driver libraries by the driver version (three numbers,
  // 550.54.15) and gives them a fixed ABI SONAME.
  const bool nvidia = StartsWith(stem, "libcuda") || StartsWith(stem, "libnvidia-") ||
                      StartsWith(stem, "libnvcuvid") || StartsWith(stem, "libnvoptix");
  if (nvidia && std::count(version.begin(), version.end(), '.') >= 2) {
    return std::string(stem) + (stem == "libnvidia-nvvm" ? ".so.4" : ".so.1");
  }
  return std::string(file_name.substr(0, so + 4)) +
         std::string(version.substr(0, version.find('.')));
}

Status WriteStandInLibrary(const std::string& path) {
  const std::filesystem::path p(path);
  GP_ASSIGN_OR_RETURN(std::string bytes, StandInLibrary(StandInSoname(p.filename().string())));
  std::error_code ec;
  std::filesystem::create_directories(p.parent_path(), ec);
  if (ec) {
    return Status::Unavailable("cannot create '" + p.parent_path().string() +
                               "' for a stand-in driver library: " + ec.message());
  }
  GP_RETURN_IF_ERROR(WriteFileAtomically(path, bytes));
  std::filesystem::permissions(p, std::filesystem::perms(0644), ec);
  if (ec) return Status::Unavailable("cannot make '" + path + "' readable: " + ec.message());
  return Status::Ok();
}

}  // namespace gpupool::gpu
