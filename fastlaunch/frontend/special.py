"""Special functions as graph expressions: scipy.special's ufuncs and the I0 series (np.i0).

scipy.special's functions are NumPy ufuncs, so a traced array reaches them through
`__array_ufunc__` like np.exp does; `ops.apply_ufunc` asks the finder registered here when it
meets a ufunc it does not know.  erf, erfc and gammaln are IR ops calling libm (and libmvec
where glibc has vector variants); the others are compositions of existing ops, written the way
SciPy computes them so that the results agree to a few ULP (docs/special-functions.md has the
measured table).  Nothing here imports SciPy: a scipy.special ufunc is recognised by identity
with the attribute of the already imported module.

I0 uses our own Chebyshev expansions of exp(-x) I0(x) on [0, 8] (in t = x/4 - 1) and of
sqrt(x) exp(-x) I0(x) on [8, inf) (in u = 16/x - 1), computed with mpmath (50 digits,
Chebyshev-Gauss quadrature on 90 nodes) and cut where the terms fall below 1e-19
(`bench/special_ulp.py --coefficients` prints them again).
"""
from __future__ import annotations

import sys

import numpy as np

from ..ir import ops
from ..ir.graph import Graph, Node, Op

# exp(-x) I0(x) = sum c_k T_k(x/4 - 1) for 0 <= x <= 8 (c_0 already halved)
I0_SMALL = (
    0.3383976372047380425, -0.30468267234319839868, 0.17162090152220877535,
    -0.094901097048047644421, 0.049305284239670708488, -0.023737414805899468816,
    0.010546460394594998318, -0.0043243099950505759443, 0.0016394756169413357984,
    -0.00057637557453858236588, 0.00018850288509584165573, -0.00005754195010082103704,
    0.000016448448070728897089, -4.4167383584587505636e-6, 1.1173875391201037182e-6,
    -2.6707938539406117339e-7, 6.0469950225419189493e-8, -1.3000250099862480421e-8,
    2.6598237246823866503e-9, -5.1897956016352629067e-10, 9.6758090353732369122e-11,
    -1.7268262914415557072e-11, 2.9550526631296398346e-12, -4.8564467831119294609e-13,
    7.6761854986049356169e-14, -1.1685332877993451681e-14, 1.7153912855551330306e-15,
    -2.4312798465479546936e-16, 3.3307945188222380978e-17, -4.4153416464793393795e-18,
    5.6691780069214961571e-19,
)
# sqrt(x) exp(-x) I0(x) = sum c_k T_k(16/x - 1) for x >= 8
I0_LARGE = (
    0.4022452055070544158, 0.0033691164782556940899, 0.000068897583469168239843,
    2.891370520834756483e-6, 2.0489185894690637418e-7, 2.2666689904981780646e-8,
    3.3962320257083863452e-9, 4.9406023882249695891e-10, 1.1889147107846438342e-11,
    -3.1499165279632413645e-11, -1.3215811840447713119e-11, -1.7941785315068061178e-12,
    7.1801244513836662337e-13, 3.8527783827421427011e-13, 1.5400862175214098269e-14,
    -4.1505693472872220866e-14, -9.5548466988283076487e-15, 3.8116806693526224207e-15,
    1.7725601330565263836e-15, -3.4254856196772191346e-16, -2.8276239805165834849e-16,
    3.4612228676974610931e-17, 4.465621420296759999e-17, -4.8305044859441820713e-18,
    -7.2331804878747539546e-18, 9.9214754121736985989e-19, 1.1936508908459820855e-18,
    -2.4887098371508072357e-19, -1.938426454160905929e-19,
)

_F64 = np.dtype(np.float64)


# ---- small graph helpers (operands already of dtype dt) ---------------------------------------
def _c(g: Graph, value, dt) -> Node:
    return ops.literal(g, value, dt)


def _op(g: Graph, op: Op, dt, *xs) -> Node:
    return ops.elementwise(g, op, dt, list(xs))


