"""Patterns found by compiling other people's NumPy code unchanged (issue 11, "prove it on
code you did not write"). Each test is the pattern in our own words, checked against NumPy."""
import numpy as np
import pytest
from numpy import empty as np_empty_by_name
from numpy import zeros
from numpy.lib.stride_tricks import as_strided as as_strided_by_name

import fastlaunch as fl

import assert_bodies  # noqa: E402  (tests/jit is on the path: test modules are imported by name)


# ---- a library that catches our TracingError and raises its own error ----------------------
def _checked_covariance(c):
    # a validation helper in the style of many libraries: any failure means "bad input"
    try:
        if c[0, 0] <= 0:               # data-dependent: a TracingError while tracing
            raise ArithmeticError
    except Exception:
        raise ValueError("covariance is not positive definite") from None
    return c


def test_swallowed_tracing_error_reraised_as_other_error_names_both():
    def density(x, cov):
        return np.sum(x * (_checked_covariance(cov) @ x))

    x = np.arange(3.0)
    cov = np.eye(3) * 2.0
    assert density(x, cov) == 10.0
    f = fl.compile(density)
    with pytest.raises(fl.TracingError) as info:
        f(x, cov)
    text = str(info.value)
    # the user sees that fastlaunch failed, not that their matrix is bad
    assert "caught a fastlaunch.TracingError" in text
    assert "test_realcode_patterns.py" in text and "_checked_covariance" in text
    assert "ValueError: covariance is not positive definite" in text
    assert "bool(x)" in text                   # what was not traceable
    assert isinstance(info.value.__cause__, ValueError)
    assert f.stats["entries"] == 0


def test_own_error_without_swallowing_is_left_alone():
    def strict(x):
        if x.shape[0] != 4:
            raise ValueError("need four values")
        return x

    with pytest.raises(ValueError, match="need four values"):
        fl.compile(strict)(np.zeros(3))


# ---- unsupported calls are named as the user wrote them, with what to use instead ----------
def _message(fn, *args):
    with pytest.raises(fl.TracingError) as info:
        fl.compile(fn)(*args)
    return str(info.value)


def test_submodule_function_named_with_its_submodule(monkeypatch):
    from fastlaunch.frontend.numpy import registry
    monkeypatch.delitem(registry.FUNCTIONS, np.linalg.eig, raising=False)
    text = _message(lambda a: np.linalg.eig(a), np.eye(3))
    assert text.startswith("np.linalg.eig is not supported"), text
    text = _message(lambda a: np.fft.rfft(a), np.ones(8))
    assert text.startswith("np.fft.rfft is not supported"), text


def test_scipy_ufunc_named_as_scipy_special(monkeypatch):
    special = pytest.importorskip("scipy.special")
    # a SciPy ufunc fastlaunch does not trace (erf and others are supported: frontend/special.py)
    text = _message(lambda x: special.dawsn(x) * 2, np.linspace(-1, 1, 5))
    assert text.startswith("scipy.special.dawsn is not supported"), text
    assert "np.dawsn" not in text


def test_unsupported_function_suggests_a_traced_equivalent(monkeypatch):
    from fastlaunch.frontend.numpy import registry
    monkeypatch.delitem(registry.FUNCTIONS, np.flip, raising=False)
    text = _message(lambda x: np.flip(x) * 2, np.arange(5.0))
    assert text.startswith("np.flip is not supported") and "instead, use x[::-1]" in text
    # and the suggestion is right
    x = np.arange(5.0) ** 2
    np.testing.assert_array_equal(fl.compile(lambda v: v[::-1] * 2)(x), np.flip(x) * 2)


def test_suggestion_only_when_the_equivalent_is_traced(monkeypatch):
    from fastlaunch.frontend.numpy import registry
    monkeypatch.delitem(registry.FUNCTIONS, np.average, raising=False)
    text = _message(lambda x: np.average(x), np.ones(4))
    assert "instead, use np.mean" in text
    monkeypatch.delitem(registry.FUNCTIONS, np.mean)      # the equivalent gone too
    text = _message(lambda x: np.average(x), np.ones(4))
    assert text.startswith("np.average is not supported") and "instead" not in text


def test_ufunc_methods_named_with_their_ufunc():
    text = _message(lambda x, i: np.add.reduceat(x, i), np.arange(4.0), np.array([0, 2]))
    assert text.startswith("np.add.reduceat with traced indices is not supported"), text


