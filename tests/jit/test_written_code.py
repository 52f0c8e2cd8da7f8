"""Code as people write it (issue 11): traces that must not be installed, and side effects
on argument containers that must reach the caller on every call."""
import numpy as np
import pytest

import fastlaunch as fl


# ---- a TracingError the traced code catches poisons the trace -------------------------------
def test_caught_tracing_error_is_not_installed():
    def with_fallback(x):
        try:
            if x.sum() > 0:          # data-dependent: raises TracingError while tracing
                return x * 2
            return x * 3
        except Exception:            # a library's own bare except
            return x + 100           # the fallback would be baked into the trace

    f = fl.compile(with_fallback)
    with pytest.raises(fl.TracingError, match=r"caught a fastlaunch.TracingError at .*"
                                              r"test_written_code.py:\d+ \(in with_fallback\)"):
        f(np.ones(3))
    assert f.stats["entries"] == 0            # nothing was installed
    with pytest.raises(fl.TracingError):      # and every call says so, never the fallback
        f(np.ones(3))


def test_caught_error_from_nested_compiled_function_poisons_outer():
    inner = fl.compile(lambda x: float(x[0]))

    def outer(x):
        try:
            return inner(x) * x
        except fl.TracingError:
            return x

    with pytest.raises(fl.TracingError, match="caught a fastlaunch.TracingError"):
        fl.compile(outer)(np.ones(2))


def test_uncaught_tracing_error_still_raises_itself():
    f = fl.compile(lambda x: float(x[0]))
    with pytest.raises(fl.TracingError) as info:
        f(np.ones(2))
    assert "caught" not in str(info.value)


def test_other_exceptions_caught_by_the_function_are_fine():
    def tolerant(x):
        try:
            {}["missing"]
        except KeyError:
            pass
        return x + 1

    np.testing.assert_array_equal(fl.compile(tolerant)(np.zeros(2)), np.ones(2))


# ---- side effects on argument containers ----------------------------------------------------
def adam_step(w, dw, config):
    config.setdefault("lr", 1e-2)
    config.setdefault("m", np.zeros_like(w))
    config.setdefault("v", np.zeros_like(w))
    config["m"] = 0.9 * config["m"] + 0.1 * dw
    config["v"] = 0.999 * config["v"] + 0.001 * dw * dw
    return w - config["lr"] * config["m"] / (np.sqrt(config["v"]) + 1e-8)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dict_side_effects_replay_like_numpy(dtype):
    rng = np.random.default_rng(1)
    f = fl.compile(adam_step)
    w_fl = w_np = rng.standard_normal(7).astype(dtype)
    c_fl, c_np = {}, {}
    for _ in range(5):
        dw = rng.standard_normal(7).astype(dtype)
        w_fl = f(w_fl, dw, c_fl)
        w_np = adam_step(w_np, dw, c_np)
        assert set(c_fl) == set(c_np)
        for key in ("m", "v"):
            assert c_fl[key].dtype == c_np[key].dtype
            np.testing.assert_allclose(c_fl[key], c_np[key], rtol=1e-5)
        np.testing.assert_allclose(w_fl, w_np, rtol=1e-5)
    assert f.stats["entries"] == 2       # {} and the filled dict: then every call replays


def test_list_append_and_item_assignment():
    def track(x, history, slots):
        history.append(x.sum())
        slots[0] = slots[0] + x
        return x * 2

    f = fl.compile(track)
    x = np.arange(3.0)
    h_fl, h_np = [], []
    s_fl, s_np = [np.zeros(3)], [np.zeros(3)]
    for _ in range(3):
        f(x, h_fl, s_fl)
        track(x, h_np, s_np)
    assert len(h_fl) == len(h_np) == 3
    np.testing.assert_allclose(h_fl, h_np)
    np.testing.assert_allclose(s_fl[0], s_np[0])


