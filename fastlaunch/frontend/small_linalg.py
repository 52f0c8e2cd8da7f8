"""np.linalg on small matrices as elementwise operations over the batch.

Each entry A[..., i, j] of a stack of small matrices is a view over the batch, so the
factorisations are written out at trace time entry by entry, in the order of the routines
NumPy's LAPACK (OpenBLAS) runs: getf2 (a left-looking LU with partial pivoting: the pivot
search by comparisons, the row swaps by `where` selects), getrs's substitutions (trsm's
order), potf2 for the Cholesky factor, and NumPy's own accumulation of det and slogdet from
the pivots.  Every value is an elementwise op over the batch, so fuse makes kernels that loop
over the batch (SIMD across matrices on the CPU; the same graph lowers for any backend), and
the results, assembled by a pack (ir.Op.PACK), fuse with the elementwise work around them.
A singular matrix (an exactly zero pivot, where getrf reports info > 0) or one that is not
positive definite (a pivot <= 0, where potrf stops) is a runtime check: LinAlgError at the
call, nothing written.

Kernel size: LLVM's time grows faster than linearly with a loop body, and fuse cuts a longer
expression than fuse.MAX_KERNEL_OPS into many small kernels, so the work is cut into stages
of about STAGE_OPS operations, each materialised by a stage pack (one kernel storing the
state the next stage reads); the last stage fuses with the consumers.  A problem is written
out only when its whole size (`estimate`) stays within MAX_OPS, for the first call's compile
time (measured with bench/linalg_small.py --compile): frontend/numpy keeps the LAPACK library
call (Op.LINALG) for the others.
"""
from __future__ import annotations

import numpy as np

from ..ir import ops
from ..ir.graph import Graph, Kind, Node, Op

__all__ = ["MAX_N", "MAX_OPS", "STAGE_OPS", "written_out", "estimate", "inv", "solve", "det",
           "slogdet", "cholesky"]

# The largest matrices written out, and the most elementwise operations (`estimate`) a
# written-out call may take (solve with many right-hand sides); beyond either, LAPACK.  From
# the first call's compile time (about MAX_OPS / STAGE_OPS kernels of STAGE_OPS operations),
# measured with bench/linalg_small.py --compile on a loaded 2-core machine (CPU seconds): 8 x 8
# inv 1.6-1.8 s, solve 0.8 s, det 0.7-0.9 s; 10 x 10 det and solve 2.0 s; 16 x 16 cholesky
# 0.7-1.2 s (docs/architecture.md, section 10)
MAX_N = {"inv": 8, "solve": 8, "det": 8, "slogdet": 8, "cholesky": 16}
MAX_OPS = 2500
# operations per stage kernel
STAGE_OPS = 800

F64 = np.dtype(np.float64)
BOOL = np.dtype(np.bool_)


def written_out(fn: str, n: int, k: int = 0) -> bool:
    """Whether np.linalg.`fn` of n x n matrices (solve: k right-hand sides) is written out
    here rather than called from LAPACK (0 x 0 matrices: LAPACK's path, which makes no
    call)."""
    return 0 < n <= MAX_N.get(fn, 0) and estimate(fn, n, k) <= MAX_OPS


def estimate(fn: str, n: int, k: int = 0) -> int:
    """The operations `fn` on n x n matrices (solve: k right-hand sides) takes written out:
    the factorisation's multiply-adds and selects, the substitutions."""
    if fn == "cholesky":
        return n * (n + 1) * (n + 2) // 3
    rhs = {"inv": n, "solve": k}.get(fn, 0)
    w = n + rhs
    pivots = 0 if rhs else 7 * n          # det's and slogdet's sign and log-sum
    return sum(_lu_step_ops(n, w, j) for j in range(n)) + 2 * rhs * n * n + pivots


