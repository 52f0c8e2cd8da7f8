"""Linear algebra: products (`matmul`, `dot`, `einsum`, `tensordot`, `kron`, `cross`), `np.linalg`
(LAPACK library calls, or `small_linalg` for small matrices), `norm`."""
from __future__ import annotations

import math
import operator

import numpy as np

from .. import small_linalg
from ...errors import TracingError
from ...ir import ops
from ...ir.graph import Node, Op
from ..trace import Unreturnable, current_graph
from .registry import FUNCTIONS, implements


def norm(x, ord=None, axis=None, keepdims=False):
    """np.linalg.norm for vectors (any ord) and the Frobenius/1/inf norms of matrices."""
    t = _as_tracer(x)
    if t.dtype.kind not in "fc":
        t = astype(t, np.float64)
    nd = t.ndim
    if t.dtype.kind == "c":
        # NumPy: the 2-norm of complex values from re^2 + im^2, the others from |x|
        a = np.abs(t)
        re, im = _real(t), _imag(t)

        def sq(axes_, keep):
            return sum_(re * re + im * im, axes_, None, None, keep)
    else:
        a = None

        def sq(axes_, keep):
            return sum_(t * t, axes_, None, None, keep)
    axes = ops.normalize_axes(axis, nd) if axis is not None else None
    if axes is None and ord is None:
        r = np.sqrt(sq(None, keepdims))
        r.scalar = not keepdims
        return r
    if axes is None:
        axes = tuple(range(nd))
    if len(axes) == 1:
        a = np.abs(t) if a is None else a
        if ord is None or ord == 2:
            return np.sqrt(sq(axes, keepdims))
        if isinstance(ord, str):
            raise ValueError(f"Invalid norm order '{ord}' for vectors")
        if ord == np.inf:
            return _max_from_zero(a, axes, keepdims)
        if ord == -np.inf:
            return min_(a, axes, None, keepdims)
        if ord == 0:
            return sum_(astype(t != 0, a.dtype), axes, None, None, keepdims)
        if ord == 1:
            return sum_(a, axes, None, None, keepdims)
        return sum_(a ** ord, axes, None, None, keepdims) ** (1.0 / ord)
    if len(axes) == 2:
        r0, r1 = axes
        a = np.abs(t) if a is None else a
        if ord in (None, "fro"):
            return np.sqrt(sq(axes, keepdims))
        # the largest-kind norms start from 0 (NumPy's initial=0): 0 for an empty matrix
        largest = lambda v, ax, _, keep: _max_from_zero(v, ax, keep)  # noqa: E731
        if ord in (1, -1):
            col = sum_(a, r0, None, None, True)
            red = largest if ord == 1 else min_
            return red(col, r1, None, True) if keepdims else squeeze(red(col, r1, None, True), axes)
        if ord in (np.inf, -np.inf):
            row = sum_(a, r1, None, None, True)
            red = largest if ord == np.inf else min_
            return red(row, r0, None, True) if keepdims else squeeze(red(row, r0, None, True), axes)
        if ord in (2, -2, "nuc"):
            # NumPy's _multi_svd_norm: the largest / smallest / sum of the singular values
            sv = linalg_svd(moveaxis(t, (r0, r1), (-2, -1)), compute_uv=False)
            red = {2: largest, -2: min_}.get(ord)
            r = red(sv, -1, None, False) if red is not None else sum_(sv, -1)
            if keepdims:
                shape = list(t.shape)
                shape[r0] = shape[r1] = 1
                r = reshape(r, tuple(shape))
            return r
        raise ValueError("Invalid norm order for matrices.")
    raise ValueError("Improper number of dimensions to norm.")


def _norm(x, ord=None, axis=None, keepdims=False):
    r = norm(x, ord, axis, keepdims)
    r.scalar = r.ndim == 0
    return r


FUNCTIONS[np.linalg.norm] = _norm


