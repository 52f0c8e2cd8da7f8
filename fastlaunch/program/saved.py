"""Saved programs: one traced signature written to a file and replayed in another process
without the Python function that produced it.

The file holds the bytecode and its tables (constants included), the argument signature, the
result layout, and per kernel its description (ir/kernel.py, as JSON: program/kernel_json.py), its
source and its machine code.  The header carries a magic number and a format version; the
payload carries a SHA-256, which detects accidents, not tampering: anyone can recompute it.

Loading trusts the file's machine code unless told otherwise (docs/security.md):

* `load(path)` runs the stored machine code when it was compiled for this very target (CPU
  name and features, LLVM version, optimisation level), so a file can run any code, as a
  pickle can.  Only load files you trust;
* `load(path, machine_code=False)` runs nothing from the file: every kernel is generated
  again by our own code generator from its description, which is decoded strictly; the
  kernels' element ranges, launch sizes and launch parameters are derived from those
  descriptions (never read from the file), and the verifier checks the bytecode against them
  and against the argument signature.  What it then runs touches only the call's arguments,
  its results and its own temporaries.

A process with another target compiles the kernels from their descriptions in both modes.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import tempfile

import numpy as np

from .. import _core
from .._launch import Opcode, ResultKind, Space
from .._version import __version__
from ..backends import get_backend
from .artifact import Artifact, effects_text, from_saved
from .bytecode import MAX_COUNT, Program
from ..errors import SavedProgramError
from .kernel_json import kernel_from_json, kernel_to_json
from ..ir.leaves import LeafSpec
from .link import link
from ..frontend.pytree import TreeDef, flatten

MAGIC = b"FLPROG\x00\x01"
FORMAT_VERSION = 2
_HEADER = struct.Struct("<8sIIQ32s")     # magic, format version, reserved, length, sha256

MAX_TREE_DEPTH = 100
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _json_scalar(v, what: str):
    if v is None or type(v) in (bool, int, float, str):
        return v
    if isinstance(v, np.generic) and v.dtype.kind in "biuf":
        return v.item()
    raise TypeError(f"a saved program cannot hold {what} of type {type(v).__name__}")


def save_artifact(path, art: Artifact, backend, static_positions) -> None:
    """Write one artifact (a traced signature, or an fl.iterate loop) as a saved program."""
    data = dumps_artifact(art, backend, static_positions)
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


def dumps_artifact(art: Artifact, backend, static_positions) -> bytes:
    """The saved-program file's bytes for one artifact (what save_artifact writes; what a
    pickled compiled function ships with `pickle_programs`)."""
    if art.effects:
        raise TypeError(f"a saved program cannot replay side effects on argument containers "
                        f"({effects_text(art.effects)}); return the new values instead")
    program: Program = art.program
    descriptions = art.plan.compiled_kernels()
    if len(descriptions) != len(art.kernels):
        raise RuntimeError("fastlaunch: the traced plan and its compiled kernels disagree")
    for k in art.keys:
        if not isinstance(k, tuple) and type(k) is not str:    # str: a const in the tree
            raise TypeError("a saved program cannot take namedtuple or object arguments")
    if any(d.is_array and d.space != Space.SPACE_HOST for d in art.leaves):
        raise TypeError("a saved program takes NumPy arrays: save it with NumPy example "
                        "arguments, not DeviceArrays")
    meta = {
        "fastlaunch": __version__,
        "backend": backend.name,
        "target": backend.target_key,
        "signature": art.signature.hex(),
        "specialized": [[leaf, word] for leaf, word in art.specialized],
        "static_positions": list(static_positions),
        "statics": [_static_json(v) for v in art.static_values],
        "keys": [k if type(k) is str else [_json_scalar(x, "a dict key") for x in k]
                 for k in art.keys],
        "leaves": [_leaf_json(d) for d in art.leaves],
        "leaf_names": list(art.leaf_names),
        "results": [[int(kind), _json_scalar(index, "a constant result") if kind == 2 else index,
                     bool(scalar)] for kind, index, scalar in art.results],
        "out_tree": art.out_tree.to_json(),
        "int_bounds": [[leaf, lo, hi] for leaf, (lo, hi) in sorted(art.int_bounds.items())],
        # "schedule": what the backend decided that the description does not show (a CUDA
        # split), for schedule_kernel on load
        "kernels": [{"label": d.label, "text": backend.kernel_text(k),
                     "desc": kernel_to_json(d), "schedule": dict(d.schedule.saved)}
                    for k, d in zip(art.kernels, descriptions)],
        "graph": art.graph,
    }
    if art.finish is not None:
        meta["iterate"] = dict(art.finish)
    blobs = [json.dumps(meta, sort_keys=True).encode(), program.to_bytes()]
    blobs += [k.obj for k in art.kernels]
    payload = b"".join(struct.pack("<Q", len(b)) + b for b in blobs)
    return _HEADER.pack(MAGIC, FORMAT_VERSION, 0, len(payload),
                        hashlib.sha256(payload).digest()) + payload


def _static_json(v):
    """A static argument's value with its exact type: 1, 1.0 and np.float64(1) key differently."""
    if isinstance(v, np.generic) and v.dtype.kind in "biuf":
        return [v.dtype.str, v.item()]
    return [type(v).__name__, _json_scalar(v, "a static argument")]


