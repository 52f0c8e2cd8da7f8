"""The trace/replay state machine: when the traced function runs, what the key is made of,
what comes back."""
import warnings

import numpy as np
import pytest

import fastlaunch as fl


def counted(fn, **kw):
    """fl.compile(fn) plus a counter of how many times fn's Python body ran."""
    count = [0]

    def body(*args, **kwargs):
        count[0] += 1
        return fn(*args, **kwargs)

    body.__signature__ = __import__("inspect").signature(fn)
    body.__name__ = fn.__name__
    return fl.compile(body, **kw), count


def axpy(x, y, a):
    return a * x + y


def rng_arrays(*shapes, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


# ---- replay does not run Python ------------------------------------------------------------
def test_replay_does_not_run_python():
    cf, count = counted(axpy)
    x, y = rng_arrays(100, 100)
    for _i in range(20):
        out = cf(x, y, 2.0)
        np.testing.assert_allclose(out, axpy(x, y, 2.0))
    assert count[0] == 1
    assert cf.stats["traces"] == 1 and cf.stats["entries"] == 1


def test_replay_sees_new_input_values():
    cf, count = counted(axpy)
    for seed in range(5):
        x, y = rng_arrays(64, 64, seed=seed)
        np.testing.assert_allclose(cf(x, y, 0.5), axpy(x, y, 0.5))
    assert count[0] == 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_new_shape_traces_again(dtype):
    # dynamic=False: every new size traces (the default makes sizes symbolic: tests/symbolic)
    cf, count = counted(lambda x: x * 3 + 1, dynamic=False)
    for n, expected in [(10, 1), (10, 1), (11, 2), (10, 2), (11, 2), (3, 3)]:
        x = np.arange(n, dtype=dtype)
        out = cf(x)
        assert count[0] == expected
        np.testing.assert_array_equal(out, x * 3 + 1)
        assert out.dtype == (x * 3 + 1).dtype


def test_new_dtype_traces_again():
    cf, count = counted(lambda x: x / 3)
    for dtype, expected in [(np.float32, 1), (np.float64, 2), (np.int32, 3), (np.float32, 3),
                            (np.bool_, 4)]:
        x = np.arange(6).astype(dtype)
        out = cf(x)
        assert count[0] == expected
        assert out.dtype == (x / 3).dtype
        np.testing.assert_allclose(out, x / 3, rtol=1e-6)


def test_new_rank_traces_again():
    cf, count = counted(lambda x: x.sum(axis=-1))
    a, b = np.ones((2, 3)), np.ones(6)
    np.testing.assert_array_equal(cf(a), a.sum(axis=-1))
    np.testing.assert_array_equal(cf(b), b.sum(axis=-1))
    assert count[0] == 2


# ---- Python scalars: their type is in the key, their value is not ----------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_python_scalar_value_does_not_retrace(dtype):
    cf, count = counted(axpy)
    x, y = rng_arrays(50, 50, dtype=dtype)
    for a in [0.5, -2.0, 1e-3, 0.0, 7.25]:
        out = cf(x, y, a)
        want = axpy(x, y, a)
        assert out.dtype == want.dtype
        np.testing.assert_allclose(out, want, rtol=1e-6)
    assert count[0] == 1


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int16])
def test_python_int_value_does_not_retrace(dtype):
    cf, count = counted(lambda x, k: x * k - k)
    x = np.arange(10, dtype=dtype)
    for k in [1, 2, -3, 100]:
        out = cf(x, k)
        want = x * k - k
        assert out.dtype == want.dtype
        np.testing.assert_array_equal(out, want)
    assert count[0] == 1


def test_int_and_float_scalars_are_different_signatures():
    cf, count = counted(lambda x, a: x * a)
    x = np.arange(5, dtype=np.int32)
    out_int = cf(x, 2)
    assert count[0] == 1
    out_float = cf(x, 2.5)
    assert count[0] == 2
    assert out_int.dtype == (x * 2).dtype == np.int32
    assert out_float.dtype == (x * 2.5).dtype == np.float64
    np.testing.assert_array_equal(out_int, x * 2)
    np.testing.assert_array_equal(out_float, x * 2.5)
    cf(x, 3)
    cf(x, 3.5)
    assert count[0] == 2
    reasons = [t.reason for t in cf.stats["history"]]
    assert "int" in reasons[1] and "float" in reasons[1]