def test_nested_container_and_keyword_argument():
    def step(x, *, state):
        state["inner"]["count"] = state["inner"]["count"] + x
        return x

    f = fl.compile(step)
    s_fl = {"inner": {"count": np.zeros(2)}}
    for _ in range(4):
        f(np.ones(2), state=s_fl)
    np.testing.assert_array_equal(s_fl["inner"]["count"], np.full(2, 4.0))


def test_unmodified_containers_have_no_effects():
    f = fl.compile(lambda x, cfg: x * cfg["scale"])
    cfg = {"scale": 2.0}
    f(np.ones(2), cfg)
    entry = f._entries_list()[0]
    assert entry.post is None and cfg == {"scale": 2.0}


def test_fast_path_applies_effects():
    def bump(x, c):
        c["n"] = c["n"] + x
        return x

    f = fl.compile(bump)
    c = {"n": np.zeros(3)}
    f(np.ones(3), c)                      # trace
    for _ in range(10):                   # replays through the dispatcher's general path
        f(np.ones(3), c)
    np.testing.assert_array_equal(c["n"], np.full(3, 11.0))


def test_save_refuses_container_effects(tmp_path):
    def bump(x, c):
        c["n"] = c["n"] + x
        return x

    f = fl.compile(bump)
    with pytest.raises(TypeError, match=r"side effects on argument containers \(argument 1\)"):
        f.save(tmp_path / "p.flp", np.ones(2), {"n": np.zeros(2)})


# ---- Python scalars that decide control flow or shapes ---------------------------------------
def unrolled(x, n, nesterov):
    y = x
    for t in range(n):                  # a loop count
        y = y * 0.5 + t
    if nesterov:                        # a flag
        y = y + 1
    z = np.zeros(n) + y.sum()           # a shape
    return y.reshape(n, -1), z, n       # a reshape, and the value itself


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_scalars_used_as_python_values_are_specialised(dtype):
    f = fl.compile(unrolled)
    x = np.arange(12).astype(dtype)
    for n, flag in [(2, True), (3, False), (2, True), (4, True), (3, False)]:
        got, want = f(x, n, flag), unrolled(x, n, flag)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-6)
            assert np.shape(g) == np.shape(w) and np.asarray(g).dtype == np.asarray(w).dtype
    history = f.stats["history"]
    assert f.stats["traces"] == 3       # one per distinct (n, flag); repeats replay
    assert "specialised on the value of argument 'n' = 2, argument 'nesterov' = True" in \
        history[0].reason


def test_arithmetic_only_scalars_stay_runtime_parameters():
    f = fl.compile(lambda x, lr: x - lr * x)
    for lr in (0.1, 0.2, 0.3):
        np.testing.assert_allclose(f(np.ones(3), lr), np.ones(3) - lr)
    assert f.stats["traces"] == 1


def test_specialised_scalar_computed_from_argument():
    def body(x, n):
        return x[: n // 2 + 1].sum()     # slicing with a value computed from n
    f = fl.compile(body)
    x = np.arange(10.0)
    for n in (4, 8, 4):
        assert f(x, n) == body(x, n)
    assert f.stats["traces"] == 2


def test_specialisation_caught_by_user_code_still_works():
    def body(x, n):
        try:
            k = int(n)
        except TypeError:
            k = 1
        return x * k
    f = fl.compile(body)
    np.testing.assert_array_equal(f(np.ones(2), 3), np.full(2, 3.0))
    np.testing.assert_array_equal(f(np.ones(2), 5), np.full(2, 5.0))


def test_array_values_still_raise():
    f = fl.compile(lambda x: x * 2 if x.sum() > 0 else x)
    with pytest.raises(fl.TracingError, match="np.where"):
        f(np.ones(3))


def test_specialised_program_saves_and_loads(tmp_path):
    f = fl.compile(unrolled)
    x = np.arange(6.0)
    f.save(tmp_path / "u.flp", x, 3, True)
    g = fl.load(tmp_path / "u.flp")
    for a, b in zip(g(x, 3, True), unrolled(x, 3, True)):
        np.testing.assert_allclose(a, b)
    with pytest.raises(TypeError):
        g(x, 2, True)                   # another value is another program