# ---- small dense linear algebra (np.linalg): LIBRARY nodes ---------------------------------------
_SlogdetResult = type(np.linalg.slogdet(np.eye(1)))
_EighResult = type(np.linalg.eigh(np.eye(1)))
_SVDResult = type(np.linalg.svd(np.eye(1)))


def _linalg_operand(x, name: str, square: bool = True):
    """(operand cast to float64, result dtype) of np.linalg.`name`.  NumPy computes every
    real linalg function in float64 and casts the results to float32 for float32 inputs
    (float64 for any other): so do we, for the same bits."""
    n = node_of(x)
    if n.ndim < 2:
        raise np.linalg.LinAlgError(f"{n.ndim}-dimensional array given. Array must be at "
                                    f"least two-dimensional")
    if square and n.shape[-1] != n.shape[-2]:
        raise np.linalg.LinAlgError("Last 2 dimensions of the array must be square")
    _linalg_dtype(n.dtype, name)
    result = np.dtype(np.float32) if n.dtype == np.float32 else np.dtype(np.float64)
    return ops.cast(current_graph(), n, np.float64), result


def _linalg_dtype(dt, name):
    if dt.kind == "f" and dt.itemsize == 2:
        raise TypeError("array type float16 is unsupported in linalg")
    if dt.kind not in "biuf":
        raise TracingError(f"np.linalg.{name} of {dt} is not supported by fastlaunch")


def _linalg(fn, shape, inputs, result_dtype, **attrs):
    """The LIBRARY node (float64) cast to the result dtype."""
    g = current_graph()
    return ops.cast(g, g.add(Op.LINALG, np.float64, shape, inputs, fn=fn, **attrs),
                    result_dtype)


@implements(np.linalg.inv)
def linalg_inv(a):
    n, rt = _linalg_operand(a, "inv")
    if small_linalg.written_out("inv", n.shape[-1]):
        return wrap(small_linalg.inv(current_graph(), n, rt))
    return wrap(_linalg("inv", n.shape, (n,), rt))


@implements(np.linalg.solve)
def linalg_solve(a, b):
    g = current_graph()
    an, rt = _linalg_operand(a, "solve")
    bn = node_of(b)
    if bn.ndim == 0:
        raise ValueError("solve: Input operand 1 does not have enough dimensions (has 0, "
                         "gufunc core with signature (m,m),(m,n)->(m,n) requires 2)")
    _linalg_dtype(bn.dtype, "solve")
    if bn.dtype != np.float32:
        rt = np.dtype(np.float64)
    bn = ops.cast(g, bn, np.float64)
    m = an.shape[-1]
    vector = bn.ndim == 1
    if vector:
        bn = ops.reshape(g, bn, (m, 1))
    if bn.shape[-2] != m:
        raise ValueError(f"solve: Input operand 1 has a mismatch in its core dimension 0, "
                         f"with gufunc signature (m,m),(m,n)->(m,n) (size {bn.shape[-2]} is "
                         f"different from {m})")
    batch = ops.broadcast_shapes(an.shape[:-2], bn.shape[:-2])
    an = ops.broadcast_to(g, an, batch + an.shape[-2:])
    bn = ops.broadcast_to(g, bn, batch + bn.shape[-2:])
    if small_linalg.written_out("solve", m, bn.shape[-1]):
        return wrap(small_linalg.solve(g, an, bn, vector, rt))
    r = _linalg("solve", bn.shape, (an, bn), rt)
    if vector:
        r = ops.reshape(g, r, batch + (m,))
    return wrap(r)


@implements(np.linalg.det)
def linalg_det(a):
    n, rt = _linalg_operand(a, "det")
    if small_linalg.written_out("det", n.shape[-1]):
        r = small_linalg.det(current_graph(), n, rt)
    else:
        r = _linalg("det", n.shape[:-2], (n,), rt)
    return wrap(r, scalar=r.ndim == 0)