_PLAIN_STATICS = {"bool": bool, "int": int, "float": float, "str": str,
                  "NoneType": type(None)}


def _static_value(j):
    if type(j) is not list or len(j) != 2 or not isinstance(j[0], str):
        raise SavedProgramError("statics: malformed value")
    kind, value = j
    if kind in _PLAIN_STATICS:
        if type(value) is not _PLAIN_STATICS[kind]:
            raise SavedProgramError(f"statics: {kind} holding {type(value).__name__}")
        return value
    dt = np.dtype(kind)
    if dt.kind not in "biuf" or dt.fields is not None or type(value) not in (bool, int, float):
        raise SavedProgramError(f"statics: {kind!r} is not a number type")
    return dt.type(value)


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
        elif leaf[0] == "scalar":
            specs.append(LeafSpec.scalar(leaf[1], leaf[2]))
        else:
            raise SavedProgramError("signature: a saved program cannot take device arrays")
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
        if at + 8 > len(payload):
            raise SavedProgramError(f"{path}: truncated blob header")
        (n,) = struct.unpack_from("<Q", payload, at)
        if at + 8 + n > len(payload):
            raise SavedProgramError(f"{path}: a blob runs past the end of the file")
        blobs.append(payload[at + 8:at + 8 + n])
        at += 8 + n
    if len(blobs) < 2:
        raise SavedProgramError(f"{path}: no program in the file")
    meta = json.loads(blobs[0])
    if type(meta) is not dict:
        raise SavedProgramError(f"{path}: the metadata is not an object")
    return meta, Program.from_bytes(blobs[1]), blobs[2:]


# ---- strict readers of the metadata -------------------------------------------------------
def _int(x, what: str, lo: int = _INT64[0], hi: int = _INT64[1]) -> int:
    if type(x) is not int or not lo <= x <= hi:
        raise SavedProgramError(f"{what}: expected an integer in [{lo}, {hi}], got "
                                f"{str(x)[:40]}")
    return x


def _list(x, what: str) -> list:
    if type(x) is not list:
        raise SavedProgramError(f"{what}: expected a list")
    return x


def _str(x, what: str) -> str:
    if type(x) is not str:
        raise SavedProgramError(f"{what}: expected a string")
    return x


def _scalar(x, what: str):
    if x is not None and type(x) not in (bool, int, float, str):
        raise SavedProgramError(f"{what}: expected a number, string or null")
    return x


