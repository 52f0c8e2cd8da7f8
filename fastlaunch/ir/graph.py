"""The traced program: a typed, shaped, printable DAG of array operations.

Nothing here knows about backends, kernels or Python call signatures.  Nodes are
hash-consed per graph (structurally equal nodes are one node), and names are given
only when printing, so the text of a graph depends on its structure alone.
"""
from __future__ import annotations

import enum
import math

import numpy as np

__all__ = ["Kind", "Op", "Node", "Graph", "SUPPORTED_DTYPES", "dtype_short", "check_shape",
           "MAX_INTP", "FIRST_CHECK_BIT", "LAST_CHECK_BIT"]

# The status-word bits of runtime checks (Op.CHECK): below FIRST_CHECK_BIT the KernelError
# bits every program shares (ir/kernel.py); from it up, one bit per distinct check of a program
# (its exception and message in Graph.check_errors, then Program.checks)
FIRST_CHECK_BIT = 8
LAST_CHECK_BIT = 1 << 62

# NumPy's limit on dimensions, sizes and byte counts (npy_intp); every node's shape keeps its
# byte count within it, so the int64 shape and size arithmetic downstream cannot overflow
MAX_INTP = int(np.iinfo(np.intp).max)


def check_shape(shape, dtype) -> tuple:
    """The shape as a tuple of ints, if NumPy could make an array of it; else NumPy's own
    error.  NumPy checks every array, views included: each dimension non-negative and at most
    npy_intp's maximum, and itemsize times the non-zero dimensions within it (so even
    (0, 2**62, 2**62) is refused, as NumPy refuses it)."""
    shape = tuple(int(s) for s in shape)
    nbytes = np.dtype(dtype).itemsize
    for s in shape:
        if s < 0:
            raise ValueError("negative dimensions are not allowed")
        if s > MAX_INTP:
            raise ValueError("Maximum allowed dimension exceeded")
        if s:
            nbytes *= s
    if nbytes > MAX_INTP:
        raise ValueError("array is too big; `arr.size * arr.dtype.itemsize` is larger than the "
                         "maximum possible size.")
    return shape


class Kind(enum.Enum):
    LEAF = "leaf"                # argument buffer, scalar parameter, captured constant, literal
    ELEMENTWISE = "elementwise"  # same-shaped (or 0-d) operands, one value per index
    VIEW = "view"                # index remapping of one operand; never copies
    REDUCE = "reduce"            # folds the `axes` of its operand
    SCAN = "scan"                # running fold along one axis
    GATHER = "gather"            # reads its first operand at data-dependent indices
    SCATTER = "scatter"          # writes or accumulates values at data-dependent indices
    UPDATE = "update"            # replaces a strided region of its base
    SORT = "sort"                # orders its operand along one axis
    LIBRARY = "library"          # dense linear algebra over the last two dims (np.linalg)
    PACK = "pack"                # values of one shape laid side by side along trailing dims
    LOOP = "loop"                # a body graph run n times over carried values (frontend/loops.py)