@implements(np.linalg.slogdet)
def linalg_slogdet(a):
    g = current_graph()
    n, rt = _linalg_operand(a, "slogdet")
    if small_linalg.written_out("slogdet", n.shape[-1]):
        parts = small_linalg.slogdet(g, n, rt)
        return _SlogdetResult(*(wrap(p, scalar=p.ndim == 0) for p in parts))
    packed = _linalg("slogdet", n.shape[:-2] + (2,), (n,), rt)
    lead = packed.ndim - 1
    parts = [ops.reshape(g, ops.slice_view(g, packed, (0,) * lead + (i,), (1,) * (lead + 1),
                                           packed.shape[:-1] + (1,)), packed.shape[:-1])
             for i in (0, 1)]
    return _SlogdetResult(*(wrap(p, scalar=p.ndim == 0) for p in parts))


@implements(np.linalg.cholesky)
def linalg_cholesky(a, /, *, upper=False):
    g = current_graph()
    n, rt = _linalg_operand(a, "cholesky")
    if small_linalg.written_out("cholesky", n.shape[-1]):
        return wrap(small_linalg.cholesky(g, n, bool(upper), rt))
    if not upper:
        return wrap(_linalg("cholesky", n.shape, (n,), rt))
    # NumPy's upper factor reads the upper triangle (potrf 'U'): the lower factor of the
    # transpose, transposed
    swap = tuple(range(n.ndim - 2)) + (n.ndim - 1, n.ndim - 2)
    r = _linalg("cholesky", n.shape, (ops.transpose(g, n, swap),), rt)
    return wrap(ops.transpose(g, r, swap))


@implements(np.linalg.eigh)
def linalg_eigh(a, UPLO="L"):
    if UPLO not in ("L", "U"):
        raise ValueError("UPLO argument must be 'L' or 'U'")
    g = current_graph()
    n, rt = _linalg_operand(a, "eigh")
    if UPLO == "U":           # the upper triangle is the lower one of the transpose
        n = ops.transpose(g, n, tuple(range(n.ndim - 2)) + (n.ndim - 1, n.ndim - 2))
    m = n.shape[-1]
    packed = _linalg("eigh", n.shape[:-2] + (m + 1, m), (n,), rt)
    lead = packed.ndim - 2
    w = ops.reshape(g, ops.slice_view(g, packed, (0,) * packed.ndim, (1,) * packed.ndim,
                                      packed.shape[:-2] + (1, m)), packed.shape[:-2] + (m,))
    v = ops.slice_view(g, packed, (0,) * lead + (1, 0), (1,) * packed.ndim, n.shape)
    return _EighResult(wrap(w), wrap(v))


def _block(g, packed, row, col, rows, cols, shape):
    """packed[..., row:row+rows, col:col+cols] (a view), reshaped to batch + shape."""
    lead = packed.ndim - 2
    v = ops.slice_view(g, packed, (0,) * lead + (row, col), (1,) * packed.ndim,
                       packed.shape[:-2] + (rows, cols))
    return ops.reshape(g, v, packed.shape[:-2] + shape)


@implements(np.linalg.svd)
def linalg_svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    """LAPACK gesdd as NumPy calls it (jobz 'A', 'S' or 'N'), computed in float64 and cast;
    hermitian=True: NumPy's construction from eigh."""
    if hermitian:
        return _svd_hermitian(a, compute_uv)
    g = current_graph()
    n, rt = _linalg_operand(a, "svd", square=False)
    rows, cols = n.shape[-2:]
    r = min(rows, cols)
    job = 0 if not compute_uv else (2 if full_matrices else 1)
    ucols, vrows = (rows, cols) if job == 2 else (r, r)
    packed = _linalg("svd", n.shape[:-2] + ((1, r) if job == 0 else
                                            (1 + rows + vrows, max(ucols, cols))), (n,), rt,
                     job=job)
    s = wrap(_block(g, packed, 0, 0, 1, r, (r,)))
    if not compute_uv:
        return s
    u = _block(g, packed, 1, 0, rows, ucols, (rows, ucols))
    vh = _block(g, packed, 1 + rows, 0, vrows, cols, (vrows, cols))
    return _SVDResult(wrap(u), s, wrap(vh))


