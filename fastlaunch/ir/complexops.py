"""Complex numbers (complex64, complex128) as pairs of real values, at the graph level.

A complex node is a value of the graph like any other: arguments, results, constants, views,
gathers, region updates and scatters that set elements move whole complex elements.  Every
computation on complex values is composed here, while tracing, of real ops on their parts:
`real(z)`, `imag(z)` (Op.REAL / Op.IMAG) and `complex(re, im)` (Op.COMPLEX), with NumPy's own
formulas (its loops and npy_math), so kernels never see complex arithmetic: they load a
complex element as two floats, take it apart, and store two floats.  Folding is structural:
real(complex(a, b)) is a, parts of literals are literals, parts of a broadcast are
broadcasts of the parts; so `x + 0j` costs nothing in a kernel.

Registered into ops.COMPLEX at import (ops stays free of this module: no import cycle).
What is not composed raises TracingError naming the function (never a wrong answer).
"""
from __future__ import annotations

import numpy as np

from . import ops
from ..errors import TracingError
from .graph import Graph, Node, Op

_BOOL = np.dtype(np.bool_)


def part_dtype(dt) -> np.dtype:
    """float32 for complex64, float64 for complex128."""
    return np.dtype(np.float32 if np.dtype(dt).itemsize == 8 else np.float64)


def complex_of(part) -> np.dtype:
    """The complex dtype whose parts are `part` (float16 widens to complex64, as NumPy)."""
    return np.dtype(np.complex128 if np.dtype(part) == np.float64 else np.complex64)


def _op_name(op: Op) -> str:
    u = ops.UFUNC_OF_OP.get(op)
    return f"np.{u.__name__}" if u is not None else op.value


# ---- parts -------------------------------------------------------------------------------
def real(g: Graph, n: Node) -> Node:
    if n.dtype.kind != "c":
        return n
    p = part_dtype(n.dtype)
    v = ops.literal_value(n)
    if v is not None:
        return ops.broadcast_to(g, ops.literal(g, v.real, p), n.shape)
    if n.op is Op.COMPLEX:
        return n.inputs[0]
    if n.op is Op.BROADCAST:
        return ops.broadcast_to(g, real(g, n.inputs[0]), n.shape)
    return g.add(Op.REAL, p, n.shape, [n])


def imag(g: Graph, n: Node) -> Node:
    """The imaginary part (zeros of n's dtype for a real n, as NumPy's x.imag)."""
    if n.dtype.kind != "c":
        zero = ops.literal(g, 0, n.dtype if n.dtype.kind == "f" else np.float64)
        return ops.broadcast_to(g, zero, n.shape)
    p = part_dtype(n.dtype)
    v = ops.literal_value(n)
    if v is not None:
        return ops.broadcast_to(g, ops.literal(g, v.imag, p), n.shape)
    if n.op is Op.COMPLEX:
        return n.inputs[1]
    if n.op is Op.BROADCAST:
        return ops.broadcast_to(g, imag(g, n.inputs[0]), n.shape)
    return g.add(Op.IMAG, p, n.shape, [n])


def make(g: Graph, re: Node, im: Node, dt=None) -> Node:
    """complex(re, im), of dtype dt (default: from the parts' dtype)."""
    dt = np.dtype(dt) if dt is not None else complex_of(re.dtype)
    p = part_dtype(dt)
    re, im = ops.cast(g, re, p), ops.cast(g, im, p)
    shape = ops.broadcast_shapes(re.shape, im.shape)
    re, im = ops.broadcast_to(g, re, shape), ops.broadcast_to(g, im, shape)
    vr, vi = ops.literal_value(re), ops.literal_value(im)
    if vr is not None and vi is not None:
        value = np.zeros(1, dt)
        value.view(p)[:] = (vr, vi)          # bit for bit: signed zeros and NaNs kept
        value = value[0]
        return ops.broadcast_to(g, ops.literal(g, value, dt), shape)
    if re.op is Op.REAL and im.op is Op.IMAG and re.inputs[0] is im.inputs[0] \
            and re.inputs[0].dtype == dt:
        return re.inputs[0]
    return g.add(Op.COMPLEX, dt, shape, [re, im])


def conj(g: Graph, n: Node) -> Node:
    if n.dtype.kind != "c":
        return n
    return make(g, real(g, n), _e(g, Op.NEG, part_dtype(n.dtype), imag(g, n)), n.dtype)


