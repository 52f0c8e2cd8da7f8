"""Backend-neutral kernel descriptions: loop nests over static shapes, with affine addressing.

A kernel iterates a `space` of parallel loop dimensions, optionally folding a nested `rspace` of
reduction dimensions, and stores expression values into buffers.  Every address is an `Index`:
an integer affine combination of loop variables and of `DivMod` atoms ((f // d) % m), the
latter appearing only where a reshape of non-contiguous data cannot be expressed by strides.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

from .graph import Op, dtype_short

__all__ = ["KernelError", "accumulator_dtype", "ordered_product", "Loop", "DivMod", "Pick",
           "Index", "Load", "Scalar", "Const", "IndexValue", "Random", "Compute", "Folded",
           "Reduced", "Phase", "Store", "Reduction", "Sort", "ArgKind", "KernelArg", "Kernel",
           "walk", "expression_operands", "index_picks", "SMALL_SORT", "sort_passes",
           "LibraryCall", "is_kernel"]


class KernelError(enum.IntFlag):
    """Bits a kernel ORs into the call's status word (the kernel ABI's one error channel);
    the program's CHECK stops before any argument is written and the caller raises the
    error of the lowest bit set."""
    INDEX = 1          # a data-dependent index out of range
    OVERFLOW = 2       # Python-int arithmetic that left the 64-bit range
    RANGE = 4          # a value outside [0, size) where a function takes no negatives
                       # (np.bincount with a static minlength, np.choose(mode="raise"))
    # from ir.FIRST_CHECK_BIT up: a program's own runtime checks (ir.Op.CHECK), one bit per
    # check, their exceptions and messages in Program.checks


def accumulator_dtype(op: Op, dtype: np.dtype) -> np.dtype:
    """The type a reduction accumulates in: sums of float32/float16 in the next wider float."""
    if op is Op.SUM and dtype == np.float32:
        return np.dtype(np.float64)
    if op is Op.SUM and dtype == np.float16:
        return np.dtype(np.float32)
    return np.dtype(dtype)



def ordered_product(r) -> bool:
    """Whether reduction `r` is a float product, which every backend folds one element at a
    time in the reduced axes' order, as NumPy's multiply.reduce does: never split into
    partial products, never reassociated (the order decides where a partial product
    overflows or underflows, so between inf, 0 and NaN, not only the last bits)."""
    return r.op is Op.PROD and r.acc_dtype.kind == "f"


@dataclass(frozen=True, order=True)
class Loop:
    """Loop variable `dim` of the kernel: space dims first, then reduction dims."""
    dim: int

    def __str__(self):
        return f"i{self.dim}"


@dataclass(frozen=True)
class DivMod:
    """(f // div) % mod, for an f known to lie in [0, bound)."""
    f: "Index"
    div: int
    mod: int
    bound: int

    def __str__(self):
        return f"(({self.f}) / {self.div} % {self.mod})"


@dataclass(frozen=True)
class Pick:
    """A data-dependent index: the int64 value of kernel expression `expr`, an index into an
    axis of `size` elements.  Negative values count from the end, as in NumPy; a value outside
    [-size, size) is never dereferenced: it reads element 0 and raises the kernel's error flag
    (KernelError.INDEX).  `strict`: only [0, size) is valid, and a value outside raises
    KernelError.RANGE instead (functions that take values, not indices: np.bincount)."""
    expr: object
    size: int
    strict: bool = False

    def __str__(self):
        return f"pick{'!' if self.strict else ''}({self.size})"


def _atom_key(atom):
    if isinstance(atom, Loop):
        return (0, atom.dim, "")
    return (1 if isinstance(atom, DivMod) else 2, 0, repr(atom))


@dataclass(frozen=True)
class Index:
    """const + sum(coef * atom); terms sorted, no zero coefficients."""
    const: int = 0
    terms: tuple = ()

    @staticmethod
    def of(const=0, terms=()) -> "Index":
        acc: dict = {}
        for atom, coef in terms:
            if coef:
                acc[atom] = acc.get(atom, 0) + int(coef)
        items = sorted(((a, c) for a, c in acc.items() if c), key=lambda t: _atom_key(t[0]))
        return Index(int(const), tuple(items))

    @staticmethod
    def loop(dim: int) -> "Index":
        return Index(0, ((Loop(dim), 1),))

    def __add__(self, other: "Index") -> "Index":
        return Index.of(self.const + other.const, self.terms + other.terms)

    def scale(self, k: int) -> "Index":
        return Index.of(self.const * k, [(a, c * k) for a, c in self.terms])

    def shift(self, k: int) -> "Index":
        return Index(self.const + int(k), self.terms)

    def coef(self, atom) -> int:
        for a, c in self.terms:
            if a == atom:
                return c
        return 0

    @property
    def is_affine(self) -> bool:
        """Only loop variables: a strided access."""
        return all(isinstance(a, Loop) for a, _ in self.terms)

    def loops(self) -> set:
        """Loop dims the index depends on through its affine part and DivMod atoms."""
        out = set()
        for a, _ in self.terms:
            if isinstance(a, Loop):
                out.add(a.dim)
            elif isinstance(a, DivMod):
                out |= a.f.loops()
        return out

    @property
    def picks(self) -> list:
        return [a for a, _ in self.terms if isinstance(a, Pick)]

    def substitute(self, mapping, pick=lambda p: p) -> "Index":
        """Replace loop atoms: mapping(dim) -> Index; Pick atoms: pick(atom) -> Pick."""
        total = Index(self.const)
        for a, c in self.terms:
            if isinstance(a, Loop):
                total = total + mapping(a.dim).scale(c)
            elif isinstance(a, DivMod):
                f = a.f.substitute(mapping, pick)
                total = total + Index.of(0, [(DivMod(f, a.div, a.mod, a.bound), c)])
            else:
                total = total + Index.of(0, [(pick(a), c)])
        return total

    def bounds(self, sizes) -> tuple[int, int]:
        """Smallest and largest value over loop variables in [0, sizes[dim])."""
        lo = hi = self.const
        for a, c in self.terms:
            if isinstance(a, Loop):
                top = sizes[a.dim] - 1
            elif isinstance(a, DivMod):
                top = a.mod - 1
            else:
                top = a.size - 1
            lo += min(0, c * top)
            hi += max(0, c * top)
        return lo, hi

    def __str__(self):
        parts = [f"{c}*{a}" if c != 1 else str(a) for a, c in self.terms]
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts)