def test_outer_suggests_broadcasting():
    a, b = np.arange(3.0), np.arange(4.0) + 1
    f = fl.compile(lambda u, v: np.subtract.outer(u, v))
    try:
        got = f(a, b)
    except fl.TracingError as err:
        assert str(err).startswith("np.subtract.outer is not supported")
        assert "np.subtract(a[:, None], b)" in str(err)
        got = fl.compile(lambda u, v: np.subtract(u[:, None], v))(a, b)
    np.testing.assert_array_equal(got, np.subtract.outer(a, b))


def test_library_function_that_converts_its_arguments_is_named():
    linalg = pytest.importorskip("scipy.linalg")

    def precision_quadratic(x, cov):
        return x @ linalg.pinvh(cov) @ x        # scipy converts with np.asarray

    line = precision_quadratic.__code__.co_firstlineno + 1
    text = _message(precision_quadratic, np.ones(2), np.eye(2))
    # (SciPy wraps pinvh in a batching decorator: the message names pinvh, not the wrapper)
    assert text.startswith("scipy.linalg.pinvh (called at "), text
    assert f"test_realcode_patterns.py:{line})" in text
    # scipy.linalg.inv and a few others are traced (fastlaunch/frontend/scipy_funcs.py)
    np.testing.assert_array_equal(fl.compile(lambda c: linalg.inv(c))(np.eye(2) * 2),
                                  np.eye(2) / 2)


def test_conversion_in_own_code_keeps_the_general_message():
    table = np.arange(4.0)

    def lookup(k):
        return table[k]           # a NumPy array indexed by a traced array, in own code
    text = _message(lookup, np.array([1, 2]))
    assert text.startswith("converting a traced array")


# ---- z[mask] = f(x[mask]): elementwise functions of a boolean selection ---------------------
def _stable_sigmoid(x):
    # split by sign so that exp never overflows (a common way to write it)
    pos, neg = x >= 0, x < 0
    z = np.zeros_like(x)
    z[pos] = np.exp(-x[pos])
    z[neg] = np.exp(x[neg])
    top = np.ones_like(x)
    top[neg] = z[neg]
    return top / (1 + z)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_split_by_sign_sigmoid(dtype):
    f = fl.compile(_stable_sigmoid)
    rng = np.random.default_rng(0)
    for _ in range(2):                 # trace, then replay on new values
        x = (rng.standard_normal((4, 5)) * 30).astype(dtype)
        got = f(x)
        want = _stable_sigmoid(x)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == np.float64 else 1e-5)


def _power_where_positive(r):
    # the mask is written twice: two comparisons of the same array are one mask
    r[r > 0] = r[r > 0] ** (-1.5)
    return r.sum()


def test_same_mask_written_twice_updates_in_place():
    f = fl.compile(_power_where_positive)
    rng = np.random.default_rng(1)
    for _ in range(2):
        r = rng.standard_normal((3, 3))
        mine, ref = r.copy(), r.copy()
        np.testing.assert_allclose(f(mine), _power_where_positive(ref))
        np.testing.assert_allclose(mine, ref)        # the argument changed as in NumPy


def test_integer_selection_arithmetic_is_exact():
    def flip_negatives(a, k):
        neg = a < 0
        a[neg] = -a[neg] * k + 1
        return (a[neg] % 3).sum(), (a[neg] > 4).sum()

    f = fl.compile(flip_negatives)
    rng = np.random.default_rng(2)
    for k in (2, 3):
        a = rng.integers(-9, 9, 12)
        mine, ref = a.copy(), a.copy()
        got, want = f(mine, k), flip_negatives(ref, k)
        assert [int(v) for v in got] == [int(v) for v in want]
        np.testing.assert_array_equal(mine, ref)


def test_row_mask_with_trailing_broadcast_value():
    def scale_rows(x, keep, w):
        x[keep] = x[keep] * w + 1.0
        return x

    rng = np.random.default_rng(3)
    f = fl.compile(scale_rows)
    for _ in range(2):
        x, keep, w = rng.standard_normal((5, 3)), rng.random(5) < 0.5, rng.standard_normal(3)
        np.testing.assert_allclose(f(x.copy(), keep, w), scale_rows(x.copy(), keep, w))