# ---- real arithmetic helpers ---------------------------------------------------------------
def _e(g, op, dt, *args):
    return ops.elementwise(g, op, np.dtype(dt), list(args))


class _R:
    """Real ops on one part dtype, written as arithmetic (keeps the formulas readable)."""

    def __init__(self, g: Graph, p: np.dtype):
        self.g, self.p = g, p

    def c(self, x) -> Node:
        return ops.literal(self.g, x, self.p)

    def __getattr__(self, name):
        op = Op[name.upper()]
        boolean = op in (Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE, Op.ISNAN, Op.ISINF,
                         Op.ISFINITE, Op.LOGICAL_AND, Op.LOGICAL_OR, Op.LOGICAL_NOT,
                         Op.SIGNBIT)

        def f(*args):
            args = [a if isinstance(a, Node) else self.c(a) for a in args]
            if op is Op.WHERE:
                return _e(self.g, op, args[1].dtype, *args)
            return _e(self.g, op, _BOOL if boolean else self.p, *args)
        return f


def _mul(r: _R, ar, ai, br, bi):
    """NumPy's complex multiply: (ar*br - ai*bi, ar*bi + ai*br)."""
    return r.sub(r.mul(ar, br), r.mul(ai, bi)), r.add(r.mul(ar, bi), r.mul(ai, br))


def _div(r: _R, ar, ai, br, bi):
    """NumPy's complex division (Smith's method, as its loops and npy_math's cdiv)."""
    abs_br, abs_bi = r.abs(br), r.abs(bi)
    first = r.ge(abs_br, abs_bi)
    zero = r.logical_and(first, r.eq(abs_br, 0.0))
    rat1 = r.div(bi, br)
    scl1 = r.div(1.0, r.add(br, r.mul(bi, rat1)))
    re1 = r.mul(r.add(ar, r.mul(ai, rat1)), scl1)
    im1 = r.mul(r.sub(ai, r.mul(ar, rat1)), scl1)
    rat2 = r.div(br, bi)
    scl2 = r.div(1.0, r.add(bi, r.mul(br, rat2)))
    re2 = r.mul(r.add(r.mul(ar, rat2), ai), scl2)
    im2 = r.mul(r.sub(r.mul(ai, rat2), ar), scl2)
    re = r.where(first, re1, re2)
    im = r.where(first, im1, im2)
    return r.where(zero, r.div(ar, abs_br), re), r.where(zero, r.div(ai, abs_br), im)


# ---- exp, sinh, cosh, sin, cos: C99 Annex G, as the C library NumPy calls computes them ----
# NumPy's complex exp, sin, cos, sinh and cosh are the C library's cexp, csin, ... (glibc's
# here), which give each non-finite or zero case the value Annex G (G.6) lists, and scale
# exp(x) for a large real part so that exp(x) cos(y) is finite where exp(x) alone overflows.
# Each is composed below as its finite formula, then a select per special case.

def _exp_limit(r: _R) -> float:
    """t = floor((emax - 1) ln 2): exp(x) is finite for x <= t (709 for float64)."""
    return float(int((np.finfo(r.p).maxexp - 1) * np.log(2.0)))


def _steps(r: _R, x, half: bool):
    """exp(x) for x finite, taken apart so that exp(x) * p does not overflow in exp(x)
    first: past t (_exp_limit) exp(t) comes out once or twice (exp(t) / 2 the first time
    with `half`: sinh and cosh), and past 3t the product is max * p (an overflow to the
    sign of p, a zero for p == 0).  Returns (the rest of x, the factors taken out, whether
    x is past 3t)."""
    t = _exp_limit(r)
    exp_t = float(np.exp(np.float64(t)).astype(r.p))
    k1 = r.gt(x, t)
    x1 = r.where(k1, r.sub(x, t), x)
    k2 = r.logical_and(k1, r.gt(x1, t))
    x2 = r.where(k2, r.sub(x1, t), x1)
    f1 = r.where(k1, exp_t / 2 if half else exp_t, 1.0)
    return x2, (f1, r.where(k2, exp_t, 1.0)), r.gt(x2, t)


