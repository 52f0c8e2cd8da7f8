"""Reductions over axis None / int / negative int / tuple, with keepdims, across dtypes; nan-
reductions; np.linalg.norm; cumsum / cumprod.

Float sums are compared with a tolerance scaled by the data (NumPy sums pairwise, fastlaunch
in vectorised partial sums: both are right, they round differently): |got - expected| <=
8 * n * eps * max|x| for sum-like results, the square of that scale for var.  Reductions of at
most ops.SMALL_REDUCE (8) elements per result that the fuser unrolls into elementwise
operations follow NumPy's order and are compared bit for bit, signed zeros included
(test_small_reduction*).
"""
from __future__ import annotations

import numpy as np
import pytest

import fastlaunch as fl

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .harness import (ALL, FLOATS, SOME, assert_same, check, check_many, cover, make, param,
                      run_numpy, short)

RED, NANRED, CUM = "reductions", "nan-reductions", "cumulative"


def _inputs(dtype, domain=None, special=False):
    dt = np.dtype(dtype)
    return (make((4, 5, 6), dt, "negstep", domain=domain, special=special),
            make((1000,), dt, domain=domain, special=special),
            make((), dt, domain=domain, special=special),
            make((0,), dt), make((3, 0), dt),
            make((7, 5), dt, "T", domain=domain, special=special))


def _variants(f, extra=None, empty=True, zero_d=True):
    """label -> body(x3, x1, x0, e0, e2, xt) for the reduction f(x, axis=..., keepdims=...)."""
    v = {
        "3d": lambda x3, x1, x0, e0, e2, xt: f(x3),
        "3d ax0": lambda x3, x1, x0, e0, e2, xt: f(x3, axis=0),
        "3d ax-1": lambda x3, x1, x0, e0, e2, xt: f(x3, axis=-1),
        "3d ax1 keep": lambda x3, x1, x0, e0, e2, xt: f(x3, axis=1, keepdims=True),
        "3d ax(0,2)": lambda x3, x1, x0, e0, e2, xt: f(x3, axis=(0, 2)),
        "3d ax(-1,-3) keep": lambda x3, x1, x0, e0, e2, xt: f(x3, axis=(-1, -3), keepdims=True),
        "3d None keep": lambda x3, x1, x0, e0, e2, xt: f(x3, axis=None, keepdims=True),
        "1d": lambda x3, x1, x0, e0, e2, xt: f(x1),
        "1d ax0": lambda x3, x1, x0, e0, e2, xt: f(x1, axis=0),
        "T ax0": lambda x3, x1, x0, e0, e2, xt: f(xt, axis=0),
        "T ax1": lambda x3, x1, x0, e0, e2, xt: f(xt, axis=1),
        "slice": lambda x3, x1, x0, e0, e2, xt: f(x1[::-3], axis=0),
    }
    if zero_d:
        v["0d"] = lambda x3, x1, x0, e0, e2, xt: f(x0)
    if empty:
        v["empty"] = lambda x3, x1, x0, e0, e2, xt: f(e0)
        v["(3,0) ax1"] = lambda x3, x1, x0, e0, e2, xt: f(e2, axis=1)
        v["(3,0) ax0"] = lambda x3, x1, x0, e0, e2, xt: f(e2, axis=0)
    v.update(extra or {})
    return v


