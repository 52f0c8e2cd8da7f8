"""complex64 and complex128 wherever NumPy takes them: ufuncs, reductions, products, selection,
casts, shapes and indexing; and the functions fastlaunch refuses for complex values (a
TracingError naming them, never a wrong answer).

Each part of a complex result is compared as a float of the part dtype (harness.assert_same).
Arithmetic that fastlaunch composes with NumPy's own formulas (+ - * /, reciprocal, square,
conjugate, comparisons, |z|) is compared on every special value; NumPy's SIMD loops may use
FMA for products, so those are compared within an error bound of eps * |a| * |b| per part.
Transcendental functions (libm's cexp/clog/csqrt/... in NumPy, composed of real libm calls
here) are compared on finite values within a bound relative to |z|, and every function at
each combination of special parts (zeros, infinities, NaN, overflow edges): NaNs, infinities
and signed zeros exactly as NumPy's (C99 Annex G).
"""
from __future__ import annotations

import numpy as np
import pytest

from .harness import COMPLEX, check, check_many, cover, make, scalar, short, specials

A, E, T = "arithmetic", "exponential and log", "trigonometric and hyperbolic"
PRED, CMP, SEL, RED = "predicates", "comparisons", "selection and casting", "reductions"


def _eps(dt) -> float:
    return float(np.finfo(np.dtype(dt).char.lower()).eps)


def _inputs(dt, special=True, domain=None):
    return (make((1000,), dt, special=special, domain=domain),
            make((5, 7), dt, "T", special=special, domain=domain),
            make((3, 4, 5), dt, "negstep", special=special, domain=domain),
            make((33,), dt, "step", special=special, domain=domain),
            make((), dt, special=special, domain=domain),
            scalar(dt, make((1,), dt, special=False, domain=domain, key=("s",))[0]),
            make((0,), dt),
            make((4, 6), dt, "bcast", special=special, domain=domain))


# ---- unary ------------------------------------------------------------------------------------
EXACT_UNARY = {"negative": A, "positive": A, "conjugate": A, "isnan": PRED,
               "isinf": PRED, "isfinite": PRED, "logical_not": "logical"}
ARITH_UNARY = {"reciprocal": A, "square": A, "sign": A, "absolute": A}
TRANSC_UNARY = {"exp": E, "log": E, "sqrt": E, "exp2": E, "expm1": E, "log2": E, "log10": E,
                "log1p": E, "sin": T, "cos": T, "sinh": T, "cosh": T}
REFUSED_UNARY = ["tan", "tanh", "arcsin", "arccos", "arctan", "arcsinh", "arccosh", "arctanh"]

for _n, _c in {**EXACT_UNARY, **ARITH_UNARY, **TRANSC_UNARY}.items():
    cover(f"np.{_n}", _c, COMPLEX, test="test_complex.py")
_FMA_NOTE = ("complex: each product rounded on its own (ar*br - ai*bi); NumPy's SIMD loop, on "
             "a CPU with FMA, rounds ar*br - ai*bi once: the last bit of a part may differ, and "
             "where a product of finite parts overflows NumPy may give an infinity where "
             "fastlaunch gives NaN ((1e300+1e300j)**2: NumPy -inf+infj, fastlaunch nan+infj)")
cover("np.square", A, COMPLEX, note=_FMA_NOTE, test="test_complex.py::test_unary_arith")
cover("np.exp", E, COMPLEX, note="complex exp, sin, cos, sinh, cosh: zeros, infinities and NaNs "
      "as C99 Annex G (the C library NumPy calls), and finite where exp(x) alone overflows but "
      "its product with a sine does not; tested at every combination of special parts",
      test="test_complex.py::test_every_function_at_special_values")


@pytest.mark.parametrize("dtype", COMPLEX, ids=short)
def test_unary_exact(dtype):
    check_many({n: (lambda f: lambda *xs: tuple(f(x) for x in xs))(getattr(np, n))
                for n in EXACT_UNARY}, *_inputs(dtype), signed_zero=True)


