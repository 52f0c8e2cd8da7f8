"""Every elementwise ufunc with a plain numerical meaning, across dtypes, shapes and layouts.

One compiled function per (ufunc, dtype or dtype pair) applies the ufunc to a whole set of
inputs (odd sizes, 0-d, empty, broadcasting, transposed / stepped / negative-stride views,
stride-0 inputs, NumPy scalar parameters, and a grid of every pair of special values), so that
each signature is traced and compiled once.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from .harness import (ALL, FLOATS, INTS, SINTS, accepted, check, check_many, cover, grid, ids,
                      make, param, rejected, scalar, short, specials, unary_inputs)


@dataclass
class U:
    name: str
    category: str
    tol: str = "exact"
    domain: tuple | None = None
    signed_zero: bool = True
    note: str | None = None


A, E, T, R = ("arithmetic", "exponential and log", "trigonometric and hyperbolic", "rounding")
UNARY = [
    U("negative", A), U("positive", A), U("absolute", A), U("sign", A),
    U("reciprocal", A, "arith",
      note="integer reciprocal of 0: NumPy's value on x86-64 (1.0/0 converted to the type: "
           "INT_MIN for int32 and int64, 0 for the others)"),
    U("square", A, "arith"), U("sqrt", A, "arith"), U("cbrt", A, "transc"),
    U("exp", E, "transc"), U("exp2", E, "transc"), U("expm1", E, "transc"),
    U("log", E, "transc"), U("log2", E, "transc"), U("log10", E, "transc"),
    U("log1p", E, "transc"),
    U("sin", T, "transc"), U("cos", T, "transc"), U("tan", T, "transc"),
    U("arcsin", T, "transc", (-1.1, 1.1)), U("arccos", T, "transc", (-1.1, 1.1)),
    U("arctan", T, "transc"), U("sinh", T, "transc"), U("cosh", T, "transc"),
    U("tanh", T, "transc"), U("arcsinh", T, "transc"), U("arccosh", T, "transc", (0.5, 20)),
    U("arctanh", T, "transc", (-1.1, 1.1)),
    U("deg2rad", T, "arith"), U("rad2deg", T, "arith"),
    U("floor", R), U("ceil", R), U("trunc", R), U("rint", R),
    U("isnan", "predicates"), U("isinf", "predicates"), U("isfinite", "predicates"),
    U("signbit", "predicates"),
    U("logical_not", "logical"), U("invert", "bitwise and shifts"),
]
UNARY_BY_NAME = {u.name: u for u in UNARY}


def _params_unary():
    out = []
    for u in UNARY:
        f = getattr(np, u.name)
        dts = accepted(f)
        cover(f"np.{u.name}", u.category, dts, note=u.note, test="test_ufuncs.py::test_unary")
        for dt in dts:
            out.append(param(u.name, dt, name=f"np.{u.name}", dtype=dt, id=f"{u.name}-{short(dt)}"))
    return out


@pytest.mark.parametrize(("name", "dtype"), _params_unary())
def test_unary(name, dtype):
    u = UNARY_BY_NAME[name]
    f = getattr(np, name)
    args = unary_inputs(dtype, u.domain)
    check(lambda *xs: tuple(f(x) for x in xs), *args, tol=u.tol, signed_zero=u.signed_zero)


def _params_unary_rejected():
    out = []
    for u in UNARY:
        f = getattr(np, u.name)
        for dt in rejected(f):
            out.append(param(u.name, dt, name=f"np.{u.name}", id=f"{u.name}-{short(dt)}"))
    return out


@pytest.mark.parametrize(("name", "dtype"), _params_unary_rejected())
def test_unary_rejects_like_numpy(name, dtype):
    """Where NumPy has no loop for the dtype, the compiled function raises the same error."""
    f = getattr(np, name)
    check(lambda x: f(x), make((3,), dtype))


# ---- binary ------------------------------------------------------------------------------------
@dataclass
class B:
    name: str
    category: str
    tol: str = "exact"
    b_domain: tuple | None = None     # domain of the second operand for integer dtypes
    signed_zero: bool = True
    note: str | None = None
    abs_ulps: float = 0.0             # error bound in ulps of the larger operand: functions
                                      # whose error is absolute (results near 0 by cancellation)


MM, CMP, LOG, BIT = ("min/max, clip, sign manipulation", "comparisons", "logical",
                     "bitwise and shifts")
BINARY = [
    B("add", A), B("subtract", A), B("multiply", A), B("divide", A, "arith"),
    B("true_divide", A, "arith"),
    B("floor_divide", A, "arith",
      note="integer x // 0 == 0 and MIN // -1 == MIN (wraps), as NumPy"),
    B("remainder", A, "arith", note="integer x % 0 == 0, as NumPy"),
    B("fmod", A, "arith"),
    B("power", A, "transc", b_domain=(0, 70),
      note="integer arrays are tested with non-negative exponents here; negative ones in "
           "test_power_negative_integer_exponent"),
    B("float_power", A, "transc"),
    B("arctan2", T, "transc"), B("hypot", T, "transc"),
    B("logaddexp", E, "transc", abs_ulps=4), B("logaddexp2", E, "transc", abs_ulps=4),
    B("minimum", MM), B("maximum", MM), B("fmin", MM), B("fmax", MM), B("copysign", MM),
    B("nextafter", MM), B("heaviside", MM),
    B("equal", CMP), B("not_equal", CMP), B("less", CMP), B("less_equal", CMP),
    B("greater", CMP), B("greater_equal", CMP),
    B("logical_and", LOG), B("logical_or", LOG), B("logical_xor", LOG),
    B("bitwise_and", BIT), B("bitwise_or", BIT), B("bitwise_xor", BIT),
    B("left_shift", BIT, note="shift counts >= the bit width or negative give 0 (NumPy's rule)"),
    B("right_shift", BIT, note="shift counts >= the bit width or negative give 0 or -1 (sign "
                               "fill), NumPy's rule"),
]
BINARY_BY_NAME = {b.name: b for b in BINARY}


def _domain_ok(dt, b_domain):
    return b_domain if np.dtype(dt).kind in "iub" else None


def binary_inputs(d1, d2, b_domain=None, full=True):
    """Pairs (a_i, b_i) of operands: every pair of special values, broadcasting, layouts."""
    d1, d2 = np.dtype(d1), np.dtype(d2)
    bd = _domain_ok(d2, b_domain)
    col, _ = grid(d1)
    row = specials(d2).reshape(1, -1)
    if bd is not None:
        row = row[(row >= bd[0]) & (row <= bd[1])].reshape(1, -1)
    pairs = [
        (col, row),                                                         # all special pairs
        (make((257,), d1), make((257,), d2, domain=bd, key=("b",))),      # odd size
        (make((5, 1), d1), make((1, 7), d2, domain=bd, key=("b",))),      # both broadcast
        (scalar(d1, make((1,), d1, key=("s",))[0]), make((6,), d2, domain=bd, key=("b",))),
    ]
    if full:
        pairs += [
            (make((7,), d1), make((5, 7), d2, "T", domain=bd, key=("b",))),
            (make((3, 4, 5), d1, "negstep"), make((4, 5), d2, "step", domain=bd, key=("b",))),
            (make((), d1), make((4, 3), d2, "neg", domain=bd, key=("b",))),
            (make((1,), d1), make((1,), d2, domain=bd, key=("b",))),
            (make((0,), d1), make((0,), d2)),
            (make((3, 0), d1), make((1, 0), d2)),
            (make((5,), d1, "bcast"), make((5,), d2, domain=bd, key=("b",))),
        ]
    return [x for p in pairs for x in p]


def _binary_fn(f):
    return lambda *xs: tuple(f(xs[i], xs[i + 1]) for i in range(0, len(xs), 2))


def _params_binary():
    out = []
    for b in BINARY:
        f = getattr(np, b.name)
        dts = accepted(f)
        cover(f"np.{b.name}", b.category, dts, note=b.note, test="test_ufuncs.py::test_binary")
        for dt in dts:
            out.append(param(b.name, dt, name=f"np.{b.name}", dtype=dt, id=f"{b.name}-{short(dt)}"))
    return out


def _abs_tolerance(b: B, args) -> list | float:
    """Per result (operand pair): b.abs_ulps ulps of the larger finite operand, elementwise."""
    if not b.abs_ulps:
        return 0.0
    out = []
    for x, y in zip(args[::2], args[1::2]):
        dt = np.result_type(x, y)
        if dt.kind != "f":
            out.append(0.0)
            continue
        with np.errstate(all="ignore"):
            m = np.maximum(np.abs(np.asarray(x, np.float64)), np.abs(np.asarray(y, np.float64)))
        out.append(np.where(np.isfinite(m), b.abs_ulps * float(np.finfo(dt).eps) * m, 0.0))
    return out


@pytest.mark.parametrize(("name", "dtype"), _params_binary())
def test_binary(name, dtype):
    b = BINARY_BY_NAME[name]
    args = binary_inputs(dtype, dtype, b.b_domain)
    check(_binary_fn(getattr(np, name)), *args, tol=b.tol, signed_zero=b.signed_zero,
          atol=_abs_tolerance(b, args))


MIXED = [(np.int8, np.uint8), (np.int16, np.float32), (np.uint64, np.int64), (np.bool_, np.int8),
         (np.float32, np.float64), (np.uint32, np.float32), (np.int64, np.float64),
         (np.uint8, np.float32), (np.int32, np.uint16), (np.uint64, np.int8),
         (np.float16, np.float32), (np.int8, np.float16), (np.int16, np.float16),
         (np.float16, np.bool_)]


def _params_mixed():
    out = []
    for b in BINARY:
        for d1, d2 in MIXED:
            for x, y in ((d1, d2), (d2, d1)):
                x, y = np.dtype(x), np.dtype(y)
                out.append(param(b.name, x, y, name=f"np.{b.name}", dtype=f"{short(x)}+{short(y)}",
                                 id=f"{b.name}-{short(x)}-{short(y)}"))
    return out


@pytest.mark.parametrize(("name", "d1", "d2"), _params_mixed())
def test_binary_mixed_dtypes(name, d1, d2):
    """NumPy's promotion (int8 + uint8 -> int16, uint64 + int64 -> float64, ...) and the values;
    where NumPy has no loop for the pair, the same error."""
    b = BINARY_BY_NAME[name]
    args = binary_inputs(d1, d2, b.b_domain, full=False)
    check(_binary_fn(getattr(np, name)), *args, tol=b.tol, signed_zero=b.signed_zero,
          atol=_abs_tolerance(b, args))


# ---- Python scalars (NEP 50 weak scalars), literal and as runtime parameters ---------------------
SCALAR_OPS = {
    "add": lambda a, s: (a + s, s + a),
    "subtract": lambda a, s: (a - s, s - a),
    "multiply": lambda a, s: (a * s, s * a),
    "true_divide": lambda a, s: (a / s, s / a),
    "floor_divide": lambda a, s: (a // s, s // a),
    "remainder": lambda a, s: (a % s, s % a),
    "power": lambda a, s: (a ** s,),
    "maximum": lambda a, s: (np.maximum(a, s), np.minimum(s, a)),
    "less": lambda a, s: (a < s, s <= a, a == s, a != s),
    "arctan2": lambda a, s: (np.arctan2(a, s),),
    "bitwise_and": lambda a, s: (a & s, s | a, a ^ s),
}
SCALARS = {"int": 3, "bigint": 100, "float": 2.5, "negfloat": -0.0, "bool": True}


PYSCALAR = "Python scalar operands (NEP 50)"


def _scalar_params():
    out = []
    for op in SCALAR_OPS:
        for kind in SCALARS:
            dtype = kind
            if op == "maximum" and kind in ("int", "bigint"):
                dtype = "uint64 (np.minimum)"          # the group includes uint64
            out.append(param(op, kind, name=PYSCALAR, dtype=dtype, id=f"{op}-{kind}"))
    return out


@pytest.mark.parametrize(("op", "kind"), _scalar_params())
def test_python_scalar_operands(op, kind):
    """Weak Python scalars keep the array's dtype (float32 * 2.5 -> float32), for a literal
    written in the function and for a Python scalar passed as a (runtime) argument; every
    dtype in one compiled function.  Where NumPy raises, the same error."""
    f = SCALAR_OPS[op]
    s = SCALARS[kind]
    arrays = [make((11,), dt) for dt in ALL]
    ok = []
    for a in arrays:
        try:
            with np.errstate(all="ignore"):
                f(a.copy(), s)
            ok.append(a)
        except Exception:  # noqa: BLE001
            check(lambda a, s: f(a, s), a, s)     # the same error, passed
            check(lambda a: f(a, s), a)           # and literal
    tol = "transc" if op in ("power", "arctan2") else "arith"
    check(lambda s, *xs: tuple(f(a, s) for a in xs), s, *ok, tol=tol, signed_zero=True)
    check(lambda *xs: tuple(f(a, s) for a in xs), *ok, tol=tol, signed_zero=True)


cover(PYSCALAR, A, [short(d) for d in ALL], test="test_ufuncs.py::test_python_scalar_operands",
      note="int, float and bool Python scalars with arrays of every dtype, written as literals "
           "and passed as arguments (runtime parameters), both operand orders: + - * / // % ** "
           "maximum minimum comparisons arctan2 & | ^")


@pytest.mark.parametrize("dtype", INTS, ids=ids(INTS))
def test_python_int_out_of_range_in_comparison(dtype):
    """NumPy 2 compares integer arrays with any Python int exactly (int8_array < 300 is all
    True, and so is int64_array < 2**70); arithmetic with an out-of-range Python int raises
    OverflowError."""
    ii = np.iinfo(dtype)
    a = make((6,), dtype)
    for big, small in ((int(ii.max) + 1, int(ii.min) - 1), (2**70, -2**70), (2**64, -2**63 - 1)):
        check(lambda a: (a < big, a >= small, a == big, a != small, np.greater(a, big),
                         big > a, np.less_equal(small, a), a[0] < big), a)


def test_python_int_beyond_64_bits_with_floats_and_bools():
    """A float array compares with the int converted to a float (OverflowError past float64's
    range); NumPy raises OverflowError for a bool array."""
    x = make((6,), np.float32)
    check(lambda x: (x < 2**70, x == 2**64, np.greater(x, -2**80)), x)
    check(lambda x: x < 10**400, x)
    check(lambda b: b < 2**70, make((6,), np.bool_))


@pytest.mark.parametrize("dtype", [param(d, name=PYSCALAR, dtype=f"{short(d)} vs out-of-range int",
                                         id=short(d)) for d in INTS])
def test_python_int_out_of_range_argument_in_comparison(dtype):
    """The same comparisons with the Python int passed as an argument."""
    ii = np.iinfo(dtype)
    a = make((6,), dtype)
    check(lambda a, s: (a < s, s > a, np.equal(a, s)), a, int(ii.max) + 1)


@pytest.mark.parametrize("fname", [
    param(n, name=PYSCALAR, dtype="Python int operands only" if n in ("less", "equal", "greater_equal")
          else None, id=n)
    for n in ("add", "multiply", "true_divide", "maximum", "less", "equal", "greater_equal", "arctan2")])
def test_ufunc_of_python_scalars_only(fname):
    """np.<ufunc>(n, 2) where n is a Python scalar argument: NumPy gives a NumPy scalar of the
    default dtype."""
    f = getattr(np, fname)
    check(lambda n, x: (f(n, 2), f(x, n), f(n, n)), 3, 2.5, tol="transc")


def test_python_scalar_arithmetic_gives_numpy_scalars():
    """Documented difference: arithmetic on Python scalar arguments alone (n * 2) is plain
    Python in NumPy code, but traced it gives a NumPy scalar (int64 / float64) of equal value."""
    import fastlaunch as fl
    for f in (lambda n: n * 2, lambda n: n + 0.5, lambda n: -n, lambda n: n / 2):
        got = fl.compile(f)(3)
        assert got == f(3) and isinstance(got, np.generic)
        assert got.dtype == np.asarray(f(3)).dtype


cover(PYSCALAR, A, note="arithmetic on Python scalar arguments alone (n * 2) returns a NumPy "
      "scalar (int64/float64) instead of a Python int/float: equal value, documented")


@pytest.mark.parametrize("dtype", INTS, ids=ids(INTS))
def test_python_int_out_of_range_raises(dtype):
    """int8_array + 300 raises OverflowError in NumPy; the same for a passed Python int."""
    ii = np.iinfo(dtype)
    a = make((4,), dtype)
    check(lambda a, s: a + s, a, int(ii.max) + 1)
    check(lambda a, s: a * s, a, int(ii.min) - 1)
    check(lambda a: a + (int(ii.max) + 1), a)


# ---- operators -------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ALL, ids=ids(ALL))
def test_operators(dtype):
    """The operator forms of the ufuncs, including in-place operators on inputs."""
    dt = np.dtype(dtype)
    a = make((6, 5), dt, "T")
    b = make((5,), dt, key=("b",))
    ops = [("+", lambda x, y: x + y), ("-", lambda x, y: x - y), ("*", lambda x, y: x * y),
           ("/", lambda x, y: x / y), ("//", lambda x, y: x // y), ("%", lambda x, y: x % y),
           ("&", lambda x, y: x & y), ("|", lambda x, y: x | y), ("^", lambda x, y: x ^ y),
           ("<<", lambda x, y: x << (y & 7) if dt.kind in "iu" else x << y),
           (">>", lambda x, y: x >> (y & 7) if dt.kind in "iu" else x >> y),
           ("<", lambda x, y: x < y), ("<=", lambda x, y: x <= y), (">", lambda x, y: x > y),
           (">=", lambda x, y: x >= y), ("==", lambda x, y: x == y), ("!=", lambda x, y: x != y),
           ("neg", lambda x, y: -x), ("pos", lambda x, y: +x), ("abs", lambda x, y: abs(x)),
           ("~", lambda x, y: ~x), ("divmod", lambda x, y: divmod(x, y))]
    ok = []
    for name, f in ops:
        try:
            with np.errstate(all="ignore"):
                f(a.copy(), b.copy())
            ok.append((name, f))
        except TypeError:
            check(f, a, b)        # the same TypeError
    check(lambda x, y: {name: f(x, y) for name, f in ok}, a, b, tol="arith", signed_zero=True)
    # in-place operators on an input array replay into the caller's array
    for name, f in ok:
        if name in ("neg", "pos", "abs", "~", "divmod") or name in ("<", "<=", ">", ">=", "==", "!="):
            continue
        with np.errstate(all="ignore"):
            if f(a.copy(), b.copy()).dtype != dt:   # x[...] = float values: casts not compared
                continue

        def inplace(x, y, f=f):
            z = f(x, y)
            x[...] = z
            return x.sum() if dt.kind != "b" else x.any()
        check(inplace, a, b, tol="reduce")


cover("operators (+ - * / // % ** & | ^ << >> comparisons, unary - + abs ~, divmod)", "arithmetic",
      ALL, test="test_ufuncs.py::test_operators")


@pytest.mark.parametrize("dtype", INTS, ids=ids(INTS))
def test_int_overflow_wraps(dtype):
    """Integer overflow wraps exactly as in NumPy: add, sub, mul, neg, abs(MIN), power."""
    ii = np.iinfo(dtype)
    a = np.array([ii.max, ii.min, ii.max // 2 + 1, 3, -3 if ii.min else 3], dtype)
    b = np.array([1, -1 if ii.min else 1, 2, ii.max, 5], dtype)
    check(lambda a, b: (a + b, a - b, a * b, -a, np.abs(a), a ** np.array(5, a.dtype), a * a * a),
          a, b)


@pytest.mark.parametrize("dtype", SINTS, ids=ids(SINTS))
def test_power_negative_integer_exponent(dtype):
    """NumPy raises ValueError for integer ** negative integer, whichever element holds it.
    With a literal exponent the compiled function raises while tracing; with an array or a
    runtime scalar exponent on every call whose exponent holds a negative value."""
    a = make((5,), dtype, domain=(1, 5))
    check(lambda a: a ** -2, a)                      # literal: ValueError, both
    f = __import__("fastlaunch").compile(lambda a, e: a ** e)
    e = np.array([0, 1, 2, 3, 1], dtype)
    np.testing.assert_array_equal(f(a, e), a ** e)
    for bad in (np.full(5, -2, dtype), np.array([0, 1, -1, 3, 1], dtype)):
        with pytest.raises(ValueError, match="negative integer powers"):
            a ** bad
        with pytest.raises(ValueError, match="negative integer powers"):
            f(a, bad)
    g = __import__("fastlaunch").compile(lambda a, e: np.power(a, e))
    np.testing.assert_array_equal(g(a, 3), np.power(a, 3))
    with pytest.raises(ValueError, match="negative integer powers"):
        g(a, -3)                                     # the traced signature, a new value
    np.testing.assert_array_equal(g(a, 2), np.power(a, 2))


cover("np.power", A, note="integer ** negative integer: ValueError, as NumPy, for a literal, "
      "array or runtime scalar exponent", test="test_ufuncs.py::test_power_negative_integer_exponent")


@pytest.mark.parametrize("dtype", FLOATS, ids=ids(FLOATS))
def test_power_of_a_scalar_half_is_sqrt(dtype):
    """NumPy's float32/64 power loop computes x ** e as sqrt(x) where e is a scalar 0.5 (a
    literal, a runtime scalar, a one-element array): NaN at -inf and -0.0 at -0.0, where
    pow gives inf and +0.0; an exponent array of several elements, and float16, are pow's.
    The operator's own fast path (x ** 0.5) is sqrt for every float dtype."""
    import fastlaunch as fl
    x = np.array([-np.inf, -0.0, 0.0, np.inf, -1.0, 4.0, np.nan, 2.0], dtype)

    def body(x, p):
        return (np.power(x, 0.5), x ** 0.5, np.power(x, p), x ** p,
                np.power(x, np.array([0.5], x.dtype)), np.power(x, np.full(8, 0.5, x.dtype)),
                np.power(x, 2.0), np.power(x, -0.5))
    cf = fl.compile(body)
    with np.errstate(all="ignore"):
        for p in (0.5, 2.0, 0.5, -0.5):                 # replays with new exponents
            for got, want in zip(cf(x, p), body(x, p)):
                assert got.dtype == want.dtype
                np.testing.assert_array_equal(got, want)
                np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    assert len(cf.traces) == 1