def _scaled(r: _R, e, parts, steps):
    """exp(x) * p for each p in parts, given `e`, exp of the rest of x (see _steps)."""
    _, (f1, f2), past = steps
    top = float(np.finfo(r.p).max)
    out = []
    for p in parts:
        p = r.mul(r.mul(p, f1), f2)
        out.append(r.where(past, r.mul(p, top), r.mul(e, p)))
    return out


def _cases(r: _R, default, *cases):
    """The (re, im) of the first case whose condition holds, else `default`: cases are
    (condition, re, im)."""
    re, im = default
    for cond, cre, cim in reversed(cases):
        re, im = r.where(cond, cre, re), r.where(cond, cim, im)
    return re, im


def _exp(r: _R, ar, ai):
    """cexp: exp(ar) (cos ai, sin ai), with Annex G's special values."""
    s, c = r.sin(ai), r.cos(ai)
    steps = _steps(r, ar, half=False)
    fin = _scaled(r, r.exp(steps[0]), [c, s], steps)
    nan = r.c(np.nan)
    x_inf, y_fin, y_zero = r.isinf(ar), r.isfinite(ai), r.eq(ai, 0.0)
    limit = r.where(r.signbit(ar), 0.0, np.inf)        # exp(-inf), exp(+inf)
    return _cases(
        r, fin,
        (r.logical_and(r.isnan(ar), y_zero), nan, ai),
        (r.isnan(ar), nan, nan),
        (r.logical_and(x_inf, y_zero), limit, ai),
        (r.logical_and(x_inf, y_fin), r.copysign(limit, c), r.copysign(limit, s)),
        (r.logical_and(x_inf, r.signbit(ar)), r.c(0.0), r.copysign(0.0, ai)),
        (x_inf, r.c(np.inf), nan),
        (r.logical_not(y_fin), nan, nan))


def _sinh_cosh(r: _R, ar, ai, cosh: bool):
    """csinh or ccosh of ar + i ai, with Annex G's special values."""
    ax, neg = r.abs(ar), r.signbit(ar)
    s, c = r.sin(ai), r.cos(ai)
    # past t the product is scaled (_steps); the exp of the rest of |x| is sinh + cosh of
    # it (within an ulp), which below t are the finite formula's own: no third function
    steps = _steps(r, ax, half=True)
    big = r.gt(ax, _exp_limit(r))
    odd, even = r.sinh(steps[0]), r.cosh(steps[0])
    if cosh:           # cosh(x) cos(y) + i sinh(x) sin(y)
        s = r.where(neg, r.neg(s), s)
        sre, sim = _scaled(r, r.add(odd, even), [c, s], steps)
        fin = r.where(big, sre, r.mul(even, c)), r.where(big, sim, r.mul(odd, s))
    else:              # sinh(x) cos(y) + i cosh(x) sin(y)
        c = r.where(neg, r.neg(c), c)
        sre, sim = _scaled(r, r.add(odd, even), [c, s], steps)
        fin = r.where(big, sre, r.mul(odd, c)), r.where(big, sim, r.mul(even, s))
    nan, inf = r.c(np.nan), r.c(np.inf)
    x_fin, x_inf, x_nan = r.isfinite(ar), r.isinf(ar), r.isnan(ar)
    y_fin, y_zero = r.isfinite(ai), r.eq(ai, 0.0)
    x_zero = r.eq(ar, 0.0)
    if cosh:
        return _cases(
            r, fin,
            (r.logical_and(x_fin, r.logical_not(y_fin)), nan, r.where(x_zero, 0.0, np.nan)),
            (r.logical_and(x_inf, y_zero), inf, r.mul(ai, r.copysign(1.0, ar))),
            (r.logical_and(x_inf, y_fin), r.copysign(np.inf, c), r.copysign(np.inf, s)),
            (x_inf, inf, nan),
            (r.logical_and(x_nan, y_zero), nan, ai),
            (x_nan, nan, nan))
    return _cases(
        r, fin,
        (r.logical_and(x_fin, r.logical_not(y_fin)), r.where(x_zero, ar, np.nan), nan),
        (r.logical_and(x_inf, y_zero), r.copysign(np.inf, ar), ai),
        (r.logical_and(x_inf, y_fin), r.copysign(np.inf, c), r.copysign(np.inf, s)),
        (x_inf, inf, nan),
        (r.logical_and(x_nan, y_zero), nan, ai),
        (x_nan, nan, nan))


