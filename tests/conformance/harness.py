"""Conformance harness: run one NumPy body with plain NumPy and through fl.compile, compare.

    check(fn, *args)                 # run fn(*args) both ways and compare everything
    @conformance(make_args, ...)     # decorator form: the decorated body is the traced function

What is compared (see `assert_same`):
  * the result tree (tuple / list / dict / leaves), leaf for leaf;
  * ndarray versus NumPy scalar (a 0-d result must come back the way NumPy gives it);
  * dtype and shape;
  * values: exact for bool and integers; for floats NaN positions and infinities must match,
    finite values within `rtol * |expected| + atol` (presets in TOLERANCES, picked by the
    result dtype); signed zeros must match where the test asks for it (`signed_zero=True`);
  * the arguments after the call (in-place updates of inputs must replay);
  * a second call (the replay path of the cached program) gives the same answer again;
  * a third call with new values of the same signature (`new_values`: floats scaled by 33/32,
    integers and booleans permuted, a sorted row kept sorted; the same shapes, dtypes and
    memory layouts) replays the same program and agrees with NumPy on those values.

If NumPy raises, the compiled function must raise the same exception class (fastlaunch's
TracingError is *not* accepted in its place: it means "not supported").

Inputs come from `make` (random values across dtypes, shapes and memory layouts, with special
values mixed in) and are deterministic per test (seeded from the test id).

The registry (`cover`, REGISTRY) records, for docs/numpy-coverage.md, every NumPy function the
suite covers: its category, the dtypes tested, its status and documented differences.
"""
from __future__ import annotations

import copy
import functools
import hashlib
import inspect
import math
import os
from dataclasses import dataclass, field

import numpy as np
import pytest

import fastlaunch as fl

# ---- dtypes ------------------------------------------------------------------------------------
FLOATS = [np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)]
SINTS = [np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64)]
UINTS = [np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64)]
INTS = SINTS + UINTS
BOOL = [np.dtype(np.bool_)]
ALL = FLOATS + INTS + BOOL
# complex dtypes: driven by test_complex.py (not part of ALL: the functions of the other files
# that NumPy accepts complex values for are listed there)
COMPLEX = [np.dtype(np.complex64), np.dtype(np.complex128)]
# a smaller spread used where the full matrix would only repeat the same code path
SOME = [np.dtype(t) for t in (np.float16, np.float32, np.float64, np.int8, np.int64, np.uint8,
                               np.uint64, np.bool_)]

SHORT = {np.dtype(np.bool_): "bool"}


def short(dt) -> str:
    dt = np.dtype(dt)
    return SHORT.get(dt, dt.name)


def ids(dtypes):
    return [short(d) for d in dtypes]


def accepted(fn, dtypes=ALL, nargs=1):
    """The dtypes (of all `nargs` operands) for which NumPy accepts `fn` (ufunc or callable)."""
    out = []
    for dt in dtypes:
        dt = np.dtype(dt)
        try:
            if isinstance(fn, np.ufunc):
                fn.resolve_dtypes((dt,) * fn.nin + (None,) * fn.nout)
            else:
                with np.errstate(all="ignore"):
                    fn(*[np.ones(3, dt)] * nargs)
        except Exception:
            continue
        out.append(dt)
    return out


def rejected(fn, dtypes=ALL, nargs=1):
    ok = accepted(fn, dtypes, nargs)
    return [np.dtype(d) for d in dtypes if np.dtype(d) not in ok]


# ---- tolerances --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tol:
    """Relative tolerance by result float size; atol in units of the dtype's smallest normal."""
    f16: float
    f32: float
    f64: float
    atol_tiny: float = 1.0

    def rtol(self, dt) -> float:
        return {2: self.f16, 4: self.f32, 8: self.f64}[np.dtype(dt).itemsize]


TOLERANCES = {
    "exact": Tol(0.0, 0.0, 0.0, 0.0),
    # float16: NumPy computes in float32 and rounds once, as the kernels do: IEEE operations
    # match exactly; libm results one float32 ulp apart may round to neighbouring halves
    "arith": Tol(0.0, 2e-6, 1e-14),        # +-*/ sqrt, casts: IEEE, a few roundings at most
    "transc": Tol(1e-3, 1e-5, 1e-12),      # libm / libmvec versus NumPy's own SIMD math
    "reduce": Tol(2e-3, 1e-4, 1e-11),      # reassociated sums (pairwise in NumPy)
}