@pytest.mark.parametrize("dtype", COMPLEX, ids=short)
def test_unary_arith(dtype):
    """reciprocal (NumPy's scaled formula), square (z*z, FMA in NumPy's SIMD loop), sign (NumPy
    2: z/|z|) on finite values and on the special values."""
    eps = _eps(dtype)
    xs = _inputs(dtype, special=False) + (specials(dtype),)

    def atol(label, expected):
        with np.errstate(all="ignore"):
            return tuple(8 * eps * (np.abs(x) ** 2 if label == "square" else 1.0) for x in xs)
    check_many({n: (lambda f: lambda *a: tuple(f(x) for x in a))(getattr(np, n))
                for n in ARITH_UNARY}, *xs, tol="arith", atol=atol,
               mask=lambda e: np.isfinite(e))


@pytest.mark.parametrize("dtype", COMPLEX, ids=short)
def test_unary_transcendental(dtype):
    eps = _eps(dtype)
    xs = _inputs(dtype, special=False, domain=(-5, 5))

    def atol(label, expected):
        return tuple(64 * eps * (np.abs(e) + 1) for e in expected)
    names = sorted(TRANSC_UNARY)
    for group in (names[:6], names[6:]):          # at most 64 results per program
        check_many({n: (lambda f: lambda *a: tuple(f(x) for x in a))(getattr(np, n))
                    for n in group}, *xs, tol="transc", atol=atol)


@pytest.mark.parametrize("dtype", COMPLEX, ids=short)
def test_special_values_of_exp_log_sqrt(dtype):
    """Zeros, infinities and NaNs in one part: where C99 defines the result, as NumPy's."""
    p = np.dtype(dtype).char.lower()
    vals = np.array([0, -0.0, 1, -1, np.inf, -np.inf], p)
    z = np.zeros((len(vals), len(vals)), dtype)
    z.real, z.imag = vals[:, None], vals[None, :]
    z = z.ravel()
    check(lambda x: (np.exp(x), np.log(x), np.sqrt(x)), z, tol="transc",
          mask=lambda e: np.isfinite(e.real) & np.isfinite(e.imag) | np.isinf(e.real))


def _special_grid(dt, extra=()):
    """Every complex value whose parts are zeros, ones, infinities, NaN or `extra`."""
    p = np.dtype(dt).char.lower()
    vals = np.array([0.0, -0.0, 1.0, -1.0, 2.5, -2.5, np.inf, -np.inf, np.nan, *extra], p)
    z = np.zeros((len(vals), len(vals)), dt)
    z.real, z.imag = vals[:, None], vals[None, :]
    return z.ravel()


def _relative(dt, k, by_label=None):
    """An absolute tolerance of k eps |expected| per element (the larger finite part's
    magnitude: the modulus may overflow where the parts do not); `by_label`: other k's."""
    def atol(label, expected):
        with np.errstate(all="ignore"):
            re, im = (np.nan_to_num(np.abs(p), nan=0.0, posinf=0.0)
                      for p in (expected.real, expected.imag))
            return (by_label or {}).get(label, k) * _eps(dt) * np.maximum(re, im)
    return atol


@pytest.mark.parametrize("dtype", COMPLEX, ids=short)
def test_every_function_at_special_values(dtype):
    """Each complex function at every combination of special parts, plus values where exp,
    sinh, cosh overflow alone but not multiplied by a sine (past t = floor((emax-1) ln 2),
    2t and 3t), as NumPy gives them: NaNs and infinities where NumPy has them, signed zeros
    with NumPy's signs (C99 Annex G, as the C library's cexp/csin/ccosh/... compute them),
    finite values within a few ulps of |z|.  Replayed on the same grid reversed."""
    big = [710.5, -711.0, 1500.0, 1e-300] if dtype == np.complex128 else \
        [89.5, -90.0, 200.0, 1e-30]
    z = _special_grid(dtype, big)
    names = sorted({**EXACT_UNARY, **ARITH_UNARY, **TRANSC_UNARY})
    for group in (names[:12], names[12:]):
        check_many({n: getattr(np, n) for n in group}, z, tol="exact", signed_zero=True,
                   atol=_relative(dtype, 16))
        check_many({n: getattr(np, n) for n in group}, z[::-1].copy(), tol="exact",
                   signed_zero=True, atol=_relative(dtype, 16))