def _bool(g: Graph, op: Op, *xs) -> Node:
    return ops.elementwise(g, op, np.bool_, list(xs))


def _where(g: Graph, cond: Node, a: Node, b: Node) -> Node:
    return ops.elementwise(g, Op.WHERE, a.dtype, [cond, a, b])


def chebyshev(g: Graph, t: Node, coefs) -> Node:
    """sum coefs[k] T_k(t) by Clenshaw's recurrence, in t's dtype."""
    dt = t.dtype
    two_t = _op(g, Op.ADD, dt, t, t)
    b1 = b2 = _c(g, 0.0, dt)
    for c in reversed(coefs[1:]):
        b1, b2 = _op(g, Op.ADD, dt, _op(g, Op.SUB, dt, _op(g, Op.MUL, dt, two_t, b1), b2),
                     _c(g, c, dt)), b1
    return _op(g, Op.ADD, dt, _op(g, Op.SUB, dt, _op(g, Op.MUL, dt, t, b1), b2),
               _c(g, coefs[0], dt))


def i0e(g: Graph, x: Node) -> Node:
    """exp(-|x|) I0(x) for a float64 node."""
    dt = _F64
    ax = _op(g, Op.ABS, dt, x)
    small = chebyshev(g, _op(g, Op.SUB, dt, _op(g, Op.MUL, dt, ax, _c(g, 0.25, dt)),
                             _c(g, 1.0, dt)), I0_SMALL)
    # 16/|x| - 1 of the small |x| branch lies outside [-1, 1]: clamp it (the value is not used)
    big = _op(g, Op.MAXIMUM, dt, ax, _c(g, 8.0, dt))
    large = chebyshev(g, _op(g, Op.SUB, dt, _op(g, Op.DIV, dt, _c(g, 16.0, dt), big),
                             _c(g, 1.0, dt)), I0_LARGE)
    large = _op(g, Op.DIV, dt, large, _op(g, Op.SQRT, dt, big))
    return _where(g, _bool(g, Op.LE, ax, _c(g, 8.0, dt)), small, large)


def i0(g: Graph, x: Node, out_dtype) -> Node:
    """I0(x), the modified Bessel function of order 0, computed in float64, as out_dtype."""
    x64 = ops.cast(g, x, _F64)
    ax = _op(g, Op.ABS, _F64, x64)
    r = _op(g, Op.MUL, _F64, _op(g, Op.EXP, _F64, ax), i0e(g, x64))
    return ops.cast(g, r, out_dtype)


# ---- scipy.special's ufuncs --------------------------------------------------------------------
def _expit(g, dt, x):
    # SciPy: 1 / (1 + exp(-x)) in the loop's type
    one = _c(g, 1.0, dt)
    return _op(g, Op.DIV, dt, one, _op(g, Op.ADD, dt, one, _op(g, Op.EXP, dt,
                                                                  _op(g, Op.NEG, dt, x))))


def _logit(g, dt, x):
    # SciPy: log(x / (1 - x)) away from 1/2; log1p(2(x-1/2)) - log1p(-2(x-1/2)) on [0.3, 0.65]
    one = _c(g, 1.0, dt)
    plain = _op(g, Op.LOG, dt, _op(g, Op.DIV, dt, x, _op(g, Op.SUB, dt, one, x)))
    s = _op(g, Op.MUL, dt, _c(g, 2.0, dt), _op(g, Op.SUB, dt, x, _c(g, 0.5, dt)))
    near = _op(g, Op.SUB, dt, _op(g, Op.LOG1P, dt, s), _op(g, Op.LOG1P, dt, _op(g, Op.NEG, dt, s)))
    away = _bool(g, Op.LOGICAL_OR, _bool(g, Op.LT, x, _c(g, 0.3, dt)),
                 _bool(g, Op.GT, x, _c(g, 0.65, dt)))
    return _where(g, away, plain, near)


