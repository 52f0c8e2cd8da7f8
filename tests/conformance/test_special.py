"""Special functions reached through __array_ufunc__ (scipy.special's ufuncs) and NumPy's
np.sinc / np.i0: results, dtypes and special values against SciPy / NumPy, and accuracy in
ULP on dense samples (the full table: docs/special-functions.md, bench/special_ulp.py)."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import fastlaunch as fl

from .harness import ALL, Tol, check_many, cover, make, param, short, unary_inputs

sp = pytest.importorskip("scipy.special")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
from special_ulp import samples, ulp_distance  # noqa: E402

SPECIAL = "special functions"

UNARY = {
    "scipy.special.erf": sp.erf, "scipy.special.erfc": sp.erfc,
    "scipy.special.gammaln": sp.gammaln, "scipy.special.expit": sp.expit,
    "scipy.special.logit": sp.logit, "scipy.special.log_expit": sp.log_expit,
    "scipy.special.ndtr": sp.ndtr, "scipy.special.i0": sp.i0, "scipy.special.i0e": sp.i0e,
    "np.sinc": np.sinc, "np.i0": np.i0,
}
BINARY = {"scipy.special.xlogy": sp.xlogy, "scipy.special.xlog1py": sp.xlog1py}


def _params():
    out = []
    for name in list(UNARY) + list(BINARY):
        for dt in ALL:
            out.append(param(name, dt, name=name, dtype=dt, id=f"{name.rsplit('.', 1)[1]}-"
                                                               f"{short(dt)}"))
    return out


def _tiny_atol(name, expected):
    """Near zeros of the function the relative tolerance means nothing: allow a few ULP of
    the result's scale (gammaln at 1 and 2, sinc at the integers, logit at 1/2)."""
    e = np.asarray(expected)
    if e.dtype.kind != "f":
        return 0.0
    return 8 * float(np.finfo(e.dtype).eps)


@pytest.mark.parametrize(("name", "dtype"), _params())
def test_special_conformance(name, dtype):
    """Every dtype (ints and bool go to SciPy's float64 loop), 0-d, empty, strided and
    broadcast inputs with NaN, +-inf, +-0, tiny and huge values; NumPy scalars."""
    if name in UNARY:
        fn = UNARY[name]
        args = unary_inputs(dtype)
        if name == "scipy.special.gammaln" and np.dtype(dtype) == np.float64:
            args = tuple(_no_subnormals(a) for a in args)
        # np.i0's float16 series rounds to float16 at every step (a few float16 ULP off);
        # ours runs in float64 and rounds once
        tol = Tol(5e-3, 1e-5, 1e-12) if name == "np.i0" else "transc"
        check_many({f"arg {i}": (lambda i: lambda *xs: fn(xs[i]))(i) for i in range(len(args))},
                   *args, tol=tol, atol=_tiny_atol)
    else:
        fn = BINARY[name]
        x = make((5, 7), dtype, "T")
        y = make((5, 7), dtype, key=("y",))
        x[0] = 0
        check_many({
            "fn(x, y)": lambda x, y, c: fn(x, y),
            "fn(x, |y|)": lambda x, y, c: fn(x, np.abs(y)),
            "broadcast": lambda x, y, c: fn(x, c),
            "python scalar y": lambda x, y, c: fn(x, 2),
            "python scalar x": lambda x, y, c: fn(0.5, c),
        }, x, y, make((5, 1), dtype, key=("c",)), tol="transc", atol=_tiny_atol)


def _no_subnormals(a):
    """(a copy of) a with float64 subnormals replaced by the smallest normal."""
    if not isinstance(a, np.ndarray) or a.dtype != np.float64:
        return a
    a = a.copy()
    a[(a != 0) & (np.abs(a) < np.finfo(np.float64).tiny)] = np.finfo(np.float64).tiny
    return a


def test_gammaln_of_subnormals_is_finite():
    """SciPy's gammaln (Cephes) returns inf for float64 |x| < 1/DBL_MAX, where 1/x overflows;
    libm's lgamma returns the finite value -log|x| (a documented difference)."""
    x = np.array([5e-324, -1e-310, 1e-309])
    got = fl.compile(lambda x: sp.gammaln(x))(x)
    np.testing.assert_allclose(got, -np.log(np.abs(x)), rtol=1e-15)
    assert np.isinf(sp.gammaln(x)).all()