class _Writer:
    """Builds the elementwise graph of one call over batch-shaped float64 values."""

    def __init__(self, g: Graph, batch: tuple):
        self.g = g
        self.batch = batch
        self.ops = 0                    # operations made since the last stage began

    # ---- values --------------------------------------------------------------------------
    def lit(self, value, dtype=F64) -> Node:
        return ops.literal(self.g, value, dtype)

    def op(self, op: Op, *xs, dtype=F64) -> Node:
        out = ops.elementwise(self.g, op, dtype, list(xs))
        if out.op is not Op.LITERAL and out.op is not Op.BROADCAST:
            # counted whether or not the graph had it (a second call of the same function
            # on the same matrices must cut its stages at the same places, to share them)
            self.ops += 1
        return out

    def where(self, cond: Node, a: Node, b: Node) -> Node:
        if a is b:
            return a
        return self.op(Op.WHERE, cond, a, b, dtype=a.dtype)

    def entries(self, a: Node) -> list:
        """a[..., i, j] for every (i, j): views with the batch's shape."""
        g, nb = self.g, a.ndim - 2
        rows, cols = a.shape[-2:]
        out = []
        for i in range(rows):
            row = []
            for j in range(cols):
                v = ops.slice_view(g, a, (0,) * nb + (i, j), (1,) * a.ndim,
                                   a.shape[:nb] + (1, 1))
                row.append(ops.reshape(g, v, self.batch))
            out.append(row)
        return out

    # ---- stages --------------------------------------------------------------------------
    def over_budget(self, next_ops: int) -> bool:
        """Whether a step of `next_ops` operations would take this stage past STAGE_OPS."""
        return self.ops + next_ops > STAGE_OPS

    def checkpoint(self, values: list) -> list:
        """`values` (the state later stages read) with those that are computed replaced by
        views of one stage pack: one kernel computes and stores them all, and the next stage
        starts from memory."""
        g = self.g
        computed = [i for i, v in enumerate(values) if not _in_memory(v)]
        out = list(values)
        if computed and int(np.prod(self.batch, dtype=np.int64)):
            packed = ops.pack(g, [ops.cast(g, values[i], F64) for i in computed],
                              (len(computed),), stage=True)
            nb = len(self.batch)
            for slot, i in enumerate(computed):
                v = ops.slice_view(g, packed, (0,) * nb + (slot,), (1,) * (nb + 1),
                                   self.batch + (1,))
                out[i] = ops.cast(g, ops.reshape(g, v, self.batch), values[i].dtype)
        self.ops = 0
        return out

    def result(self, rows: list, dtype) -> Node:
        """A pack of `rows` (a list of lists: a matrix; a list of values: a vector) cast to
        the result dtype."""
        g = self.g
        if rows and isinstance(rows[0], list):
            dims = (len(rows), len(rows[0]))
            flat = [v for row in rows for v in row]
        else:
            dims, flat = (len(rows),), list(rows)
        shape = self.batch + dims
        if not flat:
            return ops.broadcast_to(g, self.lit(0, dtype), shape)
        return ops.pack(g, [ops.broadcast_to(g, ops.cast(g, v, dtype), self.batch)
                            for v in flat], dims)

    # ---- getrf (OpenBLAS's getf2), getrs ------------------------------------------------------
    def sub_dot(self, x: Node, pairs) -> Node:
        """x - (p0 q0 + p1 q1 + ...): the dot product first, accumulated in order."""
        acc = None
        for p, q in pairs:
            term = self.op(Op.MUL, p, q)
            acc = term if acc is None else self.op(Op.ADD, acc, term)
        return x if acc is None else self.op(Op.SUB, x, acc)

    def lu(self, a: list, n: int, on_pivot=None, live=None):
        """Factor the n x n left part of the rows `a` (lists of values; right-hand sides
        after column n are swapped with the rows) in place: L (unit, below the diagonal) and
        U, as OpenBLAS's getf2, a left-looking LU with partial pivoting: column j is computed
        from the factors so far (each entry minus a dot product, the dot product first), its
        pivot is the first largest |b[r]| (NaN never wins a comparison), rows j and the
        pivot's are swapped (by selects: every row below j takes the old row j where the pivot
        is its own), and the multipliers are b[r] times 1 / pivot.  Among rank-deficient
        matrices this finds an exactly zero pivot where NumPy's getrf does far more often than
        a right-looking order (OpenBLAS accumulates its dot products with fused multiply-adds,
        which elementwise ops do not have).  on_pivot(j, pivot, swapped) sees each pivot;
        live(j + 1, flag) may end a stage.  Returns the flag of an exactly zero pivot
        (getrf's info > 0); past one the values are not LAPACK's (the caller raises or
        discards them)."""
        w = len(a[0])
        zero = self.lit(False, BOOL)
        for j in range(n):
            for i in range(1, j):
                a[i][j] = self.sub_dot(a[i][j], [(a[i][k], a[k][j]) for k in range(i)])
            col = [self.sub_dot(a[r][j], [(a[r][k], a[k][j]) for k in range(j)])
                   for r in range(j, n)]
            best = self.op(Op.ABS, col[0])
            pivot = col[0]
            p = self.lit(float(j))
            rest = [c for c in range(w) if c != j]
            prow = [a[j][c] for c in rest]
            for r in range(j + 1, n):
                v = self.op(Op.ABS, col[r - j])
                gt = self.op(Op.GT, v, best, dtype=BOOL)
                best = self.where(gt, v, best)
                pivot = self.where(gt, col[r - j], pivot)
                p = self.where(gt, self.lit(float(r)), p)
                prow = [self.where(gt, a[r][c], x) for c, x in zip(rest, prow)]
            zero = self.op(Op.LOGICAL_OR, zero, self.op(Op.EQ, pivot, self.lit(0.0), dtype=BOOL),
                           dtype=BOOL)
            if on_pivot is not None:
                on_pivot(j, pivot, self.op(Op.NE, p, self.lit(float(j)), dtype=BOOL))
            recip = self.op(Op.DIV, self.lit(1.0), pivot)
            for r in range(j + 1, n):
                swap = self.op(Op.EQ, p, self.lit(float(r)), dtype=BOOL)
                for c in rest:
                    a[r][c] = self.where(swap, a[j][c], a[r][c])
                a[r][j] = self.op(Op.MUL, self.where(swap, col[0], col[r - j]), recip)
            for c, x in zip(rest, prow):
                a[j][c] = x
            a[j][j] = pivot
            if j + 1 < n and live is not None and \
                    self.over_budget(_lu_step_ops(n, w, j + 1)):
                zero = live(j + 1, zero)
        return zero

    def solve_factored(self, a: list, n: int, live) -> None:
        """getrs after lu: the right-hand-side columns of `a` (already swapped with the rows)
        overwritten with x, by trsm's orders: L y = b (b[i] - l[i][0] y[0] - l[i][1] y[1]
        - ...), then U x = y (x[i] = (y[i] - u[i][n-1] x[n-1] - ... - u[i][i+1] x[i+1]) /
        u[i][i]).  live(keep) ends a stage, keeping the entries (r, c) where keep(r, c)."""
        w = len(a[0])
        for i in range(1, n):
            for c in range(n, w):
                acc = a[i][c]
                for k in range(i):
                    acc = self.op(Op.SUB, acc, self.op(Op.MUL, a[i][k], a[k][c]))
                a[i][c] = acc
            if self.over_budget(2 * (i + 1) * (w - n)):
                live(lambda r, c: c >= r or r > i)            # U, the rest of L, b
        for i in range(n - 1, -1, -1):
            for c in range(n, w):
                acc = a[i][c]
                for k in range(n - 1, i, -1):
                    acc = self.op(Op.SUB, acc, self.op(Op.MUL, a[i][k], a[k][c]))
                a[i][c] = self.op(Op.DIV, acc, a[i][i])
            if i and self.over_budget(2 * (n - i + 1) * (w - n)):
                live(lambda r, c: c >= r)                     # U, b and x


