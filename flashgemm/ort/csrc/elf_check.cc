#include "elf_check.h"

#include <elf.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <vector>

namespace flashgemm {
namespace {

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
constexpr unsigned char kHostData = ELFDATA2LSB;
#else
constexpr unsigned char kHostData = ELFDATA2MSB;
#endif

// The ELF machine this process runs; 0 on an architecture not listed here (the machine is then not checked).
#if defined(__x86_64__)
constexpr uint16_t kHostMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr uint16_t kHostMachine = EM_AARCH64;
#elif defined(__powerpc64__)
constexpr uint16_t kHostMachine = EM_PPC64;
#else
constexpr uint16_t kHostMachine = 0;
#endif

std::string MachineName(uint16_t m) {
  switch (m) {
    case EM_X86_64: return "x86-64";
    case EM_AARCH64: return "aarch64";
    case EM_PPC64: return "ppc64";
    case EM_386: return "x86 (32-bit)";
    case EM_ARM: return "arm (32-bit)";
    case EM_RISCV: return "riscv";
    default: return "ELF machine " + std::to_string(m);
  }
}

// Offsets and sizes come from the file: arithmetic on them saturates, so a corrupt header cannot wrap around
// to a small "end" that passes.
uint64_t AddSat(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}
uint64_t MulSat(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

bool ReadAt(std::ifstream& in, uint64_t offset, void* dst, uint64_t n) {
  in.clear();
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(static_cast<char*>(dst), static_cast<std::streamsize>(n));
  return static_cast<uint64_t>(in.gcount()) == n;
}

std::string Truncated(uint64_t size, uint64_t expected, bool at_least) {
  return "truncated: " + std::to_string(size) + " of " + (at_least ? "at least " : "") + std::to_string(expected) +
         " bytes expected";
}

}  // namespace

std::string ElfProblem(const std::string& path) {
  struct stat st{};
  if (stat(path.c_str(), &st) != 0) return std::string("cannot stat it (") + std::strerror(errno) + ")";
  if (!S_ISREG(st.st_mode)) return "not a regular file";
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size == 0) return "empty file (0 bytes)";
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::string("cannot open it (") + std::strerror(errno) + ")";

  Elf64_Ehdr eh{};
  const uint64_t head = std::min<uint64_t>(size, sizeof(eh));
  if (!ReadAt(in, 0, &eh, head)) return "cannot read it";
  if (std::memcmp(eh.e_ident, ELFMAG, std::min<uint64_t>(head, SELFMAG)) != 0) return "not an ELF file";
  if (size < sizeof(eh)) return Truncated(size, sizeof(eh), /*at_least=*/true);
  if (eh.e_ident[EI_CLASS] != ELFCLASS64)
    return eh.e_ident[EI_CLASS] == ELFCLASS32 ? "a 32-bit ELF file; this process loads 64-bit libraries"
                                              : "corrupt ELF header (unknown class " +
                                                    std::to_string(eh.e_ident[EI_CLASS]) + ")";
  if (eh.e_ident[EI_DATA] != kHostData)
    return std::string(eh.e_ident[EI_DATA] == ELFDATA2MSB ? "a big-endian" : "a little-endian") +
           " ELF file; this process is " + (kHostData == ELFDATA2LSB ? "little-endian" : "big-endian");
  if (eh.e_type != ET_DYN) return "not a shared library (ELF type " + std::to_string(eh.e_type) + ")";
  if (kHostMachine != 0 && eh.e_machine != kHostMachine)
    return "built for " + MachineName(eh.e_machine) + "; this process is " + MachineName(kHostMachine);
  if (eh.e_phnum != 0 && eh.e_phentsize != sizeof(Elf64_Phdr))
    return "corrupt ELF header (program header size " + std::to_string(eh.e_phentsize) + ")";
  if (eh.e_shoff != 0 && eh.e_shentsize != sizeof(Elf64_Shdr))
    return "corrupt ELF header (section header size " + std::to_string(eh.e_shentsize) + ")";

  // Counts too large for the header live in section 0 (extended numbering: e_phnum PN_XNUM, e_shnum 0).
  uint64_t phnum = eh.e_phnum, shnum = eh.e_shnum;
  if (eh.e_shoff != 0 && (phnum == PN_XNUM || shnum == 0)) {
    if (AddSat(eh.e_shoff, sizeof(Elf64_Shdr)) > size)
      return Truncated(size, AddSat(eh.e_shoff, sizeof(Elf64_Shdr)), /*at_least=*/true);
    Elf64_Shdr s0{};
    if (!ReadAt(in, eh.e_shoff, &s0, sizeof(s0))) return "cannot read it";
    if (phnum == PN_XNUM) phnum = s0.sh_info;
    if (shnum == 0) shnum = s0.sh_size;
  }
  if (phnum == 0) return "corrupt ELF header (no program headers)";

  // What the header alone calls for; then, where the tables are within the file, their segments and sections.
  const uint64_t ph_end = AddSat(eh.e_phoff, MulSat(phnum, sizeof(Elf64_Phdr)));
  const uint64_t sh_end = eh.e_shoff == 0 ? 0 : AddSat(eh.e_shoff, MulSat(shnum, sizeof(Elf64_Shdr)));
  uint64_t expected = std::max<uint64_t>({sizeof(eh), ph_end, sh_end});
  if (ph_end <= size) {
    std::vector<Elf64_Phdr> ph(phnum);
    if (!ReadAt(in, eh.e_phoff, ph.data(), phnum * sizeof(Elf64_Phdr))) return "cannot read it";
    bool any_load = false;
    for (const Elf64_Phdr& p : ph) {
      if (p.p_type != PT_LOAD) continue;
      any_load = true;
      expected = std::max(expected, AddSat(p.p_offset, p.p_filesz));
    }
    if (!any_load) return "corrupt program headers (no loadable segment)";
  }
  if (eh.e_shoff != 0 && sh_end <= size) {
    std::vector<Elf64_Shdr> sh(shnum);
    if (!ReadAt(in, eh.e_shoff, sh.data(), shnum * sizeof(Elf64_Shdr))) return "cannot read it";
    for (const Elf64_Shdr& s : sh)
      if (s.sh_type != SHT_NOBITS && s.sh_type != SHT_NULL)
        expected = std::max(expected, AddSat(s.sh_offset, s.sh_size));
  }
  // Without the program header table the segments are unknown: the expected size is then a lower bound.
  if (size < expected) return Truncated(size, expected, /*at_least=*/ph_end > size);
  return "";
}

}  // namespace flashgemm