def _tree(j, depth: int = 0) -> TreeDef:
    """A result tree: leaves, None, strs, tuples, lists and dicts with str/int/float keys."""
    if depth > MAX_TREE_DEPTH or type(j) is not dict:
        raise SavedProgramError("out_tree: malformed or nested too deeply")
    kind = j.get("kind")
    children = [_tree(c, depth + 1) for c in _list(j.get("children", []), "out_tree")]
    if kind in ("leaf", "none"):
        if children:
            raise SavedProgramError(f"out_tree: a {kind} with children")
        return TreeDef(kind)
    if kind in ("tuple", "list"):
        return TreeDef(kind, children)
    if kind == "dict":
        keys = _list(j.get("keys"), "out_tree keys")
        if len(keys) != len(children) or any(type(k) not in (str, int, float) for k in keys) \
                or len(set(keys)) != len(keys):
            raise SavedProgramError("out_tree: malformed dict keys")
        return TreeDef(kind, children, tuple(keys))
    if kind == "const":
        if children or type(j.get("value")) is not str:
            raise SavedProgramError("out_tree: a const holds one str")
        return TreeDef(kind, meta=j["value"])
    raise SavedProgramError(f"out_tree: unknown kind {str(kind)[:20]!r}")


def _results(j) -> list:
    out = []
    for r in _list(j, "results"):
        if type(r) is not list or len(r) != 3 or type(r[2]) is not bool:
            raise SavedProgramError("results: malformed entry")
        kind = ResultKind(_int(r[0], "result kind", 0, 2))
        index = _scalar(r[1], "constant result") if kind == ResultKind.RESULT_VALUE else \
            _int(r[1], "result index", 0, 1 << 40)
        out.append((kind, index, r[2]))
    return out


def _keys(j) -> list:
    keys = []
    for k in _list(j, "keys"):
        # a str is a string in the argument tree (compared by value); a list a dict's keys
        keys.append(k if type(k) is str else
                    tuple(_scalar(x, "dict key") for x in _list(k, "keys")))
    return keys


class LoadedProgram(_core.Dispatcher):
    """A saved program (see `load`), callable with arguments of the saved signature only: an
    argument of another dtype, shape or kind is a TypeError naming it.

    Example:
        >>> import numpy as np, fastlaunch as fl
        >>> fl.compile(lambda x: x * 2).save("double.flp", np.ones(2))
        >>> double = fl.load("double.flp")
        >>> double(np.arange(2.0))
        array([0., 2.])
        >>> double([1.0, 2.0])
        Traceback (most recent call last):
        TypeError: argument 'x': expected an array float64[2], got a Python list (pass np.asarray(...))
    """

    def __init__(self, path, meta, entry, leaves, names):
        super().__init__(tuple(meta["static_positions"]), True)
        self.path = path
        self.meta = meta
        self._leaves = leaves
        self._names = names
        self._install(entry)

    @property
    def graph(self) -> str:
        return self.meta["graph"]

    def _miss(self, args, kwargs):
        if kwargs:
            raise TypeError(f"{self.path}: a loaded program takes its arguments positionally")
        raise TypeError(_mismatch(self.meta["static_positions"], self._leaves, self._names,
                                  args))

    def __repr__(self):
        return f"<fastlaunch.LoadedProgram {self.path}>"


def load(path: str | os.PathLike, backend: str | None = None, *,
         machine_code: bool = True) -> LoadedProgram:
    """Load a program written by `Compiled.save`; no tracing, no source function needed.

    **Only load files you trust.**  A saved program holds native machine code, and by default
    that code runs in this process when it was compiled for this CPU and LLVM: like a pickle,
    a file can make the loading process run any code.  The SHA-256 in the file detects
    corruption, not tampering.

    machine_code=False refuses the stored machine code: every kernel is generated again by
    fastlaunch's own code generator from the kernel descriptions in the file (strictly
    decoded), the kernels' element ranges and launch sizes are derived from those
    descriptions, and the bytecode and its tables are verified against them and against the
    stored argument signature.  Nothing executable comes from the file; loading costs a
    compile (kernels found in the kernel cache excepted).  See docs/security.md for exactly
    what that guarantees.

    In both modes the bytecode is verified before anything runs, and a file that fails any
    check raises SavedProgramError (a ValueError).

    Example:
        >>> import numpy as np, fastlaunch as fl
        >>> scale = fl.compile(lambda x, y: np.exp(x) * y)
        >>> x, y = np.zeros(3), np.full(3, 2.0)
        >>> scale.save("scale.flp", x, y)
        >>> loaded = fl.load("scale.flp")         # in any process: no tracing, no function
        >>> loaded(x, y)
        array([2., 2., 2.])
        >>> fl.load("scale.flp", machine_code=False)(x, y)   # kernels generated again
        array([2., 2., 2.])
    """
    path = os.fspath(path)
    with invalid(path):
        meta, program, objects = _read(path)
        art = _load(path, meta, program, objects, backend, machine_code)
        entry = link(art, get_backend(backend or meta["backend"]))
    if art.finish is not None:
        return LoadedIteration(path, meta, entry, list(art.leaves), list(art.leaf_names),
                               dict(art.finish))
    return LoadedProgram(path, meta, entry, list(art.leaves), list(art.leaf_names))