def _svd_hermitian(a, compute_uv):
    """np.linalg.svd(a, hermitian=True) as NumPy computes it: eigh, |eigenvalues| sorted
    descending, the signs moved into Vh."""
    t = _as_tracer(a)
    if not compute_uv:
        s = np.abs(linalg_eigh(t)[0])
        return np.sort(s, axis=-1)[..., ::-1]
    s, u = linalg_eigh(t)
    sgn = np.copysign(1.0, s)
    s = np.abs(s)
    sidx = np.argsort(s, axis=-1)[..., ::-1]
    sgn = np.take_along_axis(sgn, sidx, axis=-1)
    s = np.take_along_axis(s, sidx, axis=-1)
    u = np.take_along_axis(u, sidx[..., None, :], axis=-1)
    return _SVDResult(u, s, np.swapaxes(u * sgn[..., None, :], -1, -2))


def _static_or_array(x):
    """A traced value as it is, anything else as np.asarray (NumPy's handling of rcond/tol)."""
    return x if is_tracer(x) else np.asarray(x)


@implements(np.linalg.pinv)
def linalg_pinv(a, rcond=None, hermitian=False, *, rtol=np._NoValue):
    """NumPy 2's pinv: the reduced SVD, singular values at most rcond * max(s) dropped, then
    Vh^T (1/s) U^T (elementwise ops fused, a matrix product)."""
    t = _as_tracer(a)
    if rcond is None:
        if rtol is np._NoValue:
            rcond = 1e-15
        elif rtol is None:
            rcond = max(t.shape[-2:]) * np.finfo(t.dtype).eps
        else:
            rcond = rtol
    elif rtol is not np._NoValue:
        raise ValueError("`rtol` and `rcond` can't be both set.")
    rcond = _static_or_array(rcond)
    if t.ndim >= 2 and t.size == 0 and t.shape[-1] * t.shape[-2] == 0:
        return np.zeros(t.shape[:-2] + (t.shape[-1], t.shape[-2]), t.dtype)
    u, s, vt = linalg_svd(t, full_matrices=False, hermitian=hermitian)
    cutoff = rcond[..., None] * np.amax(s, axis=-1, keepdims=True)
    large = s > cutoff
    s = np.where(large, np.divide(1, s), 0)
    return np.matmul(np.swapaxes(vt, -1, -2), s[..., None] * np.swapaxes(u, -1, -2))


@implements(np.linalg.matrix_rank)
def linalg_matrix_rank(A, tol=None, hermitian=False, *, rtol=None):
    """NumPy's rule: the number of singular values above tol (default: max(m, n) * eps *
    max(s)).  A vector: 1 unless all zero, as a traced int64 (NumPy returns a Python int)."""
    if rtol is not None and tol is not None:
        raise ValueError("`tol` and `rtol` can't be both set.")
    t = _as_tracer(A)
    if t.ndim < 2:
        return astype(np.any(t != 0), np.int64)
    S = linalg_svd(t, compute_uv=False, hermitian=hermitian)
    if S.shape[-1] == 0:            # S.max(initial=0) is 0: nothing above it
        return wrap(ops.broadcast_to(current_graph(), ops.literal(current_graph(), 0, np.intp),
                                     S.shape[:-1]), scalar=S.ndim == 1)
    if tol is None:
        if rtol is None:
            rtol = max(t.shape[-2:]) * np.finfo(S.dtype).eps
        else:
            rtol = _static_or_array(rtol)[..., None]
        tol = np.amax(S, axis=-1, keepdims=True) * rtol
    else:
        tol = _static_or_array(tol)[..., None]
    return np.count_nonzero(S > tol, axis=-1)