def _sin(r: _R, ar, ai):
    """csin: sin(x) cosh(y) + i cos(x) sinh(y), with Annex G's special values (the C
    library's own cases, which are csinh's with the parts' roles exchanged)."""
    ay, neg_y = r.abs(ai), r.signbit(ai)
    s, c = r.sin(ar), r.cos(ar)
    c = r.where(neg_y, r.neg(c), c)
    steps = _steps(r, ay, half=True)
    big = r.gt(ay, _exp_limit(r))
    odd, even = r.sinh(steps[0]), r.cosh(steps[0])           # as in _sinh_cosh
    sre, sim = _scaled(r, r.add(odd, even), [s, c], steps)
    fin = r.where(big, sre, r.mul(even, s)), r.where(big, sim, r.mul(odd, c))
    nan, inf = r.c(np.nan), r.c(np.inf)
    x_fin, x_zero = r.isfinite(ar), r.eq(ar, 0.0)
    y_fin, y_inf, y_zero = r.isfinite(ai), r.isinf(ai), r.eq(ai, 0.0)
    return _cases(
        r, fin,
        (r.logical_and(y_fin, r.logical_and(r.logical_not(x_fin), y_zero)), nan, ai),
        (r.logical_and(y_fin, r.logical_not(x_fin)), nan, nan),
        (r.logical_and(y_inf, x_zero), ar, ai),
        (r.logical_and(y_inf, x_fin), r.copysign(np.inf, s), r.copysign(np.inf, c)),
        (y_inf, nan, inf),
        (r.logical_and(r.isnan(ai), x_zero), ar, nan),
        (r.isnan(ai), nan, nan))


def _log(r: _R, ar, ai):
    return r.log(r.hypot(ar, ai)), r.arctan2(ai, ar)


def _sqrt(r: _R, ar, ai):
    """csqrt: t = sqrt((|ar| + |z|) / 2); (t, ai / 2t) for ar >= 0, else (|ai| / 2t, ±t)."""
    t = r.sqrt(r.add(r.mul(r.abs(ar), 0.5), r.mul(r.hypot(ar, ai), 0.5)))
    two_t = r.add(t, t)
    pos = r.logical_not(r.signbit(ar))
    re = r.where(pos, t, r.div(r.abs(ai), two_t))
    im = r.where(pos, r.div(ai, two_t), r.copysign(t, ai))
    zero = r.logical_and(r.eq(ar, 0.0), r.eq(ai, 0.0))
    re, im = r.where(zero, 0.0, re), r.where(zero, ai, im)
    inf_i = r.isinf(ai)
    return r.where(inf_i, np.inf, re), r.where(inf_i, ai, im)


def _truth(g, n) -> Node:
    r = _R(g, part_dtype(n.dtype))
    return r.logical_or(r.ne(real(g, n), 0.0), r.ne(imag(g, n), 0.0))


# NumPy 2 orders complex numbers lexicographically (its CLT/CLE/CGT/CGE macros): by the
# real parts, and by the imaginary parts where those are equal; a NaN part is never ordered
def _order(r: _R, op, ar, ai, br, bi):
    strict = {Op.LT: Op.LT, Op.LE: Op.LT, Op.GT: Op.GT, Op.GE: Op.GT}[op]
    first = _e(r.g, strict, _BOOL, ar, br)
    no_nan = r.logical_not(r.logical_or(r.isnan(ai), r.isnan(bi)))
    second = _e(r.g, op, _BOOL, ai, bi)
    return r.logical_or(r.logical_and(first, no_nan), r.logical_and(r.eq(ar, br), second))


def _int_power(r: _R, ar, ai, n: int):
    """NumPy's npy_cpow for an integer exponent |n| < 100: unrolled for 1, 2, 3, else binary
    powering, then 1/result for a negative n."""
    if n == 1:
        return ar, ai
    if n == 2:
        return _mul(r, ar, ai, ar, ai)
    if n == 3:
        sr, si = _mul(r, ar, ai, ar, ai)
        return _mul(r, ar, ai, sr, si)
    m, mask = abs(n), 1
    acc = (r.c(1.0), r.c(0.0))
    p = (ar, ai)
    while True:
        if m & mask:
            acc = _mul(r, *acc, *p)
        mask <<= 1
        if m < mask:
            break
        p = _mul(r, *p, *p)
    if n < 0:
        return _div(r, r.c(1.0), r.c(0.0), *acc)
    return acc


