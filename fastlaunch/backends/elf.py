"""A minimal, bounds-checked reader of ELF64 relocatable objects: the symbols an object needs.

The CPU backend loads object code (freshly compiled, from the disk cache, or from a saved
program) into an LLVM JIT, which resolves each undefined symbol against the process.  A
symbol it cannot resolve is not reported: the call through it jumps to address 0 (or LLVM
aborts the process).  So before loading, the backend lists the object's undefined symbols
here and checks each one.  llvmlite does not list an object's symbols, hence this reader.

Every offset and size read from the input is checked against the input's length; anything
malformed raises ElfError, never an IndexError or a crash.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

ELF_MAGIC = b"\x7fELF"
ELFCLASS64 = 2
_ENDIAN = {1: "<", 2: ">"}          # ELFDATA2LSB, ELFDATA2MSB
SHT_SYMTAB = 2
SHN_UNDEF = 0
SHN_XINDEX = 0xFFFF
STB_GLOBAL, STB_WEAK = 1, 2
_SHDR_SIZE = 64
_SYM_SIZE = 24
_MAX_SECTIONS = 1 << 20             # far above anything LLVM emits; bounds the work on bad input


class ElfError(ValueError):
    """The bytes are not a well-formed ELF64 object."""


@dataclass(frozen=True)
class Symbol:
    name: str
    binding: int        # STB_LOCAL 0, STB_GLOBAL 1, STB_WEAK 2, ...
    section: int        # section index; SHN_UNDEF (0): defined elsewhere

    @property
    def weak(self) -> bool:
        return self.binding == STB_WEAK


def _unpack(fmt: str, data: bytes, offset: int, what: str):
    size = struct.calcsize(fmt)
    if offset < 0 or offset + size > len(data):
        raise ElfError(f"ELF object truncated: {what} at byte {offset} (+{size}) lies outside "
                       f"its {len(data)} bytes")
    return struct.unpack_from(fmt, data, offset)


def _span(data: bytes, offset: int, size: int, what: str) -> None:
    if offset < 0 or size < 0 or offset + size > len(data):
        raise ElfError(f"ELF object truncated: {what} (bytes {offset}..{offset + size}) lies "
                       f"outside its {len(data)} bytes")


def _cstring(data: bytes, start: int, end: int, what: str) -> str:
    """The NUL-terminated string at `start` inside the table data[start_of_table:end]."""
    if not 0 <= start < end:
        raise ElfError(f"ELF object malformed: {what} name offset outside its string table")
    stop = data.find(b"\x00", start, end)
    if stop < 0:
        raise ElfError(f"ELF object malformed: {what} name is not NUL-terminated")
    try:
        return data[start:stop].decode("utf-8")
    except UnicodeDecodeError:
        raise ElfError(f"ELF object malformed: {what} name is not UTF-8") from None


def symbols(data: bytes) -> list[Symbol]:
    """Every named symbol in the object's symbol tables (SHT_SYMTAB sections)."""
    data = bytes(data)
    if len(data) < 64 or data[:4] != ELF_MAGIC:
        raise ElfError("not an ELF object (bad magic number or shorter than an ELF header)")
    if data[4] != ELFCLASS64:
        raise ElfError(f"not an ELF64 object (class {data[4]})")
    endian = _ENDIAN.get(data[5])
    if endian is None:
        raise ElfError(f"ELF object with unknown byte order {data[5]}")
    (shoff,) = _unpack(endian + "Q", data, 0x28, "e_shoff")
    (shentsize, shnum) = _unpack(endian + "HH", data, 0x3A, "e_shentsize/e_shnum")
    if shoff == 0:
        return []                    # no section headers: no symbol table
    if shentsize != _SHDR_SIZE:
        raise ElfError(f"ELF object malformed: section header size {shentsize}, expected "
                       f"{_SHDR_SIZE}")
    if shnum == 0:                   # extended numbering: the count is section 0's sh_size
        (shnum,) = _unpack(endian + "Q", data, shoff + 0x20, "section 0 header")
    if shnum > _MAX_SECTIONS:
        raise ElfError(f"ELF object malformed: {shnum} sections")
    _span(data, shoff, shnum * _SHDR_SIZE, "the section header table")

    def header(i):
        # sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size, sh_link, sh_info,
        # sh_addralign, sh_entsize
        return struct.unpack_from(endian + "IIQQQQIIQQ", data, shoff + i * _SHDR_SIZE)

    out = []
    for i in range(shnum):
        _, sh_type, _, _, offset, size, link, _, _, entsize = header(i)
        if sh_type != SHT_SYMTAB:
            continue
        if entsize != _SYM_SIZE or size % _SYM_SIZE:
            raise ElfError(f"ELF object malformed: symbol table {i} has entries of "
                           f"{entsize} bytes and {size} bytes in all")
        _span(data, offset, size, f"symbol table {i}")
        if not 0 <= link < shnum:
            raise ElfError(f"ELF object malformed: symbol table {i} links to string table "
                           f"{link} of {shnum} sections")
        _, _, _, _, str_off, str_size, _, _, _, _ = header(link)
        _span(data, str_off, str_size, f"string table {link}")
        for at in range(offset, offset + size, _SYM_SIZE):
            st_name, st_info, _, st_shndx, _, _ = struct.unpack_from(endian + "IBBHQQ", data, at)
            if st_name == 0:
                continue             # unnamed: the null symbol, sections, ...
            if st_name >= str_size:
                raise ElfError(f"ELF object malformed: a symbol's name offset {st_name} lies "
                               f"outside its {str_size}-byte string table")
            name = _cstring(data, str_off + st_name, str_off + str_size, "a symbol's")
            if name:
                out.append(Symbol(name, st_info >> 4, st_shndx))
    return out


def undefined_symbols(data: bytes) -> list[Symbol]:
    """The global and weak symbols the object refers to but does not define, in table
    order, without repeats: what the loader must find elsewhere."""
    seen, out = set(), []
    for sym in symbols(data):
        if sym.section == SHN_UNDEF and sym.binding in (STB_GLOBAL, STB_WEAK) \
                and sym.name not in seen:
            seen.add(sym.name)
            out.append(sym)
    return out