def _summation_bound(variants, kind="sum", skip_nan=False):
    """atol callable(label, expected) for float sums, means, running sums, variances and
    standard deviations, from their error analysis: NumPy's own error, measured against the
    result in extended precision (np.longdouble: exact enough to see float64's last bits),
    plus the bound the compiled method guarantees.  That method sums n terms, in any order,
    in its accumulator (float16 in float32, float32 in float64, float64 in float64: unit
    roundoff u_acc), then rounds to the result (u): within n u_acc sum|x_i| + u |s|.  A
    mean is that divided by n, rounded again (the same formula with mean|x_i|, 2 u |mean|);
    a variance (two passes, ddof: the mean, then the squared deviations, each rounded to the
    result type u, summed) within (4 n u_acc + 6 u) sum x_i^2 / (n - ddof) + 2 u |var| (the
    mean's error e enters as 2 e mean|d_i| <= 2 e sqrt(mean x_i^2) by Cauchy-Schwarz), its
    square root within min(B / std, sqrt(B)) + 2 u std (|sqrt(a) - sqrt(b)| =
    |a - b| / (sqrt(a) + sqrt(b))).

    `variants`: label -> (count, size, exact): `count` the label's np.sum (np.cumsum) over
    the same axes, applied to ones (n per output); `size` applied to |x| (x^2 for var and
    std: np.mean's, times n / (n - ddof)) in float64; `exact` the label's own body, applied to
    the arguments as np.longdouble.  skip_nan: NaN terms count nowhere (np.nansum, np.nanmean).
    The bound is computed from each call's own arguments (the new-values call's too)."""
    def atol(label, expected, args):
        e = np.asarray(expected)
        if e.dtype.kind not in "fc":
            return 0.0
        wide = [np.asarray(a, np.float64) for a in args]
        longs = [np.asarray(a).astype(np.longdouble) for a in args]
        if skip_nan:
            ones = [np.where(np.isnan(a), 0.0, 1.0) for a in wide]
            mags = [np.nan_to_num(np.abs(a), nan=0.0, posinf=np.inf) for a in wide]
        else:
            ones = [np.ones_like(a) for a in wide]
            mags = [np.abs(a) for a in wide]
        if kind != "sum":
            mags = [m * m for m in mags]
        u = float(np.finfo(e.dtype).eps) / 2
        u_acc = float(np.finfo(np.float32).eps) / 2 if e.dtype == np.float16 else \
            float(np.finfo(np.float64).eps) / 2
        count, size, exact = variants[label]
        with np.errstate(all="ignore"):
            n = np.asarray(count(*ones), np.float64)
            true = np.asarray(exact(*longs), np.longdouble)
            numpy_error = np.abs(e.astype(np.longdouble) - true).astype(np.float64)
            true = np.abs(true.astype(np.float64))
            spread = np.asarray(size(*mags), np.float64)
            if kind == "sum":
                bound = n * u_acc * spread
            else:     # the deviations and squares round in the result type, term by term
                bound = 4 * n * u_acc * spread + 6 * u * spread
            if kind == "std":
                bound = np.minimum(bound / true, np.sqrt(bound))
            bound = numpy_error + bound + 2 * u * true
        return np.nan_to_num(bound, nan=0.0, posinf=0.0)
    return atol


METHODS = ["sum", "prod", "mean", "max", "min", "argmax", "argmin", "any", "all", "std", "var"]


def _reduction_params():
    out = []
    for name in METHODS:
        cover(f"np.{name}", RED, ALL, test="test_reductions.py::test_reduction")
        for dt in ALL:
            out.append(param(name, dt, name=f"np.{name}", dtype=dt, id=f"{name}-{short(dt)}"))
    return out


@pytest.mark.parametrize(("name", "dtype"), _reduction_params())
def test_reduction(name, dtype):
    """np.<name>(x, axis=..., keepdims=...) over 3-D, 1-D, 0-d, empty and transposed inputs."""
    dt = np.dtype(dtype)
    f = getattr(np, name)
    domain = (0.5, 1.5) if name == "prod" and dt.kind == "f" else None
    args = _inputs(dt, domain)
    extra = {}
    if name in ("argmax", "argmin"):
        # no tuple axes for arg-reductions
        variants = {k: v for k, v in _variants(f).items() if "(" not in k or "(3,0)" in k}
    else:
        variants = _variants(f)
    if name in ("std", "var"):
        for ddof in (1, 2, 1000):
            extra[f"ddof={ddof}"] = lambda x3, x1, x0, e0, e2, xt, d=ddof: f(x1, ddof=d)
            extra[f"ax0 ddof={ddof}"] = lambda x3, x1, x0, e0, e2, xt, d=ddof: f(x3, axis=0, ddof=d)
        variants.update(extra)
    if name in ("max", "min", "argmax", "argmin", "any", "all") or dt.kind in "iub" and \
            name in ("sum", "prod"):
        tol, atol = "exact", None
    elif name == "prod":
        tol, atol = "reduce", None
    else:           # the bound carries everything: no relative tolerance on top
        tol, atol = "exact", _summation_bound(_bound_variants(name, variants),
                                              "sum" if name in ("sum", "mean") else name)
    check_many(variants, *args, tol=tol, atol=atol)
    # the method form
    method_bound = 0.0
    if atol is not None:
        size = getattr(np, name) if name in ("sum", "mean") else np.mean
        f = getattr(np, name)
        bound = _summation_bound({
            0: (lambda x3, x1: np.sum(x3, axis=1), lambda x3, x1: size(x3, axis=1),
                lambda x3, x1: f(x3, axis=1)),
            1: (lambda x3, x1: np.sum(x1), lambda x3, x1: size(x1), lambda x3, x1: f(x1))},
            "sum" if name in ("sum", "mean") else name)
        method_bound = lambda e, xs: (bound(0, e[0], xs), bound(1, e[1], xs))  # noqa: E731
    check(lambda x3, x1: (getattr(x3, name)(axis=1), getattr(x1, name)()), args[0], args[1],
          tol=tol, atol=method_bound)