def _c99_mul(r: _R, a, b, c, d):
    """(a + ib)(c + id) as C99 compilers multiply complex numbers (Annex G.5.1): the
    textbook products, and where both parts come out NaN although a factor is infinite (or
    a product overflowed), the infinite factor's direction recomputed with the NaNs as
    zeros, so that the result is an infinity.  (NumPy's own multiply is the textbook
    formula; the C library's cpow multiplies this way.)"""
    ac, bd, ad, bc = r.mul(a, c), r.mul(b, d), r.mul(a, d), r.mul(b, c)
    x, y = r.sub(ac, bd), r.add(ad, bc)

    def unit(v):                       # an infinite part as +-1, a finite one as +-0
        return r.copysign(r.where(r.isinf(v), 1.0, 0.0), v)

    def unnan(v):
        return r.where(r.isnan(v), r.copysign(0.0, v), v)

    both_nan = r.logical_and(r.isnan(x), r.isnan(y))
    inf_ab = r.logical_or(r.isinf(a), r.isinf(b))
    inf_cd = r.logical_or(r.isinf(c), r.isinf(d))
    a1, b1 = r.where(inf_ab, unit(a), a), r.where(inf_ab, unit(b), b)
    c1, d1 = r.where(inf_ab, unnan(c), c), r.where(inf_ab, unnan(d), d)
    c2, d2 = r.where(inf_cd, unit(c1), c1), r.where(inf_cd, unit(d1), d1)
    a2, b2 = r.where(inf_cd, unnan(a1), a1), r.where(inf_cd, unnan(b1), b1)
    overflowed = r.logical_and(
        r.logical_not(r.logical_or(inf_ab, inf_cd)),
        r.logical_or(r.logical_or(r.isinf(ac), r.isinf(bd)),
                     r.logical_or(r.isinf(ad), r.isinf(bc))))
    a3, b3 = r.where(overflowed, unnan(a2), a2), r.where(overflowed, unnan(b2), b2)
    c3, d3 = r.where(overflowed, unnan(c2), c2), r.where(overflowed, unnan(d2), d2)
    again = r.logical_and(both_nan, r.logical_or(r.logical_or(inf_ab, inf_cd), overflowed))
    x3 = r.mul(np.inf, r.sub(r.mul(a3, c3), r.mul(b3, d3)))
    y3 = r.mul(np.inf, r.add(r.mul(a3, d3), r.mul(b3, c3)))
    return r.where(again, x3, x), r.where(again, y3, y)


def _power(r: _R, b: Node, ar, ai, br, bi):
    """NumPy's npy_cpow, element by element: 1 for a zero exponent; for a zero base 0 where
    the exponent's real part is positive, else NaN; an integral real exponent of magnitude
    below 100 by repeated (textbook) multiplication, 1/result for a negative one; else the C
    library's cpow, cexp(b * clog(a))."""
    vb = ops.literal_value(b)
    if vb is not None:
        vb = complex(vb)
        if vb == 0:
            return r.c(1.0), r.c(0.0)
        if vb.imag == 0 and vb.real == int(vb.real) and -100 < vb.real < 100:
            n = int(vb.real)
            pr, pi = _int_power(r, ar, ai, n)
            # a zero base (either sign): +0 for a positive exponent, NaN otherwise
            zero = r.logical_and(r.eq(ar, 0.0), r.eq(ai, 0.0))
            z = 0.0 if n > 0 else np.nan
            return r.where(zero, z, pr), r.where(zero, z, pi)
    lr, li = _log(r, ar, ai)
    er, ei = _exp(r, *_c99_mul(r, br, bi, lr, li))
    if vb is None:
        # an exponent known only at run time: its integral values as NumPy takes them
        ri = _R(r.g, np.dtype(np.int64))
        small = r.lt(r.abs(br), 100.0)
        n = ops.cast(r.g, r.where(small, br, 0.0), np.int64)
        integral = r.logical_and(r.logical_and(small, r.eq(bi, 0.0)),
                                 r.eq(ops.cast(r.g, n, r.p), br))
        m = ri.abs(n)
        square = _mul(r, ar, ai, ar, ai)
        cube = _mul(r, ar, ai, *square)
        acc, p = (r.c(1.0), r.c(0.0)), (ar, ai)
        for k in range(7):                        # |n| < 100 < 2**7
            bit = ri.ne(ri.bitwise_and(ri.right_shift(m, k), 1), 0)
            step = _mul(r, *acc, *p)
            acc = (r.where(bit, step[0], acc[0]), r.where(bit, step[1], acc[1]))
            if k < 6:
                p = _mul(r, *p, *p)
        inv = _div(r, r.c(1.0), r.c(0.0), *acc)
        neg = r.lt(br, 0.0)
        pr, pi = r.where(neg, inv[0], acc[0]), r.where(neg, inv[1], acc[1])
        pr, pi = _cases(r, (pr, pi), (ri.eq(n, 1), ar, ai), (ri.eq(n, 2), *square),
                        (ri.eq(n, 3), *cube))
        er, ei = r.where(integral, pr, er), r.where(integral, pi, ei)
    b_zero = r.logical_and(r.eq(br, 0.0), r.eq(bi, 0.0))
    a_zero = r.logical_and(r.eq(ar, 0.0), r.eq(ai, 0.0))
    zero_val = r.where(r.gt(br, 0.0), 0.0, np.nan)
    er, ei = r.where(a_zero, zero_val, er), r.where(a_zero, zero_val, ei)
    return r.where(b_zero, 1.0, er), r.where(b_zero, 0.0, ei)