def test_numpy_scalar_value_does_not_retrace():
    cf, count = counted(lambda x, a: x + a)
    x = np.ones(4, np.float32)
    for v in [np.float32(1.5), np.float32(-3.0)]:
        out = cf(x, v)
        np.testing.assert_array_equal(out, x + v)
        assert out.dtype == (x + v).dtype
    assert count[0] == 1
    out = cf(x, np.float64(2.0))                # a new dtype is a new signature
    assert count[0] == 2
    assert out.dtype == (x + np.float64(2.0)).dtype


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
def test_python_bool_scalar_argument(dtype):
    cf = fl.compile(lambda x, b: x + b)
    x = np.ones(3, dtype)
    out = cf(x, True)
    assert out.dtype == (x + True).dtype
    np.testing.assert_array_equal(out, x + True)


def test_python_bool_literal_in_traced_code():
    x = np.ones(3, np.float32)
    out = fl.compile(lambda x: x * True)(x)
    np.testing.assert_array_equal(out, x * True)
    assert out.dtype == np.float32


# ---- static arguments ---------------------------------------------------------------------------
def power(x, n):
    return x ** n if n > 1 else x + n


@pytest.mark.parametrize("kw", [dict(static_argnames="n"), dict(static_argnames=("n",)),
                                dict(static_argnums=1), dict(static_argnums=(1,))],
                         ids=["names-str", "names-tuple", "nums-int", "nums-tuple"])
def test_static_argument_value_is_in_the_key(kw):
    cf, count = counted(power, **kw)
    x = np.arange(1, 6, dtype=np.float64)
    for n, expected in [(2, 1), (2, 1), (3, 2), (1, 3), (3, 3), (2, 3)]:
        out = cf(x, n)
        assert count[0] == expected
        np.testing.assert_allclose(out, power(x, n))
    assert cf.stats["entries"] == 3


def test_static_argument_by_keyword():
    cf, count = counted(power, static_argnames="n")
    x = np.arange(4.0)
    np.testing.assert_allclose(cf(x, n=2), power(x, 2))
    np.testing.assert_allclose(cf(x, n=3), power(x, 3))
    np.testing.assert_allclose(cf(x, 2), power(x, 2))
    np.testing.assert_allclose(cf(x, n=3), power(x, 3))
    np.testing.assert_allclose(cf(x, 3), power(x, 3))
    assert count[0] == 2           # a keyword is bound to its position: one entry per value


def test_keyword_and_positional_calls_share_an_entry():
    cf, count = counted(lambda x, y: x + y)
    x, y = rng_arrays(5, 5)
    for call in (lambda: cf(x, y), lambda: cf(x, y=y), lambda: cf(y=y, x=x)):
        np.testing.assert_allclose(call(), x + y)
    assert count[0] == 1


def test_static_non_array_values():
    cf, count = counted(lambda x, mode: np.sin(x) if mode == "sin" else np.cos(x),
                        static_argnames="mode")
    x = np.linspace(0, 1, 7)
    np.testing.assert_allclose(cf(x, "sin"), np.sin(x))
    np.testing.assert_allclose(cf(x, "cos"), np.cos(x))
    np.testing.assert_allclose(cf(x, "sin"), np.sin(x))
    assert count[0] == 2


def test_static_argnames_must_exist():
    with pytest.raises(ValueError, match="nope"):
        fl.compile(lambda x: x, static_argnames="nope")