def test_selection_reductions_of_derived_values():
    def stats(x):
        m = x > 0.5
        return np.exp(x[m]).sum(), (2 * x[m] - 1).mean(), (-x[m]).any()

    rng = np.random.default_rng(4)
    f = fl.compile(stats)
    for _ in range(2):
        x = rng.random(10)
        np.testing.assert_allclose(np.array(f(x), dtype=float), np.array(stats(x), dtype=float))


def test_selections_that_need_the_count_still_refuse():
    x = np.arange(6.0) - 2

    def other_mask(x):
        z = np.zeros_like(x)
        z[x > 0] = x[x < 1]           # different masks: sizes may differ
        return z

    def with_full_array(x):
        return (x[x > 0] + x).sum()   # (count,) + (6,): depends on the count

    for fn in (other_mask, with_full_array):
        with pytest.raises(fl.TracingError, match="size that depends on the data"):
            fl.compile(fn)(x)
    with pytest.raises(fl.TracingError):
        fl.compile(lambda v: np.exp(v[v > 0]))(x)   # a selection as a result


# ---- strings in argument containers: configuration, keyed by value ----------------------------
def _norm_layer(x, gamma, param):
    # a layer configured by a dict holding a mode string, numbers and running statistics
    mode = param["mode"]
    eps = param.get("eps", 1e-5)
    momentum = param.get("momentum", 0.9)
    mean = param.get("running_mean", np.zeros(x.shape[1], dtype=x.dtype))
    if mode == "train":
        mu = x.mean(axis=0)
        out = (x - mu) / np.sqrt(x.var(axis=0) + eps) * gamma
        param["running_mean"] = momentum * mean + (1 - momentum) * mu
    elif mode == "test":
        out = (x - mean) * gamma
    else:
        raise ValueError(f"unknown mode {mode!r}")
    return out, (param, mode)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_mode_string_in_a_config_dict(dtype):
    f = fl.compile(_norm_layer)
    rng = np.random.default_rng(5)
    for mode in ("train", "test", "train", "test"):
        x = rng.standard_normal((6, 3)).astype(dtype)
        gamma = rng.standard_normal(3).astype(dtype)
        start = {"mode": mode, "eps": 1e-3, "running_mean": rng.standard_normal(3).astype(dtype)}
        mine, ref = dict(start), dict(start)
        (out, (p, m)), (want, (_, m_ref)) = f(x, gamma, mine), _norm_layer(x, gamma, ref)
        np.testing.assert_allclose(out, want, rtol=1e-5)
        assert m == m_ref == mode and p["mode"] == mode    # the string comes back as it went in
        assert mine.keys() == ref.keys() == p.keys()
        np.testing.assert_allclose(mine["running_mean"], ref["running_mean"], rtol=1e-5)
    assert f.stats["entries"] == 2                          # one per mode, reused


def test_missing_key_filled_from_default_then_written_back():
    f = fl.compile(_norm_layer)
    x, gamma = np.arange(6.0).reshape(3, 2), np.ones(2)
    mine, ref = {"mode": "train"}, {"mode": "train"}
    np.testing.assert_allclose(f(x, gamma, mine)[0], _norm_layer(x, gamma, ref)[0])
    assert set(mine) == {"mode", "running_mean"}
    np.testing.assert_allclose(mine["running_mean"], ref["running_mean"])


def test_string_argument_selects_a_branch():
    def activate(x, kind):
        if kind == "relu":
            return np.maximum(x, 0)
        return np.tanh(x)

    x = np.linspace(-2, 2, 7)
    with pytest.raises(TypeError, match="argument 'kind'"):   # a bare str argument: refused
        fl.compile(activate)(x, "relu")
    f = fl.compile(activate, static_argnames=("kind",))
    g = fl.compile(lambda x, opts: activate(x, opts[0]))      # a str inside a container: fine
    for kind in ("relu", "tanh", "relu"):
        np.testing.assert_allclose(f(x, kind), activate(x, kind))
        np.testing.assert_allclose(g(x, (kind,)), activate(x, kind))
    assert f.stats["entries"] == g.stats["entries"] == 2