class Op(enum.Enum):
    """Every operation the IR knows.  The value is (printed name, kind, arity); arity -1 is variadic."""
    kind: Kind
    arity: int

    # Enum's __hash__ is a Python call (hash of the name); every node's key hashes its op
    __hash__ = object.__hash__

    def __new__(cls, name, kind, arity):
        member = object.__new__(cls)
        member._value_ = name
        member.kind = kind
        member.arity = arity
        return member

    # leaves
    ARG = ("arg", Kind.LEAF, 0)
    PARAM = ("param", Kind.LEAF, 0)
    CONST = ("const", Kind.LEAF, 0)
    # the call's random key (uint64): drawn by the executable for every call
    RNG_KEY = ("rng_key", Kind.LEAF, 0)
    LITERAL = ("literal", Kind.LEAF, 0)
    # elementwise, unary
    CAST = ("cast", Kind.ELEMENTWISE, 1)
    # the same bits read as another dtype of the same size (ndarray.view(dtype))
    BITCAST = ("bitcast", Kind.ELEMENTWISE, 1)
    NEG = ("neg", Kind.ELEMENTWISE, 1)
    ABS = ("abs", Kind.ELEMENTWISE, 1)
    SIGN = ("sign", Kind.ELEMENTWISE, 1)
    RECIPROCAL = ("reciprocal", Kind.ELEMENTWISE, 1)
    SQRT = ("sqrt", Kind.ELEMENTWISE, 1)
    CBRT = ("cbrt", Kind.ELEMENTWISE, 1)
    EXP = ("exp", Kind.ELEMENTWISE, 1)
    EXP2 = ("exp2", Kind.ELEMENTWISE, 1)
    EXPM1 = ("expm1", Kind.ELEMENTWISE, 1)
    LOG = ("log", Kind.ELEMENTWISE, 1)
    LOG2 = ("log2", Kind.ELEMENTWISE, 1)
    LOG10 = ("log10", Kind.ELEMENTWISE, 1)
    LOG1P = ("log1p", Kind.ELEMENTWISE, 1)
    SIN = ("sin", Kind.ELEMENTWISE, 1)
    COS = ("cos", Kind.ELEMENTWISE, 1)
    TAN = ("tan", Kind.ELEMENTWISE, 1)
    ARCSIN = ("arcsin", Kind.ELEMENTWISE, 1)
    ARCCOS = ("arccos", Kind.ELEMENTWISE, 1)
    ARCTAN = ("arctan", Kind.ELEMENTWISE, 1)
    SINH = ("sinh", Kind.ELEMENTWISE, 1)
    COSH = ("cosh", Kind.ELEMENTWISE, 1)
    TANH = ("tanh", Kind.ELEMENTWISE, 1)
    ARCSINH = ("arcsinh", Kind.ELEMENTWISE, 1)
    ARCCOSH = ("arccosh", Kind.ELEMENTWISE, 1)
    ARCTANH = ("arctanh", Kind.ELEMENTWISE, 1)
    FLOOR = ("floor", Kind.ELEMENTWISE, 1)
    CEIL = ("ceil", Kind.ELEMENTWISE, 1)
    TRUNC = ("trunc", Kind.ELEMENTWISE, 1)
    RINT = ("rint", Kind.ELEMENTWISE, 1)
    # special functions (libm): scipy.special.erf, erfc, gammaln
    ERF = ("erf", Kind.ELEMENTWISE, 1)
    ERFC = ("erfc", Kind.ELEMENTWISE, 1)
    LGAMMA = ("lgamma", Kind.ELEMENTWISE, 1)
    ISNAN = ("isnan", Kind.ELEMENTWISE, 1)
    ISINF = ("isinf", Kind.ELEMENTWISE, 1)
    ISFINITE = ("isfinite", Kind.ELEMENTWISE, 1)
    SIGNBIT = ("signbit", Kind.ELEMENTWISE, 1)
    LOGICAL_NOT = ("logical_not", Kind.ELEMENTWISE, 1)
    INVERT = ("invert", Kind.ELEMENTWISE, 1)
    # complex numbers: the real and imaginary parts of a complex value (its part dtype);
    # complex(re, im) builds one.  Every other op on complex values is composed of these
    # and real ops while tracing (ir/complexops.py): kernels only load, store and take apart.
    REAL = ("real", Kind.ELEMENTWISE, 1)
    IMAG = ("imag", Kind.ELEMENTWISE, 1)
    # elementwise, binary
    ADD = ("add", Kind.ELEMENTWISE, 2)
    SUB = ("sub", Kind.ELEMENTWISE, 2)
    MUL = ("mul", Kind.ELEMENTWISE, 2)
    DIV = ("div", Kind.ELEMENTWISE, 2)
    FLOORDIV = ("floordiv", Kind.ELEMENTWISE, 2)
    MOD = ("mod", Kind.ELEMENTWISE, 2)
    FMOD = ("fmod", Kind.ELEMENTWISE, 2)
    POW = ("pow", Kind.ELEMENTWISE, 2)
    ARCTAN2 = ("arctan2", Kind.ELEMENTWISE, 2)
    HYPOT = ("hypot", Kind.ELEMENTWISE, 2)
    MINIMUM = ("minimum", Kind.ELEMENTWISE, 2)
    MAXIMUM = ("maximum", Kind.ELEMENTWISE, 2)
    FMIN = ("fmin", Kind.ELEMENTWISE, 2)
    FMAX = ("fmax", Kind.ELEMENTWISE, 2)
    COPYSIGN = ("copysign", Kind.ELEMENTWISE, 2)
    NEXTAFTER = ("nextafter", Kind.ELEMENTWISE, 2)
    HEAVISIDE = ("heaviside", Kind.ELEMENTWISE, 2)
    LOGADDEXP = ("logaddexp", Kind.ELEMENTWISE, 2)
    LOGADDEXP2 = ("logaddexp2", Kind.ELEMENTWISE, 2)
    EQ = ("eq", Kind.ELEMENTWISE, 2)
    NE = ("ne", Kind.ELEMENTWISE, 2)
    LT = ("lt", Kind.ELEMENTWISE, 2)
    LE = ("le", Kind.ELEMENTWISE, 2)
    GT = ("gt", Kind.ELEMENTWISE, 2)
    GE = ("ge", Kind.ELEMENTWISE, 2)
    LOGICAL_AND = ("logical_and", Kind.ELEMENTWISE, 2)
    LOGICAL_OR = ("logical_or", Kind.ELEMENTWISE, 2)
    LOGICAL_XOR = ("logical_xor", Kind.ELEMENTWISE, 2)
    BITWISE_AND = ("bitwise_and", Kind.ELEMENTWISE, 2)
    BITWISE_OR = ("bitwise_or", Kind.ELEMENTWISE, 2)
    BITWISE_XOR = ("bitwise_xor", Kind.ELEMENTWISE, 2)
    LEFT_SHIFT = ("left_shift", Kind.ELEMENTWISE, 2)
    RIGHT_SHIFT = ("right_shift", Kind.ELEMENTWISE, 2)
    COMPLEX = ("complex", Kind.ELEMENTWISE, 2)
    # elementwise, ternary
    WHERE = ("where", Kind.ELEMENTWISE, 3)
    # index values of the node's own shape along `axis` (arange, eye and friends)
    IOTA = ("iota", Kind.ELEMENTWISE, 0)
    # random(key): counter-based random numbers (Philox4x32-10) of the node's own shape:
    # element i of draw `stream` is a function of (key, stream, i) alone, so any kernel that
    # recomputes it gets the same value.  `dist`: "u64" (raw bits), "uniform" (float in
    # [0, 1)), "normal" (standard normal, Box-Muller).  The key changes on every call.
    RANDOM = ("random", Kind.ELEMENTWISE, 1)
    # check(word): a runtime check (an `assert` on traced values, a function's argument test
    # that NumPy makes on the data): ORs the int64 `word` into the call's status word, and is
    # `word`.  Each set bit names one of Graph.check_errors; a non-zero word stops the call
    # before any argument is written (program/record.py's CHECK)
    CHECK = ("check", Kind.ELEMENTWISE, 1)
    # views
    BROADCAST = ("broadcast", Kind.VIEW, 1)
    TRANSPOSE = ("transpose", Kind.VIEW, 1)
    SLICE = ("slice", Kind.VIEW, 1)
    RESHAPE = ("reshape", Kind.VIEW, 1)
    # reductions
    SUM = ("sum", Kind.REDUCE, 1)
    PROD = ("prod", Kind.REDUCE, 1)
    MAX = ("max", Kind.REDUCE, 1)
    MIN = ("min", Kind.REDUCE, 1)
    ANY = ("any", Kind.REDUCE, 1)
    ALL = ("all", Kind.REDUCE, 1)
    ARGMAX = ("argmax", Kind.REDUCE, 1)
    ARGMIN = ("argmin", Kind.REDUCE, 1)
    # running folds
    CUMSUM = ("cumsum", Kind.SCAN, 1)
    CUMPROD = ("cumprod", Kind.SCAN, 1)
    # sort(x) along `axis`: ascending, NaNs last, stable (equal values keep their order);
    # argsort(x): the int64 positions along `axis` that sort x, stably
    SORT = ("sort", Kind.SORT, 1)
    ARGSORT = ("argsort", Kind.SORT, 1)
    # data-dependent indexing along axes [axis, axis+k): gather(src, idx0..idxk-1) reads
    # src[..., idx0[b], ..., idxk-1[b], ...]; scatter(base, values, idx0..idxk-1) is base with
    # values written (mode set) or combined (add/max/min) at those positions
    GATHER = ("gather", Kind.GATHER, -1)
    SCATTER = ("scatter", Kind.SCATTER, -1)
    # setslice(base, value): base with the strided region start + step*i replaced by value
    SETSLICE = ("setslice", Kind.UPDATE, 2)
    # linalg(a[, b]) fn=...: per matrix of the leading (batch) dims, the operation `fn`
    # ("inv", "solve", "det", "slogdet", "cholesky", "eigh", "svd", "lstsq") of np.linalg.
    # Results with several parts are packed: slogdet [..., 2] = (sign, log|det|); eigh
    # [..., n+1, n] = the eigenvalues in row 0, then the eigenvectors (as np.linalg.eigh's
    # columns); svd (attribute job: 0 values only, 1 reduced, 2 full) = s in row 0, then U,
    # then Vh; lstsq(a | b, rcond) (attribute n: a's columns) = x, then s, then the rank
    # (bytecode.ROUTINES gives the packed shapes)
    LINALG = ("linalg", Kind.LIBRARY, -1)
    # pack(x0, x1, ...) dims=(p, q, ...) stage=...: operands of one shape (the batch) and dtype
    # side by side, result[..., i, j] = x[i * q + j][...] (C order over `dims`).  How small
    # matrices are assembled from their entries, each computed as an elementwise value over
    # the batch (frontend/small_linalg.py).  A kernel reading it at constant trailing indices reads
    # the operand itself (fuse unrolls the trailing dims of a store kernel reading one), so
    # the entries and what consumes them fuse into one kernel.  stage=True: always
    # materialised (one kernel stores every operand), a barrier that bounds kernel sizes
    PACK = ("pack", Kind.PACK, -1)
    # mark(x) role=... tag=...: x itself, seen by differentiation (ir/adjoint.py) only.  role
    # "var": a fresh variable that a gradient is taken with respect to (the tag keeps two
    # differentiations of one value apart); "stop": fl.stop_gradient; "custom": an output of
    # a fl.custom_vjp function, whose rule is the user's.  Every mark is removed when the
    # trace ends (`strip_marks`): fusion and the backends never see one.
    MARK = ("mark", Kind.ELEMENTWISE, 1)
    # loop(init_0, ..., init_{k-1}, inv_0, ...) body=Graph n=... ncarry=k until=...: the body
    # graph (its ARG 0..k-1 the carried values, then the loop-invariant ones; its outputs the
    # k new carried values, then the collected ones, then with `until` a bool flag) run n
    # times, stopping after the first iteration whose flag is set.  The node itself is no
    # value (bool[]): its results are loop_out nodes of it (frontend/loops.py).
    LOOP = ("loop", Kind.LOOP, -1)
    # loop_out(loop) what=...: one result of a loop: ("carry", c) the final value of carried
    # c; ("collect", r, every) collected value r of iterations every, 2 every, ... and the
    # last (ceil(n / every) rows); ("checkpoint", c, every) carried c at the start of
    # iterations 0, every, 2 every, ... (ceil(n / every) rows; what a backward pass restarts
    # from: adjoint rule in frontend/loops.py)
    LOOP_OUT = ("loop_out", Kind.LOOP, 1)
    # the iteration number (int64, from 0) of the innermost loop whose body holds this node
    ITER = ("iter", Kind.LEAF, 0)

    def __repr__(self):
        return f"Op.{self.name}"