# ---- expressions (a DAG: equal expressions are one object via the builder's memo) -------------
@dataclass(frozen=True)
class Load:
    arg: int          # kernel argument holding the buffer
    dtype: np.dtype
    index: Index      # element offset from the buffer's base pointer


@dataclass(frozen=True)
class Scalar:
    arg: int          # kernel argument passed by value (an 8-byte word)
    dtype: np.dtype   # the value's dtype; the word holds it as int64 or float64


@dataclass(frozen=True)
class Const:
    value: object     # a NumPy scalar of `dtype`
    dtype: np.dtype

    def __hash__(self):
        return hash((self.dtype.str, self.value.tobytes()))

    def __eq__(self, other):
        return (isinstance(other, Const) and self.dtype == other.dtype
                and self.value.tobytes() == other.value.tobytes())


@dataclass(frozen=True)
class IndexValue:
    index: Index      # an index expression used as a value (np.arange, np.eye)
    dtype: np.dtype


@dataclass(frozen=True, eq=False, repr=False)
class Random:
    """Counter-based random numbers (ir.Op.RANDOM): Philox4x32-10 keyed by `key` (a uint64
    expression, the call's key) with counter (position, stream); `position` is the element's
    flat index in the draw's own shape, so recomputing it anywhere gives the same value."""
    dist: str
    stream: int
    key: object
    position: Index
    dtype: np.dtype

    def __repr__(self):
        return f"<Random {self.dist} #{self.stream} {dtype_short(self.dtype)}>"


@dataclass(frozen=True, eq=False, repr=False)
class Compute:
    """op (an elementwise ir.Op) on operands of its loop dtypes.  Compared by identity: the
    builder makes one object per value, and deep chains must not hash recursively.
    `checked`: integer arithmetic standing for Python ints, which raises KernelError.OVERFLOW
    instead of wrapping."""
    op: Op
    dtype: np.dtype
    operands: tuple
    checked: bool = False

    def __repr__(self):
        return f"<Compute {self.op.value} {dtype_short(self.dtype)}>"


