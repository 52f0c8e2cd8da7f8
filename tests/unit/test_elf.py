"""The ELF64 symbol reader (backends/elf.py): what an object needs, and clear errors, never
an IndexError or a crash, on malformed bytes."""
from __future__ import annotations

import random
import struct

import pytest

from fastlaunch.backends import elf, get_backend

IR = """
declare double @fl_test_external(double)
declare extern_weak double @fl_test_weak(double)
@table = internal constant [2 x double] [double 1.0, double 2.0]

define double @fl_test_entry(double %x) {
  %a = call double @fl_test_external(double %x)
  %b = call double @fl_test_weak(double %a)
  %p = getelementptr [2 x double], ptr @table, i64 0, i64 1
  %c = load double, ptr %p
  %r = fadd double %b, %c
  ret double %r
}
"""


@pytest.fixture(scope="module")
def obj() -> bytes:
    return get_backend("cpu").object_code(IR)


def test_lists_what_the_object_needs(obj):
    undefined = {s.name: s for s in elf.undefined_symbols(obj)}
    assert set(undefined) == {"fl_test_external", "fl_test_weak"}
    assert not undefined["fl_test_external"].weak and undefined["fl_test_weak"].weak
    defined = {s.name for s in elf.symbols(obj) if s.section != elf.SHN_UNDEF}
    assert "fl_test_entry" in defined


def test_kernel_objects_need_only_what_the_process_has():
    """A real kernel (libm calls, float16 conversions): every symbol it needs resolves."""
    import llvmlite.binding as llvm
    import numpy as np

    import fastlaunch as fl
    f = fl.compile(lambda x, y: (np.exp(x) % y).astype(np.float16) * 1.5)
    x = np.linspace(0, 2, 50)
    low = f.lower(x, x + 1)
    be = get_backend("cpu")
    for _, _, source in low.kernels:
        needed = elf.undefined_symbols(be.object_code(source))
        assert all(llvm.address_of_symbol(s.name) for s in needed), needed


@pytest.mark.parametrize("data, match", [
    (b"", "not an ELF"),
    (b"\x7fELF", "not an ELF"),
    (b"MZ" + b"\x00" * 100, "not an ELF"),
    (b"\x7fELF\x01\x01" + b"\x00" * 100, "not an ELF64"),
    (b"\x7fELF\x02\x07" + b"\x00" * 100, "byte order"),
])
def test_not_elf64(data, match):
    with pytest.raises(elf.ElfError, match=match):
        elf.undefined_symbols(data)


def test_every_truncation_is_an_error_or_a_subset(obj):
    full = {s.name for s in elf.symbols(obj)}
    for n in range(len(obj)):
        try:
            got = elf.symbols(obj[:n])
        except elf.ElfError:
            continue
        assert {s.name for s in got} <= full


def test_random_corruption_never_escapes_as_another_error(obj):
    rng = random.Random(1234)
    errors = 0
    for _ in range(3000):
        data = bytearray(obj)
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            elf.symbols(bytes(data))
        except elf.ElfError:
            errors += 1
    assert errors > 0           # the corruption does reach the checks


def test_corrupted_header_fields(obj):
    def patch(fmt, offset, value):
        data = bytearray(obj)
        struct.pack_into(fmt, data, offset, value)
        return bytes(data)
    with pytest.raises(elf.ElfError, match="outside"):
        elf.symbols(patch("<Q", 0x28, len(obj) - 8))            # e_shoff past the end
    with pytest.raises(elf.ElfError, match="section header size"):
        elf.symbols(patch("<H", 0x3A, 40))                      # e_shentsize
    with pytest.raises(elf.ElfError):
        elf.symbols(patch("<H", 0x3C, 0xFFFF))                  # e_shnum too large
    assert elf.symbols(patch("<Q", 0x28, 0)) == []              # no section headers


def test_symbol_table_fields_are_checked(obj):
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shnum, = struct.unpack_from("<H", obj, 0x3C)
    for i in range(shnum):
        at = shoff + 64 * i
        if struct.unpack_from("<I", obj, at + 4)[0] == elf.SHT_SYMTAB:
            break
    # (offset in the section header, format, value, error)
    for field, fmt, value, match in [(0x38, "<Q", 16, "entries"),          # sh_entsize
                                     (0x20, "<Q", 25, "entries"),          # sh_size
                                     (0x20, "<Q", 24 << 36, "outside"),
                                     (0x18, "<Q", 1 << 40, "outside"),     # sh_offset
                                     (0x28, "<I", 10_000, "links")]:       # sh_link
        data = bytearray(obj)
        struct.pack_into(fmt, data, at + field, value)
        with pytest.raises(elf.ElfError, match=match):
            elf.symbols(bytes(data))


def test_big_endian_objects_are_read():
    """A hand-built big-endian ELF64 object with one undefined symbol."""
    strtab = b"\x00needed\x00"
    sym = struct.pack(">IBBHQQ", 0, 0, 0, 0, 0, 0) + \
        struct.pack(">IBBHQQ", 1, (elf.STB_GLOBAL << 4), 0, 0, 0, 0)
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x02"
    body = strtab + sym
    shoff = 64 + len(body)
    struct.pack_into(">Q", header, 0x28, shoff)
    struct.pack_into(">HH", header, 0x3A, 64, 3)
    shdrs = bytes(64)                                                           # null section
    shdrs += struct.pack(">IIQQQQIIQQ", 0, 3, 0, 0, 64, len(strtab), 0, 0, 1, 0)  # strtab
    shdrs += struct.pack(">IIQQQQIIQQ", 0, elf.SHT_SYMTAB, 0, 0, 64 + len(strtab), len(sym),
                         1, 1, 8, 24)
    data = bytes(header) + body + shdrs
    assert [s.name for s in elf.undefined_symbols(data)] == ["needed"]