def tolerance(tol):
    return TOLERANCES[tol] if isinstance(tol, str) else tol


# ---- comparison --------------------------------------------------------------------------------
class Mismatch(AssertionError):
    pass


def _describe(x):
    if isinstance(x, np.ndarray):
        return f"ndarray {x.dtype}{list(x.shape)}"
    if isinstance(x, np.generic):
        return f"NumPy scalar {type(x).__name__}"
    return f"{type(x).__name__}"


def assert_same(expected, got, *, tol="exact", signed_zero=False, path="result", mask=None,
                values=True, atol=0.0):
    """Compare two result trees the way the module docstring says.  `mask` (bool array or
    callable(expected) -> bool array) selects the positions whose values are compared (the rest
    are NumPy platform-defined); `values=False` compares only types, dtypes and shapes.
    `atol`: an absolute tolerance (a number, or an array broadcast against the value), or a
    tuple/list/dict of them matching the result's structure."""
    if isinstance(expected, (tuple, list)):
        if type(got) is not type(expected) or len(got) != len(expected):
            raise Mismatch(f"{path}: expected {type(expected).__name__} of {len(expected)}, "
                           f"got {_describe(got)} {got!r:.200}")
        for i, (e, g) in enumerate(zip(expected, got)):
            m = mask[i] if isinstance(mask, (tuple, list)) else mask
            a = atol[i] if isinstance(atol, (tuple, list)) else atol
            assert_same(e, g, tol=tol, signed_zero=signed_zero, path=f"{path}[{i}]", mask=m,
                        values=values, atol=a)
        return
    if isinstance(expected, dict):
        if not isinstance(got, dict) or set(got) != set(expected):
            raise Mismatch(f"{path}: expected dict with keys {sorted(expected)}, got {got!r:.200}")
        for k in expected:
            m = mask.get(k) if isinstance(mask, dict) else mask
            a = atol.get(k, 0.0) if isinstance(atol, dict) else atol
            assert_same(expected[k], got[k], tol=tol, signed_zero=signed_zero,
                        path=f"{path}[{k!r}]", mask=m, values=values, atol=a)
        return
    if not isinstance(expected, (np.ndarray, np.generic)):
        if type(got) is not type(expected) or got != expected:
            raise Mismatch(f"{path}: expected {expected!r} ({type(expected).__name__}), "
                           f"got {got!r:.200} ({type(got).__name__})")
        return
    if isinstance(expected, np.ndarray) != isinstance(got, np.ndarray) or \
            not isinstance(got, (np.ndarray, np.generic)):
        raise Mismatch(f"{path}: expected {_describe(expected)}, got {_describe(got)}")
    if expected.dtype != got.dtype:
        raise Mismatch(f"{path}: dtype {got.dtype}, expected {expected.dtype}")
    if np.shape(expected) != np.shape(got):
        raise Mismatch(f"{path}: shape {np.shape(got)}, expected {np.shape(expected)}")
    if not values:
        return
    e = np.asarray(expected)
    g = np.asarray(got)
    if callable(mask):
        mask = mask(e)
    sel = np.ones(e.shape, bool) if mask is None else np.broadcast_to(np.asarray(mask, bool), e.shape)
    if e.dtype.kind in "biu":
        bad = (e != g) & sel
    elif e.dtype.kind == "c":     # each part as a float of the part dtype
        part = np.dtype(e.dtype.char.lower())
        bad = (_float_mismatch(e.real.astype(part), g.real.astype(part), tolerance(tol),
                               signed_zero, atol)
               | _float_mismatch(e.imag.astype(part), g.imag.astype(part), tolerance(tol),
                                 signed_zero, atol)) & sel
    else:
        bad = _float_mismatch(e, g, tolerance(tol), signed_zero, atol) & sel
    if bad.any():
        where = np.argwhere(bad) if bad.ndim else [()]
        shown = []
        for pos in list(where)[:6]:
            pos = tuple(int(p) for p in pos)
            shown.append(f"  at {pos}: got {g[pos]!r}, expected {e[pos]!r}")
        raise Mismatch(f"{path}: {int(bad.sum())} of {bad.size} values differ "
                       f"({e.dtype}{list(e.shape)}, tol={tol}):\n" + "\n".join(shown))