def _bound_variants(name, variants):
    """label -> (count, size, exact) for _summation_bound: the counts np.sum's over the
    label's axes, the magnitudes the reduction's own (np.mean's for var and std, times
    n / (n - ddof)), the exact values the label's body."""
    count = _variants(np.sum)
    size = _variants(getattr(np, name) if name in ("sum", "mean") else np.mean)
    out = {k: (count[k], size[k], variants[k]) for k in count}
    for ddof in (1, 2, 1000):
        for label, pick, ax in ((f"ddof={ddof}", 1, None), (f"ax0 ddof={ddof}", 0, 0)):
            if label not in variants:
                continue

            def total(*xs, pick=pick, ax=ax):
                return np.sum(xs[pick], axis=ax)

            def mean(*xs, pick=pick, ax=ax, d=ddof):
                return np.sum(xs[pick], axis=ax) / max(xs[pick].shape[0] - d, 1)
            out[label] = (total, mean, variants[label])
    return out


@pytest.mark.parametrize(("name", "dtype"), [param(n, d, name=f"np.{n}",
                                                   dtype=f"{short(d)} (special values)",
                                                   id=f"{n}-{short(d)}")
                                             for n in METHODS for d in FLOATS])
def test_reduction_special_values(name, dtype):
    """NaN propagates (max/min/argmax: the first NaN wins), inf - inf, -0.0, in every variant."""
    dt = np.dtype(dtype)
    f = getattr(np, name)
    rows = np.array([[1.0, np.nan, 3.0, -1.0], [np.inf, -np.inf, 0.0, 1.0], [-0.0, 0.0, -0.0, 2.0],
                     [np.nan, np.nan, 1.0, 2.0], [5.0, 5.0, -7.0, -7.0], [np.inf, 1.0, np.inf, 2.0],
                     [-np.inf, -np.inf, 0.5, 0.5], [1e30, -1e30, 3.0, 0.0]], dt)
    check(lambda r: (f(r, axis=1), f(r, axis=0), f(r[2:3]), f(r[4]), f(r[5]), f(r[6])), rows,
          tol="reduce")


