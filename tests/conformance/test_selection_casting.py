"""np.where (three arguments), astype (every dtype pair), np.nan_to_num, np.clip, np.round."""
from __future__ import annotations

import numpy as np
import pytest

import fastlaunch as fl

from .harness import (ALL, FLOATS, INTS, check, cover, ids, make, param, param_marks, scalar,
                      short, specials, unary_inputs)

SEL = "selection and casting"


# ---- np.where -----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ALL, ids=ids(ALL))
def test_where(dtype):
    dt = np.dtype(dtype)
    c = make((5, 7), np.bool_, "T")
    a = make((5, 7), dt)
    b = make((7,), dt, "neg", key=("b",))
    cf = make((5, 1), np.float64, key=("c",))       # a non-bool condition: truthiness
    check(lambda c, a, b, cf, s: (np.where(c, a, b), np.where(c[0], a[0], b),
                                  np.where(cf, a, 0), np.where(c, s, a), np.where(a, 1.5, b),
                                  np.where(c[:, :0], a[:, :0], b[:0]), np.where(True, a, b)),
          c, a, b, cf, scalar(dt, 1), signed_zero=True)


cover("np.where", SEL, ALL, test="test_selection_casting.py::test_where",
      note="three-argument form; conditions of any dtype (truthiness), broadcasting, scalars")


@pytest.mark.parametrize("pair", [(np.float32, np.int64), (np.uint8, np.int8),
                                  (np.int64, np.uint64), (np.bool_, np.float32),
                                  (np.float32, np.float64), (np.uint16, np.float32)],
                         ids=lambda p: f"{short(p[0])}-{short(p[1])}")
def test_where_mixed_dtypes(pair):
    d1, d2 = pair
    c = make((33,), np.bool_)
    check(lambda c, a, b: (np.where(c, a, b), np.where(c, b, 7), np.where(c, a, 2.5)),
          c, make((33,), d1), make((33,), d2, key=("b",)), signed_zero=True)


# ---- astype ------------------------------------------------------------------------------------
def _cast_mask(src: np.ndarray, dst) -> np.ndarray:
    """Where NumPy's float -> integer casts agree with themselves.  Out of range, they give
    x86-64's cvtt values, as fastlaunch's kernels do, except float32/64 -> uint32 outside
    [-2**31, 2**32) (NaN, -inf, -3e9, 2**40): NumPy's SIMD loop converts those as uint64
    does, in 32 bits, its scalar loop (one element, the last few of a contiguous array,
    strided arrays) takes the low bits of the 64-bit conversion, as fastlaunch does."""
    dst = np.dtype(dst)
    s = np.asarray(src)
    if not (s.dtype.kind == "f" and s.dtype.itemsize > 2 and dst == np.uint32):
        return np.ones(s.shape, bool)
    with np.errstate(all="ignore"):
        t = np.trunc(s.astype(np.float64))
        return np.isfinite(t) & (t >= -2.0 ** 31) & (t < 2.0 ** 32)


def _params_astype():
    out = []
    for src in ALL:
        for dst in ALL:
            out.append(param(src, dst, name="ndarray.astype", dtype=f"{short(src)}->{short(dst)}",
                             id=f"{short(src)}-{short(dst)}"))
    return out


@pytest.mark.parametrize(("src", "dst"), _params_astype())
def test_astype(src, dst):
    """Every cast between the 11 dtypes, on special values and layouts, float -> int of
    NaN, infinities and out-of-range values included (x86-64's values; see _cast_mask)."""
    dst = np.dtype(dst)
    args = unary_inputs(src)[:5] + (specials(src),)
    masks = tuple(_cast_mask(a, dst) for a in args)
    check(lambda *xs: tuple(x.astype(dst) for x in xs), *args, mask=masks, signed_zero=True)


cover("ndarray.astype", SEL, ALL, test="test_selection_casting.py::test_astype",
      note="every pair of the 11 dtypes; float -> int of NaN/inf/out-of-range values: "
           "NumPy's values on x86-64 (the cvtt instruction's), without NumPy's RuntimeWarning; "
           "float32/64 -> uint32 outside [-2**31, 2**32) as NumPy's scalar loop (the low bits "
           "of the 64-bit conversion): NumPy's SIMD loop, which converts most elements of a "
           "contiguous array, gives other values there (-3e9: 2147483648, not 1294967296)")


@pytest.mark.parametrize("dtype", ALL, ids=ids(ALL))
def test_copies_of_tracers(dtype):
    a = make((4, 5), dtype, "T")
    check(lambda a: (a.copy(), np.copy(a), a.astype(np.float64), a.astype(a.dtype)), a)