def test_saved_program_with_a_string_in_its_arguments(tmp_path):
    def scale(x, cfg):
        return x * cfg["k"] if cfg["op"] == "mul" else x + cfg["k"]

    path = tmp_path / "scale.flp"
    fl.compile(scale).save(path, np.ones(3), {"op": "mul", "k": 2.0})
    loaded = fl.load(path)
    np.testing.assert_allclose(loaded(np.arange(3.0), {"op": "mul", "k": 3.0}),
                               np.arange(3.0) * 3.0)
    with pytest.raises(Exception):  # noqa: B017  (another string is another signature)
        loaded(np.arange(3.0), {"op": "add", "k": 3.0})


# ---- creation functions imported by name (`from numpy import zeros`) --------------------------
def _fill_rows(a, b):
    out = zeros((a.shape[0], 2))            # the name imported from numpy, not np.zeros
    for i in range(a.shape[0]):
        out[i, 0] = a[i] * b
        out[i, 1] = a[i] - b
    scratch = np_empty_by_name(3)           # imported under another name
    scratch[:] = a[:3]
    return out, scratch


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_creation_function_imported_by_name(dtype):
    f = fl.compile(_fill_rows)
    rng = np.random.default_rng(6)
    for _ in range(2):
        a = (rng.standard_normal(4) * 10).astype(dtype)
        b = dtype(3)
        for got, want in zip(f(a, b), _fill_rows(a, b)):
            assert got.dtype == want.dtype
            np.testing.assert_allclose(got, want)
    # the module's names are NumPy's own again once the trace is over
    assert zeros is np.zeros and np_empty_by_name is np.empty
    assert type(zeros(2)) is np.ndarray


def test_library_function_reading_an_unsupported_attribute_is_named():
    pytest.importorskip("scipy.linalg")

    ndimage = pytest.importorskip("scipy.ndimage")

    def propagate(a):
        return ndimage.gaussian_filter(a, 1.0)   # scipy inspects its argument's flags

    with pytest.raises(fl.TracingError) as info:
        fl.compile(propagate)(np.eye(4))
    assert "scipy.ndimage.gaussian_filter" in str(info.value)
    assert "test_realcode_patterns.py" in str(info.value)


def test_ndarray_constructor_buffer_points_to_np_empty():
    def by_constructor(a):
        col = np.ndarray((a.shape[0], 2), dtype=a.dtype)   # not intercepted: a plain array
        col[:, 0] = a * 2
        col[:, 1] = a + 1
        return col

    def by_empty(a):
        col = np.empty((a.shape[0], 2), dtype=a.dtype)
        col[:, 0] = a * 2
        col[:, 1] = a + 1
        return col

    a = np.arange(4.0)
    with pytest.raises(fl.TracingError, match=r"not np\.ndarray\(shape\) \(use np\.empty"):
        fl.compile(by_constructor)(a)
    np.testing.assert_array_equal(fl.compile(by_empty)(a), by_constructor(a))


# ---- data-dependent Python control flow: the message says what the line does ---------------
def test_builtin_max_of_traced_values_suggests_np_maximum():
    def normalise(img):
        peak = np.abs(img).max()
        peak = max(1.0, peak)                  # Python's max on a traced scalar
        return img / peak

    text = _message(normalise, np.arange(4.0))
    assert "max()/min()" in text and "np.maximum(a, b)" in text
    # the suggestion, written out, compiles and matches
    fixed = fl.compile(lambda img: img / np.maximum(1.0, np.abs(img).max()))
    for x in (np.arange(4.0), np.full(4, 0.25)):
        np.testing.assert_allclose(fixed(x), normalise(x))


def test_assert_that_cannot_become_a_check_is_explained():
    # (this module's asserts are rewritten by pytest: no longer Python's assert statement)
    def checked(x):
        d = np.sqrt((x * x).sum())
        assert d != 0
        return x / d

    text = _message(checked, np.ones(3))
    assert text.startswith("bool(x) (an `if`, `while`, `and`/`or` or `not` on an array) needs "
                           "the value of a traced array (bool[]), which is not known while "
                           "tracing: an `assert` whose failure fastlaunch cannot tell"), text
    assert text.endswith("or check the inputs before the call."), text