@pytest.mark.parametrize("dtype", COMPLEX, ids=short)
def test_binary_functions_at_special_values(dtype):
    """*, /, ** (array exponents: NumPy's integral powers by multiplication, cpow otherwise)
    and literal exponents (NumPy's fast paths: square, sqrt, reciprocal; npy_cpow's zero base)
    at every pair of the special grid."""
    z = _special_grid(dtype, [2.0, 0.5])
    a, b = np.repeat(z, z.size), np.tile(z, z.size)
    body = {"multiply": lambda a, b: a * b, "divide": lambda a, b: a / b,
            "power": lambda a, b: a ** b}
    # cexp(b clog(a)): the rounding of clog's parts, times |b clog(a)|, reaches the result
    bound = _relative(dtype, 16, {"power": 64})
    check_many(body, a, b, tol="exact", signed_zero=True, atol=bound)
    check_many(body, b, a, tol="exact", signed_zero=True, atol=bound)
    literal = {f"** {e!r}": (lambda e: lambda x: x ** e)(e)
               for e in (2, 3, 0.5, -1, -2, 2.0, 1, 0, 2.5, -0.5, 1j, 99)}
    check_many(literal, z, tol="exact", signed_zero=True, atol=_relative(dtype, 64))


@pytest.mark.parametrize("dtype", COMPLEX, ids=short)
@pytest.mark.parametrize("name", REFUSED_UNARY)
def test_unary_refused(dtype, name):
    import fastlaunch as fl
    with pytest.raises(fl.TracingError, match=f"np.{name} of {np.dtype(dtype)}"):
        fl.compile(getattr(np, name))(make((3,), dtype))


# ---- binary -----------------------------------------------------------------------------------
BINARY = {"add": A, "subtract": A, "multiply": A, "divide": A, "equal": CMP, "not_equal": CMP,
          "less": CMP, "less_equal": CMP, "greater": CMP, "greater_equal": CMP,
          "maximum": "min/max, clip, sign manipulation", "minimum": "min/max, clip, sign "
          "manipulation", "fmax": "min/max, clip, sign manipulation",
          "fmin": "min/max, clip, sign manipulation", "logical_and": "logical",
          "logical_or": "logical", "logical_xor": "logical"}
for _n, _c in BINARY.items():
    cover(f"np.{_n}", _c, COMPLEX, test="test_complex.py::test_binary")
cover("np.multiply", A, COMPLEX, note=_FMA_NOTE, test="test_complex.py::test_binary")
cover("np.power", A, COMPLEX, note="complex: NumPy's npy_cpow element by element (integral "
      "exponents below 100 in magnitude by repeated multiplication, else the C library's "
      "cexp(b clog(a))); where |b| is large, b clog(a) magnifies the last-bit differences of "
      "fastlaunch's log(|a|) and arg(a) against the C library's clog: relative errors grow "
      "as |b| ulps, and a result past overflow may be an infinity of another sign",
      test="test_complex.py::test_binary_functions_at_special_values")


def _pairs(dt):
    g0, g1 = specials(dt)[::3].reshape(-1, 1), specials(dt)[1::3].reshape(1, -1)
    return (make((1000,), dt, special=False), make((1000,), dt, special=False, key=("b",)),
            make((5, 1), dt), make((1, 7), dt, key=("b",)),
            make((7,), dt, "step", special=False), make((5, 7), dt, "T", special=False),
            g0.copy(), g1.copy())


@pytest.mark.parametrize("dtype", COMPLEX, ids=short)
def test_binary(dtype):
    eps = _eps(dtype)
    xs = _pairs(dtype)

    def body(f):
        return lambda a, b, c, d, e, g, s0, s1: (f(a, b), f(c, d), f(e, g), f(s0, s1),
                                               f(a, 2.5), f(1j, g), f(a, np.float32(-1)))

    def atol(label, expected):
        if label in ("multiply", "divide"):     # FMA in NumPy's SIMD multiply
            a, b, c, d, e, g, s0, s1 = xs
            big = [np.abs(a) * np.abs(b), np.abs(c) * np.abs(d), np.abs(e) * np.abs(g), 0.0,
                   np.abs(a) * 2.5, np.abs(g), np.abs(a)]
            if label == "divide":
                with np.errstate(all="ignore"):
                    big = [8 * np.abs(x) for x in expected]
            return tuple(4 * eps * np.nan_to_num(b_, posinf=0.0) for b_ in big)
        return 0.0
    names = sorted(BINARY)
    for group in (names[:8], names[8:]):          # at most 64 results per program
        check_many({n: body(getattr(np, n)) for n in group}, *xs, tol="arith", atol=atol,
                   mask=lambda e: np.ones(np.shape(e), bool) if np.asarray(e).dtype.kind == "b"
                   else np.isfinite(e))