@dataclass(frozen=True)
class Folded:
    """The result of prelude phase `phase` at the current point of the space (a row's max
    in a row softmax), converted to `dtype`."""
    phase: int
    dtype: np.dtype


@dataclass(frozen=True)
class Reduced:
    """The kernel's reduction result at the current point of the space, converted to `dtype`
    as a store into a buffer of that dtype converts it: what a reduction's epilogue
    (Reduction.then) computes from."""
    dtype: np.dtype


@dataclass(frozen=True, eq=False)
class Phase:
    """A reduction over the whole rspace folded, per point of the space, before the kernel's
    body (fuse's row fusion: the row stays in cache between phases).  Later phases and the body
    read its result as Folded(i)."""
    op: Op
    value: object
    acc: np.dtype


@dataclass(frozen=True)
class Store:
    """arg[index] = value.  With `mode` add/max/min the value combines with the old one
    (scatter-accumulate, where Pick indices may repeat: duplicates combine in loop order)."""
    arg: int
    index: Index
    value: object
    mode: str = "set"


@dataclass(frozen=True)
class Reduction:
    """acc = op over rspace of `value`; stored at `index` (over space loops) of `arg`.

    With `chunk` > 0 the last space dimension numbers chunks: chunk c folds the flat rspace
    range [c*chunk, min((c+1)*chunk, size)), giving partial results combined by a later kernel.

    `then` (an epilogue): an expression of `Reduced` and constants, of the argument's dtype,
    stored instead of the result: the elementwise operations of a value computed from the
    reduction alone (a mean's division by the count), applied once per output after the last
    combine, on the result as its own buffer would have held it (so the same bits as a map
    kernel reading that buffer).  Never on partial results (chunk), scans or arg-reductions.
    """
    op: Op
    value: object
    arg: int
    index: Index
    chunk: int = 0
    acc: np.dtype | None = None   # accumulation dtype (default: accumulator_dtype(op, value))
    scan: bool = False            # store the running value at every rspace step (cumsum)
    then: object = None           # the epilogue, or None: the result itself is stored

    @property
    def acc_dtype(self) -> np.dtype:
        return self.acc if self.acc is not None else accumulator_dtype(self.op, self.value.dtype)


# Rows up to this long sort by insertion (a few compares each, no histograms); longer ones by
# a least-significant-digit radix sort on 8-bit digits (stable, passes whose digit is the same
# for the whole row skipped).
SMALL_SORT = 32


def sort_passes(dtype) -> int:
    """Radix passes (8-bit digits) of a sort key of `dtype`."""
    return np.dtype(dtype).itemsize


@dataclass(frozen=True)
class Sort:
    """Each point of the space sorts one row: the values of `value` over the single rspace
    loop, in ascending order with NaNs last, stably (equal keys keep their order; -0.0 equals
    0.0), stored at `index` of `arg`: the values themselves, or with `positions` their int64
    positions in the row (argsort).  `scratch`: an argument of unsigned ints of the value's
    size (bool: one byte) with 2*n elements per row (the row at flat space position p owns
    [2*n*p, 2*n*(p+1))); `pscratch`: the same in int64 for positions (argsort only)."""
    value: object
    arg: int
    index: Index
    scratch: int
    pscratch: int | None = None
    positions: bool = False


class ArgKind(str, enum.Enum):
    """How a kernel takes an argument word (_launch.ArgKind): a buffer's address, a scalar's
    bits, or the status word's address.  A str enum: it compares equal to (and prints as)
    its value, "buffer" / "scalar" / "status", as saved kernel descriptions write it."""
    BUFFER = "buffer"
    SCALAR = "scalar"
    STATUS = "status"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class KernelArg:
    kind: ArgKind     # given as an ArgKind or its value
    dtype: np.dtype
    buffer: int       # id of the plan buffer bound to this argument
    extent: int = 0   # elements the kernel may touch (buffers): the verifier checks sizes
    writes: bool = False

    def __post_init__(self):
        object.__setattr__(self, "kind", ArgKind(self.kind))