for _n in list(UNARY) + list(BINARY):
    cover(_n, SPECIAL, ALL, test="test_special.py::test_special_conformance",
          note={"scipy.special.erf": "libm erf (libmvec where glibc has it)",
                "scipy.special.erfc": "libm erfc; beyond x = 26.64 SciPy returns 0 where glibc "
                                      "returns the (more accurate) subnormal value",
                "scipy.special.gammaln": "libm lgamma (-inf at -inf, as SciPy); for float64 "
                                         "subnormal x SciPy returns inf, fastlaunch the finite "
                                         "value -log|x|",
                "np.i0": "our own Chebyshev series, computed in float64 (NumPy's float32 "
                         "series runs in float32, its float16 one in float16: a few float16 "
                         "ULP off); infinite where NumPy's exp overflows",
                }.get(_n, "composed of existing ops the way SciPy computes it"))
cover("np.sinc", SPECIAL, note="NumPy's formula: sin(pi x) / (pi x), x = 0 replaced by eps")

# max ULP against SciPy (NumPy for np.*) on dense samples, float32 and float64: measured
# bounds of docs/special-functions.md with a margin (SciPy is the less accurate one where the
# float64 bounds are large: erfc and ndtr tails, gammaln near its zeros)
ULP_BOUNDS = {
    "scipy.special.erf": ((-7, 7), 8, 8), "scipy.special.erfc": ((-7, 26.5), 4, 1024),
    "scipy.special.gammaln": ((-60, 1e4), 8, 200), "scipy.special.expit": ((-760, 760), 8, 8),
    "scipy.special.logit": ((0, 1), 8, 8), "scipy.special.log_expit": ((-760, 760), 8, 8),
    "scipy.special.ndtr": ((-37.5, 10), 2, 1024), "scipy.special.i0": ((-720, 720), 2, 16),
    "scipy.special.i0e": ((-1e4, 1e4), 2, 16), "np.i0": ((-720, 720), 16, 16),
    "np.sinc": ((-100, 100), 8, 8),
}


@pytest.mark.parametrize("name", list(ULP_BOUNDS))
def test_special_accuracy_ulp(name):
    (lo, hi), b32, b64 = ULP_BOUNDS[name]
    fn = UNARY[name]
    rng = np.random.default_rng(11)
    base = samples(lo, hi, 20000, rng, positive=lo >= 0)
    for dt, bound in ((np.float32, b32), (np.float64, b64)):
        x = base.astype(dt)
        got = fl.compile(lambda x: fn(x))(x)
        with np.errstate(all="ignore"):
            want = fn(x)
        d, bad = ulp_distance(got, want)
        assert bad == 0, f"{name} {np.dtype(dt)}: {bad} NaN/inf mismatches"
        assert d.max() <= bound, f"{name} {np.dtype(dt)}: {d.max():.0f} ULP > {bound}"


def test_special_functions_fuse_and_refuse():
    """One kernel for a chain of special functions; an unsupported scipy.special ufunc is a
    TracingError naming it."""
    f = fl.compile(lambda x: sp.expit(sp.erf(x) * 2) + sp.gammaln(np.abs(x) + 1))
    x = make((100,), np.float64, special=False)
    np.testing.assert_allclose(f(x), sp.expit(sp.erf(x) * 2) + sp.gammaln(np.abs(x) + 1),
                               rtol=1e-12)
    assert f.stats["history"][-1].kernels == 1
    with pytest.raises(fl.TracingError, match="jv"):
        fl.compile(lambda x: sp.jv(1, x))(x)


def test_special_functions_of_literals_fold():
    """erf, erfc and gammaln of traced constants are folded while tracing (Python's math
    module, lgamma's poles as +inf like C's): the same values as SciPy's."""
    from fastlaunch.ir import ops
    x = np.linspace(-3, 3, 7)
    folded = []
    original = ops._fold_elementwise
    ops._fold_elementwise = lambda op, *a: (folded.append(op), original(op, *a))[1]
    try:
        for v in (0.5, -2.0, 0.0, -3.0, 30.0, 1e-300, float("nan")):
            f = fl.compile(lambda x: (x + sp.erf(fl.asarray(v)), x + sp.erfc(fl.asarray(v)),
                                      x + sp.gammaln(fl.asarray(v))))
            got_all = f(x)
            with np.errstate(all="ignore"):
                want = (x + sp.erf(v), x + sp.erfc(v), x + sp.gammaln(v))
            for got, w in zip(got_all, want):
                np.testing.assert_allclose(got, w, rtol=1e-14, atol=1e-14)
    finally:
        ops._fold_elementwise = original
    assert {"ERF", "ERFC", "LGAMMA"} <= {op.name for op in folded}