def test_while_on_traced_values_is_explained():
    """The `while` hint follows the sentence it explains (it was spliced into the middle of
    it), and names the way to loop: a fixed count with np.where, or fl.iterate with until."""
    def iterate(x):
        while np.abs(x).max() > 1:
            x = x / 2
        return x

    text = _message(iterate, np.full(3, 5.0))
    assert text == (
        "bool(x) (an `if`, `while`, `and`/`or` or `not` on an array) needs the value of a "
        "traced array (bool[]), which is not known while tracing: here it is a `while` "
        "condition, so the number of iterations depends on the data. Loop a fixed number of "
        "times (for _ in range(n)) with np.where to freeze converged values, or make one "
        "iteration the compiled function and run the loop with fastlaunch.iterate(step, n, "
        "..., until=lambda ...: converged)."), text


def test_needs_the_value_advice_is_the_raising_calls_own():
    """Each "needs the value" error ends with advice for the call that raised it, and only
    that: no paragraph about storing into NumPy arrays after an `if`, no `if` advice after a
    store."""
    def branch(x):
        if x.sum() > 0:
            return x
        return -x

    def to_float(x):
        return x * float(x.sum())

    def store(x):
        out = np.ndarray(2)
        out[0] = x.sum()
        return out

    def index(x, i):
        return [1.0, 2.0][i.sum()] * x

    text = _message(branch, np.ones(3))
    assert text.endswith("which is not known while tracing: express data-dependent choices "
                         "with np.where(cond, a, b), or make the deciding argument static "
                         "with static_argnames=/static_argnums=."), text
    text = _message(to_float, np.ones(3))
    assert text.startswith("float(x) needs the value of a traced array (float64[]), which is "
                           "not known while tracing: return it from the function (a 0-d "
                           "array) and convert it after the call"), text
    for t in (_message(branch, np.ones(3)), text):
        assert "out[i] = x" not in t and "np.ndarray" not in t, t
    text = _message(store, np.ones(3))
    assert "float(x) needs the value of a traced array (float64[]), which is not known while " \
        "tracing: storing a traced value into a NumPy array (out[i] = x) converts it to a " \
        "Python number: create `out` from a traced value instead" in text, text
    assert "np.where" not in text, text
    text = _message(index, np.ones(3), np.ones(2, np.int64))
    assert text.startswith("using a traced array as a Python index or size (operator.index) "
                           "needs the value of a traced array (int64[]), which is not known "
                           "while tracing: to index a NumPy array by a traced index use "
                           "fastlaunch.asarray(array)[index]"), text


def test_shipped_program_with_a_string_in_its_arguments():
    cloudpickle = pytest.importorskip("cloudpickle")

    def scale(x, cfg):
        return x * cfg["k"] if cfg["op"] == "mul" else x + cfg["k"]

    f = fl.compile(scale, backend="cpu").with_programs(np.ones(3), {"op": "mul", "k": 2.0})
    g = cloudpickle.loads(cloudpickle.dumps(f))
    np.testing.assert_allclose(g(np.arange(3.0), {"op": "mul", "k": 3.0}), np.arange(3.0) * 3)
    # by keyword: the slow path finds the shipped entry by its recorded keys
    np.testing.assert_allclose(g(np.arange(3.0), cfg={"op": "mul", "k": 4.0}), np.arange(3.0) * 4)
    assert g.stats["traces"] == 0 and g.stats["programs_loaded"] == 1
    np.testing.assert_allclose(g(np.arange(3.0), {"op": "add", "k": 3.0}), np.arange(3.0) + 3)
    assert g.stats["traces"] == 1                        # another string: traced afresh


def test_long_chain_of_element_updates_reading_each_other():
    """Hundreds of `out[i] &= f(out[j])`-style element updates, each reading the state the
    previous ones left (a local-maxima scan written with Python loops).  Before: fusing the
    chain materialised every earlier state by recursing into the chain below it, and raised
    RecursionError once the chain was a few hundred updates long."""
    def scan(x):
        out = np.ones(x.shape, bool)
        n = x.shape[0]
        for i in range(n):
            for d in (-1, 1):
                out[i] &= x[(i + d) % n] <= x[i]
                out[(i + 1) % n] |= out[i] & (x[i] > 0.9)
        return out

    x = np.random.default_rng(5).random(160)
    np.testing.assert_array_equal(fl.compile(scan)(x), scan(x))