def _log_expit(g, dt, x):
    # SciPy: -log1p(exp(-x)) for x >= 0, x - log1p(exp(x)) below
    pos = _op(g, Op.NEG, dt, _op(g, Op.LOG1P, dt, _op(g, Op.EXP, dt, _op(g, Op.NEG, dt, x))))
    neg = _op(g, Op.SUB, dt, x, _op(g, Op.LOG1P, dt, _op(g, Op.EXP, dt, x)))
    return _where(g, _bool(g, Op.LT, x, _c(g, 0.0, dt)), neg, pos)


def _xlog(op):
    def rewrite(g, dt, x, y):
        # SciPy: 0 where x == 0 and y is not NaN, else x * log(y) (log1p for xlog1py)
        prod = _op(g, Op.MUL, dt, x, _op(g, op, dt, y))
        zero = _bool(g, Op.LOGICAL_AND, _bool(g, Op.EQ, x, _c(g, 0, dt)),
                     _bool(g, Op.LOGICAL_NOT, _bool(g, Op.ISNAN, y)))
        return _where(g, zero, _c(g, 0.0, dt), prod)
    return rewrite


def _ndtr(g, dt, x):
    # the standard normal CDF: erfc(-x / sqrt(2)) / 2 (exact in the tails, where erf is not),
    # in float64 (as SciPy): in float32 the rounding of -x/sqrt(2) costs ~2 x^2 ULP in the tail
    x64 = ops.cast(g, x, _F64)
    z = _op(g, Op.MUL, _F64, x64, _c(g, -np.sqrt(0.5), _F64))
    return ops.cast(g, _op(g, Op.MUL, _F64, _op(g, Op.ERFC, _F64, z), _c(g, 0.5, _F64)), dt)


def _gammaln(g, dt, x):
    # libm's lgamma, except at -inf: SciPy (Cephes) gives -inf where libm gives +inf
    r = _op(g, Op.LGAMMA, dt, x)
    return _where(g, _bool(g, Op.EQ, x, _c(g, -np.inf, dt)), _c(g, -np.inf, dt), r)


def _entr(g, dt, x):
    # SciPy: -x log(x) for x > 0, 0 at 0, -inf below; NaN stays NaN
    r = _op(g, Op.NEG, dt, _op(g, Op.MUL, dt, x, _op(g, Op.LOG, dt, x)))
    r = _where(g, _bool(g, Op.EQ, x, _c(g, 0.0, dt)), _c(g, 0.0, dt), r)
    return _where(g, _bool(g, Op.LT, x, _c(g, 0.0, dt)), _c(g, -np.inf, dt), r)


def _scipy_i0(g, dt, x):
    return i0(g, x, dt)


def _scipy_i0e(g, dt, x):
    return ops.cast(g, i0e(g, ops.cast(g, x, _F64)), dt)


# name -> ("op", Op) or ("rewrite", function(g, loop dtype, *operands))
SCIPY_UFUNCS = {
    "erf": ("op", Op.ERF), "erfc": ("op", Op.ERFC), "gammaln": ("rewrite", _gammaln),
    "expit": ("rewrite", _expit), "logit": ("rewrite", _logit),
    "log_expit": ("rewrite", _log_expit),
    "xlogy": ("rewrite", _xlog(Op.LOG)), "xlog1py": ("rewrite", _xlog(Op.LOG1P)),
    "ndtr": ("rewrite", _ndtr), "entr": ("rewrite", _entr), "i0": ("rewrite", _scipy_i0),
    "i0e": ("rewrite", _scipy_i0e),
}


def scipy_ufunc(ufunc):
    """(op, None) or (None, rewrite) for a supported scipy.special ufunc, else None."""
    module = sys.modules.get("scipy.special")
    name = getattr(ufunc, "__name__", None)
    if module is None or name not in SCIPY_UFUNCS or getattr(module, name, None) is not ufunc:
        return None
    kind, what = SCIPY_UFUNCS[name]
    return (what, None) if kind == "op" else (None, what)


ops.UFUNC_FINDERS.append(scipy_ufunc)