cover("np.copy / ndarray.copy", SEL, ALL, test="test_selection_casting.py::test_copies_of_tracers")


@param_marks("np.astype")
def test_astype_function():
    a = make((4, 5), np.float32, "T")
    check(lambda a: np.astype(a, np.float64), a)


cover("np.astype", SEL, [np.float32], test="test_selection_casting.py::test_astype_function")


@pytest.mark.parametrize("fname", ["asarray", "array", "ascontiguousarray", "asanyarray"])
def test_asarray_family_raises_tracing_error(fname):
    """np.asarray / np.array / np.ascontiguousarray are not dispatched by NumPy
    (__array_function__ is not consulted), so on a traced array they can only call __array__,
    which raises TracingError.  Documented difference."""
    f = getattr(np, fname)
    c = fl.compile(lambda a: f(a) + 1)
    with pytest.raises(fl.TracingError, match="converting a traced array"):
        c(make((3,), np.float32))


for _n in ("np.asarray", "np.array", "np.ascontiguousarray", "np.asanyarray"):
    cover(_n, SEL, test="test_selection_casting.py::test_asarray_family_raises_tracing_error",
          note="applied to a traced array raises TracingError (NumPy does not dispatch it "
               "through __array_function__); use x.copy() / x.astype(...)")


# ---- nan_to_num, clip, round -----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [param(d, name="np.nan_to_num", dtype=d, id=short(d))
                                   for d in ALL])
def test_nan_to_num(dtype):
    args = unary_inputs(dtype)
    check(lambda *xs: tuple(np.nan_to_num(x) for x in xs) +
          (np.nan_to_num(xs[0], nan=-1.0, posinf=7.0, neginf=-7.0),), *args, signed_zero=True)


cover("np.nan_to_num", SEL, ALL, test="test_selection_casting.py::test_nan_to_num")


@pytest.mark.parametrize("dtype", [param(d, name="np.clip", dtype=d, id=short(d)) for d in ALL])
def test_clip(dtype):
    dt = np.dtype(dtype)
    a = make((1000,), dt)
    lo = make((1000,), dt, key=("lo",))
    hi = make((1000,), dt, key=("hi",))
    m = make((5, 7), dt, "T")
    fns = lambda a, lo, hi, m: (np.clip(a, lo, hi), np.clip(m, m[0], None),   # noqa: E731
                                np.clip(m, None, m[:, :1]), a.clip(lo, hi), np.clip(a, 1, 5))
    try:
        with np.errstate(all="ignore"):
            fns(a, lo, hi, m)
    except Exception:   # noqa: BLE001 - e.g. bool with integer bounds: same error expected
        pass
    check(fns, a, lo, hi, m, signed_zero=True)


cover("np.clip", "min/max, clip, sign manipulation", ALL, test="test_selection_casting.py::test_clip",
      note="array, scalar and None bounds; lo > hi gives hi, NaN propagates (NumPy's rules)")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_min_max_against_constants(dtype):
    """Against a constant that is neither NaN nor zero, minimum/maximum/fmin/fmax/clip lower to
    LLVM's min/max intrinsics (one vminps/vmaxps): NumPy's results to the bit, with NaN, signed
    zeros, infinities and the constant itself in the array, the constant on either side;
    zero and NaN constants keep the general code (checked the same way)."""
    x = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 4.0, -4.0, 0.1, -0.1, 5.0, -5.0,
                  3.5, 1e-45, -1e-45, 1.5, 2.0, np.float32(0.1), 1e30] * 5, dtype)
    fns = lambda x: (np.clip(x, -4.0, 4.0), np.maximum(x, 0.1), np.maximum(0.1, x),  # noqa: E731
                     np.minimum(x, -4.0), np.minimum(1.5, x), np.fmax(x, 2.0), np.fmin(-2.0, x),
                     np.fmax(x, np.inf), np.minimum(x, -np.inf), np.maximum(x, 0.0),
                     np.minimum(-0.0, x), np.fmax(x, 0.0), np.maximum(x, np.nan),
                     np.fmin(x, np.nan))
    with np.errstate(invalid="ignore"):
        want = fns(x)
        got = fl.compile(fns)(x)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        ok = ~np.isnan(w)
        assert np.array_equal(g[ok], w[ok]) and np.array_equal(np.signbit(g[ok]),
                                                               np.signbit(w[ok]))