@pytest.mark.parametrize("dtype", COMPLEX, ids=short)
def test_binary_special_values_exact(dtype):
    """+, -, ==, < on every pair of special values: bit for bit, NaNs included."""
    s0, s1 = specials(dtype)[::2].reshape(-1, 1), specials(dtype)[1::2].reshape(1, -1)
    check(lambda a, b: (a + b, a - b, a == b, a != b, a < b, a >= b, np.maximum(a, b),
                        np.fmin(a, b)), s0.copy(), s1.copy(), signed_zero=True)


@pytest.mark.parametrize("dtype", COMPLEX, ids=short)
def test_power(dtype):
    eps = _eps(dtype)
    a = make((200,), dtype, special=False, domain=(-2, 2))
    b = make((200,), dtype, special=False, domain=(-2, 2), key=("b",))

    def body(x, y):
        return (x ** 2, x ** 3, x ** 5, x ** -1, x ** -4, x ** 0, x ** 1, np.power(x, 7),
                np.power(x, y), x ** 0.5, np.power(x, 2.5))
    expected = body(a, b)
    check(body, a, b, tol="transc", atol=tuple(256 * eps * (np.abs(e) + 1) for e in expected))


# ---- casts, selection, construction -----------------------------------------------------------
cover("ndarray.astype", SEL, COMPLEX, test="test_complex.py::test_casts")
cover("np.where", SEL, COMPLEX, test="test_complex.py::test_where")
for _n in ("np.real", "np.imag", "np.angle", "np.conj", "ndarray.real", "ndarray.imag",
           "np.iscomplexobj", "np.isrealobj", "np.iscomplex", "np.isreal"):
    cover(_n, A if _n != "np.angle" else T, COMPLEX, test="test_complex.py::test_parts")


@pytest.mark.parametrize("dtype", COMPLEX, ids=short)
def test_casts(dtype):
    import warnings
    z = make((100,), dtype)
    x = make((100,), np.float32, key=("x",))
    i = make((100,), np.int16, key=("i",))
    b = make((100,), np.bool_, key=("b",))

    def body(z, x, i, b):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
            return (x.astype(dtype), i.astype(dtype), b.astype(dtype), z.astype(np.complex64),
                    z.astype(np.complex128), z.astype(bool), x + 0j, i * 1j, b + 0j,
                    z.astype(np.float64), z.astype(np.float32))
    check(body, z, x, i, b, signed_zero=True)


@pytest.mark.parametrize("dtype", COMPLEX, ids=short)
def test_parts(dtype):
    z = make((6, 7), dtype, "T")
    x = make((6, 7), np.float64, key=("x",))

    def body(z, x):
        return (z.real, z.imag, np.real(z), np.imag(z), np.angle(z), np.angle(z, deg=True),
                np.conj(z), z.conjugate(), np.real(x), np.imag(x), np.angle(x),
                np.iscomplexobj(z), np.isrealobj(z), np.iscomplex(z), np.isreal(z),
                np.iscomplex(x), (z * z.conj()).real)
    check(body, z, x, tol="transc", mask=lambda e: np.isfinite(e) if np.ndim(e) else True)


@pytest.mark.parametrize("dtype", COMPLEX, ids=short)
def test_part_assignment(dtype):
    def body(z, v):
        z.real = v
        w = z.copy()
        w.imag = 2 * v
        return w
    check(body, make((5, 4), dtype), make((5, 4), np.float64, key=("v",)))


@pytest.mark.parametrize("dtype", COMPLEX, ids=short)
def test_where(dtype):
    z, w = make((50,), dtype), make((50,), dtype, key=("w",))
    check(lambda z, w: (np.where(np.abs(z) < 1, z, w), np.where(z.real > 0, z, 0),
                        np.where(z.imag > 0, 1j, z)), z, w, signed_zero=True)


