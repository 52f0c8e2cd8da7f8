"""Saved programs: one traced signature written to a file and replayed in another process
without the Python function that produced it.

The file holds the bytecode and its tables (constants included), the argument signature, the
result layout, and each kernel's source and machine code.  A process whose target (CPU name
and features, LLVM version, optimisation level) matches loads the machine code as is; any
other target compiles the kernels again from their source.  The header carries a magic
number and a format version; the payload carries a SHA-256.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile

import numpy as np

from . import _core
from ._launch import ResultKind
from ._version import __version__
from .backends import get_backend
from .backends.base import CallLayout
from .bytecode import Program, verify
from .leaves import LeafSpec
from .link import link_entry
from .pytree import TreeDef

MAGIC = b"FLPROG\x00\x01"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<8sIIQ32s")     # magic, format version, reserved, length, sha256


class SavedProgramError(ValueError):
    """A saved program file that cannot be used: wrong format version, corrupted, truncated."""


def _json_scalar(v, what: str):
    if v is None or type(v) in (bool, int, float, str):
        return v
    if isinstance(v, np.generic) and v.dtype.kind in "biuf":
        return v.item()
    raise TypeError(f"a saved program cannot hold {what} of type {type(v).__name__}")


def save_entry(path, entry, backend, static_positions) -> None:
    data = dumps_entry(entry, backend, static_positions)
    path = os.fspath(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".fl-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def dumps_entry(entry, backend, static_positions) -> bytes:
    """The saved-program file's bytes for one traced entry (what save_entry writes; what a
    pickled compiled function ships with `pickle_programs`)."""
    info = entry.info
    program: Program = info.lowered.program
    for k in info.keys:
        if not isinstance(k, tuple):
            raise TypeError("a saved program cannot take namedtuple arguments")
    meta = {
        "fastlaunch": __version__,
        "backend": backend.name,
        "target": backend.target_key,
        "signature": entry.signature.hex(),
        "static_positions": list(static_positions),
        "statics": [_static_json(v) for v in info.static_values],
        "keys": [[_json_scalar(x, "a dict key") for x in k] for k in info.keys],
        "leaves": [_leaf_json(d) for d in info.leaves],
        "leaf_names": list(info.leaf_names),
        "results": [[kind, _json_scalar(index, "a constant result") if kind == 2 else index,
                     scalar] for kind, index, scalar in info.results],
        "out_tree": info.out_tree.to_json(),
        "int_bounds": [[leaf, lo, hi] for leaf, (lo, hi) in sorted(info.int_bounds.items())],
        "kernels": [{"label": label, "text": backend.kernel_text(k)}
                    for (label, _, _), k in zip(info.lowered.kernels, info.kernels)],
        "graph": info.lowered.graph,
    }
    blobs = [json.dumps(meta, sort_keys=True).encode(), program.to_bytes()]
    blobs += [k.obj for k in info.kernels]
    payload = b"".join(struct.pack("<Q", len(b)) + b for b in blobs)
    return _HEADER.pack(MAGIC, FORMAT_VERSION, 0, len(payload),
                        hashlib.sha256(payload).digest()) + payload


def _static_json(v):
    """A static argument's value with its exact type: 1, 1.0 and np.float64(1) key differently."""
    if isinstance(v, np.generic) and v.dtype.kind in "biuf":
        return [v.dtype.str, v.item()]
    return [type(v).__name__, _json_scalar(v, "a static argument")]


def _static_value(j):
    kind, value = j
    if kind in ("bool", "int", "float", "str", "NoneType"):
        return value
    return np.dtype(kind).type(value)


def _leaf_json(d: LeafSpec):
    if d.is_array:
        return ["array", d.dtype.str, list(d.shape)]
    return ["scalar", d.dtype.str, d.weak.__name__ if d.weak is not None else None]


