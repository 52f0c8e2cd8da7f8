"""Kernel descriptions (ir/kernel.py) to JSON and back, for saved programs.

A saved program stores each kernel's description, so that a loading process can generate the
kernel's code with its own code generator instead of running code from the file.  Reading is
strict: a description that does not decode to a kernel our code generator handles soundly is a
KernelFormatError (a ValueError), never an exception of another kind:

* every reference (argument, expression node, loop dimension) is in range, and expression nodes
  refer only to earlier ones (the DAG cannot be cyclic);
* loads and stores address buffer arguments of their own dtype, scalars read scalar arguments,
  the error flag is the one status argument, and every stored-to argument is marked written;
* sizes and every address expression stay far inside int64 (the generated index arithmetic is
  `nsw`: an overflow would be undefined behaviour), a DivMod's operand is never negative (the
  code divides unsigned) and its claimed bound is raised to what the loop sizes allow (the
  code skips the modulo below the bound);
* a kernel without a reduction, sort or prelude phases has no reduction loops (set_extents
  would skip its accesses); a phase's value reads only earlier phases (`Folded`), the body any;
  and a reduction's result index holds no data-dependent index (its loads would be
  unaccounted);
* a reduction's epilogue (`then`) reads only the reduced value (`Reduced`) and constants, is
  of its output argument's dtype, and is not on partial results, scans or arg-reductions;
  a reduced value appears nowhere else;
* a sort has exactly one reduction loop (the row), no reduction or prelude beside it, scratch
  arguments of the dtypes the code generator addresses them with, and an output of its value's
  dtype (int64 for positions).

Those are the facts `kernel.set_extents` relies on: the element ranges it computes from a
decoded kernel bound every address the generated code can form, and the verifier checks those
ranges against the program's slots.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.graph import Kind, Op
from ..ir.kernel import Compute, Const, DivMod, Folded, Index, IndexValue, Kernel, KernelArg, Load
from ..ir.kernel import Loop, Phase, Random, Pick, Reduced, Reduction, Scalar, Sort, Store
from ..ir.kernel import index_picks, walk

# 2: reductions may carry an epilogue ("then", "reduced" nodes); format 1 is read as well
FORMAT = 2
READS = (1, 2)
LIMIT = 1 << 62          # sizes and address magnitudes
MAX_DIMS = 32
MAX_ARGS = 4096
MAX_NODES = 1 << 21
MAX_TERMS = 64
MAX_DEPTH = 8            # DivMod atoms nested in DivMod operands
STORE_MODES = ("set", "add", "mul", "max", "min")
ARG_KINDS = ("buffer", "scalar", "status")


class KernelFormatError(ValueError):
    """A kernel description that cannot be used."""


# ---- writing ----------------------------------------------------------------------------------
def kernel_to_json(k: Kernel) -> dict:
    roots = list(k._roots())
    if k.reduction is not None:
        roots += [p.expr for p in index_picks(k.reduction.index)]
        if k.reduction.then is not None:
            roots.append(k.reduction.then)
    nodes = walk(roots)
    ids = {id(e): i for i, e in enumerate(nodes)}

    def index(ix: Index):
        terms = []
        for atom, coef in ix.terms:
            if isinstance(atom, Loop):
                terms.append([["loop", atom.dim], coef])
            elif isinstance(atom, DivMod):
                terms.append([["divmod", index(atom.f), atom.div, atom.mod, atom.bound], coef])
            else:
                terms.append([["pick", ids[id(atom.expr)], atom.size] + ([1] if atom.strict else []),
                              coef])
        return [ix.const, terms]

    table = []
    for e in nodes:
        if isinstance(e, Load):
            table.append(["load", e.arg, e.dtype.str, index(e.index)])
        elif isinstance(e, Scalar):
            table.append(["scalar", e.arg, e.dtype.str])
        elif isinstance(e, Const):
            table.append(["const", e.dtype.str, np.asarray(e.value, e.dtype).tobytes().hex()])
        elif isinstance(e, IndexValue):
            table.append(["iota", index(e.index), e.dtype.str])
        elif isinstance(e, Random):
            table.append(["random", e.dist, e.stream, ids[id(e.key)], index(e.position),
                          e.dtype.str])
        elif isinstance(e, Folded):
            table.append(["folded", e.phase, e.dtype.str])
        elif isinstance(e, Reduced):
            table.append(["reduced", e.dtype.str])
        else:
            table.append(["op", e.op.value, e.dtype.str, [ids[id(o)] for o in e.operands],
                          bool(e.checked)])
    r = k.reduction
    srt = k.sort
    return {
        "format": FORMAT,
        "space": [int(s) for s in k.space], "rspace": [int(s) for s in k.rspace],
        "label": k.label,
        "args": [[a.kind, a.dtype.str, bool(a.writes)] for a in k.args],
        "status": k.status,
        "nodes": table,
        "stores": [[s.arg, index(s.index), ids[id(s.value)], s.mode] for s in k.stores],
        "checks": [index(ix) for ix in k.checks],
        "prelude": [[ph.op.value, ids[id(ph.value)], np.dtype(ph.acc).str] for ph in k.prelude],
        "reduction": None if r is None else {
            "op": r.op.value, "value": ids[id(r.value)], "arg": r.arg, "index": index(r.index),
            "chunk": r.chunk, "acc": None if r.acc is None else np.dtype(r.acc).str,
            "scan": bool(r.scan), "then": None if r.then is None else ids[id(r.then)]},
        "sort": None if srt is None else {
            "value": ids[id(srt.value)], "arg": srt.arg, "index": index(srt.index),
            "scratch": srt.scratch, "pscratch": srt.pscratch, "positions": bool(srt.positions)},
    }


# what each random distribution may produce (codegen's Random lowering)
_RANDOM_DTYPES = {"u64": (np.dtype(np.uint64),),
                  "uniform": (np.dtype(np.float32), np.dtype(np.float64)),
                  "normal": (np.dtype(np.float32), np.dtype(np.float64))}


# ---- reading ----------------------------------------------------------------------------------
def _fail(what: str):
    raise KernelFormatError(f"kernel description: {what}")


def _int(x, what: str, lo: int = -LIMIT, hi: int = LIMIT) -> int:
    if type(x) is not int or not lo <= x <= hi:
        _fail(f"{what} must be an integer in [{lo}, {hi}], got {x!r}"[:200])
    return x


def _bool(x, what: str) -> bool:
    if type(x) is not bool:
        _fail(f"{what} must be true or false")
    return x


def _list(x, what: str, most: int) -> list:
    if type(x) is not list or len(x) > most:
        _fail(f"{what} must be a list of at most {most} items")
    return x


def _dtype(x, what: str) -> np.dtype:
    if not isinstance(x, str) or len(x) > 8:
        _fail(f"{what}: bad dtype {x!r}"[:200])
    try:
        dt = np.dtype(x)
    except TypeError:
        _fail(f"{what}: bad dtype {x!r}")
    if dt.kind not in "biufc" or dt.fields is not None or dt.subdtype is not None or \
            not dt.isnative or dt.itemsize not in (1, 2, 4, 8, 16):
        _fail(f"{what}: {x!r} is not a number dtype")
    return dt


class _Reader:
    def __init__(self, j: dict):
        if type(j) is not dict:
            _fail("not an object")
        if j.get("format") not in READS:
            _fail(f"format {j.get('format')!r}, this fastlaunch reads {READS}")
        self.j = j
        self.space = tuple(_int(s, "space size", 0) for s in _list(j["space"], "space", MAX_DIMS))
        self.rspace = tuple(_int(s, "rspace size", 0)
                            for s in _list(j["rspace"], "rspace", MAX_DIMS))
        self.sizes = self.space + self.rspace
        if len(self.sizes) > MAX_DIMS or math.prod(self.sizes) > LIMIT:
            _fail("loop space too large")
        # the largest value of each loop variable (a loop of size 0 never runs its body)
        self.tops = [max(s - 1, 0) for s in self.sizes]
        self.args = []
        for i, a in enumerate(_list(j["args"], "args", MAX_ARGS)):
            if type(a) is not list or len(a) != 3 or a[0] not in ARG_KINDS:
                _fail(f"argument {i} is malformed")
            self.args.append(KernelArg(a[0], _dtype(a[1], f"argument {i}"), i, 0,
                                       _bool(a[2], f"argument {i} writes")))
        self.nodes: list = []

    # an index and its value range [lo, hi] over the loops (conservative)
    def index(self, x, nodes_before: int, depth: int = 0):
        if type(x) is not list or len(x) != 2:
            _fail("malformed index")
        const = _int(x[0], "index constant")
        terms, lo, hi, size = [], const, const, abs(const)
        for t in _list(x[1], "index terms", MAX_TERMS):
            if type(t) is not list or len(t) != 2 or type(t[0]) is not list or not t[0]:
                _fail("malformed index term")
            atom, coef = t[0], _int(t[1], "index coefficient")
            kind = atom[0]
            if kind == "loop" and len(atom) == 2:
                dim = _int(atom[1], "loop dimension", 0, len(self.sizes) - 1)
                a, alo, ahi = Loop(dim), 0, self.tops[dim]
            elif kind == "divmod" and len(atom) == 5:
                if depth >= MAX_DEPTH:
                    _fail("index nested too deeply")
                f, flo, fhi = self.index(atom[1], nodes_before, depth + 1)
                div = _int(atom[2], "divmod divisor", 1)
                mod = _int(atom[3], "divmod modulus", 1)
                bound = _int(atom[4], "divmod bound", 1)
                if flo < 0:
                    _fail("a divmod of a value that can be negative")
                # the code skips the modulo where div * mod >= bound: keep bound above f
                a, alo, ahi = DivMod(f, div, mod, max(bound, fhi + 1)), 0, mod - 1
            elif kind == "pick" and len(atom) in (3, 4):
                node = _int(atom[1], "pick expression", 0, nodes_before - 1)
                psize = _int(atom[2], "pick size", 0)
                strict = len(atom) == 4 and _int(atom[3], "pick strictness", 1, 1) == 1
                a, alo, ahi = Pick(self.nodes[node], psize, strict), 0, max(psize - 1, 0)
            else:
                _fail(f"unknown index atom {str(kind)[:20]!r}")
            lo += min(coef * alo, coef * ahi)
            hi += max(coef * alo, coef * ahi)
            size += abs(coef) * max(abs(alo), abs(ahi))
            if size > LIMIT:
                _fail("an index expression that can leave the 62-bit range")
            terms.append((a, coef))
        return Index(const, tuple(terms)), lo, hi

    def node(self, x, i: int):
        if type(x) is not list or not x:
            _fail(f"node {i} is malformed")
        kind = x[0]
        if kind == "load" and len(x) == 4:
            arg = self.arg(x[1], "buffer", f"node {i}")
            dt = _dtype(x[2], f"node {i}")
            if dt != self.args[arg].dtype:
                _fail(f"node {i} loads {dt} from a {self.args[arg].dtype} buffer")
            return Load(arg, dt, self.index(x[3], i)[0])
        if kind == "scalar" and len(x) == 3:
            arg = self.arg(x[1], "scalar", f"node {i}")
            dt = _dtype(x[2], f"node {i}")
            if dt != self.args[arg].dtype:
                _fail(f"node {i} reads a {self.args[arg].dtype} scalar as {dt}")
            return Scalar(arg, dt)
        if kind == "const" and len(x) == 3:
            dt = _dtype(x[1], f"node {i}")
            try:
                raw = bytes.fromhex(x[2]) if isinstance(x[2], str) else b""
            except ValueError:
                raw = b""
            if len(raw) != dt.itemsize:
                _fail(f"node {i}: constant of the wrong size")
            return Const(np.frombuffer(raw, dt)[0], dt)
        if kind == "iota" and len(x) == 3:
            return IndexValue(self.index(x[1], i)[0], _dtype(x[2], f"node {i}"))
        if kind == "random" and len(x) == 6:
            dist = x[1]
            dt = _dtype(x[5], f"node {i}")
            if dist not in _RANDOM_DTYPES or dt not in _RANDOM_DTYPES[dist]:
                _fail(f"node {i}: random draw {str(dist)[:20]!r} of {dt}")
            key = self.nodes[_int(x[3], f"node {i} key", 0, i - 1)]
            if not (isinstance(key, Scalar) and key.dtype == np.uint64):
                _fail(f"node {i}: a random key must be a uint64 scalar argument")
            return Random(dist, _int(x[2], f"node {i} stream", 0, 2**32 - 1), key,
                          self.index(x[4], i)[0], dt)
        if kind == "folded" and len(x) == 3:
            return Folded(_int(x[1], f"node {i} phase", 0, MAX_NODES), _dtype(x[2], f"node {i}"))
        if kind == "reduced" and len(x) == 2 and self.j["format"] >= 2:
            return Reduced(_dtype(x[1], f"node {i}"))
        if kind == "op" and len(x) == 5:
            try:
                op = Op(x[1])
            except (ValueError, TypeError):
                _fail(f"node {i}: unknown operation")
            if op.kind is not Kind.ELEMENTWISE or op in (Op.RANDOM, Op.IOTA):
                _fail(f"node {i}: {op.value} is not an elementwise operation")
            operands = _list(x[3], f"node {i} operands", 8)
            if len(operands) != op.arity:
                _fail(f"node {i}: {op.value} takes {op.arity} operands")
            ops = tuple(self.nodes[_int(o, f"node {i} operand", 0, i - 1)] for o in operands)
            if op is Op.CHECK and not (_dtype(x[2], f"node {i}") == np.int64 and
                                       ops[0].dtype == np.int64):
                _fail(f"node {i}: a check takes and gives int64")
            return Compute(op, _dtype(x[2], f"node {i}"), ops, _bool(x[4], f"node {i} checked"))
        _fail(f"node {i}: unknown kind {str(kind)[:20]!r}")

    def arg(self, x, kind: str, what: str) -> int:
        arg = _int(x, f"{what} argument", 0, len(self.args) - 1)
        if self.args[arg].kind != kind:
            _fail(f"{what} uses argument {arg} ({self.args[arg].kind}) as a {kind}")
        return arg

    def kernel(self) -> Kernel:
        j = self.j
        label = j["label"]
        if not isinstance(label, str) or len(label) > 200:
            _fail("bad label")
        for i, x in enumerate(_list(j["nodes"], "nodes", MAX_NODES)):
            self.nodes.append(self.node(x, i))
        n = len(self.nodes)

        def value(x, what):
            return self.nodes[_int(x, what, 0, n - 1)]

        k = Kernel(self.space, self.rspace, list(self.args), label=label)
        status = j["status"]
        statuses = [i for i, a in enumerate(self.args) if a.kind == "status"]
        if status is not None:
            _int(status, "status argument", 0, len(self.args) - 1)
        if statuses != ([] if status is None else [status]):
            _fail("the status argument must be the one argument of kind status")
        if status is not None and self.args[status].dtype != np.int64:
            _fail("the status argument must be int64")
        k.status = status
        if status is None and any(isinstance(x, Compute) and x.op is Op.CHECK for x in self.nodes):
            _fail("a runtime check needs the status argument")
        written = set()
        for s in _list(j["stores"], "stores", MAX_NODES):
            if type(s) is not list or len(s) != 4 or s[3] not in STORE_MODES:
                _fail("malformed store")
            arg = self.arg(s[0], "buffer", "a store")
            written.add(arg)
            k.stores.append(Store(arg, self.index(s[1], n)[0], value(s[2], "store value"), s[3]))
        k.checks = [self.index(ix, n)[0] for ix in _list(j["checks"], "checks", MAX_NODES)]
        for p, ph in enumerate(_list(j.get("prelude", []), "prelude", MAX_NODES)):
            if type(ph) is not list or len(ph) != 3:
                _fail("malformed prelude phase")
            try:
                op = Op(ph[0])
            except (ValueError, TypeError):
                _fail("unknown prelude reduction")
            if op not in (Op.SUM, Op.PROD, Op.MAX, Op.MIN, Op.ANY, Op.ALL):
                _fail(f"{op.value} cannot be a prelude phase")
            v = value(ph[1], "phase value")
            if any(isinstance(e, Folded) and e.phase >= p for e in walk([v])):
                _fail(f"phase {p} reads its own or a later phase")
            k.prelude.append(Phase(op, v, _dtype(ph[2], "phase accumulator")))
        if any(isinstance(e, Folded) and e.phase >= len(k.prelude) for e in self.nodes):
            _fail("a folded value of a phase that does not exist")
        r = j["reduction"]
        srt = j.get("sort")
        if srt is not None:
            if r is not None:
                _fail("a sort and a reduction in one kernel")
            if k.prelude:
                _fail("a sort with prelude phases")
            k.sort = self.sort(srt, value, n)
            written |= {k.sort.arg, k.sort.scratch} | (
                {k.sort.pscratch} if k.sort.pscratch is not None else set())
        elif r is None:
            if self.rspace and not k.prelude:
                _fail("reduction loops without a reduction")
        else:
            if type(r) is not dict:
                _fail("malformed reduction")
            try:
                op = Op(r["op"])
            except (ValueError, TypeError):
                _fail("unknown reduction")
            if op.kind is not Kind.REDUCE:
                _fail(f"{op.value} is not a reduction")
            arg = self.arg(r["arg"], "buffer", "the reduction")
            written.add(arg)
            index = self.index(r["index"], n)[0]
            if index_picks(index):
                _fail("a reduction result at a data-dependent index")
            chunk = _int(r["chunk"], "reduction chunk", 0)
            if chunk and (not self.space or self.space[-1] * chunk + chunk > LIMIT):
                _fail("a chunked reduction needs a chunk dimension")
            acc = None if r["acc"] is None else _dtype(r["acc"], "reduction accumulator")
            k.reduction = Reduction(op, value(r["value"], "reduction value"), arg, index,
                                    chunk, acc, _bool(r["scan"], "reduction scan"))
            then = r.get("then")
            if then is not None:
                k.reduction = self.epilogue(k.reduction, value(then, "reduction epilogue"))
        # a reduced value only inside the epilogue (the code generator evaluates it there)
        roots = list(k._roots())
        if k.reduction is not None:
            roots += [p.expr for p in index_picks(k.reduction.index)]
        if any(isinstance(e, Reduced) for e in walk(roots)):
            _fail("a reduced value outside a reduction's epilogue")
        for i in written:
            if not self.args[i].writes:
                _fail(f"argument {i} is written but not marked as written")
        return k


def _sort_reader(self, srt, value, n) -> Sort:
    if type(srt) is not dict:
        _fail("malformed sort")
    if len(self.rspace) != 1 or self.rspace[0] < 1:
        _fail("a sort needs exactly one non-empty row loop")
    if 2 * math.prod(self.sizes) > LIMIT:
        _fail("sort scratch too large")
    v = value(srt["value"], "sort value")
    positions = _bool(srt["positions"], "sort positions")
    arg = self.arg(srt["arg"], "buffer", "the sort")
    out_dt = np.dtype(np.int64) if positions else v.dtype
    if self.args[arg].dtype != out_dt:
        _fail(f"a sort stores {out_dt} into a {self.args[arg].dtype} buffer")
    index = self.index(srt["index"], n)[0]
    if index_picks(index):
        _fail("a sort result at a data-dependent index")
    scratch = self.arg(srt["scratch"], "buffer", "the sort scratch")
    if self.args[scratch].dtype != np.dtype(f"u{v.dtype.itemsize}"):
        _fail("a sort scratch of the wrong dtype")
    pscratch = srt["pscratch"]
    if positions:
        pscratch = self.arg(pscratch, "buffer", "the sort positions scratch")
        if self.args[pscratch].dtype != np.int64:
            _fail("a sort positions scratch of the wrong dtype")
    elif pscratch is not None:
        _fail("a positions scratch without positions")
    if len({arg, scratch, pscratch}) != 3:
        _fail("a sort's output, scratch and positions scratch must be distinct arguments")
    return Sort(v, arg, index, scratch, pscratch, positions)


def _epilogue_reader(self, r: Reduction, then) -> Reduction:
    """A reduction with the epilogue `then`, checked (see the module docstring)."""
    if r.chunk or r.scan or r.op in (Op.ARGMAX, Op.ARGMIN):
        _fail("an epilogue on partial results, a scan or an arg-reduction")
    for e in walk([then]):
        if not isinstance(e, (Reduced, Const, Compute)):
            _fail("an epilogue reads only the reduced value and constants")
        if e.dtype.kind == "c" or isinstance(e, Compute) and (e.checked or e.op is Op.CHECK):
            _fail("an epilogue of checked or complex operations")
    if then.dtype != self.args[r.arg].dtype:
        _fail(f"an epilogue of {then.dtype} stored into a {self.args[r.arg].dtype} buffer")
    return Reduction(r.op, r.value, r.arg, r.index, r.chunk, r.acc, r.scan, then)


_Reader.sort = _sort_reader
_Reader.epilogue = _epilogue_reader


def kernel_from_json(j) -> Kernel:
    """An unscheduled kernel from its description (see the module docstring for what is
    checked); its arguments' extents are not set (kernel.set_extents computes them)."""
    try:
        return _Reader(j).kernel()
    except KernelFormatError:
        raise
    except (KeyError, TypeError, IndexError, AttributeError, ValueError, OverflowError,
            RecursionError) as err:
        raise KernelFormatError(f"kernel description: {type(err).__name__}: {err}"[:300]) \
            from None