def loads_artifact(data: bytes, backend: str | None = None, where: str = "saved program bytes",
                   machine_code: bool = True) -> tuple[dict, Artifact]:
    """(meta, artifact) from bytes made by dumps_artifact, checked and verified as `load`
    checks a file (the same trust rule: the bytes hold machine code that will run); the
    artifact's plan is the scheduled plan the program was recorded from, rebuilt from the
    kernel descriptions the bytes hold (artifact.scheduled_plan)."""
    with invalid(where):
        meta, program, objects = _parse(bytes(data), where)
        art = _load(where, meta, program, objects, backend, machine_code)
    return meta, art


@contextlib.contextmanager
def invalid(path):
    """Every malformed-input error as one SavedProgramError naming the file."""
    try:
        yield
    except SavedProgramError as err:
        if str(err).startswith(path):
            raise
        raise SavedProgramError(f"{path}: invalid saved program: {err}") from None
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError,
            RecursionError, UnicodeError) as err:
        raise SavedProgramError(f"{path}: invalid saved program: {type(err).__name__}: "
                                f"{err}") from None


def _load(path, meta, program: Program, objects, backend, machine_code) -> Artifact:
    """The artifact of a parsed saved program: its tables read strictly here, the kernels
    scheduled, compiled and verified by artifact.from_saved."""
    sig = bytes.fromhex(_str(meta["signature"], "signature"))
    leaves = _signature_specs(sig)
    be = get_backend(backend or _str(meta["backend"], "backend"))
    target = _str(meta["target"], "target")
    kmeta = _list(meta["kernels"], "kernels")
    if not len(kmeta) == len(objects) == len(program.kernels):
        raise SavedProgramError(f"{path}: {len(program.kernels)} kernels in the program, "
                                f"{len(kmeta)} described, {len(objects)} objects")
    described = []
    for i, km in enumerate(kmeta):
        if type(km) is not dict:
            raise SavedProgramError(f"kernels: entry {i} is malformed")
        described.append((kernel_from_json(km.get("desc")), km.get("schedule", {})))
    static_positions = [_int(p, "static position", 0, 1 << 16)
                        for p in _list(meta["static_positions"], "static_positions")]
    if static_positions != sorted(set(static_positions)):
        raise SavedProgramError("static_positions: not increasing")
    meta["static_positions"] = static_positions
    static_values = [_static_value(v) for v in _list(meta["statics"], "statics")]
    results = _results(meta["results"])
    out_tree = _tree(meta["out_tree"])
    keys = _keys(meta["keys"])
    int_bounds = {}
    for b in _list(meta["int_bounds"], "int_bounds"):
        if type(b) is not list or len(b) != 3:
            raise SavedProgramError("int_bounds: malformed entry")
        leaf = _int(b[0], "int_bounds leaf", 0, len(leaves) - 1)
        lo, hi = _int(b[1], "int_bounds low"), _int(b[2], "int_bounds high")
        if leaf in int_bounds or lo > hi:
            raise SavedProgramError("int_bounds: repeated leaf or empty range")
        int_bounds[leaf] = (lo, hi)
    names = meta.get("leaf_names")
    if type(names) is not list or len(names) != len(leaves) or \
            any(type(n) is not str for n in names):
        names = [f"leaf {i}" for i in range(len(leaves))]
    graph = _str(meta.get("graph", ""), "graph")
    specialized = []
    for sp in _list(meta.get("specialized", []), "specialized"):
        if type(sp) is not list or len(sp) != 2:
            raise SavedProgramError("specialized: malformed entry")
        leaf = _int(sp[0], "specialised leaf", 0, len(leaves) - 1)
        if leaves[leaf].is_array:
            raise SavedProgramError("specialized: a value for a leaf that is not a scalar")
        specialized.append((leaf, _int(sp[1], "specialised value")))
    finish = _iterate_finish(meta, program, len(results), len(leaves))
    texts = [_str(km.get("text"), "kernel source") for km in kmeta] if \
        machine_code and target == be.target_key else []
    return from_saved(
        path, program, described, be, target=target, texts=texts, objects=objects,
        machine_code=machine_code, signature=sig, leaves=leaves, leaf_names=names, keys=keys,
        statics=[_core.static_key(v) for v in static_values], static_values=static_values,
        results=results, out_tree=out_tree, int_bounds=int_bounds, specialized=specialized,
        graph=graph, finish=finish)