def _lu_step_ops(n: int, w: int, j: int) -> int:
    """The operations of lu's column j (w columns in all): the dot products, the pivot
    search, the swap, the multipliers."""
    below = n - j - 1
    dots = sum(2 * i for i in range(1, j)) + (n - j) * 2 * j
    return dots + 5 * below + 1 + below * 2 * (w - 1) + below * 3 + 4


def _in_memory(v: Node) -> bool:
    """Whether reading `v` loads from memory without computing (a view of an argument, a
    constant, a literal or a stage)."""
    while v.op.kind is Kind.VIEW or v.op is Op.CAST:
        v = v.inputs[0]
    return v.op in (Op.ARG, Op.CONST, Op.LITERAL, Op.PARAM) or \
        (v.op is Op.PACK and v.attrs["stage"])


def _checkpoint_rows(wr: _Writer, a: list, cells: list, extra: list) -> list:
    """Checkpoint the entries `cells` ((row, column) pairs) of `a` and the values `extra`;
    the new extra values are returned."""
    values = [a[r][c] for r, c in cells] + list(extra)
    new = wr.checkpoint(values)
    for (r, c), v in zip(cells, new):
        a[r][c] = v
    return new[len(cells):]


# ---- the functions -------------------------------------------------------------------------------
def _solve_rows(g: Graph, a_node: Node, rhs: list, singular_check: bool = True):
    """Factor a (float64, batch + (n, n)) and solve for the right-hand-side columns `rhs` (a
    list of n rows of values, or None for inv's identity): the rows of x."""
    batch, n = a_node.shape[:-2], a_node.shape[-1]
    wr = _Writer(g, batch)
    a = wr.entries(a_node)
    if rhs is None:
        rhs = [[wr.lit(1.0 if i == j else 0.0) for j in range(n)] for i in range(n)]
    k = len(rhs[0]) if rhs else 0
    for i in range(n):
        a[i] = a[i] + list(rhs[i])
    w = n + k

    def live_lu(step, zero):
        # every entry is read later (L and U by the substitutions, the rest by the
        # factorisation), and the zero-pivot flag
        return _checkpoint_rows(wr, a, [(r, c) for r in range(n) for c in range(w)],
                                [zero])[0]

    def live(keep):
        _checkpoint_rows(wr, a, [(r, c) for r in range(n) for c in range(w) if keep(r, c)], [])

    zero = wr.lu(a, n, live=live_lu)
    if singular_check:
        ops.add_check(g, wr.op(Op.LOGICAL_NOT, zero, dtype=BOOL), np.linalg.LinAlgError,
                      "Singular matrix")
    if k:
        wr.solve_factored(a, n, live)
    return wr, [row[n:] for row in a]