# ---- reductions and products ------------------------------------------------------------------
for _n in ("np.sum", "np.mean", "np.var", "np.std", "np.nansum", "np.nanmean",
           "np.linalg.norm"):
    cover(_n, RED, COMPLEX, test="test_complex.py::test_reductions")
cover("np.cumsum", "cumulative", COMPLEX, test="test_complex.py::test_reductions")
for _n in ("np.dot", "np.matmul", "np.vdot", "np.outer", "np.inner", "np.einsum"):
    cover(_n, "linear algebra", COMPLEX, test="test_complex.py::test_products")


@pytest.mark.parametrize("dtype", COMPLEX, ids=short)
def test_reductions(dtype):
    eps = _eps(dtype)
    z3 = make((4, 5, 6), dtype, "negstep", special=False)
    z1 = make((1000,), dtype, special=False)
    z1n = z1.copy()
    z1n[::7] = np.nan
    scale = max(np.abs(z3).max(), np.abs(z1).max())

    def body(z3, z1, z1n):
        return (np.sum(z3), np.sum(z3, axis=1), z3.sum(axis=(0, 2), keepdims=True), np.sum(z1),
                np.mean(z3, axis=0), np.mean(z1), np.var(z1), np.std(z3, axis=2),
                np.nansum(z1n), np.nanmean(z1n), np.cumsum(z3, axis=1), np.cumsum(z1),
                np.linalg.norm(z1), np.linalg.norm(z3, axis=2), np.linalg.norm(z1, 1),
                np.linalg.norm(z1, np.inf), np.linalg.norm(z3[0], "fro"))
    check(body, z3, z1, z1n, tol="reduce", atol=8 * 1000 * eps * scale * scale)


@pytest.mark.parametrize("dtype", COMPLEX, ids=short)
def test_products(dtype):
    eps = _eps(dtype)
    a = make((40, 30), dtype, special=False, domain=(-1, 1))
    b = make((30, 20), dtype, "T", special=False, domain=(-1, 1), key=("b",))
    v = make((30,), dtype, special=False, domain=(-1, 1), key=("v",))
    r = make((30,), np.float64, special=False, domain=(-1, 1), key=("r",))

    def body(a, b, v, r):
        return (a @ b, a @ v, np.dot(v, v), np.vdot(v, v), np.vdot(a[:, :30], b.T[:, :30]),
                np.outer(v, v[:7]), np.inner(v, r), a @ r, r @ b,
                np.einsum("ij,jk->ik", a, b), np.matmul(a[None], b))
    check(body, a, b, v, r, tol="reduce", atol=64 * 30 * eps)


# ---- shapes, joining and indexing fall out of the dtype -----------------------------------------
for _n in ("np.concatenate", "np.stack", "np.reshape", "np.transpose", "indexing",
           "np.broadcast_to", "np.flip", "np.roll"):
    cover(_n, "shapes and views", COMPLEX, test="test_complex.py::test_shapes_and_indexing")


@pytest.mark.parametrize("dtype", COMPLEX, ids=short)
def test_shapes_and_indexing(dtype):
    z = make((6, 8), dtype, "step")
    w = make((8,), dtype, key=("w",))
    idx = np.array([5, 0, 3, 3, -1])

    def body(z, w, idx):
        y = z.copy()
        y[1:3] = w
        y[idx[:2]] += 1j
        y[z.real > 0] = 0
        return (np.concatenate([z, w[None]]), np.stack([w, w[::-1]], axis=1), z.reshape(4, 12),
                z.T, z[::-2, 1:5], z[idx], np.broadcast_to(w, (3, 8)), np.flip(z, 0),
                np.roll(w, 3), y, z[2, 3], w[idx].sum())
    check(body, z, w, idx, tol="reduce", atol=1e-5)


# ---- what is refused ----------------------------------------------------------------------------
REFUSED = {"np.prod": np.prod, "np.cumprod": np.cumprod, "np.max": np.max, "np.min": np.min,
           "np.argmax": np.argmax, "np.argmin": np.argmin, "np.sort": np.sort,
           "np.argsort": np.argsort, "np.fft.fft": np.fft.fft}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_with_a_clear_error(name):
    import fastlaunch as fl
    with pytest.raises(fl.TracingError, match=name.replace(".", r"\.")):
        fl.compile(REFUSED[name])(make((10,), np.complex128))