@dataclass
class Kernel:
    space: tuple                     # parallel loop sizes (loop dims 0..len-1)
    rspace: tuple = ()               # reduction loop sizes (dims after the space dims)
    args: list = field(default_factory=list)
    stores: list = field(default_factory=list)
    reduction: Reduction | None = None
    label: str = ""                  # short human description, e.g. "sum" or "map"
    status: int | None = None        # argument index of the error flag, for checked gathers
    checks: list = field(default_factory=list)   # indices evaluated only to validate picks
    prelude: list = field(default_factory=list)  # Phases folded per point before the body
    # The backend's launch decisions (backends' schedule()): None in a fused, unscheduled
    # kernel.  Whatever it is, it has `launch_size` (LAUNCH n) and `params` (the executable's
    # per-kernel words, e.g. the CPU's work per launch index) and `describe()`.
    schedule: object = None
    sort: Sort | None = None          # a per-row sort (rspace: the row), instead of a reduction

    @property
    def size(self) -> int:
        """Points of the parallel space."""
        return int(np.prod(self.space, dtype=np.int64))

    @property
    def launch_size(self) -> int:
        if self.schedule is None:
            raise ValueError(f"kernel {self.label!r} is not scheduled: its backend decides its "
                             f"launch size")
        return self.schedule.launch_size

    @property
    def ordered_stores(self) -> bool:
        """Stores at data-dependent indices (scatters): repeated indices must apply in loop
        order, as NumPy's do, so a backend may not run iterations concurrently."""
        return any(index_picks(s.index) for s in self.stores)

    def cost_per_iteration(self) -> int:
        """Memory accesses and operations of one innermost iteration; a math-library call
        counts as TRANSCENDENTAL_COST."""
        cost = len(self.stores) + (self.reduction is not None)
        if self.sort is not None:     # copy in, the radix passes (or insertion), copy out
            cost += 2 + 3 * sort_passes(self.sort.value.dtype)
        for e in walk(self._roots()):
            if isinstance(e, Compute):
                cost += TRANSCENDENTAL_COST if e.op in TRANSCENDENTAL else 1
            elif isinstance(e, Random):
                cost += RANDOM_COST
            elif isinstance(e, Load):
                cost += 1
        return max(1, cost)

    def sizes(self) -> tuple:
        return tuple(self.space) + tuple(self.rspace)

    def bytes_moved(self) -> int:
        """Bytes read and written once per distinct access: the traffic estimate we report."""
        seen, total = set(), 0
        for e in walk(self._roots()):
            if isinstance(e, Load) and (e.arg, e.index) not in seen:
                seen.add((e.arg, e.index))
                total += self._touched(e.index) * e.dtype.itemsize
        for s in self.stores:
            total += self._touched(s.index) * self.args[s.arg].dtype.itemsize
        if self.reduction is not None:
            total += self.size * self.args[self.reduction.arg].dtype.itemsize
        return total

    def _touched(self, index: Index) -> int:
        used = index.loops()
        return int(np.prod([s for d, s in enumerate(self.sizes()) if d in used], dtype=np.int64))

    def _roots(self):
        roots = [ph.value for ph in self.prelude]
        roots += [p.expr for ix in self.checks for p in index_picks(ix)]
        roots += [p.expr for s in self.stores for p in index_picks(s.index)]
        roots += [s.value for s in self.stores]
        if self.reduction is not None:
            roots.append(self.reduction.value)
        if self.sort is not None:
            roots.append(self.sort.value)
        return roots

    def describe(self) -> str:
        """Readable, deterministic text of the loop nest (what `dis()` shows before the source)."""
        names: dict = {}
        head = f"kernel {self.label} space={list(self.space)}"
        if self.rspace:
            head += f" rspace={list(self.rspace)}"
        lines = [head]
        for i, a in enumerate(self.args):
            rw = " out" if a.writes else ""
            lines.append(f"  arg{i}: {a.kind} {dtype_short(a.dtype)}{rw}")
        epilogue = [self.reduction.then] if self.reduction is not None and \
            self.reduction.then is not None else []
        for e in walk(self._roots() + epilogue):
            names[id(e)] = f"v{len(names)}"
            lines.append(f"  {names[id(e)]} = {_expr_text(e, names)}")
        for s in self.stores:
            verb = "store" if s.mode == "set" else f"store-{s.mode}"
            lines.append(f"  {verb} arg{s.arg}[{_index_text(s.index, names)}] = "
                         f"{names[id(s.value)]}")
        for i, ph in enumerate(self.prelude):
            lines.append(f"  phase{i} = {ph.op.value} over rspace of {names[id(ph.value)]} "
                         f"(acc {dtype_short(ph.acc)})")
        for ix in self.checks:
            lines.append(f"  check [{_index_text(ix, names)}]")
        if self.reduction is not None:
            r = self.reduction
            extra = (f" chunk={r.chunk}" if r.chunk else "") + (" scan" if r.scan else "")
            then = f", then {names[id(r.then)]}" if r.then is not None else ""
            lines.append(f"  arg{r.arg}[{r.index}] = {r.op.value}{extra} over rspace of "
                         f"{names[id(r.value)]} (acc {dtype_short(r.acc_dtype)}){then}")
        if self.sort is not None:
            s = self.sort
            what = "argsort" if s.positions else "sort"
            scratch = f"arg{s.scratch}" + (f", arg{s.pscratch}" if s.pscratch is not None else "")
            lines.append(f"  arg{s.arg}[{s.index}] = {what} over rspace of {names[id(s.value)]}"
                         f" (scratch {scratch})")
        if self.schedule is not None:
            lines.append(f"  schedule: {self.schedule.describe()}")
        return "\n".join(lines)