def inv(g: Graph, a_node: Node, dtype) -> Node:
    """np.linalg.inv of float64 a (batch + (n, n)), cast to dtype: gesv against the identity,
    as NumPy."""
    wr, x = _solve_rows(g, a_node, None)
    return wr.result(x, dtype)


def solve(g: Graph, a_node: Node, b_node: Node, vector: bool, dtype) -> Node:
    """np.linalg.solve of float64 a (batch + (n, n)) and b (batch + (n, k)), cast to dtype;
    vector: the result is batch + (n,) (b was 1-D)."""
    batch = a_node.shape[:-2]
    b = _Writer(g, batch).entries(b_node)
    wr, x = _solve_rows(g, a_node, b)
    return wr.result([row[0] for row in x] if vector else x, dtype)


def _pivots(g: Graph, a_node: Node):
    """(sign, log|det|, singular) of float64 a as NumPy's slogdet accumulates them: the
    permutation's parity, then each pivot's sign and log|pivot| in order."""
    batch, n = a_node.shape[:-2], a_node.shape[-1]
    wr = _Writer(g, batch)
    a = wr.entries(a_node)
    acc = {"sign": wr.lit(1.0), "log": wr.lit(0.0)}

    def on_pivot(k, pivot, swapped):
        sign = acc["sign"]
        sign = wr.where(swapped, wr.op(Op.NEG, sign), sign)
        sign = wr.where(wr.op(Op.LT, pivot, wr.lit(0.0), dtype=BOOL), wr.op(Op.NEG, sign), sign)
        acc["sign"] = sign
        acc["log"] = wr.op(Op.ADD, acc["log"], wr.op(Op.LOG, wr.op(Op.ABS, pivot)))

    def live(step, zero):
        # the multipliers later columns' dot products read, the columns not yet factored
        cells = [(r, c) for r in range(n) for c in range(n) if c >= step or r > c]
        acc["sign"], acc["log"], zero = _checkpoint_rows(wr, a, cells,
                                                         [acc["sign"], acc["log"], zero])
        return zero

    zero = wr.lu(a, n, on_pivot, live)
    sign = wr.where(zero, wr.lit(0.0), acc["sign"])
    logdet = wr.where(zero, wr.lit(-np.inf), acc["log"])
    return wr, sign, logdet