cover("np.power", A, note="a scalar exponent of 0.5 (literal, runtime scalar or one-element "
      "array) is sqrt for float32/64, as NumPy's loop computes it",
      test="test_ufuncs.py::test_power_of_a_scalar_half_is_sqrt")


def test_divmod_function():
    for dt in (np.float32, np.float64, np.int16, np.uint32, np.int64):
        a, b = grid(dt)
        check(lambda a, b: np.divmod(a, b), a, b, tol="arith", signed_zero=True)


cover("np.divmod", A, [np.float32, np.float64, np.int16, np.uint32, np.int64],
      test="test_ufuncs.py::test_divmod_function")


POWFAST = "np.power (x ** scalar fast paths)"


@pytest.mark.parametrize("dtype", [param(d, name=POWFAST, dtype=d, id=short(d)) for d in ALL])
def test_power_scalar_fast_paths(dtype):
    """ndarray ** 2 / 0.5 / -1 / 1 / 0 / 3: NumPy's fast paths (square, sqrt, reciprocal,
    copy) decide the result dtype (bool ** 2 is int8 via np.square)."""
    a = make((33,), dtype, domain=(0, 9) if np.dtype(dtype).kind in "iub" else None)
    ops = {"**2": lambda a: a ** 2, "**0.5": lambda a: a ** 0.5, "**1": lambda a: a ** 1,
           "**0": lambda a: a ** 0, "**3": lambda a: a ** 3, "**-1.0": lambda a: a ** -1.0,
           "**2.0": lambda a: a ** 2.0, "np.power(a, 2)": lambda a: np.power(a, 2)}
    check_many(ops, a, tol="transc", signed_zero=True)


cover(POWFAST, A, ALL, test="test_ufuncs.py::test_power_scalar_fast_paths")