TRANSCENDENTAL_COST = 8
RANDOM_COST = 24          # ten Philox rounds (two 32x32->64 multiplies each), plus conversion
TRANSCENDENTAL = {Op.CBRT, Op.EXP, Op.EXP2, Op.EXPM1, Op.LOG, Op.LOG2, Op.LOG10, Op.LOG1P,
                  Op.SIN, Op.COS, Op.TAN, Op.ARCSIN, Op.ARCCOS, Op.ARCTAN, Op.SINH, Op.COSH,
                  Op.TANH, Op.ARCSINH, Op.ARCCOSH, Op.ARCTANH, Op.POW, Op.ARCTAN2, Op.HYPOT,
                  Op.NEXTAFTER, Op.LOGADDEXP, Op.LOGADDEXP2, Op.FLOORDIV, Op.MOD, Op.FMOD,
                  Op.ERF, Op.ERFC, Op.LGAMMA}


@dataclass
class LibraryCall:
    """A step of a plan that is not a compiled kernel: a library routine (matrix product,
    small dense linear algebra) over a (b1, b2) batch of matrices, by operation name
    ("gemm", "inv", "solve", "det", "slogdet", "cholesky", "eigh", "svd", "lstsq"): which
    routine entry
    implements it, and whether one does, is the backend's business.  `args` bind the
    operands (x, y[, z]) to plan buffers, `layouts` give each operand's (offset, batch
    strides sb1 sb2, row and column strides s0 s1) in elements; sizes are (b1, b2, m, n, k)
    (bytecode.ROUTINES says which shape each operand has)."""
    name: str
    dtype: np.dtype
    sizes: tuple
    args: list
    layouts: list
    label: str = ""
    # the backend's decisions (None in a fused plan); like a Kernel's, it has describe()
    schedule: object = None
    status = None                    # library calls stop the run themselves on failure

    def describe(self) -> str:
        b1, b2, m, n, k = self.sizes
        ops = "  ".join(f"{'xyz'[i]}{'<-' if a.writes else '='}buf{a.buffer}"
                        f"[{lay[0]}; {lay[1]} {lay[2]}; {lay[3]} {lay[4]}]"
                        for i, (a, lay) in enumerate(zip(self.args, self.layouts)))
        return (f"library {self.name} {dtype_short(self.dtype)} batch=({b1},{b2}) m={m} n={n} "
                f"k={k}\n  {ops}")

    def work(self) -> int:
        """Estimated operations (for the recorder's decision to poll for Ctrl-C)."""
        b1, b2, m, n, k = self.sizes
        if self.name in ("svd", "lstsq"):         # m x n: about m n min(m, n) each
            return b1 * b2 * max(1, m) * max(1, n) * max(1, min(m, n))
        return b1 * b2 * max(1, m) * max(1, m if self.name != "gemm" else n) * \
            max(1, k if self.name == "gemm" else m)