# ---- `assert` on traced values: a check made every time the function runs --------------------
# (the bodies are in assert_bodies.py: pytest rewrites the asserts of test modules)
def test_assert_on_traced_values_passes_like_numpy():
    f = fl.compile(assert_bodies.step_with_assert)
    for dt in (np.float32, np.float64):
        x = np.linspace(-1, 2, 7).astype(dt)
        y, y_np = np.zeros(3, dt), np.zeros(3, dt)
        got = f(x, y)
        want = assert_bodies.step_with_assert(x, y_np)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(y, y_np)
        assert got.dtype == want.dtype


def test_failed_assert_raises_at_replay_naming_the_line_and_writes_nothing():
    f = fl.compile(assert_bodies.step_with_assert)
    y = np.zeros(3)
    f(np.ones(4), y)                                   # traced with a passing assert
    with pytest.raises(AssertionError) as info:
        f(np.zeros(4), y)
    with pytest.raises(AssertionError):
        assert_bodies.step_with_assert(np.zeros(4), np.zeros(3))   # NumPy agrees
    text = str(info.value)
    assert "assert_bodies.py:9" in text and "step_with_assert" in text
    assert "assert norm != 0" in text
    np.testing.assert_array_equal(y, 1.0)              # only the passing call wrote
    f(np.ones(4), y)
    np.testing.assert_array_equal(y, 2.0)
    assert f.stats["traces"] == 1


def test_assert_forms():
    """`assert a and b` checks both; `assert not c` checks c is false; an assert inside a
    Python loop is one check per iteration, one message for its line."""
    f = fl.compile(assert_bodies.bounded_total)
    ok = np.array([1.0, -2.0, 4.5])
    assert f(ok) == assert_bodies.bounded_total(ok)
    for bad in ([1.0, 6.0, 0.0], [-7.0, 0.0, 0.0], [np.nan, 0.0, 1.0]):
        bad = np.array(bad)
        with pytest.raises(AssertionError):
            assert_bodies.bounded_total(bad)
        with pytest.raises(AssertionError) as info:
            f(bad)
        assert ("x[i] > -5" in str(info.value)) != ("isnan" in str(info.value))
    assert f.stats["traces"] == 1


def test_assert_whose_outcome_is_not_certain_stays_an_error():
    """In `assert a or b`, a false `a` does not fail the assert: it cannot be a check."""
    with pytest.raises(fl.TracingError, match="assert"):
        fl.compile(assert_bodies.either_positive)(np.ones(2))


def test_assert_on_an_array_of_several_elements_is_numpys_error():
    with pytest.raises(ValueError, match="ambiguous"):
        assert_bodies.all_positive(np.ones(3))
    with pytest.raises(ValueError, match="ambiguous"):
        fl.compile(assert_bodies.all_positive)(np.ones(3))
    f = fl.compile(assert_bodies.all_positive)          # one element: a check
    np.testing.assert_array_equal(f(np.ones(1)), np.ones(1))
    with pytest.raises(AssertionError):
        f(-np.ones(1))


def test_distinct_asserts_raise_their_own_message():
    f = fl.compile(assert_bodies.two_asserts)
    f(np.ones(3))
    with pytest.raises(AssertionError, match=r"x\.min\(\) >= 0"):
        f(-np.ones(3))
    with pytest.raises(AssertionError, match=r"x\.sum\(\) < 100"):
        f(np.full(3, 50.0))


def test_assert_check_survives_save_and_load(tmp_path):
    f = fl.compile(assert_bodies.step_with_assert)
    path = tmp_path / "step.flp"
    f.save(path, np.ones(4), np.zeros(3))
    g = fl.load(path)
    y = np.zeros(3)
    np.testing.assert_array_equal(g(np.full(4, 2.0), y), np.full(4, 0.5))
    with pytest.raises(AssertionError, match="assert norm != 0"):
        g(np.zeros(4), y)
    np.testing.assert_array_equal(y, 1.0)


# ---- x[i] with an integer i is a view in NumPy: writes through it must reach x ----------------
def _kick(force, which, amount):
    out = force.copy()
    out[which][1] += amount            # NumPy: out[which] is a view of row `which`
    return out


def test_write_through_row_view_at_an_int_argument_index():
    f = fl.compile(_kick)
    force = np.arange(12.0).reshape(6, 2)
    for which in (0, 3, 5, -1):
        np.testing.assert_array_equal(f(force, which, 2.5), _kick(force, which, 2.5))
    assert f.stats["traces"] == 1          # the index stays a runtime value