def _float_mismatch(e, g, tol: Tol, signed_zero, atol):
    with np.errstate(all="ignore"):
        e_nan, g_nan = np.isnan(e), np.isnan(g)
        bad = e_nan != g_nan
        e_inf, g_inf = np.isinf(e), np.isinf(g)
        inf_bad = (e_inf | g_inf) & ~(e_nan | g_nan) & (e != g)
        fin = np.isfinite(e) & np.isfinite(g)
        rtol = tol.rtol(e.dtype)
        tiny = float(np.finfo(e.dtype).tiny) * tol.atol_tiny
        diff = np.abs(e.astype(np.float64) - g.astype(np.float64))
        limit = rtol * np.abs(e.astype(np.float64)) + tiny + atol
        num_bad = fin & (diff > limit)
        bad = bad | inf_bad | num_bad
        if signed_zero:
            zero = (e == 0) & (g == 0)
            bad = bad | (zero & (np.signbit(e) != np.signbit(g)))
    return bad


# ---- running both ways -------------------------------------------------------------------------
def _fresh(args):
    """Deep copies of the arguments that keep each array's memory layout (strides, offset)."""
    def one(a):
        if isinstance(a, np.ndarray):
            return _copy_layout(a)
        if isinstance(a, (tuple, list)):
            return type(a)(one(x) for x in a)
        if isinstance(a, dict):
            return {k: one(v) for k, v in a.items()}
        return copy.copy(a)
    return [one(a) for a in args]


def _copy_layout(a: np.ndarray) -> np.ndarray:
    if a.strides and 0 in a.strides and a.size > 1:   # broadcast (stride 0) input: keep it one
        return a                                      # (read-only, so it cannot be written)
    base = a.base if isinstance(a.base, np.ndarray) and a.base.base is None else None
    if base is not None and base.flags.c_contiguous:
        nb = base.copy()
        off = a.__array_interface__["data"][0] - base.__array_interface__["data"][0]
        return np.ndarray(a.shape, a.dtype, buffer=nb, offset=off, strides=a.strides)
    out = np.empty_like(a, order="K")
    out[...] = a
    return out


# Floats of the new-values call: scaled by 33/32, exact in every float dtype, so that every
# non-zero finite value changes (by far more than any tolerance) while zeros, infinities,
# NaNs, signs, order and ties stay where they were (per-element masks and bounds still fit).
NEW_VALUE_SCALE = 33 / 32


def new_values(args, key=()):
    """Arguments of the same signature as `args` (dtypes, shapes, memory layouts) holding other
    values: float and complex arrays scaled by NEW_VALUE_SCALE; integer and boolean arrays
    permuted (deterministically), rows sorted along the last axis kept sorted (index arrays
    stay in range, bins ordered); scalars and empty arrays as they were.  None when nothing
    changed (then a call would only repeat the replay)."""
    rng = rng_for("new values", *key)
    changed = []

    def one(a):
        if isinstance(a, (tuple, list)):
            return type(a)(one(x) for x in a)
        if isinstance(a, dict):
            return {k: one(v) for k, v in a.items()}
        if not isinstance(a, np.ndarray) or a.size == 0 or a.dtype.kind not in "fciub":
            return a
        stride0 = tuple(slice(0, 1) if st == 0 and n > 1 else slice(None)
                        for st, n in zip(a.strides, a.shape))
        core = a[stride0]                        # a broadcast input: its distinct elements
        if a.dtype.kind in "fc":
            with np.errstate(all="ignore"):
                vals = core * a.dtype.type(NEW_VALUE_SCALE)
        else:
            vals = rng.permutation(core.ravel()).reshape(core.shape)
            if core.ndim and core.shape[-1] > 1:
                if np.all(core[..., 1:] >= core[..., :-1]):
                    vals = np.sort(vals, axis=-1)
                elif np.all(core[..., 1:] <= core[..., :-1]):
                    vals = np.flip(np.sort(vals, axis=-1), axis=-1)
        vals = vals.astype(a.dtype)
        changed.append(not np.array_equal(vals, core, equal_nan=True))
        if core.shape != a.shape:
            return np.broadcast_to(np.array(vals, order="C"), a.shape)
        out = _copy_layout(a)
        out[...] = vals
        return out
    out = [one(a) for a in args]
    return out if any(changed) else None