# ---- the registered hooks ------------------------------------------------------------------
def cast(g: Graph, n: Node, dt: np.dtype) -> Node:
    """NumPy's casts to, from and between complex dtypes (complex -> real drops the imaginary
    part, as NumPy does with a ComplexWarning)."""
    if dt.kind == "c":
        if n.dtype.kind == "c":
            return make(g, real(g, n), imag(g, n), dt)
        p = part_dtype(dt)
        return make(g, ops.cast(g, n, p), ops.broadcast_to(g, ops.literal(g, 0.0, p), n.shape), dt)
    if dt.kind == "b":
        return _truth(g, n)
    return ops.cast(g, real(g, n), dt)


_UNARY_PARTS = {Op.SIN, Op.COS, Op.SINH, Op.COSH, Op.EXP, Op.LOG, Op.SQRT, Op.LOG2, Op.LOG10,
                Op.EXP2, Op.EXPM1, Op.LOG1P}


def elementwise(g: Graph, op: Op, out: np.dtype, operands: list) -> Node:
    """`op` on operands of which at least one is complex (already cast to NumPy's loop dtypes
    and broadcast together), composed of real ops."""
    shape = ops.broadcast_shapes(*(o.shape for o in operands))
    return ops.broadcast_to(g, _elementwise(g, op, out, operands), shape)