@pytest.mark.parametrize("fname", ["round", "around"])
@pytest.mark.parametrize("dtype", [param(d, name="np.round", dtype=d, id=short(d)) for d in ALL])
def test_round(fname, dtype):
    f = getattr(np, fname)
    args = unary_inputs(dtype)
    check(lambda *xs: tuple(f(x) for x in xs) + (xs[0].round(), f(xs[1], decimals=0)),
          *args, signed_zero=True)


cover("np.round", "rounding", ALL, test="test_selection_casting.py::test_round",
      note="decimals=0 (half to even, as np.rint)")
cover("np.around", "rounding", ALL, test="test_selection_casting.py::test_round")


@pytest.mark.parametrize("dtype", [param(d, name="np.round(decimals!=0)", dtype=d, id=short(d))
                                   for d in FLOATS + INTS])
def test_round_decimals(dtype):
    """decimals != 0: NumPy multiplies by 10**decimals, rints and divides (divides, rints and
    multiplies for decimals < 0), in float64 for integers; integers with decimals > 0 are
    unchanged.  Compared exactly: the same operations in the same order."""
    lo, hi = (-100, 100) if np.dtype(dtype).kind != "u" else (0, 200)
    if np.dtype(dtype).itemsize == 1:
        lo, hi = max(lo, -120), min(hi, 120)
    a = make((33,), dtype, domain=(lo, hi))
    check(lambda a: (np.round(a, 2), np.round(a, -1), np.around(a, 1), a.round(3),
                     np.round(a, 25), np.round(a, -2)), a, signed_zero=True)
    check(lambda a: np.round(a[3], 1), a)                    # a 0-d value


def test_round_decimals_errors():
    import fastlaunch as fl
    with pytest.raises(fl.TracingError, match="decimals"):
        fl.compile(lambda a, d: np.round(a, d))(np.ones(3), np.int64(2))
    with pytest.raises(TypeError, match="bool"):
        fl.compile(lambda a: np.round(a, 1))(np.ones(3, bool))


cover("np.round(decimals!=0)", "rounding", FLOATS + INTS,
      test="test_selection_casting.py::test_round_decimals")


@pytest.mark.parametrize("dtype", INTS + FLOATS, ids=ids(INTS + FLOATS))
def test_float_to_int_cast_of_nan_inf_out_of_range(dtype):
    """NaN / inf / huge / negative -> every integer dtype: NumPy's values on x86-64 (C's
    conversion: the cvtt instruction's INT_MIN "integer indefinite", the low bits of its
    32-bit form for the narrow types, uint32/uint64 through the signed form), replayed on
    other values of the same signature."""
    src = np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, 3e9, -3e9, 2.0 ** 63, 2.0 ** 64, -0.5,
                    -1.5, 300.0, -300.0, 70000.0, -70000.0, 2.0 ** 31, -2.0 ** 31 - 0.5,
                    -2.0 ** 31 - 1, 4294967296.0, 1.8e19, -2.0 ** 63, 255.9, -129.0],
                   np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        for s in (src, src.astype(np.float32), src.astype(np.float16)):
            cf = fl.compile(lambda x: x.astype(dtype))
            for x in (s, s[::-1].copy()):                  # the trace, then a replay
                got = cf(x)
                assert got.dtype == np.dtype(dtype)
                if np.dtype(dtype) == np.uint32 and s.dtype.itemsize > 2:
                    # NumPy's scalar loop (see _cast_mask): element by element
                    want = np.array([v.astype(dtype) for v in x])
                else:
                    want = x.astype(dtype)
                np.testing.assert_array_equal(got, want)
            assert len(cf.traces) == 1


cover("ndarray.astype", SEL, note="float -> int of NaN/inf/huge: x86-64's values, as NumPy's; "
      "NumPy's RuntimeWarning 'invalid value encountered in cast' is not raised",
      test="test_selection_casting.py::test_float_to_int_cast_of_nan_inf_out_of_range")


@pytest.mark.parametrize("case", [
    param("literal", name="np.where", dtype="out-of-range Python int (literal)", id="literal"),
    param("argument", name="np.where", dtype="out-of-range Python int (argument)", id="argument")])
def test_where_python_int_out_of_range(case):
    """np.where(c, uint8_array, -7): NumPy casts the Python int to the array's dtype (wraps to
    249) instead of raising."""
    c = np.array([True, False, True])
    a = np.array([1, 2, 3], np.uint8)
    if case == "literal":
        check(lambda c, a: np.where(c, a, -7), c, a)
    else:
        check(lambda c, a, s: np.where(c, a, s), c, a, -7)
