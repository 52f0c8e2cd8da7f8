"""The inlined math functions (codegen/vmath.py): accuracy on a strided sample of float32 and
a float64 sample, measured against a high-precision reference beside NumPy's own error on the
same inputs; special values as NumPy gives them; sin/cos sharing their reduction; the libm mode.

The exhaustive float32 sweep is bench/vmath_accuracy.py (docs/math-accuracy.md)."""
import os
import subprocess
import sys

import llvmlite.binding as llvm
import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch import env
from fastlaunch import backends
from fastlaunch.backends import get_backend, register_backend
from fastlaunch.codegen import vmath

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from vmath_accuracy import errors  # noqa: E402

F32_FUNCS = sorted(vmath.INLINE[vmath.F32])
F64_FUNCS = sorted(vmath.INLINE[vmath.F64])


INLINE = "cpu-inline-test"


def _libm_backend():
    from fastlaunch.backends.cpu import CPUBackend
    return CPUBackend(math="libm")


def _inline_backend():
    from fastlaunch.backends.cpu import CPUBackend
    return CPUBackend(math="inline")


@pytest.fixture(scope="module", autouse=True)
def libm_backend():
    """CPU backends in libm and inline modes, registered only while this module runs (other
    tests list the registered backends); the inline one is the module's default backend."""
    register_backend("cpu-libm-test", _libm_backend)
    register_backend(INLINE, _inline_backend)
    before = os.environ.get("FASTLAUNCH_BACKEND")
    os.environ["FASTLAUNCH_BACKEND"] = INLINE
    yield
    if before is None:
        os.environ.pop("FASTLAUNCH_BACKEND", None)
    else:
        os.environ["FASTLAUNCH_BACKEND"] = before
    for name in ("cpu-libm-test", INLINE):
        backends._FACTORIES.pop(name, None)
        backends._INSTANCES.pop(name, None)


def inline_available():
    return get_backend("cpu").math.inline


pytestmark = pytest.mark.skipif(not inline_available(), reason="host CPU without FMA: libm only")


def compiled(name, backend=INLINE):
    f = getattr(np, name)
    return fl.compile(lambda a: f(a), backend=backend)


def f32_sample(stride=65521):
    """Every stride-th float32 bit pattern, plus the neighbourhoods that matter."""
    bits = np.arange(0, 1 << 32, stride, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    extra = np.concatenate([np.linspace(-100, 100, 200001), np.linspace(-1, 1, 100001),
                            np.linspace(0.5, 2, 100001), np.geomspace(1e-40, 1e38, 100001),
                            np.linspace(71000, 72000, 20001),
                            np.linspace(130000, 132000, 20001)]).astype(np.float32)
    return np.concatenate([x, extra])


@pytest.mark.parametrize("name", F32_FUNCS)
def test_float32_ulp_within_numpy(name):
    x = f32_sample()
    with np.errstate(all="ignore"):
        ref = getattr(np, name)(x.astype(np.float64))
        ours, ours_bad = errors(compiled(name)(x), ref, np.float32)
        theirs, theirs_bad = errors(getattr(np, name)(x), ref, np.float32)
    assert ours_bad == 0
    assert ours <= max(theirs, 1.0), (name, ours, theirs)


@pytest.mark.parametrize("name", F64_FUNCS)
def test_float64_ulp_sampled(name):
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.integers(0, 1 << 64, 200_000, dtype=np.uint64).view(np.float64),
                        np.linspace(-746, 710, 200_001), np.geomspace(1e-320, 1e308, 200_001),
                        np.linspace(0.6, 1.5, 200_001)])
    with np.errstate(all="ignore"):
        ref = getattr(np, name)(x.astype(np.longdouble))
        ours, ours_bad = errors(compiled(name)(x), ref, np.float64)
        theirs, _ = errors(getattr(np, name)(x), ref, np.float64)
    assert ours_bad == 0
    assert ours <= max(theirs, 1.0), (name, ours, theirs)


def specials(dt):
    fi = np.finfo(dt)
    vals = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, fi.smallest_subnormal,
            -fi.smallest_subnormal, fi.smallest_normal, fi.smallest_normal / 3, fi.max, -fi.max,
            1.0, -1.0, 2.0, 10.0, 0.5, 1e-30 if dt == np.float32 else 1e-300,
            # exp's overflow / underflow / denormal thresholds
            88.72283, 88.72284, 89.0, -87.33654, -103.97208, -103.97209, -104.0, -150.0,
            127.99, 128.0, 128.01, -126.0, -149.0, -149.5, -150.0, -151.0,
            709.782712893384, 709.7827128933841, -708.3964185322641, -745.1332191019411,
            -745.1332191019412, 1023.99, 1024.0, -1074.0, -1075.0,
            # huge arguments for sin/cos, and the edge of the fast reduction
            1e5, -3e7, 1e20, 3.4e38, float(2 ** 24), float(2 ** 24) + 2, 71476.0625,
            float(2 ** 17), -float(2 ** 17), float(2 ** 17) + 0.015625,
            np.pi / 2, np.pi, 1e-8, -1e-8, 9.0, 9.1, 20.0, -20.0, 0.0625, -1.0 + 2 ** -20]
    with np.errstate(over="ignore"):
        return np.array(vals * 3, dtype=dt)     # three copies: vector and scalar code