def _elementwise(g: Graph, op: Op, out: np.dtype, operands: list) -> Node:
    cdt = next(o.dtype for o in operands if o.dtype.kind == "c") \
        if any(o.dtype.kind == "c" for o in operands) else out
    p = part_dtype(cdt)
    r = _R(g, p)
    if op is Op.WHERE:
        c, a, b = operands
        return make(g, r.where(c, real(g, a), real(g, b)), r.where(c, imag(g, a), imag(g, b)), out)
    if op is Op.COMPLEX:
        return make(g, operands[0], operands[1], out)
    if op in (Op.LOGICAL_AND, Op.LOGICAL_OR, Op.LOGICAL_XOR, Op.LOGICAL_NOT):
        truths = [_truth(g, o) if o.dtype.kind == "c" else ops.cast(g, o, _BOOL) for o in operands]
        return _e(g, op, _BOOL, *truths)
    parts = [(real(g, o), imag(g, o)) for o in operands]
    if len(parts) == 1:
        (ar, ai), = parts
        if op is Op.NEG:
            return make(g, r.neg(ar), r.neg(ai), out)
        if op is Op.ABS:
            return r.hypot(ar, ai)
        if op is Op.ISNAN:
            return r.logical_or(r.isnan(ar), r.isnan(ai))
        if op is Op.ISINF:
            return r.logical_or(r.isinf(ar), r.isinf(ai))
        if op is Op.ISFINITE:
            return r.logical_and(r.isfinite(ar), r.isfinite(ai))
        if op is Op.RECIPROCAL:
            # NumPy's loop: scale by the larger part
            small_i = r.le(r.abs(ai), r.abs(ar))
            rat1 = r.div(ai, ar)
            d1 = r.add(ar, r.mul(ai, rat1))
            rat2 = r.div(ar, ai)
            d2 = r.add(r.mul(ar, rat2), ai)
            re = r.where(small_i, r.div(1.0, d1), r.div(rat2, d2))
            im = r.where(small_i, r.div(r.neg(rat1), d1), r.div(-1.0, d2))
            return make(g, re, im, out)
        if op is Op.SIGN:
            # NumPy 2: z / |z|; 0 for 0; NaN for NaN; the unit of an infinite part
            m = r.hypot(ar, ai)
            re, im = r.div(ar, m), r.div(ai, m)
            inf_r, inf_i = r.isinf(ar), r.isinf(ai)
            big = r.isinf(m)
            re = r.where(big, r.where(inf_r, r.where(inf_i, np.nan, r.copysign(1.0, ar)), 0.0), re)
            im = r.where(big, r.where(inf_r, r.where(inf_i, np.nan, 0.0), r.copysign(1.0, ai)), im)
            zero = r.eq(m, 0.0)
            re, im = r.where(zero, 0.0, re), r.where(zero, 0.0, im)
            nan = r.isnan(m)
            return make(g, r.where(nan, np.nan, re), r.where(nan, np.nan, im), out)
        if op in _UNARY_PARTS:
            return make(g, *_unary(r, op, ar, ai), out)
    elif len(parts) == 2:
        (ar, ai), (br, bi) = parts
        if op is Op.ADD:
            return make(g, r.add(ar, br), r.add(ai, bi), out)
        if op is Op.SUB:
            return make(g, r.sub(ar, br), r.sub(ai, bi), out)
        if op is Op.MUL:
            return make(g, *_mul(r, ar, ai, br, bi), out)
        if op is Op.DIV:
            return make(g, *_div(r, ar, ai, br, bi), out)
        if op is Op.POW:
            return make(g, *_power(r, operands[1], ar, ai, br, bi), out)
        if op is Op.EQ:
            return r.logical_and(r.eq(ar, br), r.eq(ai, bi))
        if op is Op.NE:
            return r.logical_or(r.ne(ar, br), r.ne(ai, bi))
        if op in (Op.LT, Op.LE, Op.GT, Op.GE):
            return _order(r, op, ar, ai, br, bi)
        if op in (Op.MAXIMUM, Op.MINIMUM, Op.FMAX, Op.FMIN):
            # lexicographic; maximum/minimum propagate a NaN (of either part), fmax/fmin
            # prefer the other operand
            pick_a = _order(r, Op.GE if op in (Op.MAXIMUM, Op.FMAX) else Op.LE, ar, ai, br, bi)
            a_nan = r.logical_or(r.isnan(ar), r.isnan(ai))
            b_nan = r.logical_or(r.isnan(br), r.isnan(bi))
            if op in (Op.MAXIMUM, Op.MINIMUM):
                pick_a = r.logical_or(pick_a, a_nan)
            else:
                pick_a = r.logical_or(r.logical_and(pick_a, r.logical_not(a_nan)), b_nan)
            return make(g, r.where(pick_a, ar, br), r.where(pick_a, ai, bi), out)
    raise TracingError(f"{_op_name(op)} of {cdt} values is not supported by fastlaunch")


