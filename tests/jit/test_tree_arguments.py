"""Arguments in dicts, tuples and lists (an optimiser's config, a dict of parameters) replay on
the dispatcher's tree path (_core.encode_tree) with the semantics of the general path: values
traced (Python and NumPy scalars as runtime values), keys, their order, nesting and strings
part of the signature; a changed structure traces again, never misreads."""
import threading

import numpy as np
import pytest

import fastlaunch as fl


def sgd(p, g, cfg):
    return p - cfg["lr"] * (g + cfg["beta"] * p)


def _calls(f):
    return f.stats["traces"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("scalar", [float, np.float64, np.float32, lambda v: np.array(v)])
def test_dict_of_scalars_new_values_replay(dtype, scalar):
    rng = np.random.default_rng(0)
    f = fl.compile(sgd)
    for i in range(6):
        p, g = (rng.standard_normal(16).astype(dtype) for _ in range(2))
        cfg = {"lr": scalar(0.01 * (i + 1)), "beta": scalar(0.9 - 0.1 * i)}
        got, want = f(p, g, cfg), sgd(p, g, cfg)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == np.float32 else 1e-14)
    assert _calls(f) == 1


def test_dict_of_arrays_and_dict_result():
    rng = np.random.default_rng(1)

    def update(params, grads, cfg):
        return {k: params[k] - cfg["lr"] * grads[k] for k in params}

    f = fl.compile(update)
    for i in range(4):
        params = {f"w{j}": rng.standard_normal((3, 5)) for j in range(4)}
        grads = {f"w{j}": rng.standard_normal((3, 5)) for j in range(4)}
        got, want = f(params, grads, {"lr": 0.1 * i}), update(params, grads, {"lr": 0.1 * i})
        assert list(got) == list(want)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-14)
    assert _calls(f) == 1


def test_changed_keys_order_and_nesting_trace_again():
    def leaves(x):
        if isinstance(x, dict):
            x = list(x.values())
        if isinstance(x, (list, tuple)):
            return [y for v in x for y in leaves(v)]
        return [x]

    def f_(cfg):
        return sum(v * (i + 1) for i, v in enumerate(leaves(cfg)))

    f = fl.compile(f_)
    a, b = np.arange(3.0), np.ones(3)
    for cfg in ({"a": a, "b": b}, {"b": b, "a": a}, {"a": a, "c": b}, {"a": a, "b": b},
                {"a": (a, b)}, {"a": [a, b]}, {"a": {"x": a}}, {"a": {"y": a}}):
        np.testing.assert_array_equal(f(cfg), f_(cfg))
    # key order is structure: {"a", "b"} and {"b", "a"} are two signatures
    assert _calls(f) == 7


def test_keys_equal_but_not_identical_hit():
    f = fl.compile(sgd)
    p = np.arange(4.0)
    f(p, p, {"lr": 0.5, "beta": 0.25})
    key = "".join(["l", "r"])           # a new str object, equal to "lr"
    np.testing.assert_array_equal(f(p, p, {key: 0.5, "beta": 0.25}),
                                  sgd(p, p, {"lr": 0.5, "beta": 0.25}))
    assert _calls(f) == 1


def test_non_str_keys_and_strings():
    def f_(cfg):
        return cfg[1] * 2 if cfg["mode"] == "double" else cfg[1]

    f = fl.compile(f_)
    x = np.arange(5.0)
    for mode in ("double", "same", "double"):
        np.testing.assert_array_equal(f({1: x, "mode": mode}), f_({1: x, "mode": mode}))
    assert _calls(f) == 2


def test_nested_tuple_list_and_ints():
    def f_(state, cfg):
        (x, v), (k, c) = state, cfg["coefs"]
        return x + cfg["dt"] * v * k, v - cfg["dt"] * c * x

    f = fl.compile(f_)
    rng = np.random.default_rng(2)
    for i in range(5):
        x, v = rng.standard_normal(8), rng.standard_normal(8)
        cfg = {"dt": 0.1, "coefs": [i + 1, 2.0 * i]}
        for g, w in zip(f((x, v), cfg), f_((x, v), cfg)):
            np.testing.assert_allclose(g, w, rtol=1e-14)
    assert _calls(f) == 1
    with pytest.raises(OverflowError, match="cfg"):
        f((x, v), {"dt": 0.1, "coefs": [2**70, 1.0]})     # an int beyond int64: as before
    # a float where an int was: another signature
    out = f((x, v), {"dt": 0.1, "coefs": [1.5, 1.0]})
    np.testing.assert_allclose(out[0], f_((x, v), {"dt": 0.1, "coefs": [1.5, 1.0]})[0])
    assert _calls(f) == 2


def test_function_mutating_its_dict_argument():
    def f_(state):
        state["t"] = state["t"] + 1
        return state["x"] * 2

    f = fl.compile(f_)
    s1, s2 = {"t": np.zeros(()), "x": np.arange(3.0)}, {"t": np.zeros(()), "x": np.arange(3.0)}
    for _ in range(3):
        np.testing.assert_array_equal(f(s1), f_(s2))
    assert s1["t"] == s2["t"] == 3


def test_leaves_held_while_another_thread_changes_the_dict():
    def f_(d):
        return np.sqrt(d["x"]) + 1

    f = fl.compile(f_)
    d = {"x": np.full(200_000, 4.0)}
    f(d)
    stop = threading.Event()

    def churn():
        while not stop.is_set():
            d["x"] = np.full(200_000, 4.0)

    t = threading.Thread(target=churn)
    t.start()
    try:
        for _ in range(50):
            assert np.all(f(d) == 3.0)
    finally:
        stop.set()
        t.join()


def test_many_leaves_fall_back_to_the_general_path():
    def f_(d):
        return sum(d.values())

    f = fl.compile(f_)
    d = {f"k{i}": np.full(2, float(i)) for i in range(100)}    # beyond the tree path's 64
    np.testing.assert_array_equal(f(d), f_(d))
    np.testing.assert_array_equal(f(d), f_(d))
    assert _calls(f) == 1


def test_unflatten_builds_every_node_kind():
    from collections import namedtuple

    from fastlaunch.frontend import pytree
    P = namedtuple("P", "a b")
    tree = {"x": (1.0, [2.0, None]), 3: P(4.0, "s"), ("t", 1): 5 + 6j, "e": (), "l": []}
    leaves, td = pytree.flatten(tree)
    assert td.unflatten(leaves) == tree
    assert td.unflatten(iter(leaves)) == tree
    deep = [1.0]
    for _ in range(60):                   # deeper than the generated builder nests
        deep = [deep]
    leaves, td = pytree.flatten(deep)
    assert td.unflatten(leaves) == deep


def test_int_in_a_dict_that_the_trace_needed_is_matched_by_value():
    def f_(x, cfg):
        for _ in range(cfg["steps"]):         # the trace needs the value: specialised
            x = x * cfg["decay"]
        return x

    f = fl.compile(f_)
    x = np.arange(4.0)
    for steps, decay in ((2, 0.5), (3, 0.5), (2, 0.25), (3, 0.9)):
        cfg = {"steps": steps, "decay": decay}
        np.testing.assert_allclose(f(x, cfg), f_(x, cfg), rtol=1e-15)
    assert _calls(f) == 2