class LstsqResiduals(Unreturnable):
    """np.linalg.lstsq's residuals when a has more rows than columns: their shape depends on
    the data (empty unless rank == n), so they are refused wherever they are used."""

    why = ("np.linalg.lstsq's residuals have a data-dependent shape (empty unless the rank "
           "equals the number of columns), which fastlaunch cannot trace: use x, rank and s "
           "(np.linalg.lstsq(a, b)[0]), and compute the residuals as "
           "np.sum((a @ x - b) ** 2, axis=0)")

    def _refuse(self, *args, **kwargs):
        raise TracingError(self.why)

    __len__ = __iter__ = __array__ = __getitem__ = __setitem__ = __bool__ = _refuse
    __float__ = __int__ = __index__ = __array_ufunc__ = __array_function__ = _refuse
    __hash__ = object.__hash__

    def __getattr__(self, name):
        if name.startswith("__"):      # protocol probes (NumPy, copy, pickle) just miss
            raise AttributeError(name)
        raise TracingError(self.why)


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and",
              "or", "xor", "lt", "le", "gt", "ge", "eq", "ne", "neg", "pos", "abs", "invert"):
    for _pre in (("", "r") if _name not in ("lt", "le", "gt", "ge", "eq", "ne", "neg", "pos",
                                            "abs", "invert") else ("",)):
        setattr(LstsqResiduals, f"__{_pre}{_name}__", LstsqResiduals._refuse)


@implements(np.linalg.lstsq)
def linalg_lstsq(a, b, rcond=None):
    """LAPACK gelsd as NumPy calls it, on the augmented matrix [a | b] with rcond as a second
    operand; returns (x, residuals, rank, s).  x, rank and s have static shapes; the
    residuals' shape depends on the rank when a has more rows than columns (then they are a
    LstsqResiduals, refused where used), else they are the empty array NumPy returns."""
    g = current_graph()
    an, bn = node_of(a), node_of(b)
    vector = bn.ndim == 1
    if vector:
        bn = ops.reshape(g, bn, bn.shape + (1,))
    for x in (an, bn):
        if x.ndim != 2:
            raise np.linalg.LinAlgError(f"{x.ndim}-dimensional array given. Array must be "
                                        f"two-dimensional")
    m, n = an.shape
    m2, nrhs = bn.shape
    if m != m2:
        raise np.linalg.LinAlgError("Incompatible dimensions")
    for x in (an, bn):
        _linalg_dtype(x.dtype, "lstsq")
    rt = np.dtype(np.float32) if an.dtype == bn.dtype == np.float32 else np.dtype(np.float64)
    if rcond is None:
        rcond = np.finfo(np.float64).eps * max(n, m)
    if is_tracer(rcond):
        rc = node_of(rcond)
        if rc.ndim != 0:
            raise TracingError("np.linalg.lstsq: a traced rcond must be a scalar")
        _linalg_dtype(rc.dtype, "lstsq")
    else:
        value = np.asarray(rcond)
        if value.ndim != 0 or value.dtype.kind not in "biuf":
            raise TracingError(f"np.linalg.lstsq: rcond must be a real scalar, got "
                               f"{rcond!r:.60}")
        rc = ops.literal(g, float(value), np.float64)
    rc = ops.reshape(g, ops.cast(g, rc, np.float64), (1, 1))
    ab = node_of(concatenate([wrap(ops.cast(g, an, np.float64)),
                              wrap(ops.cast(g, bn, np.float64))], axis=1))
    r = min(m, n)
    packed = g.add(Op.LINALG, np.float64, (n + 2, max(nrhs, r, 1)), (ab, rc), fn="lstsq", n=n)
    x = _block(g, packed, 0, 0, n, nrhs, (n,) if vector else (n, nrhs))
    s = _block(g, packed, n, 0, 1, r, (r,))
    rank = _block(g, packed, n + 1, 0, 1, 1, ())
    if m <= n or nrhs == 0:          # NumPy's residuals are then always empty
        resid = np.zeros(0, rt)
    else:
        resid = LstsqResiduals()
    return (wrap(ops.cast(g, x, rt)), resid, wrap(ops.cast(g, rank, np.int32), scalar=True),
            wrap(ops.cast(g, s, rt)))


# ---- matrix products -------------------------------------------------------------------------
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _product_dtype(a: Node, b: Node) -> np.dtype:
    return ops.check_dtype(np.result_type(a.dtype, b.dtype), "matrix product")