def _iterate_finish(meta, program: Program, nresults: int, nleaves: int):
    """A saved fl.iterate loop's finishing description, checked (None for a plain program)."""
    if "iterate" not in meta:
        return None
    finish = check_finish(meta["iterate"], nresults, nleaves)
    # stacked rows and the stop flags are arrays the program makes (a file that says a
    # constant or an argument is one fails here, not when called)
    stacked = [x for kind, x in finish["results"] if kind == "stack"]
    if finish["flags"] is not None:
        stacked.append(finish["flags"])
    if any(_list(meta["results"][x], "result")[0] != ResultKind.RESULT_NEW for x in stacked):
        raise SavedProgramError("iterate: a stacked result or the flags are not arrays the "
                                "program makes")
    # what fl.iterate records: one loop, whose LOOP and NEXTs all count to the iteration
    # count the results are for
    loops = program.loops()
    counts = [ops[1] for _, op, ops in program.instructions() if op is Opcode.NEXT]
    if len(loops) != 1 or any(c != finish["n"] for c in counts + [loops[0][3]]):
        raise SavedProgramError(f"iterate: the program's loops {[c for *_, c in loops]} "
                                f"(NEXT counts {counts}) do not run the iteration count "
                                f"{finish['n']}")
    return finish


class LoadedIteration(LoadedProgram):
    """A saved fl.iterate loop: called with the loop's arguments, returns what fl.iterate
    returned (carried values, collected rows of the iterations that ran)."""

    def __init__(self, path, meta, entry, leaves, names, finish):
        super().__init__(path, meta, entry, leaves, names)
        self.finish = finish

    def __call__(self, *args, **kwargs):
        raw = LoadedProgram.__call__(self, *args, **kwargs)
        static = set(self.meta["static_positions"])
        leaves = []
        for i, a in enumerate(args):
            if i not in static:
                leaves += flatten(a)[0]
        return finish_results(raw, self.finish, leaves)

    def __repr__(self):
        return f"<fastlaunch.LoadedIteration {self.path}>"