def same(got, want, ulps, dt, exact=None):
    """got as NumPy's want: NaN where it is NaN, the same infinities and signed zeros, else
    within `ulps`.  Where `exact` (the correctly rounded result) is given, a zero or infinity
    that it has and NumPy does not is also accepted (NumPy's float32 exp2(-149.5) is 0)."""
    got, want = np.asarray(got), np.asarray(want)
    exact = want if exact is None else np.asarray(exact)
    for g, w, e, x in zip(got, want, exact, specials(dt)):
        if np.isnan(w) or np.isnan(g):
            assert np.isnan(w) and np.isnan(g), (x, g, w)
        elif np.isinf(w) or np.isinf(g) or w == 0 or g == 0:
            assert any(g == v and np.signbit(g) == np.signbit(v) for v in (w, e)), (x, g, w, e)
        else:
            assert abs(float(g) - float(w)) <= ulps * float(np.spacing(np.abs(w))), (x, g, w)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("name", F32_FUNCS)
def test_special_values_as_numpy(name, dt):
    x = specials(dt)
    with np.errstate(all="ignore"):
        want = getattr(np, name)(x)
        got = compiled(name)(x)
        exact = getattr(np, name)(x.astype(np.longdouble)).astype(dt)
    same(got, want, 3, dt, exact)


def test_non_vectorised_and_strided_uses():
    """The scalar code (remainder loops, strided views, reductions) agrees too."""
    x = specials(np.float32)
    with np.errstate(all="ignore"):
        for name in F32_FUNCS:
            f = getattr(np, name)
            got = fl.compile(lambda a: f(a[::3]))(x)
            want = compiled(name)(x)[::3]          # the vectorised code's values
            np.testing.assert_array_equal(got, want)
    y = np.linspace(-50, 50, 10007).astype(np.float32)
    total = fl.compile(lambda a: np.sum(np.sin(a) * np.exp(a * 0.01), axis=0))(y)
    np.testing.assert_allclose(total, np.sum(np.sin(y) * np.exp(y * 0.01)), rtol=1e-4)


def test_huge_sin_cos_take_libm():
    x = np.array([1e5, -3e7, 1e20, 3.4e38, 2.0 ** 24 + 2] * 7, np.float32)
    with np.errstate(all="ignore"):
        s, c = fl.compile(lambda a: (np.sin(a), np.cos(a)))(x)
    np.testing.assert_allclose(s, np.sin(x.astype(np.float64)), rtol=0, atol=1e-7)
    np.testing.assert_allclose(c, np.cos(x.astype(np.float64)), rtol=0, atol=1e-7)


# ---- sin and cos share the reduction --------------------------------------------------------
def optimized_ir(fn, x):
    be = get_backend(INLINE)
    kernels = fl.compile(fn).lower(x).plan.kernels
    assert len(kernels) == 1
    ctx = llvm.create_context()
    mod = be.optimized_module(be.source(kernels[0]), ctx)
    try:
        return str(mod)
    finally:
        mod.close()
        ctx.close()


def rint_calls(text):
    """The llvm.rint calls of a module, by type (one loop each: vector body, vector
    epilogue, scalar remainder)."""
    calls = [line.split("@llvm.rint.")[1].split("(")[0] for line in text.splitlines()
             if "call" in line and "@llvm.rint." in line and not line.startswith("declare")]
    return {t: calls.count(t) for t in set(calls)}


def test_sin_and_cos_share_the_reduction():
    x = np.ones(4096, np.float32)
    one = rint_calls(optimized_ir(lambda a: np.sin(a), x))
    both = rint_calls(optimized_ir(lambda a: np.sin(a) + np.cos(a), x))
    assert any(t.startswith("v") for t in both)          # vectorised
    # the reduction (and both polynomials) computed once per loop
    assert set(one.values()) == {1} and set(both.values()) == {1}, (one, both)


def test_no_math_calls_in_the_hot_loop():
    text = optimized_ir(lambda a: np.exp(a) + np.log(a) + np.tanh(a), np.ones(4096, np.float32))
    assert "@fastlaunch_" not in text and "_ZGV" not in text


def _no_scalef_backend():
    import dataclasses
    from fastlaunch.backends.cpu import CPUBackend
    be = CPUBackend(math="inline")
    be.math = dataclasses.replace(be.math, scalef=False)
    return be