def _signature_specs(sig: bytes) -> list:
    """The leaves the stored signature admits (what the dispatcher will let in), as LeafSpecs:
    the program is verified against these, not against what the file says elsewhere."""
    specs = []
    for leaf in _core.signature_leaves(sig):
        if leaf[0] == "array":
            _, dtype, shape, strides = leaf
            if strides is not None:
                if any(st % dtype.itemsize for st in strides):
                    raise SavedProgramError("signature: strides not a multiple of the itemsize")
                strides = tuple(st // dtype.itemsize for st in strides)
            specs.append(LeafSpec.array(dtype, shape, strides))
        else:
            specs.append(LeafSpec.scalar(leaf[1], leaf[2]))
    return specs


def _read(path) -> tuple[dict, Program, list]:
    with open(path, "rb") as f:
        return _parse(f.read(), path)


def _parse(data: bytes, path) -> tuple[dict, Program, list]:
    if len(data) < _HEADER.size or data[:8] != MAGIC:
        raise SavedProgramError(f"{path}: not a fastlaunch saved program")
    _, version, _, length, digest = _HEADER.unpack_from(data)
    if version != FORMAT_VERSION:
        raise SavedProgramError(f"{path}: saved program format version {version}; this "
                                f"fastlaunch ({__version__}) reads version {FORMAT_VERSION}")
    payload = data[_HEADER.size:]
    if len(payload) != length or hashlib.sha256(payload).digest() != digest:
        raise SavedProgramError(f"{path}: saved program is truncated or corrupted "
                                f"(checksum mismatch)")
    blobs, at = [], 0
    while at < len(payload):
        (n,) = struct.unpack_from("<Q", payload, at)
        blobs.append(payload[at + 8:at + 8 + n])
        at += 8 + n
    meta = json.loads(blobs[0])
    return meta, Program.from_bytes(blobs[1]), blobs[2:]


class LoadedProgram(_core.Dispatcher):
    """A saved program, callable with arguments of the saved signature only."""

    def __init__(self, path, meta, entry):
        super().__init__(tuple(meta["static_positions"]), True)
        self.path = path
        self.meta = meta
        self._install(entry)

    @property
    def graph(self) -> str:
        return self.meta["graph"]

    def _miss(self, args, kwargs):
        if kwargs:
            raise TypeError(f"{self.path}: a loaded program takes its arguments positionally")
        raise TypeError(_mismatch(self.meta, args))

    def __repr__(self):
        return f"<fastlaunch.LoadedProgram {self.path}>"


def load(path: str | os.PathLike, backend: str | None = None) -> LoadedProgram:
    """Load a program written by `Compiled.save`; no tracing, no source function needed.

    Only load files you trust: a saved program holds native machine code, which runs in this
    process (like pickle, a file can run code).  The bytecode and its tables are verified
    against the stored signature before anything runs."""
    path = os.fspath(path)
    meta, program, objects = _read(path)
    entry, _ = _link(path, meta, program, objects, backend)
    return LoadedProgram(path, meta, entry)


def loads_entry(data: bytes, backend: str | None = None, where: str = "saved program bytes"):
    """(meta, program, kernels, entry) from bytes made by dumps_entry, checked and verified as
    `load` checks a file (the same trust rule: the bytes hold machine code that will run)."""
    meta, program, objects = _parse(bytes(data), where)
    entry, kernels = _link(where, meta, program, objects, backend)
    return meta, program, kernels, entry


def _link(path, meta, program, objects, backend):
    try:
        sig = bytes.fromhex(meta["signature"])
        leaves = _signature_specs(sig)
        verify(program, leaves=leaves, strict=True)
        be = get_backend(backend or meta["backend"])
        if len(objects) != len(program.kernels) or len(meta["kernels"]) != len(objects):
            raise SavedProgramError(f"{path}: {len(program.kernels)} kernels, "
                                    f"{len(objects)} objects")
        kernels = [be.load_object(k["text"], obj, meta["target"])
                   for k, obj in zip(meta["kernels"], objects)]
        results = [(ResultKind(kind), index, bool(scalar)) for kind, index, scalar in meta["results"]]
        out_tree = TreeDef.from_json(meta["out_tree"])
        keys = [tuple(k) for k in meta["keys"]]
        int_bounds = {leaf: (lo, hi) for leaf, lo, hi in meta["int_bounds"]}
        statics = [_core.static_key(_static_value(v)) for v in meta["statics"]]
        call = CallLayout(results, out_tree, int_bounds)
        entry = link_entry(be, program, kernels, call, sig, keys, statics)
    except SavedProgramError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:
        raise SavedProgramError(f"{path}: invalid saved program: {type(err).__name__}: "
                                f"{err}") from None
    return entry, kernels


def _mismatch(meta, args) -> str:
    """Name the first argument leaf that does not match the saved signature."""
    from .pytree import flatten
    static = set(meta["static_positions"])
    leaves = []
    for i, a in enumerate(args):
        if i not in static:
            leaves += flatten(a)[0]
    want = meta["leaves"]
    names = meta.get("leaf_names") or [f"leaf {i}" for i in range(len(want))]
    if len(leaves) != len(want):
        return (f"this saved program takes {len(want)} array/scalar arguments, "
                f"got {len(leaves)}")
    for name, w, got in zip(names, want, leaves):
        if w[0] == "array":
            if not isinstance(got, np.ndarray):
                return f"{name}: expected an array {np.dtype(w[1])}{w[2]}, got {type(got).__name__}"
            if got.dtype != np.dtype(w[1]) or list(got.shape) != w[2]:
                return (f"{name}: expected {np.dtype(w[1])}{w[2]}, got "
                        f"{got.dtype}{list(got.shape)}")
        elif w[2] is not None and type(got).__name__ != w[2]:
            return f"{name}: expected a Python {w[2]}, got {type(got).__name__}"
    return ("the arguments do not match the saved signature (memory layout or static "
            "argument values differ); a loaded program cannot re-trace")