@implements(np.matmul)
def matmul(a, b, out=None, **kwargs):
    g = current_graph()
    an, bn = node_of(a), node_of(b)
    if an.ndim == 0 or bn.ndim == 0:
        raise ValueError("matmul: Input operand does not have enough dimensions")
    dt = _product_dtype(an, bn)
    a_vec, b_vec = an.ndim == 1, bn.ndim == 1
    if a_vec:
        an = ops.reshape(g, an, (1,) + an.shape)
    if b_vec:
        bn = ops.reshape(g, bn, bn.shape + (1,))
    if an.shape[-1] != bn.shape[-2]:
        raise ValueError(f"matmul: Input operand 1 has a mismatch in its core dimension 0, with "
                         f"gufunc signature (n?,k),(k,m?)->(n?,m?) (size {bn.shape[-2]} is "
                         f"different from {an.shape[-1]})")
    batch = ops.broadcast_shapes(an.shape[:-2], bn.shape[:-2])
    an = ops.broadcast_to(g, an, batch + an.shape[-2:])
    bn = ops.broadcast_to(g, bn, batch + bn.shape[-2:])
    lb = _LETTERS[:len(batch)]
    r = ops.contract(g, an, lb + "xz", bn, lb + "zy", lb + "xy", dt)
    shape = batch + (() if a_vec else (r.shape[-2],)) + (() if b_vec else (r.shape[-1],))
    r = ops.reshape(g, r, shape)
    return wrap(r, scalar=r.ndim == 0)


@implements(np.dot)
def dot(a, b, out=None):
    _no_extra("dot", out=out)
    an, bn = node_of(a), node_of(b)
    if an.ndim == 0 or bn.ndim == 0:       # np.dot makes Python scalars arrays: no NEP 50
        return wrap(ops.apply_ufunc(current_graph(), np.multiply, [(an, None), (bn, None)]))
    g = current_graph()
    dt = _product_dtype(an, bn)
    la = _LETTERS[:an.ndim - 1] + "z"
    if bn.ndim == 1:
        lb = "z"
    else:
        rest = _LETTERS[an.ndim - 1:an.ndim - 1 + bn.ndim - 1]
        lb = rest[:-1] + "z" + rest[-1]
    out_labels = la[:-1] + lb.replace("z", "")
    if an.shape[-1] != bn.shape[lb.index("z")]:
        raise ValueError(f"shapes {an.shape} and {bn.shape} not aligned: {an.shape[-1]} "
                         f"(dim {an.ndim - 1}) != {bn.shape[lb.index('z')]} (dim {lb.index('z')})")
    r = ops.contract(g, an, la, bn, lb, out_labels, dt)
    return wrap(r, scalar=r.ndim == 0)


@implements(np.inner)
def inner(a, b):
    an, bn = node_of(a), node_of(b)
    if an.ndim == 0 or bn.ndim == 0:
        return wrap(ops.apply_ufunc(current_graph(), np.multiply, [(an, None), (bn, None)]))
    la = _LETTERS[:an.ndim - 1] + "z"
    lb = _LETTERS[an.ndim - 1:an.ndim - 1 + bn.ndim - 1] + "z"
    if an.shape[-1] != bn.shape[-1]:
        raise ValueError("shapes not aligned for np.inner")
    r = ops.contract(current_graph(), an, la, bn, lb, la[:-1] + lb[:-1], _product_dtype(an, bn))
    return wrap(r, scalar=r.ndim == 0)


@implements(np.outer)
def outer(a, b, out=None):
    _no_extra("outer", out=out)
    return call_ufunc(np.multiply, (reshape(_as_tracer(a), (-1, 1)), reshape(_as_tracer(b), (1, -1))))


@implements(np.vdot)
def vdot(a, b):
    """conj(a) . b over the flattened arrays (NumPy conjugates the first operand)."""
    a = ravel(_as_tracer(a))
    if a.dtype.kind == "c":
        a = call_ufunc(np.conjugate, (a,))
    return dot(a, ravel(_as_tracer(b)))