def public_error_class(err: BaseException) -> type:
    """The exception class a conforming implementation must raise where NumPy raised `err`:
    its first base that is a builtin or in numpy.exceptions (NumPy's private subclasses, such as
    _UFuncNoLoopError, are not required)."""
    for cls in type(err).__mro__:
        if cls.__module__ in ("builtins", "numpy.exceptions"):
            return cls
    return Exception


def run_numpy(fn, args, kwargs=None):
    """(result, exception) of fn on copies of args; NumPy warnings silenced."""
    args = _fresh(args)
    try:
        with np.errstate(all="ignore"):
            return fn(*args, **(kwargs or {})), None, args
    except Exception as err:   # noqa: BLE001 - any NumPy error is part of the contract
        return None, err, args


def check(fn, *args, tol="exact", signed_zero=False, mask=None, values=True, atol=0.0,
          kwargs=None, compile_kw=None, replay=True, new_args=None):
    """Run fn(*args) with NumPy and compiled; compare results, argument updates and errors.
    `atol` may be a callable(expected) or (expected, args) -> atol, evaluated for each call
    with that call's results and arguments (the new-values call has other ones); a plain
    atol computed from `args` must also hold for the new values (floats scaled by
    NEW_VALUE_SCALE).  `new_args`: a callable that restores relations between arguments
    in the new values (new_values(args) -> the arguments of the new-values call)."""
    expected, np_err, np_args = run_numpy(fn, args, kwargs)
    cfn = fl.compile(fn, **(compile_kw or {}))
    fl_args = _fresh(args)
    if np_err is not None:
        with pytest.raises(public_error_class(np_err)):
            with np.errstate(all="ignore"):
                cfn(*fl_args, **(kwargs or {}))
        return None
    with np.errstate(all="ignore"):
        got = cfn(*fl_args, **(kwargs or {}))
    opts = dict(tol=tol, signed_zero=signed_zero, mask=mask, values=values, atol=atol)
    if callable(atol):                   # a bound computed from the call's result and args
        opts["atol"] = _call_bound(atol, expected, args)
    assert_same(expected, got, **opts)
    _compare_args(np_args, fl_args, opts)
    if replay:
        fl_args2 = _fresh(args)
        with np.errstate(all="ignore"):
            got2 = cfn(*fl_args2, **(kwargs or {}))
        assert_same(expected, got2, path="result (replayed call)", **opts)
        _compare_args(np_args, fl_args2, opts)
        _check_new_values(fn, cfn, args, kwargs, opts, atol, new_args)
        assert len(cfn.traces) == 1, f"replay re-traced: {cfn.stats}"
    return got


def _check_new_values(fn, cfn, args, kwargs, opts, atol, new_args):
    """The compiled function on new values of the traced signature (`new_values`): the same
    program replayed, compared with NumPy on those values (or raising as NumPy does)."""
    args3 = new_values(args)
    if args3 is None:
        return
    if new_args is not None:
        args3 = new_args(args3)
    expected, np_err, np_args = run_numpy(fn, args3, kwargs)
    if callable(atol) and np_err is None:
        opts = dict(opts, atol=_call_bound(atol, expected, args3))
    fl_args = _fresh(args3)
    with np.errstate(all="ignore"):
        if np_err is not None:
            with pytest.raises(public_error_class(np_err)):
                cfn(*fl_args, **(kwargs or {}))
            return
        got = cfn(*fl_args, **(kwargs or {}))
    assert_same(expected, got, path="result (replayed on new values)", **opts)
    _compare_args(np_args, fl_args, opts)


def _call_bound(atol, expected, args):
    """A callable atol's value for one call: atol(expected), or atol(expected, args) where it
    takes the call's arguments too (an error bound computed from the inputs)."""
    if len(inspect.signature(atol).parameters) >= 2:
        return atol(expected, args)
    return atol(expected)