# float16 is storage only: LLVM promotes each operation to float and rounds back, as NumPy's loops do.
# complex64/complex128 are pairs of float32/float64 (ir/complexops.py).
SUPPORTED_DTYPES = tuple(dict.fromkeys(np.dtype(c) for c in "?bhilqBHILQefdFD"))

_SHORT = {"b": "bool", "i": "i", "u": "u", "f": "f", "c": "c"}


def dtype_short(dt: np.dtype) -> str:
    """Compact dtype name used in IR text: f32, i64, u8, bool."""
    dt = np.dtype(dt)
    if dt.kind == "b":
        return "bool"
    return f"{_SHORT[dt.kind]}{dt.itemsize * 8}"


class Node:
    """One value of the graph.  Immutable once made; compare by identity."""

    __slots__ = ("op", "dtype", "shape", "inputs", "attrs", "index", "key", "__weakref__")

    def __init__(self, op: Op, dtype: np.dtype, shape: tuple, inputs, attrs, index, key=None):
        # made by Graph.add only, which has normalised the dtype and the shape
        self.op = op
        self.dtype = dtype
        self.shape = shape
        self.inputs = tuple(inputs)
        self.attrs = dict(attrs)
        self.index = index  # creation order within its graph: a topological order
        self.key = key      # its hash-consing key in its graph (frontend/roll.py compares these)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def attr(self, name, default=None):
        return self.attrs.get(name, default)

    def __repr__(self):
        return f"<Node #{self.index} {self.op.value}:{dtype_short(self.dtype)}{list(self.shape)}>"


