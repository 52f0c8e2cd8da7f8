"""Mutation fuzzing of saved programs (used by test_saved_fuzz.py; also a script).

The base programs include fl.iterate loops (LOOPS) and library calls (linalg: gemm, LAPACK):
half the code mutations of those hit the loop and LIBCALL instructions' operands (counts, jump
targets, row strides, alias and counter slots; routines, sizes, operand slots, offsets and
strides).

A saved file is taken apart (file metadata, the program's tables, code and argument lists, its
constants, the kernel descriptions, the machine code), one or a few fields that matter are
changed (code words, slot ranges, kernel ranges and launch sizes, leaf counts, result indices,
signature words, kernel descriptions...), and the file is packed again with its SHA-256
recomputed, as an attacker would.  Each mutated file is then loaded and, if it loads, called
with the saved signature's arguments, which sit inside canary-filled buffers.

What must hold: load raises SavedProgramError (a ValueError), or the call returns or raises a
clean Python error, and then no byte outside the arguments' element ranges changed, no
argument the loaded program does not declare as updated in place changed, and no constant
changed.  A crash kills the worker process: the test runs workers in subprocesses and names
the case that was running.

    python savedfuzz.py build DIR               save the base programs into DIR
    python savedfuzz.py run DIR MODE SEED COUNT  fuzz (MODE: machine or source); one JSON line
                                                 per case on stdout
    python savedfuzz.py run DIR MODE seeds=S1,S2,...   the same, for these cases
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
import random
import struct
import sys
import traceback

import numpy as np

MAGIC_LEN = 8
HEADER = struct.Struct("<8sIIQ32s")
CANARY = 0xA5
PAD = 256


# ---- the base programs ------------------------------------------------------------------------
def _step(p, m, v, target, lr):
    y = np.sin(p) + p * p
    r = y - target
    g = 2 * r * (np.cos(p) + 2 * p) / p.size
    m = 0.9 * m + 0.1 * g
    v = 0.999 * v + 0.001 * g * g
    return {"p": p - lr * m / (np.sqrt(v) + 1e-8), "m": m, "v": v}, np.mean(r * r)


TABLE = np.linspace(-1.0, 1.0, 7)


def _gather_inplace(x, i, k):
    import fastlaunch as fl
    x += fl.asarray(TABLE)[i] * k
    return x.sum(), x[::2] * 2


def _reductions(a, b, big):
    return a @ b, big.sum(), np.argmax(a, axis=1), np.cumsum(a, axis=0)


def _views(x, y, idx, vals):
    z = x.T.reshape(-1)[: y.size] + y       # a transposed reshape: DivMod addressing
    w = np.zeros_like(y[:6])
    np.add.at(w, idx, vals)                 # a scatter: ordered stores
    return z, w, np.where(y > 0.5, y, -y)


def _linalg(a, b, c):
    """Library calls: a BLAS gemm on a transposed, strided operand with a fused epilogue,
    LAPACK inv / solve / det over a batch, svd (full and reduced) and lstsq (gelsd, rcond)."""
    u, s, vh = np.linalg.svd(c)
    return (a @ b.T + 1.0, np.linalg.inv(c), np.linalg.solve(c, b[:12, :5]), np.linalg.det(c),
            u, s, np.linalg.svd(a[:6, :5], full_matrices=False).Vh,
            np.linalg.lstsq(a[:, :5], b[:20, :3], rcond=None)[0])


def _static_dict(d, scale):
    return {"out": d["a"] * scale + d["b"][::-1], "n": d["b"].shape[0]}


def _loop_step(p, m, v, target, lr):
    y = np.sin(p) + p * p
    r = y - target
    g = 2 * r * (np.cos(p) + 2 * p) / p.size
    m = 0.9 * m + 0.1 * g
    v = 0.999 * v + 0.001 * np.abs(g)
    return p - lr * m / (np.sqrt(v) + 1e-8), m, v, np.mean(r * r)


def _until(loss):
    return loss < 0.5


def _args(name):
    rng = np.random.default_rng(0)
    if name.startswith("loop"):
        p, m, t = (rng.standard_normal(100).astype(np.float32) for _ in range(3))
        return [p, m, np.abs(rng.standard_normal(100)).astype(np.float32), t, 1e-2]
    if name == "step":
        return [rng.standard_normal(100).astype(np.float32) for _ in range(4)] + [1e-2]
    if name == "gather":
        return [rng.random(40), rng.integers(-7, 7, 40), 3]
    if name == "reductions":
        return [rng.random((6, 9)), rng.random((9, 70)), rng.random(40000)]
    if name == "views":
        x = rng.random((12, 8))[:, ::2]                     # strided
        return [x, rng.random(40), rng.integers(0, 6, 9), rng.random(9)]
    if name == "linalg":
        c = rng.random((3, 12, 12)) + 12 * np.eye(12)   # LAPACK (smaller: kernels)
        return [rng.random((20, 16)), rng.random((24, 32))[:, ::2], c]
    if name == "static":
        return [{"a": rng.random((3, 5)), "b": rng.random((3, 5))[:, ::-1]}, 2.5]
    raise KeyError(name)


# name -> (function, backend, static_argnums)
PROGRAMS = {
    "step": (_step, "cpu", ()),
    "gather": (_gather_inplace, "cpu", ()),
    "reductions": (_reductions, "cpu", ()),
    "views": (_views, "cpu", ()),
    "static": (_static_dict, "cpu", (1,)),
    "gather-devsim": (_gather_inplace, "devsim", ()),
    # fl.iterate loops (LOOPS: their options)
    "loop": (_loop_step, "cpu", ()),
    "loopuntil": (_loop_step, "cpu", ()),
    "loopinplace": (_loop_step, "cpu", ()),
    "loopuntil-devsim": (_loop_step, "devsim", ()),
    "linalg": (_linalg, "cpu", ()),
    "linalg-devsim": (_linalg, "devsim", ()),
}
LOOPS = {
    "loop": dict(n=7, collect=3),
    "loopuntil": dict(n=9, until=_until),
    "loopinplace": dict(n=5, collect=False, inplace=True),
    "loopuntil-devsim": dict(n=6, collect=2, until=_until),
}


def build(directory):
    import fastlaunch as fl
    for name, (fn, backend, static) in PROGRAMS.items():
        args = _args(name.split("-")[0])
        path = os.path.join(directory, name + ".flp")
        if name in LOOPS:
            opts = dict(LOOPS[name])
            fl.iterated(fl.compile(fn, backend=backend), opts.pop("n"), carry=("p", "m", "v"),
                        **opts).save(path, *args)
        else:
            fl.compile(fn, backend=backend, static_argnums=static).save(path, *args)


# ---- taking a file apart and packing it again ---------------------------------------------
def _blobs(data: bytes) -> list:
    out, at = [], 0
    while at < len(data):
        (n,) = struct.unpack_from("<Q", data, at)
        out.append(data[at + 8:at + 8 + n])
        at += 8 + n
    return out


def _join(blobs) -> bytes:
    return b"".join(struct.pack("<Q", len(b)) + b for b in blobs)


def unpack(data: bytes) -> dict:
    head = HEADER.unpack_from(data)
    blobs = _blobs(data[HEADER.size:])
    prog = _blobs(blobs[1])
    pmeta = json.loads(prog[0])
    consts = []
    for i in range(len(pmeta["consts"])):
        consts.append([json.loads(prog[3 + 2 * i]), prog[4 + 2 * i]])
    return {"version": head[1], "meta": json.loads(blobs[0]), "pmeta": pmeta,
            "code": np.frombuffer(prog[1], np.int64).copy(),
            "lists": np.frombuffer(prog[2], np.int64).copy(), "consts": consts,
            "objects": [bytearray(b) for b in blobs[2:]]}


def pack(f: dict) -> bytes:
    """The file again, with its SHA-256 recomputed over whatever it now holds."""
    prog = [json.dumps(f["pmeta"], sort_keys=True).encode(), f["code"].tobytes(),
            f["lists"].tobytes()]
    for head, raw in f["consts"]:
        prog += [json.dumps(head).encode(), bytes(raw)]
    payload = _join([json.dumps(f["meta"], sort_keys=True).encode(), _join(prog)]
                    + [bytes(o) for o in f["objects"]])
    return HEADER.pack(b"FLPROG\x00\x01", f["version"], 0, len(payload),
                       hashlib.sha256(payload).digest()) + payload


# ---- mutations ------------------------------------------------------------------------------
BIG = [2**31, 2**32, 2**62, 2**63 - 1, -2**63, -2**31, 10**6, 1 << 40]
TOKENS = ["input", "param", "const", "output", "temp", "status", "buffer", "scalar",
          "<f8", "<f4", "<i8", "<i4", "|b1", "<f2", "|u1", "|O", "<c16", "<U3", "V8",
          "load", "scalar", "const", "iota", "op", "loop", "divmod", "pick", "set", "add",
          "sum", "max", "argmax", "add", "mul", "where", "sqrt", "cumsum", "leaf", "tuple",
          "dict", "list", "none", "namedtuple", "", "x"]


def new_int(rng: random.Random, v: int) -> object:
    r = rng.random()
    if r < 0.30:
        return v + rng.choice([-1, 1])
    if r < 0.45:
        return v + rng.randint(-40, 40)
    if r < 0.55:
        return rng.choice([0, 1, -1, 2])
    if r < 0.65:
        return rng.randint(0, 64)
    if r < 0.75:
        return v * rng.choice([2, 4, 8, -1]) + rng.choice([0, 1])
    if r < 0.80:
        return v // 2
    if r < 0.93:
        return rng.choice(BIG) + rng.choice([0, -1, 1])
    return rng.choice([None, True, 1.5, "1", [], {}])       # type confusion (JSON only)


def _leaves(x, path=()):
    """(path, value) of every scalar in a JSON value (bools count as ints here too)."""
    if isinstance(x, dict):
        for k in sorted(x):
            yield from _leaves(x[k], path + (k,))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _leaves(v, path + (i,))
    else:
        yield path, x


def _set(x, path, value):
    for p in path[:-1]:
        x = x[p]
    x[path[-1]] = value


def mutate_json(rng, root, what) -> str:
    """Change one scalar (an int mostly, else a string or a list's length) of a JSON value."""
    leaves = list(_leaves(root))
    ints = [(p, v) for p, v in leaves if type(v) is int and p]
    strs = [(p, v) for p, v in leaves if type(v) in (str, bool) and p]
    r = rng.random()
    if ints and (r < 0.75 or not strs):
        path, v = rng.choice(ints)
        new = new_int(rng, v)
        _set(root, path, new)
        return f"{what}{list(path)}: {v} -> {new!r}"
    if strs and r < 0.93:
        path, v = rng.choice(strs)
        new = (not v) if type(v) is bool else rng.choice(TOKENS)
        _set(root, path, new)
        return f"{what}{list(path)}: {v!r} -> {new!r}"
    lists = [p for p, _ in _containers(root) if p]
    if not lists:
        return f"{what}: nothing"
    path = rng.choice(lists)
    x = root
    for p in path:
        x = x[p]
    if isinstance(x, list) and x and rng.random() < 0.5:
        del x[rng.randrange(len(x))]
        return f"{what}{list(path)}: dropped an item"
    if isinstance(x, list) and x:
        x.append(copy.deepcopy(rng.choice(x)))
        return f"{what}{list(path)}: repeated an item"
    return f"{what}: nothing"


def _containers(x, path=()):
    if isinstance(x, (dict, list)):
        yield path, x
        items = x.items() if isinstance(x, dict) else enumerate(x)
        for k, v in items:
            yield from _containers(v, path + (k,))


def mutate_words(rng, arr, what) -> str:
    if not len(arr):
        return f"{what}: empty"
    i = rng.randrange(len(arr))
    v = int(arr[i])
    new = new_int(rng, v)
    if type(new) is not int:
        new = v ^ (1 << rng.randrange(63))
    new = max(-2**63, min(2**63 - 1, new))
    arr[i] = new
    return f"{what}[{i}]: {v} -> {new}"


def mutate(rng: random.Random, f: dict, mode: str) -> str:
    """One targeted mutation of the unpacked file; machine mode leaves the kernel descriptions,
    sources and machine code alone (they are what that mode trusts)."""
    meta, pmeta = f["meta"], f["pmeta"]
    choices = [("code", 22), ("lists", 5), ("slots", 14), ("pkernels", 8), ("ptables", 10),
               ("consts", 3), ("signature", 8), ("meta", 10)]
    if mode == "source":
        choices += [("desc", 30), ("objects", 2), ("text", 1)]
    total = sum(w for _, w in choices)
    pick = rng.uniform(0, total)
    for target, w in choices:  # noqa: B007  (the one picked is read after the loop)
        pick -= w
        if pick <= 0:
            break
    if target == "code":
        loop_words = _loop_operands(f["code"])
        if loop_words and rng.random() < 0.5:
            # the loop and library call instructions' operands: counts, targets, strides,
            # alias slots; routines, sizes, operand slots and layouts
            i = rng.choice(loop_words)
            v = int(f["code"][i])
            new = new_int(rng, v)
            if type(new) is not int:
                new = v ^ (1 << rng.randrange(63))
            f["code"][i] = max(-2**63, min(2**63 - 1, new))
            return f"code[{i}] (a loop or LIBCALL operand): {v} -> {int(f['code'][i])}"
        return mutate_words(rng, f["code"], "code")
    if target == "lists":
        return mutate_words(rng, f["lists"], "arg_lists")
    if target == "slots":
        return mutate_json(rng, pmeta["slots"], "slots")
    if target == "pkernels":
        return mutate_json(rng, pmeta["kernels"], "kernel tables")
    if target == "ptables":
        sub = {k: pmeta[k] for k in ("nargwords", "nleaves", "consts", "outputs",
                                     "mutated_leaves")}
        note = mutate_json(rng, sub, "program")
        pmeta.update(sub)
        return note
    if target == "consts":
        if not f["consts"]:
            return "consts: none"
        c = rng.choice(f["consts"])
        if rng.random() < 0.5:
            return mutate_json(rng, c[0], "const header")
        raw = bytearray(c[1])
        if raw:
            raw[rng.randrange(len(raw))] ^= 0xFF
        c[1] = bytes(raw)
        return "const bytes"
    if target == "signature":
        words = np.frombuffer(bytes.fromhex(meta["signature"]), np.int64).copy()
        note = mutate_words(rng, words, "signature")
        meta["signature"] = words.tobytes().hex()
        return note
    if target == "meta":
        sub = {k: meta[k] for k in ("static_positions", "statics", "keys", "results",
                                    "out_tree", "int_bounds", "leaf_names", "target",
                                    "backend", "iterate") if k in meta}
        note = mutate_json(rng, sub, "meta")
        meta.update(sub)
        return note
    if target == "desc":
        i = rng.randrange(len(meta["kernels"]))
        return mutate_json(rng, meta["kernels"][i]["desc"], f"kernel {i} description")
    if target == "text":
        i = rng.randrange(len(meta["kernels"]))
        meta["kernels"][i]["text"] = meta["kernels"][i]["text"].replace("i64", "i32", 1)
        return f"kernel {i} source"
    obj = rng.choice(f["objects"]) if f["objects"] else bytearray()
    for _ in range(8):
        if obj:
            obj[rng.randrange(len(obj))] ^= rng.randrange(1, 256)
    return "machine code bytes"


def _loop_operands(code) -> list:
    """Indices of the operand words of the loop opcodes (fl.iterate) and of LIBCALL."""
    from fastlaunch._launch import Opcode
    loop_ops = {int(Opcode.MOVE), int(Opcode.ROTATE), int(Opcode.ROW), int(Opcode.COPY),
                int(Opcode.SET), int(Opcode.LOOP), int(Opcode.BREAK_IF), int(Opcode.NEXT),
                int(Opcode.JUMP), int(Opcode.LIBCALL)}
    out, pc = [], 0
    while 0 <= pc < len(code):
        op = int(code[pc])
        width = op & 0xFF
        if width == 0:
            break
        if op in loop_ops:
            out += range(pc + 1, min(pc + width, len(code)))
        pc += width
    return out


# ---- guarded arguments ----------------------------------------------------------------------
class Guarded:
    """An argument array inside a canary-filled buffer: same dtype, shape and strides."""

    def __init__(self, a: np.ndarray):
        itemsize = a.itemsize
        lo = sum(min(0, (n - 1) * s) for n, s in zip(a.shape, a.strides)) if a.size else 0
        hi = sum(max(0, (n - 1) * s) for n, s in zip(a.shape, a.strides)) + itemsize \
            if a.size else 0
        self.buf = np.full(hi - lo + 2 * PAD, CANARY, np.uint8)
        self.start, self.end = PAD, PAD + hi - lo
        self.array = np.ndarray(a.shape, a.dtype, buffer=self.buf, offset=PAD - lo,
                                strides=a.strides)
        self.array[...] = a
        self.inside = self.buf[self.start:self.end].copy()

    def outside_intact(self) -> bool:
        return bool((self.buf[:self.start] == CANARY).all() and
                    (self.buf[self.end:] == CANARY).all())

    def unchanged(self) -> bool:
        return bool((self.buf[self.start:self.end] == self.inside).all())


def guarded_call(name: str):
    """Arguments of program `name` (arrays guarded) and the guards, leaf order."""
    args = _args(name.split("-")[0])
    guards = []

    def wrap(x):
        if isinstance(x, np.ndarray):
            g = Guarded(x)
            guards.append(g)
            return g.array
        if isinstance(x, dict):
            return {k: wrap(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return type(x)(wrap(v) for v in x)
        return x
    static = PROGRAMS[name][2]
    call = [x if i in static else wrap(x) for i, x in enumerate(args)]
    return call, guards


def leaf_guards(call, static, guards):
    """The guard of each flattened leaf (None for scalars), in the program's leaf order."""
    from fastlaunch.frontend.pytree import flatten
    by_id = {id(g.array): g for g in guards}
    out = []
    for i, a in enumerate(call):
        if i in static:
            continue
        out += [by_id.get(id(x)) for x in flatten(a)[0]]
    return out


# ---- one case -------------------------------------------------------------------------------
CALL_ERRORS = (TypeError, ValueError, ArithmeticError, LookupError, MemoryError)


def run_case(name: str, data: bytes, mode: str) -> dict:
    import fastlaunch as fl
    path = os.path.join(os.environ.get("FUZZ_TMP", "/tmp"), f"fuzz-{os.getpid()}.flp")
    with open(path, "wb") as fh:
        fh.write(data)
    try:
        program = fl.load(path, machine_code=(mode == "machine"))
    except fl.SavedProgramError as err:
        return {"outcome": "load-refused", "why": str(err).split("\n")[0][:160]}
    except Exception as err:                                      # noqa: BLE001
        return {"outcome": "FAIL", "why": f"load raised {type(err).__name__}: {err}"[:400]}
    finally:
        os.unlink(path)
    static = PROGRAMS[name][2]
    call, guards = guarded_call(name)
    leaves = leaf_guards(call, static, guards)
    entry = program._entries_list()[0]
    prog = entry.executable.program
    consts = [arr.copy() for _, arr in prog.consts]
    try:
        program(*call)
        outcome = {"outcome": "called"}
    except CALL_ERRORS as err:
        outcome = {"outcome": "call-error", "why": f"{type(err).__name__}: {err}"[:160]}
    except Exception as err:                                      # noqa: BLE001
        return {"outcome": "FAIL", "why": f"call raised {type(err).__name__}: {err}"[:400]}
    for i, g in enumerate(leaves):
        if g is None:
            continue
        if not g.outside_intact():
            return {"outcome": "FAIL", "why": f"bytes outside argument leaf {i} changed"}
        if i not in prog.mutated_leaves and not g.unchanged():
            return {"outcome": "FAIL", "why": f"argument leaf {i} changed, not declared "
                                              f"updated in place"}
    for (_, arr), before in zip(prog.consts, consts):
        if not np.array_equal(arr, before, equal_nan=True):
            return {"outcome": "FAIL", "why": "a constant changed"}
    return outcome


def run(directory: str, mode: str, seeds, out=sys.stdout):
    names = sorted(PROGRAMS)
    base = {}
    for n in names:
        with open(os.path.join(directory, n + ".flp"), "rb") as fh:
            base[n] = unpack(fh.read())
    for case_seed in seeds:
        rng = random.Random(case_seed)
        name = names[case_seed % len(names)]
        f = copy.deepcopy(base[name])
        notes = [mutate(rng, f, mode)]
        while rng.random() < 0.15:
            notes.append(mutate(rng, f, mode))
        try:
            data = pack(f)
        except (TypeError, ValueError, OverflowError):
            continue
        # the case is named before it runs: a crash leaves it as the last line
        print(json.dumps({"case": case_seed, "program": name, "mutation": notes}), file=out,
              flush=True)
        try:
            result = run_case(name, data, mode)
        except Exception:                                         # noqa: BLE001
            result = {"outcome": "FAIL", "why": traceback.format_exc()[-600:]}
        print(json.dumps({"done": case_seed, **result}), file=out, flush=True)


def main(argv):
    if argv[1] == "build":
        build(argv[2])
    elif argv[1] == "run":
        import warnings
        warnings.simplefilter("ignore")
        if argv[4].startswith("seeds="):
            seeds = [int(x) for x in argv[4][6:].split(",") if x]
        else:
            seeds = range(int(argv[4]), int(argv[4]) + int(argv[5]))
        run(argv[2], argv[3], seeds)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