@pytest.mark.skipif(not get_backend("cpu").math.scalef, reason="no AVX-512 (vscalef) here")
@pytest.mark.parametrize("name", ["exp", "exp2", "expm1", "tanh"])
def test_scalef_scaling_gives_the_same_bits(name):
    """exp's 2^k through ldexp (vscalefps) rounds denormal results once, as the two normal
    factors do: the same bits everywhere, overflow, underflow and NaN included (every float32
    was compared when it was written)."""
    register_backend("cpu-no-scalef-test", _no_scalef_backend)
    try:
        x = np.concatenate([f32_sample(stride=4099), specials(np.float32).astype(np.float32),
                            np.linspace(-110, 95, 400001, dtype=np.float32)])
        with np.errstate(all="ignore"):
            got = compiled(name)(x)
            want = compiled(name, "cpu-no-scalef-test")(x)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
        kernel = fl.compile(lambda a: getattr(np, name)(a)).lower(x).plan.kernels[0]
        assert "@llvm.ldexp" in get_backend(INLINE).source(kernel)
        assert "@llvm.ldexp" not in get_backend("cpu-no-scalef-test").source(kernel)
        x64 = np.concatenate([np.linspace(-750, 712, 400001), specials(np.float64)])
        with np.errstate(all="ignore"):
            got, want = compiled("exp")(x64), compiled("exp", "cpu-no-scalef-test")(x64)
        assert np.array_equal(got.view(np.uint64), want.view(np.uint64))
    finally:
        backends._FACTORIES.pop("cpu-no-scalef-test", None)
        backends._INSTANCES.pop("cpu-no-scalef-test", None)


# ---- the libm mode -------------------------------------------------------------------------
def test_libm_mode_is_a_target_key():
    inline, libm = get_backend(INLINE), get_backend("cpu-libm-test")
    assert inline.math_mode == "inline" and libm.math_mode == "libm"
    assert "math=inline" in inline.target_key and "math=libm" in libm.target_key
    kernel = fl.compile(lambda a: np.sin(a)).lower(np.ones(8, np.float32)).plan.kernels[0]
    assert "fastlaunch_sinf" in libm.source(kernel)
    assert "@llvm.rint" not in libm.source(kernel)
    assert "@llvm.rint" in inline.source(kernel)


def test_auto_mode_inlines_only_where_faster():
    """The default ("auto"): the exp and log families inline, sin/cos/tanh libmvec calls
    (their inline code, computed in float64, measured slower than libmvec)."""
    auto = get_backend("cpu")
    assert auto.math_mode == "auto" and "math=auto" in auto.target_key
    x = np.ones(8, np.float32)
    sin = fl.compile(lambda a: np.sin(a), backend="cpu").lower(x).plan.kernels[0]
    exp = fl.compile(lambda a: np.exp(a), backend="cpu").lower(x).plan.kernels[0]
    assert "@llvm.rint" not in auto.source(sin)
    assert "fastlaunch_expf" not in auto.source(exp) and "_ZGV" not in auto.source(exp)
    y = np.linspace(-3, 3, 1001, dtype=np.float32)
    np.testing.assert_allclose(fl.compile(lambda a: np.sin(a) + np.exp(a), backend="cpu")(y),
                               np.sin(y) + np.exp(y), rtol=2e-6, atol=2e-6)


def test_libm_mode_matches_glibc_scalar():
    x = np.linspace(-20, 20, 1001)
    got = fl.compile(lambda a: np.exp(a) + np.sin(a), backend="cpu-libm-test")(x[::2])
    # float64 libmvec may differ from scalar libm by a few ulp; what matters is that it is
    # glibc's code: close, and not the inline code's bits
    np.testing.assert_allclose(got, np.exp(x[::2]) + np.sin(x[::2]), rtol=1e-14, atol=1e-14)


def test_math_env_variable_validated(monkeypatch):
    monkeypatch.setenv("FASTLAUNCH_MATH", "LIBM ")
    assert env.math_mode() == "libm"
    monkeypatch.setenv("FASTLAUNCH_MATH", "")
    assert env.math_mode() == "auto"
    monkeypatch.setenv("FASTLAUNCH_MATH", "fast")
    with pytest.raises(env.EnvironmentVariableError, match="FASTLAUNCH_MATH='fast'"):
        env.math_mode()
    with pytest.raises(ValueError, match="math must be one of"):
        from fastlaunch.backends.cpu import CPUBackend
        CPUBackend(cache_dir=None, math="fast")


def test_math_env_variable_selects_libm_in_a_fresh_process(tmp_path):
    code = ("import numpy as np, fastlaunch as fl\n"
            "from fastlaunch.backends import get_backend\n"
            "f = fl.compile(lambda a: np.exp(a))\n"
            "f(np.ones(4, np.float32))\n"
            "print(get_backend('cpu').math_mode)\n")
    envs = dict(os.environ, FASTLAUNCH_MATH="libm", FASTLAUNCH_CACHE_DIR=str(tmp_path),
                PYTHONPATH=ROOT)
    envs.pop("FASTLAUNCH_BACKEND", None)          # this module's default backend is its own
    out = subprocess.run([sys.executable, "-c", code], env=envs, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "libm"
