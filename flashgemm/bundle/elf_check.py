"""Is a shared library whole? Checked before Python's loaders (tvm.runtime.load_module) dlopen a kernels .so.

dlopen maps each loadable segment by its file offset and size without comparing them with the file's length, so a
truncated library maps pages past the end of the file and the first touch of one kills the process with SIGBUS instead
of raising. flashgemm/ort/csrc/elf_check.cc is the same check in the op library (which runs it before every bundle
load); the two give the same answer for every file (tests/test_ort_op.py compares them).
"""
from __future__ import annotations

import os
import platform
import stat
import struct
import sys

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")  # Elf64_Ehdr (the byte order is fixed up below)
_PHDR_SIZE, _SHDR_SIZE = 56, 64
_MACHINES = {62: "x86-64", 183: "aarch64", 21: "ppc64", 3: "x86 (32-bit)", 40: "arm (32-bit)", 243: "riscv"}
_HOST_MACHINE = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183, "ppc64le": 21, "ppc64": 21}.get(
    platform.machine().lower())  # None: not checked
_PT_LOAD, _SHT_NULL, _SHT_NOBITS, _ET_DYN, _PN_XNUM = 1, 0, 8, 3, 0xFFFF


def _machine_name(m: int) -> str:
    return _MACHINES.get(m, f"ELF machine {m}")


def _truncated(size: int, expected: int, at_least: bool) -> str:
    expected = min(expected, 2**64 - 1)  # as the C++ check's saturating arithmetic has it
    return f"truncated: {size} of {'at least ' if at_least else ''}{expected} bytes expected"


def elf_problem(path: os.PathLike) -> str:
    """'' when `path` is a regular file holding a 64-bit ELF shared library of this process's byte order and
    architecture whose ELF header, program and section header tables, loadable segments and sections all lie within
    the file; else one phrase saying what is wrong, e.g. "truncated: 12345 of 67890 bytes expected" (the size the
    headers call for: a truncation at any length is caught)."""
    try:
        st = os.stat(path)
    except OSError as err:
        return f"cannot stat it ({err.strerror})"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    size = st.st_size
    if size == 0:
        return "empty file (0 bytes)"
    try:
        with open(path, "rb") as fh:
            return _check(fh, size)
    except OSError as err:
        return f"cannot read it ({err.strerror})"


def _check(fh, size: int) -> str:
    head = fh.read(_EHDR.size)
    if head[:4] != b"\x7fELF"[:len(head)]:
        return "not an ELF file"
    if size < _EHDR.size:
        return _truncated(size, _EHDR.size, True)
    ei_class, ei_data = head[4], head[5]
    if ei_class != 2:
        return "a 32-bit ELF file; this process loads 64-bit libraries" if ei_class == 1 else \
            f"corrupt ELF header (unknown class {ei_class})"
    host_data = 1 if sys.byteorder == "little" else 2
    if ei_data != host_data:
        return (f"a {'big' if ei_data == 2 else 'little'}-endian ELF file; this process is "
                f"{'little' if host_data == 1 else 'big'}-endian")
    order = "<" if host_data == 1 else ">"
    (_, e_type, e_machine, _, _, e_phoff, e_shoff, _, _, e_phentsize, e_phnum, e_shentsize, e_shnum,
     _) = struct.unpack(order + _EHDR.format[1:], head)
    if e_type != _ET_DYN:
        return f"not a shared library (ELF type {e_type})"
    if _HOST_MACHINE is not None and e_machine != _HOST_MACHINE:
        return f"built for {_machine_name(e_machine)}; this process is {_machine_name(_HOST_MACHINE)}"
    if e_phnum and e_phentsize != _PHDR_SIZE:
        return f"corrupt ELF header (program header size {e_phentsize})"
    if e_shoff and e_shentsize != _SHDR_SIZE:
        return f"corrupt ELF header (section header size {e_shentsize})"

    def read(offset, n):
        fh.seek(offset)
        data = fh.read(n)
        if len(data) != n:
            raise OSError(0, "short read")
        return data

    # counts too large for the header live in section 0 (extended numbering: e_phnum PN_XNUM, e_shnum 0)
    phnum, shnum = e_phnum, e_shnum
    if e_shoff and (phnum == _PN_XNUM or shnum == 0):
        if e_shoff + _SHDR_SIZE > size:
            return _truncated(size, e_shoff + _SHDR_SIZE, True)
        _, _, _, _, _, sh_size, _, sh_info, _, _ = struct.unpack(order + "IIQQQQIIQQ", read(e_shoff, _SHDR_SIZE))
        phnum = sh_info if phnum == _PN_XNUM else phnum
        shnum = sh_size if shnum == 0 else shnum
    if phnum == 0:
        return "corrupt ELF header (no program headers)"

    # what the header alone calls for; then, where the tables are within the file, their segments and sections
    ph_end = e_phoff + phnum * _PHDR_SIZE
    sh_end = e_shoff + shnum * _SHDR_SIZE if e_shoff else 0
    expected = max(_EHDR.size, ph_end, sh_end)
    if ph_end <= size:
        table = read(e_phoff, phnum * _PHDR_SIZE)
        loads = [struct.unpack_from(order + "IIQQQQQQ", table, i * _PHDR_SIZE) for i in range(phnum)]
        loads = [p for p in loads if p[0] == _PT_LOAD]
        if not loads:
            return "corrupt program headers (no loadable segment)"
        expected = max([expected] + [p_offset + p_filesz for _, _, p_offset, _, _, p_filesz, _, _ in loads])
    if e_shoff and sh_end <= size:
        table = read(e_shoff, shnum * _SHDR_SIZE)
        for i in range(shnum):
            _, sh_type, _, _, sh_offset, sh_size, _, _, _, _ = struct.unpack_from(order + "IIQQQQIIQQ", table,
                                                                                    i * _SHDR_SIZE)
            if sh_type not in (_SHT_NULL, _SHT_NOBITS):
                expected = max(expected, sh_offset + sh_size)
    # without the program header table the segments are unknown: the expected size is then a lower bound
    return _truncated(size, expected, ph_end > size) if size < expected else ""
