"""What a backend sees of the executable (issue 26, encapsulation): _core.pxd declares the
short list below and no more; the dispatcher's own tables are an incomplete struct outside
_core; a backend hands the bytecode to the shared loop without reading it; _core.pyx names no
backend, and the numbers of the backends' memories in signature words never change."""
from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch import _core, backends

PKG = pathlib.Path(fl.__file__).parent
PXD = (PKG / "_core.pxd").read_text()
BACKEND_MODULES = ["_devsim.pyx", "_cuda.pyx"]     # executables outside _core

# Everything a backend's executable can read or override.  Adding to it widens every
# backend's view of the dispatcher: put dispatcher-only state in _core.pyx's CallTables.
FIELDS = {"bytecode": "Bytecode", "owned": "BackendSlots", "program": "object",
          "call": "CallTables *"}
METHODS = {"execute", "release", "read_status", "bind_outputs", "error", "kernel_error"}
STRUCTS = {"Bytecode": {"code", "ncode", "lists"},
           "BackendSlots": {"status", "temps", "ntemps", "outputs", "noutputs"}}


def _block(text: str, header: str) -> str:
    """The indented body after `header` (a line of its own)."""
    start = text.index(header + "\n") + len(header) + 1
    lines = []
    for line in text[start:].splitlines():
        if line and not line.startswith((" ", "#")):
            break
        lines.append(line)
    return "\n".join(lines)


def _fields(body: str) -> dict[str, str]:
    """name -> declared type of the `cdef` attributes (not methods) in a class body."""
    out = {}
    for m in re.finditer(r"^    cdef (?:readonly |public )?([^(#]+?)\s*(?:#.*)?$", body, re.M):
        first, *more = m.group(1).split(",")
        typ, star, name = re.fullmatch(r"(.+?)\s*(\**)(\w+)", first.strip()).groups()
        for n in [name] + [x.strip().lstrip("*") for x in more]:
            out[n] = f"{typ} {star}".strip()
    return out


def test_executable_declares_the_short_list():
    body = _block(PXD, "cdef class Executable:")
    methods = set(re.findall(r"^    cdef [\w ]*?\b(\w+)\(self", body, re.M))
    fields = {n: t for n, t in _fields(body).items() if n not in methods}
    assert fields == FIELDS
    assert methods == METHODS


@pytest.mark.parametrize("struct", sorted(STRUCTS))
def test_backend_structs(struct):
    body = _block(PXD, f"cdef struct {struct}:")
    names = set(re.findall(r"^    [\w ]+?\**(\w+)\s*(?:#.*)?$", body, re.M))
    assert names == STRUCTS[struct]


def test_dispatcher_tables_are_opaque_outside_core():
    # forward-declared only: Cython refuses `self.call.x` in any module that cimports _core
    assert re.search(r"^cdef struct CallTables$", PXD, re.M)
    assert not re.search(r"^cdef struct CallTables:", PXD, re.M)
    core = (PKG / "_core.pyx").read_text()
    assert re.search(r"^cdef struct CallTables:", core, re.M)
    for module in BACKEND_MODULES:
        assert not re.search(r"\.call\b", (PKG / module).read_text()), module


@pytest.mark.parametrize("module", BACKEND_MODULES)
def test_backends_hand_the_bytecode_on(module):
    # the shared loop (_interp.pxi) is the only reader of the bytecode's fields
    text = (PKG / module).read_text()
    assert not re.search(r"\.bytecode\.", text), module
    assert re.findall(r"run_loop\((\S+),", text) == ["&self.bytecode"], module


def test_pxd_holds_declarations_only():
    for line in PXD.splitlines():
        code = line.split("#")[0].rstrip()
        assert not re.match(r"\s*(def |return\b|if |for |while |\w+ = )", code), line


def test_core_names_no_backend():
    core = (PKG / "_core.pyx").read_text()
    for name in backends.available_backends():
        assert not re.search(rf"[\"']{name}[\"']", core), name
    assert re.search(r"^DEVICE_KINDS = \{\}$", core, re.M)


# ---- the device kinds -----------------------------------------------------------------------

# Fixed for good: saved signatures and shipped programs hold these numbers (0: host memory).
KINDS = {"cpu": 0, "null": 0, "cuda": 1, "devsim": 2}


def test_device_kinds_never_change():
    assert {name: backends.device_kind(name) for name in KINDS} == KINDS
    assert _core.DEVICE_KINDS == {n: k for n, k in KINDS.items() if k}
    assert _core.DEVICE_NAMES == {k: n for n, k in KINDS.items() if k}


def test_signature_word_holds_the_kind():
    x = fl.to_device(np.arange(4.0), "devsim")
    sig = _core.encode((x,))[0]
    word = np.frombuffer(sig, np.int64)[0]
    assert (int(word) >> 44) & 0xF == KINDS["devsim"]
    (leaf,) = _core.signature_leaves(sig)
    assert leaf[0] == "device" and leaf[-1] == "devsim"


def test_device_kind_registration_is_checked():
    with pytest.raises(ValueError, match="conflicts"):
        _core.register_device_kind("devsim", 3)
    with pytest.raises(ValueError, match="conflicts"):
        _core.register_device_kind("other", KINDS["cuda"])
    with pytest.raises(ValueError, match="not in 1..15"):
        _core.register_device_kind("other", 16)
    _core.register_device_kind("devsim", KINDS["devsim"])       # the same again: no change
    assert _core.DEVICE_KINDS["devsim"] == KINDS["devsim"]


def test_cuda_array_interface_follows_the_registry():
    x = fl.to_device(np.arange(4.0), "devsim")
    with pytest.raises(AttributeError, match="not CUDA memory"):
        _ = x.__cuda_array_interface__
    # a cuda DeviceArray (no memory is touched: the interface only describes it)
    y = _core.DeviceArray(4096, (4,), np.float64, "cuda", None)
    assert y.__cuda_array_interface__["data"] == (4096, False)


def test_cython_refuses_the_dispatcher_tables_in_a_backend(tmp_path, capfd):
    # what a backend module sees is what Cython compiles for it: the dispatcher's tables are
    # an incomplete type there, while the backend's own view compiles
    pytest.importorskip("Cython")
    from Cython.Build import cythonize
    from Cython.Compiler.Errors import CompileError

    def compile_backend(body: str):
        src = tmp_path / f"backend_{abs(hash(body))}.pyx"
        src.write_text("# cython: language_level=3\n"
                       "from libc.stdint cimport int64_t\n"
                       "from fastlaunch._core cimport Executable\n\n"
                       "cdef class Probe(Executable):\n"
                       "    cdef int64_t peek(self):\n"
                       f"        {body}\n")
        cythonize([str(src)], include_path=[str(PKG.parent)], quiet=True, force=True)

    compile_backend("return self.owned.status + self.owned.ntemps")
    capfd.readouterr()
    with pytest.raises(CompileError):
        compile_backend("return self.call.nslots")
    captured = capfd.readouterr()
    assert "incomplete type 'CallTables'" in captured.out + captured.err