@dataclass
class LoopBegin:
    """The start of a loop in a plan (a graph's Op.LOOP, ir/fuse.py): the steps up to the
    matching LoopEnd are its body, run `n` times (program/record.py makes the bytecode loop).
    Buffer ids: per carried value (init, read, write, spare, final): the body reads `read`
    and writes `write`, two aliases (role "alias") that take turns between `final` and
    `spare` (ping-pong), the first iteration reading `init`; per collected result (row,
    stack, every): the body writes the alias `row`, moved every iteration to row
    counter // every of `stack`; per checkpoint (carried index, row, stack, every): the
    carried value's new value is copied into its row each iteration; `flag`: a bool the body
    writes, the loop stops after an iteration that set it; `iter`: the body's iteration
    number (role "iter", the loop counter by value), or None."""
    label: str
    n: int
    carried: list
    rows: list
    checkpoints: list
    flag: int | None = None
    iter: int | None = None
    schedule: object = None
    status = None

    def describe(self) -> str:
        parts = [f"loop {self.label} n={self.n}"]
        parts += [f"  carry buf{i} -> buf{f} (reads buf{r}, writes buf{w}, spare buf{s})"
                  for i, r, w, s, f in self.carried]
        parts += [f"  collect buf{r} into buf{st} every {e}" for r, st, e in self.rows]
        parts += [f"  checkpoint carry {c} into buf{st} every {e}"
                  for c, _, st, e in self.checkpoints]
        if self.flag is not None:
            parts.append(f"  until buf{self.flag}")
        return "\n".join(parts)

    def buffers(self) -> list:
        """Every buffer id the loop's own instructions use."""
        out = [b for c in self.carried for b in c] + [b for r in self.rows for b in r[:2]]
        out += [b for _, r, st, _ in self.checkpoints for b in (r, st)]
        return out + ([self.flag] if self.flag is not None else [])

    def remapped(self, m) -> "LoopBegin":
        return LoopBegin(self.label, self.n, [tuple(m[b] for b in c) for c in self.carried],
                         [(m[r], m[st], e) for r, st, e in self.rows],
                         [(c, m[r], m[st], e) for c, r, st, e in self.checkpoints],
                         None if self.flag is None else m[self.flag],
                         None if self.iter is None else m[self.iter], self.schedule)


@dataclass
class LoopEnd:
    """The end of the loop whose LoopBegin has the same label."""
    label: str
    schedule: object = None
    status = None

    def describe(self) -> str:
        return f"end loop {self.label}"


def is_kernel(step) -> bool:
    """Whether a plan step is a compiled kernel (not a LibraryCall or a loop's bounds)."""
    return isinstance(step, Kernel)


def is_loop_step(step) -> bool:
    return isinstance(step, (LoopBegin, LoopEnd))


def index_picks(ix: Index) -> list:
    """Pick atoms of an index, also inside DivMod atoms."""
    out = []
    for a, _ in ix.terms:
        if isinstance(a, Pick):
            out.append(a)
        elif isinstance(a, DivMod):
            out += index_picks(a.f)
    return out


def _index_text(ix: Index, names) -> str:
    text = str(ix)
    for p in index_picks(ix):
        text = text.replace(str(p), f"pick{'!' if p.strict else ''}({names.get(id(p.expr), '?')}, "
                                    f"{p.size})", 1)
    return text


def _expr_text(e, names) -> str:
    if isinstance(e, Load):
        return f"load {dtype_short(e.dtype)} arg{e.arg}[{_index_text(e.index, names)}]"
    if isinstance(e, Scalar):
        return f"scalar {dtype_short(e.dtype)} arg{e.arg}"
    if isinstance(e, Const):
        return f"const {dtype_short(e.dtype)} {e.value!s}"     # f32 0.9, not 0.899999976...
    if isinstance(e, IndexValue):
        return f"index {dtype_short(e.dtype)} {e.index}"
    if isinstance(e, Folded):
        return f"phase{e.phase} {dtype_short(e.dtype)}"
    if isinstance(e, Reduced):
        return f"reduced {dtype_short(e.dtype)}"
    if isinstance(e, Random):
        return (f"random.{e.dist} {dtype_short(e.dtype)} key={names[id(e.key)]} "
                f"stream={e.stream} at [{_index_text(e.position, names)}]")
    op = e.op.value + (".checked" if e.checked else "")
    return f"{op} {dtype_short(e.dtype)} " + ", ".join(names[id(o)] for o in e.operands)