# ---- pytrees --------------------------------------------------------------------------------------
def test_tuple_list_dict_arguments_and_results():
    def f(pair, items, table):
        a, b = pair
        return {"sum": a + b, "items": [v * 2 for v in items], "nested": (table["u"] - a, (table["v"],))}

    cf, count = counted(f)
    x, y, z = rng_arrays(8, 8, 8)
    args = ((x, y), [y, z], {"u": z, "v": x * 1.0})
    want = f(*args)
    for _ in range(3):
        got = cf(*args)
        assert isinstance(got, dict) and list(got) == list(want)
        np.testing.assert_allclose(got["sum"], want["sum"])
        assert isinstance(got["items"], list) and len(got["items"]) == 2
        for g, w in zip(got["items"], want["items"]):
            np.testing.assert_allclose(g, w)
        assert isinstance(got["nested"], tuple) and isinstance(got["nested"][1], tuple)
        np.testing.assert_allclose(got["nested"][0], want["nested"][0])
        np.testing.assert_allclose(got["nested"][1][0], want["nested"][1][0])
    assert count[0] == 1


def test_container_structure_is_part_of_the_key():
    cf, count = counted(lambda t: t[0] + t[1])
    x, y = rng_arrays(4, 4)
    np.testing.assert_allclose(cf((x, y)), x + y)
    np.testing.assert_allclose(cf([x, y]), x + y)
    np.testing.assert_allclose(cf((x, y, y)), x + y)
    assert count[0] == 3


def test_dict_keys_are_part_of_the_key():
    cf, count = counted(lambda d: sum(v * i for i, v in enumerate(d.values())))
    x, y = rng_arrays(4, 4)
    np.testing.assert_allclose(cf({"a": x, "b": y}), y)
    np.testing.assert_allclose(cf({"b": x, "a": y}), y)
    np.testing.assert_allclose(cf({"a": x, "c": y}), y)
    assert count[0] == 3


def test_tuple_results_and_non_array_leaves():
    cf = fl.compile(lambda x: (x + 1, None, 3, "tag", (x * 2,)))
    x = np.arange(3.0)
    out = cf(x)
    assert isinstance(out, tuple) and len(out) == 5
    np.testing.assert_array_equal(out[0], x + 1)
    assert out[1] is None and out[2] == 3 and out[3] == "tag"
    np.testing.assert_array_equal(out[4][0], x * 2)


def test_namedtuple_results():
    from collections import namedtuple
    Pair = namedtuple("Pair", "lo hi")
    cf = fl.compile(lambda x: Pair(x.min(), x.max()))
    x = np.array([3.0, -1.0, 7.0])
    out = cf(x)
    assert type(out) is Pair
    assert out.lo == -1.0 and out.hi == 7.0


# ---- stats, clear, warnings -------------------------------------------------------------------
def test_stats_record_traces_and_reasons():
    cf = fl.compile(lambda x, a: x * a)
    assert cf.stats["traces"] == 0 and cf.stats["entries"] == 0
    cf(np.ones(4, np.float32), 1.0)
    cf(np.ones(4, np.float32), 2.0)
    cf(np.ones(5, np.float32), 2.0)
    cf(np.ones(5, np.float64), 2.0)
    st = cf.stats
    assert st["traces"] == 3 and st["entries"] == 3
    reasons = [t.reason for t in st["history"]]
    assert reasons[0] == "first call"
    assert "float32[4]" in reasons[1] and "float32[5]" in reasons[1]
    assert "float64" in reasons[2]
    assert all(t.seconds >= 0 for t in st["history"])
    assert all(t.kernels >= 1 for t in st["history"])
    assert st["trace_seconds"] == pytest.approx(sum(t.seconds for t in st["history"]))


def test_clear_forgets():
    cf, count = counted(lambda x: x - 1)
    x = np.ones(3)
    cf(x)
    cf(x)
    assert count[0] == 1
    cf.clear()
    assert cf.stats["traces"] == 0 and cf.stats["entries"] == 0
    np.testing.assert_array_equal(cf(x), x - 1)
    assert count[0] == 2
    assert cf.stats["traces"] == 1


def test_retrace_warning_after_many_retraces():
    cf = fl.compile(lambda x: x + 1, dynamic=False)    # the default: one symbolic trace
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 4):
            cf(np.ones(n))
    assert not [w for w in caught if issubclass(w.category, fl.RetraceWarning)]
    with pytest.warns(fl.RetraceWarning, match="traced"):
        for n in range(4, 20):
            cf(np.ones(n))
    assert issubclass(fl.RetraceWarning, UserWarning)