@implements(np.einsum)
def einsum(subscripts, *operands, out=None, dtype=None, optimize=False, **kwargs):
    _no_extra("einsum", out=out, **kwargs)
    if not isinstance(subscripts, str):
        raise TracingError("np.einsum with interleaved operand/label lists is not supported")
    spec = subscripts.replace(" ", "")
    if "." in spec:
        raise TracingError("np.einsum with '...' is not supported by fastlaunch")
    inputs, _, output = spec.partition("->")
    labels = inputs.split(",")
    if len(labels) != len(operands):
        raise ValueError("more operands than subscripts" if len(operands) > len(labels)
                         else "fewer operands provided to einstein sum function than specified")
    if "->" not in spec:
        counts = {c: inputs.count(c) for c in inputs if c != ","}
        output = "".join(sorted(c for c, k in counts.items() if k == 1))
    g = current_graph()
    nodes = [node_of(o) for o in operands]
    dt = ops.check_dtype(dtype if dtype is not None else np.result_type(*(n.dtype for n in nodes)),
                         "np.einsum")
    if len(nodes) == 1:
        (n,), (lab,) = nodes, labels
        if len(set(lab)) != len(lab):
            raise TracingError("np.einsum with a repeated label (a diagonal) is not supported")
        n = ops.cast(g, n, dt)
        summed = tuple(i for i, c in enumerate(lab) if c not in output)
        kept = [c for c in lab if c in output]
        if summed:
            n = ops.reduce(g, Op.SUM, n, summed, dtype=dt) if dt.kind != "b" else \
                ops.reduce(g, Op.ANY, n, summed)
        r = ops.transpose(g, n, [kept.index(c) for c in output])
        return wrap(r, scalar=r.ndim == 0)
    # two operands at a time, left to right, keeping the labels a later operand or the
    # output needs (NumPy sums all products in one loop: the same sum, in another order)
    cur, cur_lab = nodes[0], labels[0]
    for k in range(1, len(nodes)):
        if k == len(nodes) - 1:
            keep = output
        else:
            later = "".join(labels[k + 1:]) + output
            keep = "".join(dict.fromkeys(c for c in cur_lab + labels[k] if c in later))
        cur = ops.contract(g, cur, cur_lab, nodes[k], labels[k], keep, dt)
        cur_lab = keep
    return wrap(cur, scalar=cur.ndim == 0)


@implements(np.kron)
def kron(a, b):
    """a[i] * b[j] at i * b.shape + j: a broadcast product of interleaved axes, reshaped."""
    ta, tb = _as_tracer(a), _as_tracer(b)
    nd = max(ta.ndim, tb.ndim)
    sa = (1,) * (nd - ta.ndim) + ta.shape
    sb = (1,) * (nd - tb.ndim) + tb.shape
    ia = tuple(x for s in sa for x in (s, 1))
    ib = tuple(x for s in sb for x in (1, s))
    r = call_ufunc(np.multiply, (reshape(ta, ia), reshape(tb, ib)))
    out = reshape(r, tuple(x * y for x, y in zip(sa, sb)))
    out.scalar = False
    return out