def _children(e) -> list:
    if isinstance(e, Compute):
        return list(e.operands)
    if isinstance(e, Random):
        return [e.key] + [p.expr for p in index_picks(e.position)]
    if isinstance(e, (Load, IndexValue)):
        return [p.expr for p in index_picks(e.index)]
    return []


def expression_operands(e) -> list:
    """The expressions `e` reads directly: operands, data-dependent index expressions."""
    return _children(e)


def walk(roots, known=frozenset()):
    """Expressions reachable from roots, operands before users, each once (iterative: long
    chains of operations are deep).  `known`: ids of expressions not to visit, nor what they
    are computed from (a code generator's already emitted values)."""
    order, seen = [], set()
    for root in roots:
        stack = [(root, False)]
        while stack:
            e, expanded = stack.pop()
            if expanded:
                order.append(e)
                continue
            if id(e) in seen:
                continue
            seen.add(id(e))
            stack.append((e, True))
            stack.extend((c, False) for c in reversed(_children(e))
                         if id(c) not in seen and id(c) not in known)
    return order


# ---- description transforms (shared by fusion and the backends' schedules) ---------------
def idents(n: int, start: int = 0) -> tuple:
    return tuple(Index.loop(start + d) for d in range(n))


def address(strides, imap) -> Index:
    total = Index()
    for s, ix in zip(strides, imap):
        total = total + ix.scale(int(s))
    return simplify(total)


def simplify(ix: Index) -> Index:
    """Fold DivMod digits of one f back into f where the strides walk them contiguously.

    c*((f//d)%m) + c*m*((f//(d*m))%m2) is c*((f//d)%(m*m2)); a single digit (f//1)%m with
    f < bound <= m is f itself.  So a reshape of contiguous data becomes a plain strided access.
    """
    atoms = [(a, c) for a, c in ix.terms if isinstance(a, DivMod)]
    if not atoms:
        return ix
    merged = True
    while merged:
        merged = False
        for i, (a, ca) in enumerate(atoms):
            for j, (b, cb) in enumerate(atoms):
                if i != j and a.f == b.f and b.div == a.div * a.mod and cb == ca * a.mod:
                    atoms[i] = (DivMod(a.f, a.div, a.mod * b.mod, a.bound), ca)
                    del atoms[j]
                    merged = True
                    break
            if merged:
                break
    out = Index.of(ix.const, [(a, c) for a, c in ix.terms if not isinstance(a, DivMod)])
    for a, c in atoms:
        if a.mod == 1 or a.div >= a.bound:
            continue                      # always zero
        if a.div == 1 and a.mod >= a.bound:
            out = out + a.f.scale(c)      # the whole number: affine again
        else:
            out = out + Index.of(0, [(a, c)])
    return out


def coalesce(k: Kernel) -> Kernel:
    """Drop size-1 loops and merge adjacent loops every access walks contiguously."""
    sizes = list(k.sizes())
    nspace = len(k.space)
    chunked = k.reduction is not None and k.reduction.chunk
    indices = _all_indices(k)
    # groups of loop dims that may merge: the space (less a chunk dim) and the rspace
    groups = [list(range(nspace - 1)), [nspace - 1]] if chunked else [list(range(nspace))]
    groups.append(list(range(nspace, len(sizes))))
    new_groups = []
    mapping: dict[int, Index] = {}
    next_dim = 0
    for group in groups:
        dims = [d for d in group if sizes[d] != 1 or (chunked and d == nspace - 1)]
        for d in group:
            if d not in dims:
                mapping[d] = Index()
        runs: list[list[int]] = []
        for d in dims:
            if runs and all(ix.coef(Loop(runs[-1][-1])) == ix.coef(Loop(d)) * sizes[d]
                            for ix in indices):
                runs[-1].append(d)
            else:
                runs.append([d])
        out_sizes = []
        for run in runs:
            for d in run[:-1]:
                mapping[d] = Index()
            mapping[run[-1]] = Index.loop(next_dim)
            next_dim += 1
            out_sizes.append(int(np.prod([sizes[d] for d in run], dtype=np.int64)))
        new_groups.append(out_sizes)
    if chunked:
        space, rspace = tuple(new_groups[0] + new_groups[1]), tuple(new_groups[2])
    else:
        space, rspace = tuple(new_groups[0]), tuple(new_groups[1])
    if all(mapping[d] == Index.loop(d) for d in range(len(sizes))):
        return k
    return substitute(k, space, rspace, lambda d: mapping[d])