@pytest.mark.parametrize("dtype", [param(d, name="np.prod", dtype=d, id=short(d)) for d in FLOATS])
def test_prod_in_numpys_order(dtype):
    """NumPy multiplies a float product's elements one at a time, in C order (float16: a
    run over trailing reduced axes in float32, rounded once).  Where a partial product
    overflows or underflows, the order decides between inf, 0 and NaN (inf * 0), so the
    compiled product must take the same order: bit for bit, NaN and signed zeros included,
    for short and long products (long ones were split over threads), rows and columns."""
    dt = np.dtype(dtype)
    rng = np.random.default_rng(25)
    big, small = (1e200, 1e-200) if dt == np.float64 else \
        ((1e30, 1e-30) if dt == np.float32 else (300.0, 0.002))
    choices = np.array([big, small, 0.0, 1.5, -2.0, np.inf, big * 10], dt)
    cf = fl.compile(lambda x, y: (np.prod(x), np.prod(y, axis=0), np.prod(y, axis=1),
                                  np.prod(y), y.prod(axis=1, keepdims=True)))
    for n in (9, 17, 1000, 300_000):
        for _ in range(3):                               # the trace, then replays
            x = rng.choice(choices, n)
            _prod_both(cf, x, rng.choice(choices, (n // 8 + 1, 8 if n < 1000 else 300)))
    # finite values: the same bits as NumPy, not only the same class
    _prod_both(cf, rng.uniform(0.5, 1.5, 100_000).astype(dt),
               rng.uniform(0.5, 1.5, (301, 257)).astype(dt))


def _prod_both(cf, x, y):
    with np.errstate(all="ignore"):
        want = (np.prod(x), np.prod(y, axis=0), np.prod(y, axis=1), np.prod(y),
                y.prod(axis=1, keepdims=True))
        for got, w in zip(cf(x, y), want):
            np.testing.assert_array_equal(got, w)
            np.testing.assert_array_equal(np.signbit(got), np.signbit(w))


cover("np.prod", RED, FLOATS, test="test_reductions.py::test_prod_in_numpys_order",
      note="float products in NumPy's order (one element at a time, in C order of the reduced "
           "axes; float16 runs over trailing reduced axes in float32): NumPy's bits, inf/0/NaN "
           "included, for C-ordered operands; a float product is not split over threads, so "
           "it runs at NumPy's speed (about 1 ns an element). float16 products of other "
           "layouts (NumPy's run follows memory: a transposed operand) or over axes mixing "
           "the last with outer ones round where NumPy's do not")


def test_reduction_empty_errors():
    """max/min/argmax/argmin of an empty axis raise ValueError, as NumPy."""
    e = np.zeros((3, 0), np.float32)
    for f in (np.max, np.min, np.argmax, np.argmin):
        check(lambda e: f(e, axis=1), e)
        check(lambda e: f(e), e)


def test_reduction_bad_axis():
    x = make((3, 4), np.float64)
    check(lambda x: x.sum(axis=2), x)             # AxisError, both
    check(lambda x: x.sum(axis=(0, 0)), x)        # ValueError, both
    check(lambda x: np.argmax(x, axis=-3), x)


cover("np.max", RED, note="empty axis raises ValueError as in NumPy")


@pytest.mark.parametrize("dtype", [param(d, name="np.sum(dtype=...)", dtype=d, id=short(d))
                                   for d in (np.int8, np.uint8, np.bool_, np.float32, np.int32)])
def test_reduction_dtype_argument(dtype):
    x = make((4, 33), dtype, domain=(0, 50), special=False)   # float -> int casts defined
    check(lambda x: (x.sum(dtype=np.int8), x.sum(axis=0, dtype=np.float64), np.prod(x, dtype=np.int16),
                     x.mean(dtype=np.float32), np.sum(x, axis=1, dtype=np.uint64),
                     np.add.reduce(x, axis=0), np.maximum.reduce(x, axis=1),
                     np.logical_or.reduce(x, axis=1)),
          x, tol="reduce", atol=1e-3 * float(np.abs(x.astype(np.float64)).max()))


cover("np.sum(dtype=...)", RED, [np.int8, np.uint8, np.bool_, np.float32, np.int32],
      test="test_reductions.py::test_reduction_dtype_argument",
      note="also np.add.reduce / np.maximum.reduce / np.logical_or.reduce")


# ---- small reductions: unrolled, NumPy's bits ----------------------------------------------------
# At most ops.SMALL_REDUCE elements per result: the fuser builds np.sum and friends from
# elementwise operations in the order NumPy's iterator adds them for a C-ordered operand
# (fewer than 8 elements of a last-axis run one by one, exactly 8 pairwise, float16 runs in
# float32; rows of an outer axis added in turn; runs split by a kept axis added run by run),
# so the results are NumPy's bit for bit.  Strided and negative-stride views are walked in
# index order by NumPy too; a transposed (Fortran-ordered) operand only where the order
# cannot matter (one reduced axis of fewer than 8 elements, not float16): elsewhere NumPy's
# own result depends on the memory layout.
SMALL = "small reductions (<= 8 elements per result): NumPy's bits"
SMALL_OPS = ["sum", "prod", "max", "min", "any", "all", "mean"]
_SMALL_LAYOUTS = ["C", "neg", "step", "negstep"]

# (shape, axis) of reductions of 1..8 elements whose order NumPy walks differently
_SMALL_CASES = (
    [((5, m), -1) for m in range(1, 9)]                # the inner, pairwise loop
    + [((m, 5), 0) for m in range(1, 9)]               # whole rows in turn
    + [((3, m, 2), 1) for m in (2, 3, 8)]              # a middle axis
    + [((4, 2, 3), (1, 2)), ((4, 2, 4), (1, 2)),       # adjacent trailing axes: one run
       ((2, 3, 4), (0, 1)),                            # adjacent leading axes: rows in turn
       ((2, 5, 3), (0, 2)), ((2, 3, 2, 2), (0, 2, 3)),  # runs split by a kept axis
       ((6, 2, 1, 2), (1, 3)), ((4, 1, 3), (1, 2)), ((4, 3, 1), 1),   # size-1 axes
       ((2, 2, 2), None), ((2, 3), None), ((1, 7), None), ((8,), None), ((3,), 0)])


def _small_args(dt):
    """One C-family layout per case, and Fortran-ordered operands for the layout-proof cases."""
    arrays = [make(shape, dt, _SMALL_LAYOUTS[i % len(_SMALL_LAYOUTS)], key=(i,))
              for i, (shape, _) in enumerate(_SMALL_CASES)]
    transposed = [make(shape, dt, "T", key=("T", shape)) for shape in ((6, 3), (4, 7), (5, 2))]
    return tuple(arrays), tuple(transposed)


def _last_axis_run(shape, axis) -> bool:
    """Whether the reduced axes of size > 1 all come after the kept ones of size > 1."""
    axes = range(len(shape)) if axis is None else np.atleast_1d(axis) % len(shape)
    kept = [d for d in range(len(shape)) if d not in axes and shape[d] > 1]
    return all(d > max(kept, default=-1) for d in axes if shape[d] > 1)


def _small_variants(f, dt):
    # float16 sums and products over an outer axis stay reductions accumulating in float32
    # (NumPy's result depends on the layout there: ops._unrollable): test_reduction's
    # tolerance covers them
    half = dt == np.float16 and f in (np.sum, np.prod)
    cases = [(i, shape, axis) for i, (shape, axis) in enumerate(_SMALL_CASES)
             if not half or _last_axis_run(shape, axis)]
    v = {f"{shape} ax={axis}": (lambda xs, ts, i=i, axis=axis: f(xs[i], axis=axis))
         for i, shape, axis in cases}
    for i, shape, axis in cases[2::8]:
        v[f"keep {shape} ax={axis}"] = lambda xs, ts, i=i, axis=axis: f(xs[i], axis=axis,
                                                                         keepdims=True)
    if dt != np.float16:
        for j, (shape, axis) in enumerate([((6, 3), 1), ((4, 7), 1), ((5, 2), 0)]):
            v[f"T{shape} ax={axis}"] = lambda xs, ts, j=j, axis=axis: f(ts[j], axis=axis)
    return v


# order- and dtype-sensitive sums, products and means over every dtype; max/min/any/all
# (the same unrolling, order-free but for NaN and signed zeros) over a spread of dtypes
_SMALL_DTYPES = {"sum": ALL, "prod": ALL, "mean": ALL, "max": FLOATS + SOME[3:],
                 "min": FLOATS + SOME[3:], "any": SOME, "all": SOME}


# max/min over 8-bit integers (2.6-3.5 s each; bool and int16/32/64 keep them covered): slow
_SLOW_SMALL = {(op, np.dtype(dt)) for op in ("max", "min") for dt in (np.int8, np.uint8)}


def _small_params():
    out = []
    for name in SMALL_OPS:
        for dt in _SMALL_DTYPES[name]:
            p = param(name, dt, name=SMALL, dtype=dt, id=f"{name}-{short(dt)}")
            if (name, np.dtype(dt)) in _SLOW_SMALL:
                p = pytest.param(*p.values, marks=[*p.marks, pytest.mark.slow], id=p.id)
            out.append(p)
    return out


cover(SMALL, RED, ALL, test="test_reductions.py::test_small_reduction",
      note="np.sum/prod/max/min/any/all/mean (functions, methods, ufunc.reduce, nan-variants) "
           "of at most 8 elements per result, unrolled by the fuser where no row or sibling "
           "fusion takes them: NumPy's order for C-ordered operands, bit for bit (float16 "
           "sums and products only over trailing axes, in float32 as NumPy's inner loop: "
           "over an outer axis NumPy's float16 result depends on the memory layout and the "
           "float32 reduction stays); for a Fortran-ordered operand NumPy's own result "
           "differs for float16 and for exactly 8 elements, and fastlaunch's is that of the "
           "C-ordered copy")


@pytest.mark.parametrize(("name", "dtype"), _small_params())
def test_small_reduction(name, dtype):
    """np.<name> over 1..8 elements per result, every kind of axis set, with keepdims and as
    a method: NumPy's bits (NaN, inf, signed zeros, integer wrap-around included)."""
    dt = np.dtype(dtype)
    f = getattr(np, name)
    xs, ts = _small_args(dt)
    variants = _small_variants(f, dt)
    variants["method"] = lambda xs, ts: getattr(xs[2], name)(axis=-1)
    with np.errstate(all="ignore"):
        check_many(variants, xs, ts, tol="exact", signed_zero=True)


@pytest.mark.parametrize("dtype", [param(d, name=SMALL, dtype=d, id=short(d)) for d in FLOATS])
def test_small_reduction_special_values(dtype):
    """Rows of signed zeros, NaN and inf in every position: a sum of -0.0s is +0.0 (NumPy's
    sum starts from +0.0), max/min ties between signed zeros and the first NaN as NumPy's."""
    rows = np.array([[-0.0, -0.0, -0.0], [0.0, -0.0, 0.0], [-0.0, 0.0, -0.0], [np.nan, 1.0, 2.0],
                     [1.0, np.nan, np.inf], [np.inf, -np.inf, 1.0], [-0.0, np.nan, -0.0],
                     [1e30, 1e30, -1e30]], dtype)
    ops_ = (np.sum, np.prod, np.max, np.min, np.mean, np.nansum)
    # (float16 sums and products over an outer axis: see _small_variants)
    outer = [f for f in ops_ if np.dtype(dtype) != np.float16 or f in (np.max, np.min, np.mean)]
    with np.errstate(all="ignore"):
        check(lambda r: ([(f(r, axis=1), f(r[:, :1], axis=1)) for f in ops_],
                         [(f(r, axis=0), f(r[:2], axis=0)) for f in outer]),
              rows, tol="exact", signed_zero=True)


cover(SMALL, RED, FLOATS, test="test_reductions.py::test_small_reduction_special_values")

NANTIES = "signed-zero ties"


@pytest.mark.parametrize("name", [param(n, name=f"np.{n}", dtype=NANTIES, id=n)
                                  for n in ("nanmax", "nanmin")])
def test_nan_extreme_signed_zero_ties(name):
    """NumPy's nanmax/nanmin are fmax/fmin reductions: of tied signed zeros the first wins."""
    rows = np.array([[-0.0, 0.0, -0.0], [0.0, -0.0, 0.0], [0.0, 0.0, -0.0]])
    f = getattr(np, name)
    check(lambda r: (f(r, axis=0), f(r, axis=1), f(r)), rows, tol="exact", signed_zero=True)


@pytest.mark.parametrize("dtype", [param(d, name=SMALL, dtype=d, id=short(d))
                                   for d in (np.int8, np.uint8, np.bool_, np.float16,
                                             np.float32, np.int64)])
def test_small_reduction_dtypes(dtype):
    """Result dtypes and the dtype= argument: small ints sum to int64 (wrapping), dtype=int8
    wraps in int8, bool sums count, float16 sums to float16, dtype=float64 adds in float64;
    ufunc.reduce and the nan-reductions take the same path."""
    dt = np.dtype(dtype)
    # values a float -> int cast defines (specials: the other tests); int8 sums still wrap
    x = make((6, 3), dt, domain=(0, 100), special=False, key=("x",))
    y = make((3, 5), dt, "neg", domain=(0, 100), special=False, key=("y",))
    # float16 sums and products over an outer axis: see _small_variants
    ax, y = (0, y) if dt != np.float16 else (-1, np.ascontiguousarray(y.T))
    with np.errstate(all="ignore"):
        check(lambda x, y: (x.sum(-1), y.sum(ax), x.prod(-1), y.prod(ax),
                            x.sum(-1, dtype=np.int8), x.sum(-1, dtype=np.float64),
                            y.prod(ax, dtype=np.int16), x.sum(-1, dtype=dt), x.mean(-1),
                            y.mean(ax, dtype=np.float32), np.add.reduce(x, axis=1),
                            np.multiply.reduce(y, axis=ax), np.maximum.reduce(x, axis=1),
                            np.minimum.reduce(y, axis=ax), np.logical_or.reduce(x, axis=1),
                            np.logical_and.reduce(y, axis=ax), np.nansum(x, axis=1),
                            np.nanmax(y, axis=ax), np.nanmean(x, axis=1),
                            np.count_nonzero(x, axis=1),
                            np.linalg.norm(y, axis=ax) if dt.kind == "f" else y.sum(ax)),
              x, y, tol="exact", signed_zero=True)


cover(SMALL, RED, [np.int8, np.uint8, np.bool_, np.float16, np.float32, np.int64],
      test="test_reductions.py::test_small_reduction_dtypes")


@st.composite
def _small_reduction_programs(draw):
    """A random small reduction: shape, axes with 1..8 elements per result, op, dtype, layout
    (Fortran order only where NumPy's order does not depend on it), keepdims."""
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    axes = draw(st.lists(st.sampled_from(range(ndim)), min_size=1, max_size=ndim, unique=True))
    if int(np.prod([shape[a] for a in axes])) > 8:
        axes = axes[:1]
        if shape[axes[0]] > 8:
            shape = shape[:axes[0]] + (8,) + shape[axes[0] + 1:]
    op = draw(st.sampled_from(SMALL_OPS + ["nansum", "nanmax"]))
    dt = draw(st.sampled_from(ALL))
    big = [a for a in axes if shape[a] > 1]
    layout_proof = len(big) <= 1 and np.prod([shape[a] for a in axes]) < 8 and dt != np.float16
    if dt == np.float16 and op in ("sum", "prod", "nansum") and \
            not _last_axis_run(shape, tuple(axes)):
        dt = np.dtype(np.float32)            # (see _small_variants)
    layout = draw(st.sampled_from(_SMALL_LAYOUTS + (["T"] if layout_proof else [])))
    keepdims = draw(st.booleans())
    axis = draw(st.sampled_from([tuple(sorted(axes)), tuple(a - ndim for a in axes)]))
    if len(axes) == 1 and draw(st.booleans()):
        axis = axis[0]
    return shape, axis, op, dt, layout, keepdims, draw(st.integers(0, 2**32 - 1))


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(_small_reduction_programs())
def test_small_reductions_random(program):
    """Hypothesis: random small reductions compiled and compared with NumPy bit for bit."""
    shape, axis, op, dt, layout, keepdims, seed = program
    x = make(shape, dt, layout, rng=np.random.default_rng(seed))
    f = getattr(np, op)

    def body(x):
        return f(x, axis=axis, keepdims=keepdims)
    expected, err, _ = run_numpy(body, (x,))
    if err is not None:
        return                         # (nanmax of an all-NaN slice warns only: no error)
    with np.errstate(all="ignore"):
        got = fl.compile(body)(x)
    assert_same(expected, got, tol="exact", signed_zero=True)


# ---- nan-reductions ----------------------------------------------------------------------------
NANS = ["nansum", "nanmax", "nanmin", "nanmean"]


def _nan_params():
    out = []
    for name in NANS:
        cover(f"np.{name}", NANRED, ALL, test="test_reductions.py::test_nan_reduction")
        for dt in ALL:
            out.append(param(name, dt, name=f"np.{name}", dtype=dt, id=f"{name}-{short(dt)}"))
    return out


@pytest.mark.parametrize(("name", "dtype"), _nan_params())
def test_nan_reduction(name, dtype):
    dt = np.dtype(dtype)
    f = getattr(np, name)
    args = list(_inputs(dt))
    if dt.kind == "f":
        rng = np.random.default_rng(3)
        for a in (args[0], args[1], args[5]):
            a[rng.random(a.shape) < 0.2] = np.nan
        args[5][1] = np.nan     # an all-NaN slice along axis 1: NaN (with a RuntimeWarning)
    exact = name in ("nanmax", "nanmin") or (dt.kind in "iub" and name == "nansum")
    variants = _variants(f)
    count, size = _variants(np.sum), _variants(np.nansum if name == "nansum" else np.nanmean)
    bound = _summation_bound({k: (count[k], size[k], variants[k]) for k in count},
                             skip_nan=True)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        check_many(variants, *args, tol="exact", atol=None if exact else bound)


# ---- np.linalg.norm --------------------------------------------------------------------------------
NORM_DTYPES = [np.float16, np.float32, np.float64, np.int32, np.uint8, np.bool_]


@pytest.mark.parametrize("dtype", [param(d, name="np.linalg.norm", dtype=d, id=short(d))
                                   for d in NORM_DTYPES])
def test_norm(dtype):
    dt = np.dtype(dtype)
    v = make((33,), dt, special=False)
    m = make((6, 5), dt, "T", special=False)
    t = make((3, 4, 5), dt, special=False)
    n = np.linalg.norm
    variants = {
        "vec": lambda v, m, t: n(v),
        "vec ord1": lambda v, m, t: n(v, 1),
        "vec ord2": lambda v, m, t: n(v, 2),
        "vec inf": lambda v, m, t: n(v, np.inf),
        "vec -inf": lambda v, m, t: n(v, -np.inf),
        "vec ord0": lambda v, m, t: n(v, 0),
        "vec ord3": lambda v, m, t: n(v, 3),
        "vec keep": lambda v, m, t: n(v, keepdims=True),
        "mat fro": lambda v, m, t: n(m),
        "mat ax0": lambda v, m, t: n(m, axis=0),
        "mat ax-1": lambda v, m, t: n(m, axis=-1),
        "mat ax1 keep": lambda v, m, t: n(m, axis=1, keepdims=True),
        "mat ord1": lambda v, m, t: n(m, 1),
        "mat ordinf": lambda v, m, t: n(m, np.inf),
        "mat 'fro'": lambda v, m, t: n(m, "fro"),
        "3d ax2": lambda v, m, t: n(t, axis=2),
        "3d ax(1,2)": lambda v, m, t: n(t, axis=(1, 2)),
        "3d None": lambda v, m, t: n(t),
        "3d ax1 ord1": lambda v, m, t: n(t, ord=1, axis=1),
        "mat ord2": lambda v, m, t: n(m, 2),
        "mat ord-2": lambda v, m, t: n(m, -2),
        "mat nuc": lambda v, m, t: n(m, "nuc"),
        "3d ax(2,0) ord2 keep": lambda v, m, t: n(t, 2, axis=(2, 0), keepdims=True),
        "3d ax(1,2) nuc": lambda v, m, t: n(t, "nuc", axis=(1, 2)),
    }
    with np.errstate(all="ignore"):
        check_many(variants, v, m, t, tol="reduce", atol=lambda k, e: 1e-5 * float(
            np.max(np.abs(np.asarray(e, np.float64)), initial=0)))


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0, 0), (2, 0, 3), (2, 3, 0), (0,), (4, 0)])
def test_norm_of_empty_arrays(shape):
    """NumPy's largest-kind norms (vector inf, matrix 1, inf, 2, nuc, fro) start from 0: an
    empty vector or matrix has norm 0.0; the smallest-kind ones (-inf, -1, -2) raise
    ValueError, as does a matrix order named for a vector."""
    x = np.zeros(shape)
    axis = (-2, -1) if len(shape) > 1 else -1
    ords = [None, 2, 1, np.inf, -np.inf, 0, 3, "fro"] if len(shape) == 1 or shape == (4, 0) \
        else [None, "fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf]
    if shape == (4, 0):
        axis = -1
    for o in ords:
        for keepdims in (False, True):
            check(lambda x: np.linalg.norm(x, o, axis=axis, keepdims=keepdims), x, tol="exact")


cover("np.linalg.norm", RED, NORM_DTYPES, test="test_reductions.py::test_norm",
      note="vector norms (ord None/1/2/inf/-inf/0/3), along an axis, keepdims; matrix "
           "Frobenius/1/inf norms, 2/-2/'nuc' from the singular values (LAPACK gesdd)")


# ---- cumsum / cumprod ----------------------------------------------------------------------------
def _cum_params():
    out = []
    for name in ("cumsum", "cumprod"):
        cover(f"np.{name}", CUM, ALL, test="test_reductions.py::test_cumulative")
        for dt in ALL:
            out.append(param(name, dt, name=f"np.{name}", dtype=dt, id=f"{name}-{short(dt)}"))
    return out


@pytest.mark.parametrize(("name", "dtype"), _cum_params())
def test_cumulative(name, dtype):
    dt = np.dtype(dtype)
    f = getattr(np, name)
    domain = (0.5, 1.5) if name == "cumprod" and dt.kind == "f" else None
    x3 = make((4, 5, 6), dt, "negstep", domain=domain, special=False)
    x1 = make((1000,), dt, domain=domain, special=False)
    xt = make((7, 5), dt, "T", domain=domain, special=False)
    e2 = make((3, 0), dt)
    variants = _cum_variants(f)
    variants["method"] = lambda x3, x1, xt, e2: getattr(xt, name)(axis=0)
    exact = dt.kind in "iub"
    running = {k: (v, v, variants[k]) for k, v in _cum_variants(np.cumsum).items()}
    check_many(variants, x3, x1, xt, e2, tol="exact" if exact or name == "cumsum" else "reduce",
               atol=None if exact or name == "cumprod" else _summation_bound(running))


def _cum_variants(f):
    return {
        "3d ax0": lambda x3, x1, xt, e2: f(x3, axis=0),
        "3d ax1": lambda x3, x1, xt, e2: f(x3, axis=1),
        "3d ax-1": lambda x3, x1, xt, e2: f(x3, axis=-1),
        "3d None": lambda x3, x1, xt, e2: f(x3),
        "1d": lambda x3, x1, xt, e2: f(x1),
        "1d rev": lambda x3, x1, xt, e2: f(x1[::-1]),
        "T ax0": lambda x3, x1, xt, e2: f(xt, axis=0),
        "T ax1": lambda x3, x1, xt, e2: f(xt, axis=1),
        "empty": lambda x3, x1, xt, e2: f(e2, axis=1),
        "dtype": lambda x3, x1, xt, e2: f(xt, axis=1, dtype=np.float64),
        "method": lambda x3, x1, xt, e2: f(xt, axis=0),
    }


ACC = "np.add.accumulate / np.multiply.accumulate"


@pytest.mark.parametrize("dtype", [param(d, name=ACC, dtype=d, id=short(d)) for d in ALL])
def test_ufunc_accumulate(dtype):
    """ufunc.accumulate: the same dtype rules as np.cumsum / np.cumprod (small ints -> int64)."""
    xt = make((7, 5), dtype, "T", special=False, domain=(0.5, 1.5) if np.dtype(dtype).kind == "f"
              else None)
    check(lambda x: (np.add.accumulate(x, axis=1), np.multiply.accumulate(x, axis=0),
                     np.add.accumulate(x[0])), xt, tol="reduce",
          atol=1e-3 if np.dtype(dtype).kind == "f" else 0.0)


cover(ACC, CUM, ALL, test="test_reductions.py::test_ufunc_accumulate")

CUMSPECIAL = "np.cumsum / np.cumprod (special values, signed zeros)"


@pytest.mark.parametrize("dtype", [param(d, name=CUMSPECIAL, dtype=d, id=short(d)) for d in FLOATS])
def test_cumulative_special_values(dtype):
    x = np.array([[1.0, np.nan, 2.0], [np.inf, -np.inf, 1.0], [-0.0, -0.0, 0.0], [1e30, 1e30, -1e30]],
                 dtype)
    check(lambda x: (np.cumsum(x, axis=1), np.cumprod(x, axis=1), np.cumsum(x, axis=0)), x,
          tol="reduce", signed_zero=True)


cover(CUMSPECIAL, CUM, FLOATS, test="test_reductions.py::test_cumulative_special_values")


BOOLTILE = "np.any / np.all over a leading axis (fused operand)"


@pytest.mark.parametrize("shape", [param(s, name=BOOLTILE, dtype=f"{s}", id=str(s))
                                   for s in [(7, 12), (7, 14), (7, 32), (5, 33), (3, 4, 12)]])
def test_bool_reduction_over_leading_axis(shape):
    """any/all over axis 0 of a fused elementwise expression (a tiled reduction)."""
    x = make(shape, np.float64, special=False, domain=(0.5, 2.0))
    y = make(shape, np.float64, special=False, domain=(0.5, 2.0), key=("y",))
    check(lambda x, y: (np.any(x / x, axis=0), np.all(x / y > 0, axis=0),
                        np.any(np.isnan(x / y), axis=0), np.all(x > 0, axis=0)), x, y)


cover(BOOLTILE, RED, ["float64"], test="test_reductions.py::test_bool_reduction_over_leading_axis")
