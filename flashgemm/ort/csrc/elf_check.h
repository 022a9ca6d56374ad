// A shared library checked whole before dlopen maps it. dlopen maps each loadable segment by its file offset and
// size without comparing them with the file's length, so a truncated library maps pages past the end of the file,
// and the first touch of one (a relocation, a constructor) kills the process with SIGBUS instead of returning an
// error. flashgemm/bundle/elf_check.py is the same check for Python's loaders (flashgemm-check-bundle).
#pragma once

#include <string>

namespace flashgemm {

// Empty when `path` is a regular file holding a 64-bit ELF shared library of this process's byte order and
// architecture whose ELF header, program and section header tables, loadable segments and sections all lie within
// the file; else one phrase saying what is wrong, e.g. "truncated: 12345 of 67890 bytes expected". The expected
// size is what the headers call for (the end of the furthest table, segment or section), so a truncation at any
// length is caught: a linked library's section header table is its last part.
std::string ElfProblem(const std::string& path);

}  // namespace flashgemm