def _all_indices(k: Kernel) -> list:
    """Every index of the kernel, also those inside DivMod atoms and pick expressions."""
    out = []

    def add(ix: Index):
        out.append(ix)
        for a, _ in ix.terms:
            if isinstance(a, DivMod):
                add(a.f)

    for e in walk(k._roots()):
        if isinstance(e, (Load, IndexValue)):
            add(e.index)
        elif isinstance(e, Random):
            add(e.position)
    for s in k.stores:
        add(s.index)
    for ix in k.checks:
        add(ix)
    if k.reduction is not None:
        add(k.reduction.index)
    if k.sort is not None:
        add(k.sort.index)
    return out


def substitute(k: Kernel, space, rspace, mapping) -> Kernel:
    memo: dict = {}

    def sub(ix: Index) -> Index:
        return simplify(ix.substitute(mapping,
                                      lambda p: Pick(rebuild(p.expr), p.size, p.strict)))

    def rebuild(e):
        r = memo.get(id(e))
        if r is not None:
            return r
        for x in walk([e]):            # operands (and pick expressions) first, iteratively
            if id(x) in memo:
                continue
            if isinstance(x, Load):
                r = Load(x.arg, x.dtype, sub(x.index))
            elif isinstance(x, IndexValue):
                r = IndexValue(sub(x.index), x.dtype)
            elif isinstance(x, Random):
                r = Random(x.dist, x.stream, memo[id(x.key)], sub(x.position), x.dtype)
            elif isinstance(x, Compute):
                r = Compute(x.op, x.dtype, tuple(memo[id(o)] for o in x.operands), x.checked)
            else:
                r = x
            memo[id(x)] = r
        return memo[id(e)]

    out = Kernel(space, rspace, list(k.args), [], None, k.label, k.status)
    out.prelude = [Phase(ph.op, rebuild(ph.value), ph.acc) for ph in k.prelude]
    out.stores = [Store(s.arg, sub(s.index), rebuild(s.value), s.mode) for s in k.stores]
    out.checks = [sub(ix) for ix in k.checks]
    if k.reduction is not None:
        r = k.reduction
        # (an epilogue has no indices: it reads the result and constants only)
        out.reduction = Reduction(r.op, rebuild(r.value), r.arg, sub(r.index), r.chunk, r.acc,
                                  r.scan, r.then)
    if k.sort is not None:
        s = k.sort
        out.sort = Sort(rebuild(s.value), s.arg, sub(s.index), s.scratch, s.pscratch,
                        s.positions)
    return out


def set_extents(k: Kernel):
    """Record the element range each buffer argument may touch, for the verifier."""
    sizes = k.sizes()
    lo: dict = {}
    hi: dict = {}
    runs = all(sizes)         # loads and map stores sit inside every loop

    def see(arg, ix: Index, inside_all=True):
        if inside_all and not runs:
            return
        a, b = ix.bounds(sizes)
        lo[arg] = min(lo.get(arg, a), a)
        hi[arg] = max(hi.get(arg, b), b)

    for e in walk(k._roots()):
        if isinstance(e, Load):
            see(e.arg, e.index)
    for s in k.stores:
        see(s.arg, s.index)
    if k.reduction is not None and all(k.space):
        see(k.reduction.arg, k.reduction.index, inside_all=k.reduction.scan)
    if k.sort is not None and runs:
        s = k.sort
        see(s.arg, s.index)
        # each row's scratch: 2*n elements at 2*n*(flat space position)
        for arg in (s.scratch, s.pscratch):
            if arg is not None:
                see(arg, Index(2 * k.size * k.rspace[0] - 1))
                see(arg, Index(0))
    for i, a in enumerate(k.args):
        if a.kind == "buffer":
            extent = (lo[i], hi[i]) if i in lo else (0, -1)
            k.args[i] = KernelArg(a.kind, a.dtype, a.buffer, extent, a.writes)