def check_many(variants: dict, *args, atol=None, **kw):
    """Check many small bodies (label -> fn(*args)) with one compiled function returning a
    dict, so that they share one trace.  Bodies NumPy rejects are checked one by one (the
    compiled function must raise the same error).  `atol` may be a callable(label, expected)
    or (label, expected, args), evaluated for each call's results (and arguments)."""
    ok = {}
    for label, f in variants.items():
        _, err, _ = run_numpy(f, args)
        if err is not None:
            check(f, *args, **kw)
        else:
            ok[label] = f
    if not ok:
        return
    if callable(atol):
        per_label = atol
        if len(inspect.signature(per_label).parameters) >= 3:
            def atol(expected, args_):
                return {k: per_label(k, v, args_) for k, v in expected.items()}
        else:
            def atol(expected):
                return {k: per_label(k, v) for k, v in expected.items()}
    check(lambda *xs: {k: f(*xs) for k, f in ok.items()}, *args, atol=atol or 0.0, **kw)


def _compare_args(np_args, fl_args, opts):
    for i, (e, g) in enumerate(zip(np_args, fl_args)):
        if isinstance(e, (np.ndarray, tuple, list, dict)):
            o = dict(opts, mask=None, atol=0.0)
            assert_same(e, g, path=f"argument {i} after the call", **o)


def conformance(make_args, **check_kw):
    """Decorator: the decorated function is the NumPy body; the test's parameters are those of
    `make_args`, which returns the argument tuple for the body.

        @pytest.mark.parametrize("dtype", FLOATS)
        @conformance(lambda dtype: (make((5, 7), dtype),), tol="arith")
        def test_double(a):
            return a * 2
    """
    def deco(body):
        @functools.wraps(body)
        def test(*params, **kw):
            args = make_args(*params, **kw)
            check(body, *args, **check_kw)
        test.__signature__ = inspect.signature(make_args)
        del test.__wrapped__
        return test
    return deco


# ---- inputs ------------------------------------------------------------------------------------
def rng_for(*key) -> np.random.Generator:
    """A generator seeded from the current test id plus `key`: reproducible per test."""
    node = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
    h = hashlib.sha256(repr((node,) + tuple(str(k) for k in key)).encode()).digest()
    return np.random.default_rng(int.from_bytes(h[:8], "little"))


def float_specials(dt) -> list:
    fi = np.finfo(dt)
    return [np.nan, np.inf, -np.inf, 0.0, -0.0, float(fi.tiny), -float(fi.tiny),
            float(fi.smallest_subnormal), float(fi.max), -float(fi.max), 1.0, -1.0, 0.5, -0.5,
            1.5, -2.5, 2.5, 3.0, -7.0, float(fi.eps), 1e-30, 1e30, math.pi]