@implements(np.cross)
def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """NumPy's own sequence of products and differences (the same roundings)."""
    if axis is not None:
        axisa, axisb, axisc = (axis,) * 3
    ta, tb = _as_tracer(a), _as_tracer(b)
    if ta.ndim < 1 or tb.ndim < 1:
        raise ValueError("At least one array has zero dimension")
    ta = moveaxis(ta, ops.normalize_axes(axisa, ta.ndim)[0], -1)
    tb = moveaxis(tb, ops.normalize_axes(axisb, tb.ndim)[0], -1)
    na, nb = ta.shape[-1], tb.shape[-1]
    if na not in (2, 3) or nb not in (2, 3):
        raise ValueError("incompatible dimensions for cross product\n"
                         "(dimension must be 2 or 3)")
    if na == 2 or nb == 2:
        import warnings
        warnings.warn("Arrays of 2-dimensional vectors are deprecated. Use arrays of "
                      "3-dimensional vectors instead. (deprecated in NumPy 2.0)",
                      DeprecationWarning, stacklevel=2)
    dt = np.promote_types(ta.dtype, tb.dtype)
    ta, tb = astype(ta, dt), astype(tb, dt)
    a0, a1, b0, b1 = ta[..., 0], ta[..., 1], tb[..., 0], tb[..., 1]
    mul, sub = (lambda x, y: call_ufunc(np.multiply, (x, y))), \
        (lambda x, y: call_ufunc(np.subtract, (x, y)))
    if na == 2 and nb == 2:
        r = sub(mul(a0, b1), mul(a1, b0))
        r.scalar = False
        return r
    if na == 2:
        b2 = tb[..., 2]
        cps = [mul(a1, b2), call_ufunc(np.negative, (mul(a0, b2),)), sub(mul(a0, b1), mul(a1, b0))]
    elif nb == 2:
        a2 = ta[..., 2]
        cps = [call_ufunc(np.negative, (mul(a2, b1),)), mul(a2, b0), sub(mul(a0, b1), mul(a1, b0))]
    else:
        a2, b2 = ta[..., 2], tb[..., 2]
        cps = [sub(mul(a1, b2), mul(a2, b1)), sub(mul(a2, b0), mul(a0, b2)),
               sub(mul(a0, b1), mul(a1, b0))]
    shape = ops.broadcast_shapes(*(c.shape for c in cps))
    cp = stack([broadcast_to(c, shape) for c in cps], axis=-1)
    cp = astype(cp, dt)
    axc = ops.normalize_axes(axisc, cp.ndim)[0]
    return moveaxis(cp, -1, axc)


# ==== contractions, segments, interpolation, index arithmetic (issue 30) ============================
@implements(np.tensordot)
def tensordot(a, b, axes=2):
    """NumPy's own: the summed axes moved together, both operands reshaped to matrices, one
    product (so the same BLAS call, the same rounding), the result reshaped back."""
    ta, tb = _as_tracer(a), _as_tracer(b)
    try:
        iter(axes)
    except TypeError:
        n = operator.index(axes)
        axes_a, axes_b = list(range(-n, 0)), list(range(n))
    else:
        axes_a, axes_b = axes
    axes_a = [axes_a] if np.ndim(axes_a) == 0 else list(axes_a)
    axes_b = [axes_b] if np.ndim(axes_b) == 0 else list(axes_b)
    if len(axes_a) != len(axes_b):
        raise ValueError("shape-mismatch for sum")
    na, nb = ta.ndim, tb.ndim
    axes_a = [ax % na if na else ax for ax in axes_a]
    axes_b = [ax % nb if nb else ax for ax in axes_b]
    for x, y in zip(axes_a, axes_b):
        if ta.shape[x] != tb.shape[y]:
            raise ValueError("shape-mismatch for sum")
    keep_a = [k for k in range(na) if k not in axes_a]
    keep_b = [k for k in range(nb) if k not in axes_b]
    inner = math.prod(ta.shape[ax] for ax in axes_a)
    at = reshape(transpose(ta, keep_a + axes_a),
                 (math.prod(ta.shape[k] for k in keep_a), inner))
    bt = reshape(transpose(tb, axes_b + keep_b),
                 (inner, math.prod(tb.shape[k] for k in keep_b)))
    return reshape(dot(at, bt), tuple(ta.shape[k] for k in keep_a) +
                   tuple(tb.shape[k] for k in keep_b))


# called, not used while this module is imported: imported after its own definitions,
# since the families call each other (see the package's __init__)
from .common import _as_tracer  # noqa: E402
from .reductions import _max_from_zero, _no_extra, min_, sum_  # noqa: E402
from .registry import is_tracer, node_of, wrap  # noqa: E402
from .shaping import (  # noqa: E402
    broadcast_to, concatenate, moveaxis, ravel, reshape, squeeze, stack, transpose)
from .ufuncs import _imag, _real, astype, call_ufunc  # noqa: E402