# bound once: np's attributes cost a call while a thread traces (frontend/interception.py)
_DTYPE, _GENERIC, _NDARRAY = np.dtype, np.generic, np.ndarray
_CHECKED: dict = {}        # (shape, itemsize) -> the shape check_shape made of it


def _attr_key(value):
    # literal values are NumPy scalars: key on their bytes so that NaN equals NaN
    if isinstance(value, _GENERIC):
        return ("np", value.dtype.str, value.tobytes())
    if isinstance(value, _NDARRAY):
        return ("arr", id(value))
    return value


class Graph:
    """The nodes of one trace, in creation order, plus its results and in-place writebacks."""

    def __init__(self):
        self.nodes: list[Node] = []
        self.consts: list[np.ndarray] = []
        self.outputs: list[Node] = []
        # (argument position, final value): inputs updated in place by the traced function
        self.writebacks: list[tuple[int, Node]] = []
        self._interned: dict = {}
        self.random_streams = 0     # draws of random numbers so far (each its own stream)
        # runtime checks recorded while tracing: (bool node, exception class, message); the
        # condition must hold for every element.  ops.seal_checks turns them into `check`,
        # one CHECK node, and `check_errors`, (status bit, exception class, message) per bit
        self.checks: list = []
        self.check: Node | None = None
        self.check_errors: list = []
        # a loop body traced inside another graph: enclosing(node, its graph) -> this graph's
        # leaf for a value of an enclosing graph (frontend/loops.py)
        self.enclosing = None
        # while the traced function runs: per node, where in its code it was made (frontend/trace.py's
        # `site`, a callable), for rolling its loops (frontend/roll.py); None: not recorded
        self.sites: list | None = None
        self.site = None
        # iteration counts of the Python loops rolled in the middle of the trace (before a
        # differentiation, roll.roll_traced); roll.roll_loops reports them with its own
        self.rolled_while_tracing: list = []
        self.warned: set = set()    # warnings given once per trace (frontend/stdlib_calls.py)
        # called with no arguments after every 4th new node (frontend/trace.py's count of the traced
        # code's loop iterations: a sample is enough, and a call costs a walk up the stack),
        # or None
        self.observer = None

    def add(self, op: Op, dtype, shape, inputs=(), **attrs) -> Node:
        """Make a node, or return the structurally equal node that already exists."""
        if op.arity >= 0 and len(inputs) != op.arity:
            raise ValueError(f"{op.value} takes {op.arity} operands, got {len(inputs)}")
        if not isinstance(dtype, _DTYPE):
            dtype = _DTYPE(dtype)
        # a shape met before (most are) skips the checks; the cache holds checked shapes only
        ck = (shape, dtype.itemsize) if type(shape) is tuple else None
        try:
            known = _CHECKED.get(ck)
        except TypeError:           # an unhashable dimension (a 0-d array): checked each time
            known = ck = None
        if known is None:
            known = check_shape(shape, dtype)
            if ck is not None and len(_CHECKED) < 4096:
                _CHECKED[ck] = known
        shape = known
        if not attrs:
            akey: tuple = ()
        elif len(attrs) == 1:
            akey = tuple([(k, _attr_key(v)) for k, v in attrs.items()])
        else:
            akey = tuple(sorted([(k, _attr_key(v)) for k, v in attrs.items()]))
        key = (op, dtype.str, shape, tuple([n.index for n in inputs]), akey)
        node = self._interned.get(key)
        if node is None:
            node = Node(op, dtype, shape, inputs, attrs, len(self.nodes), key)
            self.nodes.append(node)
            self._interned[key] = node
            if self.sites is not None:
                self.sites.append(self.site() if self.site is not None else None)
            if self.observer is not None and not len(self.nodes) & 3:
                self.observer()
        return node

    def add_const(self, array: np.ndarray) -> Node:
        """A captured array: copied now, so later changes by the caller do not leak in."""
        frozen = np.array(array, copy=True, order="C")
        frozen.setflags(write=False)
        self.consts.append(frozen)
        return self.add(Op.CONST, frozen.dtype, frozen.shape, index=len(self.consts) - 1)

    def live_nodes(self) -> list[Node]:
        """Nodes reachable from the results and writebacks, in creation (topological) order."""
        seen = set()
        stack = list(self.outputs) + [n for _, n in self.writebacks]
        if self.check is not None:
            stack.append(self.check)
        while stack:
            n = stack.pop()
            if n.index in seen:
                continue
            seen.add(n.index)
            stack.extend(n.inputs)
        return [n for n in self.nodes if n.index in seen]

    # ---- printing -------------------------------------------------------------------
    def format(self) -> str:
        names: dict[int, str] = {}
        lines = []
        for n in self.live_nodes():
            names[n.index] = f"%{len(names)}"
            if n.op is Op.LOOP:
                # the body, indented, in its own names
                attrs = {k: v for k, v in n.attrs.items() if k != "body"}
                head = " ".join([n.op.value, ", ".join(names[i.index] for i in n.inputs)] +
                                [f"{k}={_format_value(v)}" for k, v in sorted(attrs.items())])
                lines.append(f"{names[n.index]}:{_type_text(n)} = {head} {{")
                lines += ["    " + line for line in n.attrs["body"].format().splitlines()]
                lines.append("}")
                continue
            lines.append(f"{names[n.index]}:{_type_text(n)} = {_op_text(n, names, self.consts)}")
        if self.outputs:
            lines.append("return " + ", ".join(names[n.index] for n in self.outputs))
        for pos, n in self.writebacks:
            lines.append(f"writeback arg{pos} = {names[n.index]}")
        if self.check is not None:
            lines.append(f"check {names[self.check.index]}: " + "; ".join(
                f"{bit:#x} {exc.__name__}" for bit, exc, _ in self.check_errors))
        return "\n".join(lines)

    __str__ = format

    def strip_marks(self) -> None:
        """Remove every Op.MARK (each is its operand), rebuilding the live nodes in place:
        values that differed only by their marks become one node again (CSE)."""
        if not any(n.op is Op.MARK for n in self.nodes):
            return
        live = self.live_nodes()
        sites, self.sites = self.sites, ([] if self.sites is not None else None)
        site, self.site = self.site, None
        self.nodes, self._interned = [], {}
        mapped: dict[int, Node] = {}
        for n in live:
            if n.op is Op.MARK:
                mapped[n.index] = mapped[n.inputs[0].index]
            else:
                made = self.add(n.op, n.dtype, n.shape, [mapped[i.index] for i in n.inputs],
                                **n.attrs)
                if sites is not None and len(self.sites) == len(self.nodes):
                    self.sites[-1] = sites[n.index]     # a new node keeps where it was made
                mapped[n.index] = made
        self.site = site
        self.outputs = [mapped[n.index] for n in self.outputs]
        self.writebacks = [(pos, mapped[n.index]) for pos, n in self.writebacks]
        if self.check is not None:
            self.check = mapped[self.check.index]
        self.checks = [(mapped[c.index], exc, msg) for c, exc, msg in self.checks
                       if c.index in mapped]


def _type_text(n: Node) -> str:
    return f"{dtype_short(n.dtype)}[{','.join(map(str, n.shape))}]"


def _format_value(v) -> str:
    if isinstance(v, np.generic):
        return str(v.item()) if v.dtype.kind == "b" else str(v)
    if isinstance(v, tuple):
        return "(" + ",".join(_format_value(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    return str(v)


def _op_text(n: Node, names: dict, consts) -> str:
    if n.op is Op.LITERAL:
        return f"literal {_format_value(n.attrs['value'])}"
    if n.op in (Op.ARG, Op.PARAM):
        return f"{n.op.value} {n.attrs['position']}"
    if n.op is Op.CONST:
        return f"const #{n.attrs['index']}"
    parts = [n.op.value]
    operands = ", ".join(names[i.index] for i in n.inputs)
    if operands:
        parts.append(operands)
    attrs = " ".join(f"{k}={_format_value(v)}" for k, v in sorted(n.attrs.items()))
    if attrs:
        parts.append(attrs)
    return " ".join(parts)