def test_no_retrace_warning_for_replays():
    cf = fl.compile(lambda x: x + 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", fl.RetraceWarning)
        for _ in range(50):
            cf(np.ones(4))


# ---- replay=False --------------------------------------------------------------------------------
def test_replay_false_traces_every_call():
    cf, count = counted(axpy, replay=False)
    x, y = rng_arrays(32, 32)
    for i in range(5):
        np.testing.assert_allclose(cf(x, y, float(i)), axpy(x, y, float(i)))
    assert count[0] == 5


def test_replay_false_compiles_kernels_once():
    from fastlaunch.backends import get_backend
    cf = fl.compile(lambda x: np.tanh(x) * 0.123456 + 9.87, replay=False)
    x = np.ones(9)
    cf(x)
    before = get_backend("cpu").compile_count
    for _ in range(3):
        np.testing.assert_allclose(cf(x), np.tanh(x) * 0.123456 + 9.87)
    assert get_backend("cpu").compile_count == before


# ---- results -----------------------------------------------------------------------------------
def test_results_are_fresh_arrays():
    cf = fl.compile(lambda x: x * 2)
    x = np.arange(16.0)
    a = cf(x)
    b = cf(x)
    assert a is not b
    assert not np.shares_memory(a, b)
    assert not np.shares_memory(a, x)
    assert a.flags.owndata or a.base is not None
    assert a.flags.writeable
    a[:] = -1
    np.testing.assert_array_equal(b, x * 2)
    np.testing.assert_array_equal(x, np.arange(16.0))


def test_results_are_never_recycled_under_the_caller():
    cf = fl.compile(lambda x: x + 1)
    first = cf(np.zeros(1000))
    keep = first.copy()
    for i in range(10):
        cf(np.full(1000, float(i)))
    np.testing.assert_array_equal(first, keep)


@pytest.mark.parametrize("n", [1000, 1_000_000])
def test_outputs_kept_alive_by_a_view_are_not_recycled(n):
    """Only a view of a result is kept: its memory must stay the caller's (pooled output
    memory may only return to the pool when nothing references it)."""
    cf = fl.compile(lambda x: x * 2)
    views = [cf(np.full(n, float(i)))[1::2] for i in range(6)]
    import gc
    gc.collect()
    for _ in range(6):
        cf(np.full(n, -1.0))
    for i, v in enumerate(views):
        assert np.all(v == 2.0 * i)


def test_view_results_are_copies():
    cf = fl.compile(lambda x: x[::2])
    x = np.arange(10.0)
    out = cf(x)
    np.testing.assert_array_equal(out, x[::2])
    assert not np.shares_memory(out, x)


@pytest.mark.parametrize("fn", [np.mean, np.sum, np.max, lambda x: x.min(), lambda x: x[2],
                                lambda x: np.sum(x * x) / x.size],
                         ids=["mean", "sum", "max", "min", "index", "expr"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_zero_d_results_are_numpy_scalars(fn, dtype):
    x = np.arange(1, 9).astype(dtype)
    want = fn(x)
    got = fl.compile(fn)(x)
    assert type(got) is type(want)
    assert np.isscalar(got)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_zero_d_keepdims_is_an_array():
    x = np.arange(6.0).reshape(2, 3)
    got = fl.compile(lambda x: np.sum(x, keepdims=True))(x)
    assert isinstance(got, np.ndarray) and got.shape == (1, 1)
    assert got[0, 0] == x.sum()


def test_keyword_arguments():
    def f(x, y=None, *, scale=1.0, shift=0.0):
        base = x if y is None else x + y
        return base * scale + shift

    cf = fl.compile(f)
    x, y = rng_arrays(6, 6)
    np.testing.assert_allclose(cf(x), f(x))
    np.testing.assert_allclose(cf(x, y), f(x, y))
    np.testing.assert_allclose(cf(x, y=y), f(x, y=y))
    np.testing.assert_allclose(cf(x, scale=2.0), f(x, scale=2.0))
    np.testing.assert_allclose(cf(x, y, scale=3.0, shift=-1.0), f(x, y, scale=3.0, shift=-1.0))
    np.testing.assert_allclose(cf(y=y, x=x, shift=0.5), f(y=y, x=x, shift=0.5))


def test_keyword_scalar_value_does_not_retrace():
    cf, count = counted(lambda x, *, lr=0.1: x * lr)
    x = np.ones(4)
    for lr in [0.1, 0.2, 0.3]:
        np.testing.assert_allclose(cf(x, lr=lr), x * lr)
    assert count[0] == 1


def test_decorator_forms_and_metadata():
    @fl.compile
    def plain(x):
        """doc"""
        return x + 1

    @fl.compile(static_argnames="k")
    def with_opts(x, k):
        return x * k

    assert isinstance(plain, fl.Compiled)
    assert plain.__name__ == "plain" and plain.__doc__ == "doc"
    assert plain.__wrapped__(np.ones(2))[0] == 2
    np.testing.assert_array_equal(with_opts(np.ones(2), 3), [3, 3])
    assert "plain" in repr(plain)


def test_methods_can_be_compiled():
    class Model:
        def __init__(self, w):
            self.w = w

        @fl.compile(static_argnums=0)
        def apply(self, x):
            return x * self.w

    m = Model(3.0)
    np.testing.assert_array_equal(m.apply(np.ones(3)), np.full(3, 3.0))


def test_negative_static_argnums():
    cf, count = counted(power, static_argnums=-1)
    x = np.arange(1, 5, dtype=np.float64)
    np.testing.assert_allclose(cf(x, 2), power(x, 2))
    np.testing.assert_allclose(cf(x, 1), power(x, 1))
    assert count[0] == 2


def test_python_int_argument_beyond_int64_with_uint64_array():
    x = np.ones(3, np.uint64)
    big = 2 ** 63 + 5
    np.testing.assert_array_equal(fl.compile(lambda x, n: x + n)(x, big), x + big)


def test_python_int_literal_beyond_int64_with_uint64_array():
    x = np.ones(3, np.uint64)
    fn = lambda x: x + (2 ** 63 + 5)          # noqa: E731
    got = fl.compile(fn)(x)
    assert got.dtype == fn(x).dtype
    np.testing.assert_array_equal(got, fn(x))


# ---- graphs of realistic depth ------------------------------------------------------------------
def _unrolled(n):
    def f(x):
        for _ in range(n):
            x = x * 0.5 + 1.0
        return x
    return f


def test_moderately_deep_elementwise_chain():
    f = _unrolled(100)                        # 200 operations
    x = np.linspace(-1, 1, 16)
    np.testing.assert_allclose(fl.compile(f)(x), f(x), rtol=1e-12)


def test_deep_elementwise_chain():
    f = _unrolled(1000)                       # 2000 operations: an unrolled time loop
    x = np.linspace(-1, 1, 16)
    np.testing.assert_allclose(fl.compile(f)(x), f(x), rtol=1e-12)


# ---- introspection ------------------------------------------------------------------------------
def test_lower_and_dis_show_graph_kernels_and_bytecode():
    import io
    cf = fl.compile(lambda x: x / x.sum())
    x = np.ones(4)
    low = cf.lower(x)
    assert cf.stats["entries"] == 0              # lowering does not install an entry
    text = str(low)
    for part in ("== graph ==", "== kernel 0", "== bytecode ==", "LAUNCH"):
        assert part in text
    assert low.graph in text and low.bytecode in text
    cf(x)
    buf = io.StringIO()
    cf.dis(file=buf)
    assert low.graph in buf.getvalue()
    buf = io.StringIO()
    cf.dis(x, file=buf, source=True)                # the kernels' source only on request
    assert buf.getvalue().strip() == text.strip()


def test_new_sizes_of_one_class_trace_twice_by_default():
    cf, count = counted(lambda x: x * 3 + 1)
    for n in (10, 11, 12, 40, 3):
        x = np.arange(n, dtype=np.float64)
        np.testing.assert_array_equal(cf(x), x * 3 + 1)
    assert cf.stats["traces"] == 2 and cf.stats["entries"] == 5