def _mismatch(static_positions, want: list, names: list, args) -> str:
    """Name the first argument (then the first leaf) that does not match the saved signature."""
    from ..frontend.pytree import flatten
    static = set(static_positions)
    positions = [i for i in range(len(args)) if i not in static]
    # the saved leaves of each argument, in order: consecutive leaves share their argument's name
    groups: list = []
    for j, name in enumerate(names):
        if groups and groups[-1][0] == name:
            groups[-1][1].append(j)
        else:
            groups.append((name, [j]))
    named = not names or not names[0].startswith("leaf ")
    if named and len(positions) != len(groups):
        return (f"this saved program takes {len(groups)} non-static argument"
                f"{'' if len(groups) == 1 else 's'} ({', '.join(g[0] for g in groups)}), got "
                f"{len(positions)}")
    leaves = []
    for k, i in enumerate(positions):
        got = flatten(args[i])[0]
        if named:
            name, js = groups[k]
            if isinstance(args[i], (list, tuple)) and (len(js) != 1 or want[js[0]].is_array) \
                    and len(got) != len(js):
                w = want[js[0]]
                kind = type(args[i]).__name__
                if len(js) == 1:
                    return (f"{name}: expected an array {w.dtype}{list(w.shape)}, got a Python "
                            f"{kind} (pass np.asarray(...))")
                if len(args[i]) == len(js):
                    # a flat container like the saved one: name the item that is a list
                    for item, (x, j) in enumerate(zip(args[i], js)):
                        if isinstance(x, (list, tuple)) and want[j].is_array:
                            return (f"{name}[{item}]: expected an array {want[j].dtype}"
                                    f"{list(want[j].shape)}, got a Python "
                                    f"{type(x).__name__} (pass np.asarray(...))")
                return (f"{name}: expected a container of {len(js)} arrays/scalars, got a "
                        f"Python {kind} of {len(args[i])} items")
            if len(got) != len(js):
                return (f"{name}: the saved program takes {len(js)} array/scalar leaves for "
                        f"it, got {len(got)} ({type(args[i]).__name__})")
        leaves += got
    if len(leaves) != len(want):
        return (f"this saved program takes {len(want)} array/scalar arguments, "
                f"got {len(leaves)}")
    for name, w, got in zip(names, want, leaves):
        if w.is_array:
            if not isinstance(got, np.ndarray):
                return f"{name}: expected an array {w.dtype}{list(w.shape)}, got {type(got).__name__}"
            if got.dtype != w.dtype or got.shape != w.shape:
                return (f"{name}: expected {w.dtype}{list(w.shape)}, got "
                        f"{got.dtype}{list(got.shape)}")
        elif w.weak is not None and type(got) is not w.weak:
            return f"{name}: expected a Python {w.weak.__name__}, got {type(got).__name__}"
    return ("the arguments do not match the saved signature (memory layout or static "
            "argument values differ); a loaded program cannot re-trace")


# ---- fl.iterate's results -----------------------------------------------------------------
def finish_results(raw, finish: dict, leaves):
    """The loop program's raw results -> what fl.iterate returns: carried values, the
    collected rows of the iterations that ran, constants stacked."""
    n, every = finish["n"], finish["every"]
    ran = n
    if finish["flags"] is not None:
        flags = raw[finish["flags"]]
        # rows up to the stopping one were written (all false but it); later rows are not
        first = int(flags.argmax())
        ran = first + 1 if flags[first] else n
    rows = -(-ran // every) if every else 0
    out = []
    for kind, x in finish["results"]:
        if kind == "raw":
            out.append(raw[x])
        elif kind == "stack":
            a = raw[x]
            out.append(a if a.shape[0] == rows else a[:rows])
        elif kind == "param":
            out.append(np.array([leaves[x]] * rows))
        else:
            out.append(np.array([x] * rows))
    structure = finish["structure"]
    if structure == "leaf" and len(out) == 1:
        return out[0]
    return list(out) if structure == "list" else tuple(out)


def check_finish(finish, nresults: int, nleaves: int) -> dict:
    """A finishing description read from a file, checked strictly (ValueError)."""
    if type(finish) is not dict or set(finish) != {"n", "every", "structure", "flags",
                                                    "results"}:
        raise ValueError("iterate: malformed description")
    n, every, flags = finish["n"], finish["every"], finish["flags"]
    if type(n) is not int or not 1 <= n <= MAX_COUNT or type(every) is not int or \
            not 0 <= every <= MAX_COUNT:
        raise ValueError("iterate: bad iteration count or collection period")
    if finish["structure"] not in ("leaf", "tuple", "list"):
        raise ValueError("iterate: bad result structure")
    if flags is not None and (type(flags) is not int or not 0 <= flags < nresults):
        raise ValueError("iterate: bad flags index")
    if type(finish["results"]) is not list:
        raise ValueError("iterate: malformed results")
    for item in finish["results"]:
        if type(item) is not list or len(item) != 2 or item[0] not in ("raw", "stack", "param",
                                                                       "value"):
            raise ValueError("iterate: malformed result")
        kind, x = item
        if kind in ("raw", "stack") and (type(x) is not int or not 0 <= x < nresults):
            raise ValueError("iterate: result index out of range")
        if kind == "param" and (type(x) is not int or not 0 <= x < nleaves):
            raise ValueError("iterate: argument index out of range")
        if kind == "value" and x is not None and type(x) not in (bool, int, float, str):
            raise ValueError("iterate: bad constant result")
    return finish