def _unary(r: _R, op, ar, ai):
    if op is Op.EXP:
        return _exp(r, ar, ai)
    if op is Op.LOG:
        return _log(r, ar, ai)
    if op is Op.SQRT:
        return _sqrt(r, ar, ai)
    if op in (Op.LOG2, Op.LOG10):      # npy_math: clog(z) scaled by log2(e) or log10(e)
        k = np.log2(np.e) if op is Op.LOG2 else np.log10(np.e)
        lr, li = _log(r, ar, ai)
        return r.mul(lr, k), r.mul(li, k)
    if op is Op.EXP2:                  # cexp(z * ln 2)
        k = np.log(2.0)
        return _exp(r, r.mul(ar, k), r.mul(ai, k))
    if op is Op.EXPM1:                 # npy_math: expm1(x) cos(y) - 2 sin(y/2)^2, exp(x) sin(y)
        s = r.sin(r.mul(ai, 0.5))
        return (r.sub(r.mul(r.expm1(ar), r.cos(ai)), r.mul(r.mul(s, s), 2.0)),
                r.mul(r.exp(ar), r.sin(ai)))
    if op is Op.LOG1P:                 # npy_math: log(|z + 1|), atan2(y, x + 1)
        x1 = r.add(ar, 1.0)
        return r.log(r.hypot(x1, ai)), r.arctan2(ai, x1)
    if op is Op.SIN:
        return _sin(r, ar, ai)
    if op is Op.COS:                   # ccos(z) = ccosh(iz), as the C library computes it
        return _sinh_cosh(r, r.neg(ai), ar, cosh=True)
    if op is Op.SINH:
        return _sinh_cosh(r, ar, ai, cosh=False)
    assert op is Op.COSH
    return _sinh_cosh(r, ar, ai, cosh=True)


def reduce(g: Graph, op: Op, n: Node, axes: tuple, out_dtype) -> Node:
    """Sums of complex values are the sums of their parts (NumPy adds complex numbers part by
    part); other reductions of complex values are refused."""
    if op is not Op.SUM:
        name = {Op.PROD: "np.prod", Op.MAX: "np.max", Op.MIN: "np.min",
                Op.ARGMAX: "np.argmax", Op.ARGMIN: "np.argmin"}.get(op, op.value)
        raise TracingError(f"{name} of {n.dtype} values is not supported by fastlaunch")
    dt = np.dtype(out_dtype)
    return make(g, ops.reduce(g, Op.SUM, real(g, n), axes),
                ops.reduce(g, Op.SUM, imag(g, n), axes), dt)


def scan(g: Graph, op: Op, n: Node, axis: int) -> Node:
    if op is not Op.CUMSUM:
        raise TracingError(f"np.{op.value} of {n.dtype} values is not supported by fastlaunch")
    return make(g, ops.scan(g, op, real(g, n), axis), ops.scan(g, op, imag(g, n), axis), n.dtype)


def _is_zero(n: Node) -> bool:
    v = ops.literal_value(n)
    return v is not None and v == 0 and not np.signbit(v)


def contract(g: Graph, a: Node, a_labels: str, b: Node, b_labels: str, out_labels: str,
             dt) -> Node:
    """A complex contraction as real ones: (Ar Br - Ai Bi) + i (Ar Bi + Ai Br); terms of a
    part that is a literal zero (a real operand) are left out."""
    p = part_dtype(dt)
    a, b = ops.cast(g, a, dt), ops.cast(g, b, dt)

    def term(x, y):
        if _is_zero(x) or _is_zero(y):
            return None
        return ops.contract(g, x, a_labels, y, b_labels, out_labels, p)

    def combine(op, x, y):
        if y is None:
            return x
        if x is None:
            return y if op is Op.ADD else _e(g, Op.NEG, p, y)
        return _e(g, op, p, x, y)

    ar, ai, br, bi = real(g, a), imag(g, a), real(g, b), imag(g, b)
    re = combine(Op.SUB, term(ar, br), term(ai, bi))
    im = combine(Op.ADD, term(ar, bi), term(ai, br))
    if re is None or im is None:
        shape_src = re if re is not None else im
        if shape_src is None:
            shape_src = ops.contract(g, ar, a_labels, br, b_labels, out_labels, p)
        zero = ops.broadcast_to(g, ops.literal(g, 0.0, p), shape_src.shape)
        re = zero if re is None else re
        im = zero if im is None else im
    return make(g, re, im, dt)


def scatter(g: Graph, base: Node, values: Node, indices: list, axis: int, mode: str,
            strict: bool) -> Node:
    if mode != "add":
        raise TracingError(f"a scatter with mode {mode!r} (np.multiply.at, np.maximum.at, "
                           f"...) of {base.dtype} values is not supported by fastlaunch")
    parts = [ops.scatter(g, f(g, base), f(g, values), indices, axis, mode, strict)
             for f in (real, imag)]
    return make(g, parts[0], parts[1], base.dtype)


ops.COMPLEX.update(cast=cast, elementwise=elementwise, reduce=reduce, scan=scan,
                   contract=contract, scatter=scatter, conj=conj)