def test_write_through_row_view_at_a_data_index():
    def body(force, idx, scale):
        out = force.copy()
        row = out[idx[0]]
        row *= scale                       # in place: NumPy's row is a view of out
        out[idx[1]][0] = -1.0
        acc = np.zeros(3)
        for k in range(3):
            acc[k] += out[idx[k]].sum()    # a read after the writes sees them
        return out, acc

    f = fl.compile(body)
    force = np.arange(8.0).reshape(4, 2)
    for idx in ([2, 0, 2], [3, 3, 1], [1, -4, 0]):
        idx = np.array(idx)
        for got, want in zip(f(force, idx, 3.0), body(force, idx, 3.0)):
            np.testing.assert_array_equal(got, want)


def test_copy_from_advanced_index_stays_a_copy():
    """x[[i, j]] is a copy in NumPy: writing into it must not reach x."""
    def body(x, idx):
        rows = x[idx]
        rows += 100.0
        return x * 1, rows

    f = fl.compile(body)
    x, idx = np.arange(6.0).reshape(3, 2), np.array([0, 2])
    for got, want in zip(f(x.copy(), idx), body(x.copy(), idx)):
        np.testing.assert_array_equal(got, want)


def test_reading_a_row_at_a_traced_index_needs_no_trace_per_value():
    f = fl.compile(lambda x, i: x[i] * 2)
    x = np.arange(12.0).reshape(4, 3)
    for i in range(4):
        np.testing.assert_array_equal(f(x, i), x[i] * 2)
    assert f.stats["traces"] == 1


def test_fl_iterate_refuses_a_step_with_runtime_checks():
    step = fl.compile(assert_bodies.halve)
    with pytest.raises(TypeError, match="runtime checks"):
        fl.iterate(step, 3, np.ones(4), carry=("x",))
    # the step itself runs, in a Python loop
    x = np.ones(4)
    for _ in range(3):
        x = step(x)
    np.testing.assert_array_equal(x, np.full(4, 0.125))


def test_as_strided_imported_by_name_is_intercepted():
    """`from numpy.lib.stride_tricks import as_strided` binds the function in the module: the
    traced function's module gets the traced version too (a gather, read-only)."""
    def pairs(x):
        item = x.strides[0]
        return as_strided_by_name(x, shape=(x.shape[0] - 1, 2), strides=(item, item)).sum(1)

    f = fl.compile(pairs)
    for dt in (np.float32, np.int64):
        x = np.arange(6).astype(dt)
        np.testing.assert_array_equal(f(x), pairs(x))
    assert as_strided_by_name is np.lib.stride_tricks.as_strided     # restored


def test_ndarray_constructor_inside_fn_is_explained():
    """np.ndarray(shape) is NumPy's class itself (not interceptable): the message says to
    use np.empty(shape), which works."""
    def energies(x):
        out = np.ndarray(2, dtype=np.float64)
        out[0], out[1] = x.sum(), (x * x).sum()
        return out

    text = _message(energies, np.ones(3))
    assert "np.empty(shape)" in text

    def fixed(x):
        out = np.empty(2, dtype=np.float64)
        out[0], out[1] = x.sum(), (x * x).sum()
        return out

    x = np.arange(3.0)
    np.testing.assert_array_equal(fl.compile(fixed)(x), energies(x))


def test_assigning_shape_reshapes_in_place():
    """`z.shape = s` on an array made inside the function reshapes z itself (NumPy's in-place
    reshape, a view: later writes through z land in the same data); where NumPy would need a
    copy it raises NumPy's AttributeError; on an argument (the caller's array object would
    change shape) a clear TracingError."""
    def f(a):
        z = a * 2.0
        z.shape = (3, 4)
        z[0] += 1
        flat = z.reshape(-1)
        t = z.T
        try:
            t.shape = (12,)
            msg = "no error"
        except AttributeError as e:
            msg = str(e)
        return z, flat, msg
    x = np.arange(12.0)
    got, want = fl.compile(f)(x), f(x)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert got[2] == want[2] and "Incompatible shape" in got[2]

    def g(a):
        a.shape = (3, 4)
        return a
    with pytest.raises(fl.TracingError, match="shape of an argument"):
        fl.compile(g)(np.arange(12.0))