def int_specials(dt) -> list:
    ii = np.iinfo(dt)
    vals = [0, 1, 2, 3, 7, int(ii.max), int(ii.max) - 1, int(ii.max) // 2]
    if ii.min < 0:
        vals += [-1, -2, -7, int(ii.min), int(ii.min) + 1]
    return vals


def specials(dt) -> np.ndarray:
    dt = np.dtype(dt)
    if dt.kind == "f":
        with np.errstate(all="ignore"):
            return np.array(float_specials(dt), dtype=dt)
    if dt.kind == "b":
        return np.array([False, True])
    if dt.kind == "c":           # special parts paired with ordinary and special parts
        part = specials(dt.char.lower())
        other = np.array([0.0, -0.0, 1.0, -2.5, np.inf, np.nan], dt.char.lower())
        out = np.zeros(2 * len(part) * len(other), dt)
        out.real[: len(part) * len(other)] = np.repeat(part, len(other))
        out.imag[: len(part) * len(other)] = np.tile(other, len(part))
        out.imag[len(part) * len(other):] = np.repeat(part, len(other))
        out.real[len(part) * len(other):] = np.tile(other, len(part))
        return out
    return np.array(int_specials(dt), dtype=dt)


def random_values(dt, n, rng, domain=None, special=True) -> np.ndarray:
    """n values of dtype dt: mostly 'ordinary' numbers, some full-range, some special values.
    domain=(lo, hi) restricts the ordinary values (and drops out-of-domain specials)."""
    dt = np.dtype(dt)
    if dt.kind == "b":
        return rng.random(n) < 0.5
    if dt.kind == "c":
        part = np.dtype(dt.char.lower())
        v = np.zeros(n, dt)
        v.real = random_values(part, n, rng, domain, special=False)
        v.imag = random_values(part, n, rng, domain, special=False)
        if special and n:
            sp = specials(dt)
            k = min(len(sp), max(1, n // 4))
            v[rng.choice(n, size=k, replace=False)] = rng.choice(sp, size=k, replace=False)
        return v
    if dt.kind == "f":
        if domain is None:
            v = rng.standard_normal(n) * np.exp(rng.uniform(-3, 3, n))
        else:
            v = rng.uniform(domain[0], domain[1], n)
        v = v.astype(dt)
    else:
        ii = np.iinfo(dt)
        lo, hi = (int(ii.min), int(ii.max)) if domain is None else (
            max(int(ii.min), int(math.floor(domain[0]))), min(int(ii.max), int(math.ceil(domain[1]))))
        small = rng.integers(max(lo, -20), min(hi, 20) + 1, n, dtype=np.int64)
        full = rng.integers(lo, hi, n, dtype=dt, endpoint=True)
        v = np.where(rng.random(n) < 0.6, small.astype(dt), full).astype(dt)
    if special and n:
        sp = specials(dt)
        if domain is not None and dt.kind in "iu":
            sp = sp[(sp >= domain[0]) & (sp <= domain[1])]
        k = min(len(sp), max(1, n // 4))
        if k:
            pos = rng.choice(n, size=k, replace=False)
            v[pos] = rng.choice(sp, size=k, replace=False) if len(sp) >= k else sp[:k]
    return v


LAYOUTS = ("C", "T", "step", "neg", "negstep", "bcast")


def make(shape, dtype, layout="C", *, rng=None, values=None, domain=None, special=True, key=()):
    """An array of `shape` and `dtype` with the given memory layout:
    C (contiguous), T (a transposed view of a C array), step (every other element of a larger
    array), neg (negative strides), negstep (negative steps of 2), bcast (stride-0 rows)."""
    dt = np.dtype(dtype)
    shape = tuple(shape)
    rng = rng or rng_for("make", shape, dt, layout, domain, special, *key)
    n = int(np.prod(shape, dtype=np.int64))
    if values is None:
        vals = random_values(dt, n, rng, domain, special).reshape(shape)
    else:
        with np.errstate(all="ignore"):
            vals = np.asarray(values).astype(dt).reshape(shape)
    if layout == "C" or not shape:
        return np.array(vals, order="C")        # (np.ascontiguousarray makes 0-d into 1-d)
    if layout == "T":
        return np.ascontiguousarray(vals.T).T
    if layout == "step":
        base = np.zeros(tuple(2 * s + 1 for s in shape), dt)
        out = base[tuple(slice(1, None, 2) for _ in shape)]
    elif layout == "neg":
        base = np.zeros(shape, dt)
        out = base[tuple(slice(None, None, -1) for _ in shape)]
    elif layout == "negstep":
        base = np.zeros(tuple(2 * s + 1 for s in shape), dt)
        out = base[tuple(slice(None, None, -2) for _ in shape)][tuple(slice(0, s) for s in shape)]
    elif layout == "bcast":      # every row repeats the first one (stride 0 on axis 0)
        return np.broadcast_to(vals[:1], shape)
    else:
        raise ValueError(layout)
    out[...] = vals
    return out


def scalar(dtype, value):
    """A NumPy scalar (runtime scalar parameter of the compiled function)."""
    with np.errstate(all="ignore"):
        return np.array(value).astype(dtype)[()]


def grid(dtype):
    """Special values of dtype as a (k,1) column and a (1,k) row: every pair of specials."""
    sp = specials(dtype)
    return sp.reshape(-1, 1).copy(), sp.reshape(1, -1).copy()


# Shapes the suite walks; layouts are combined with them in the tests.
SHAPE_SET = [(), (0,), (3, 0), (1,), (7,), (33,), (1000,), (5, 7), (3, 4, 5)]


def unary_inputs(dtype, domain=None):
    """A tuple of arrays covering shapes, layouts, special values and scalars for one dtype."""
    dt = np.dtype(dtype)
    return (
        make((1000,), dt, domain=domain),               # odd size, specials inside
        make((5, 7), dt, "T", domain=domain),           # transposed
        make((3, 4, 5), dt, "negstep", domain=domain),  # 3-D, negative steps
        make((33,), dt, "step", domain=domain),         # stepped 1-D
        make((), dt, domain=domain),                    # 0-d array
        scalar(dt, make((1,), dt, domain=domain, key=("s",))[0]),  # NumPy scalar parameter
        make((1,), dt, domain=domain),                  # size 1
        make((0,), dt),                                 # empty
        make((3, 0), dt),                               # empty 2-D
        make((4, 6), dt, "bcast", domain=domain),       # stride-0 rows
        specials(dt) if domain is None else make((7,), dt, domain=domain, key=("sp",)),
    )


# ---- marks and the registry ----------------------------------------------------------------------
from .status import BUG_RAISES, BUGS, NOT_IMPLEMENTED  # noqa: E402

OK, NI, BUG, DOC = "supported", "not implemented", "bug", "documented difference"


def not_implemented(reason="not implemented"):
    return pytest.mark.xfail(strict=True, raises=fl.TracingError, reason=reason)


def bug(reason, raises=None):
    kw = {"raises": raises} if raises is not None else {}
    return pytest.mark.xfail(strict=True, reason="bug: " + reason, **kw)


def bug_reason(name, dtype=None):
    key = short(dtype) if dtype is not None and not isinstance(dtype, str) else dtype
    return BUGS.get((name, key)) or BUGS.get((name, "*"))


def xmarks(name, dtype=None):
    """The xfail marks a test of `name` (for `dtype`) carries, from status.py."""
    if name in NOT_IMPLEMENTED:
        return [not_implemented(NOT_IMPLEMENTED[name] or "not implemented")]
    reason = bug_reason(name, dtype)
    return [bug(reason, BUG_RAISES.get(reason))] if reason else []


PARAM_NAMES: set = set()


def param(*values, name, dtype=None, id=None):
    """pytest.param with the marks of `name`/`dtype` from status.py."""
    PARAM_NAMES.add(name)
    return pytest.param(*values, marks=xmarks(name, dtype), id=id)


@dataclass
class Entry:
    name: str
    category: str
    dtypes: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    tests: list = field(default_factory=list)

    @property
    def status(self) -> str:
        if self.name in NOT_IMPLEMENTED:
            return NI
        return BUG if self.bugs else OK

    @property
    def bugs(self) -> list:
        return [f"{d if d != '*' else 'all dtypes'}: {r}" for (n, d), r in BUGS.items()
                if n == self.name]


REGISTRY: dict = {}
CATEGORY_ORDER = ["arithmetic", "exponential and log", "trigonometric and hyperbolic",
                  "rounding", "min/max, clip, sign manipulation", "predicates", "comparisons",
                  "logical", "bitwise and shifts", "selection and casting", "reductions",
                  "nan-reductions", "cumulative", "shapes and views", "joining",
                  "construction", "gather", "scatter", "sorting and selection",
                  "matrix helpers", "linear algebra",
                  "data-dependent size"]


def cover(name, category, dtypes=(), *, note=None, test=None):
    """Record that the suite covers `name` (dtypes tested, documented differences, tests)."""
    e = REGISTRY.get(name)
    if e is None:
        e = REGISTRY[name] = Entry(name, category)
    for d in dtypes:
        s = d if isinstance(d, str) else short(d)
        if s not in e.dtypes:
            e.dtypes.append(s)
    if note and note not in e.notes:
        e.notes.append(note)
    if test and test not in e.tests:
        e.tests.append(test)
    return e


def slow_except(params, *keep):
    """The params with those whose dtype is not in `keep` marked slow: the default run checks a
    representative sample, `pytest -m slow` the rest (see the README's Testing section)."""
    keep = {np.dtype(k) for k in keep}
    return [p if np.dtype(p.values[0]) in keep else
            pytest.param(*p.values, marks=[*p.marks, pytest.mark.slow], id=p.id)
            for p in params]


def param_marks(name, dtype=None):
    """Decorator applying the status.py marks of `name` to a whole (unparametrized) test."""
    PARAM_NAMES.add(name)

    def deco(fn):
        for m in xmarks(name, dtype):
            fn = m(fn)
        return fn
    return deco