def _batch_value(wr: _Writer, v: Node, dtype) -> Node:
    return ops.broadcast_to(wr.g, ops.cast(wr.g, v, dtype), wr.batch)


def det(g: Graph, a_node: Node, dtype) -> Node:
    """np.linalg.det as NumPy computes it: sign * exp(log|det|) (a singular matrix: 0)."""
    wr, sign, logdet = _pivots(g, a_node)
    return _batch_value(wr, wr.op(Op.MUL, sign, wr.op(Op.EXP, logdet)), dtype)


def slogdet(g: Graph, a_node: Node, dtype) -> tuple:
    wr, sign, logdet = _pivots(g, a_node)
    return _batch_value(wr, sign, dtype), _batch_value(wr, logdet, dtype)


def cholesky(g: Graph, a_node: Node, upper: bool, dtype) -> Node:
    """np.linalg.cholesky of float64 a (its lower triangle, as potrf 'L' on NumPy's copy;
    upper: the upper triangle and the transposed factor, as potrf 'U'), as OpenBLAS's potf2:
    l[j][j] = sqrt(a[j][j] - sum l[j][k]^2), the column below it (a[i][j] - l[i][0] l[j][0]
    - ...) times 1 / l[j][j]; a pivot <= 0 is LinAlgError (NaN is not: as NumPy, NaN out)."""
    batch, n = a_node.shape[:-2], a_node.shape[-1]
    wr = _Writer(g, batch)
    a = wr.entries(a_node)
    if upper:          # potrf 'U' reads the upper triangle: the lower one of the transpose
        a = [list(col) for col in zip(*a)]
    low = [[None] * n for _ in range(n)]
    bad = wr.lit(False, BOOL)
    for j in range(n):
        before = wr.ops
        dot = None
        for k in range(j):
            sq = wr.op(Op.MUL, low[j][k], low[j][k])
            dot = sq if dot is None else wr.op(Op.ADD, dot, sq)
        ajj = a[j][j] if dot is None else wr.op(Op.SUB, a[j][j], dot)
        bad = wr.op(Op.LOGICAL_OR, bad, wr.op(Op.LE, ajj, wr.lit(0.0), dtype=BOOL), dtype=BOOL)
        low[j][j] = wr.op(Op.SQRT, ajj)
        recip = wr.op(Op.DIV, wr.lit(1.0), low[j][j])
        for i in range(j + 1, n):
            acc = a[i][j]
            for k in range(j):
                acc = wr.op(Op.SUB, acc, wr.op(Op.MUL, low[i][k], low[j][k]))
            low[i][j] = wr.op(Op.MUL, acc, recip)
        if j + 1 < n and wr.over_budget(wr.ops - before):
            cells = [(i, c) for i in range(n) for c in range(j + 1)]
            values = [low[i][c] for i, c in cells if i >= c] + [bad]
            new = wr.checkpoint(values)
            it = iter(new)
            for i, c in cells:
                if i >= c:
                    low[i][c] = next(it)
            bad = next(it)
    ops.add_check(g, wr.op(Op.LOGICAL_NOT, bad, dtype=BOOL), np.linalg.LinAlgError,
                  "Matrix is not positive definite")
    zero = wr.lit(0.0)
    rows = [[(low[i][j] if i >= j else zero) for j in range(n)] for i in range(n)]
    if upper:
        rows = [list(col) for col in zip(*rows)]
    return wr.result(rows, dtype)
