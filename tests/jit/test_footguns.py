"""Surprising but documented behaviour.  Each test says why it behaves this way."""
import numpy as np
import pytest

import fastlaunch as fl

TABLE = np.arange(8.0)
SCALE = 2.0


def test_captured_global_array_is_frozen_at_trace_time():
    """Arrays captured from globals are constants copied when the function is traced (a replay
    runs no Python, so it cannot look the global up again).  Mutating the global later changes
    nothing until .clear() forces a new trace.  Pass arrays that change as arguments."""
    global TABLE
    TABLE = np.arange(8.0)

    @fl.compile
    def f(x):
        return x + TABLE

    x = np.ones(8)
    np.testing.assert_array_equal(f(x), x + np.arange(8.0))
    TABLE[:] = 100.0                      # mutated in place
    np.testing.assert_array_equal(f(x), x + np.arange(8.0))
    TABLE = np.full(8, -1.0)              # rebound
    np.testing.assert_array_equal(f(x), x + np.arange(8.0))
    f.clear()
    np.testing.assert_array_equal(f(x), x + TABLE)


def test_captured_closure_array_is_frozen_at_trace_time():
    """Same for arrays from an enclosing scope."""
    weights = np.linspace(0, 1, 5)

    @fl.compile
    def f(x):
        return x * weights

    x = np.ones(5)
    first = f(x)
    weights[:] = 0
    np.testing.assert_array_equal(f(x), first)


def test_closure_python_scalars_are_baked_in():
    """Python scalars from a closure or a global are literals of the trace, not parameters:
    only *arguments* are parameters.  Changing the captured value later is ignored."""
    global SCALE
    SCALE = 2.0
    factor = [3.0]

    @fl.compile
    def f(x):
        return x * SCALE + factor[0]

    x = np.arange(4.0)
    np.testing.assert_array_equal(f(x), x * 2.0 + 3.0)
    assert "literal 2.0" in f.lower(x).graph and "param" not in f.lower(x).graph
    SCALE, factor[0] = 10.0, -1.0
    np.testing.assert_array_equal(f(x), x * 2.0 + 3.0)
    f.clear()
    np.testing.assert_array_equal(f(x), x * 10.0 - 1.0)


def test_python_scalar_arguments_are_parameters():
    """...whereas a Python scalar passed as an argument is a runtime parameter."""
    @fl.compile
    def f(x, s):
        return x * s

    x = np.arange(4.0)
    assert "param 1" in f.lower(x, 2.0).graph
    np.testing.assert_array_equal(f(x, 2.0), x * 2.0)
    np.testing.assert_array_equal(f(x, 10.0), x * 10.0)


def test_returning_an_input_returns_the_input_object():
    """`return x` is not a computation: the caller gets its own array back, not a copy
    (NumPy code would return the same object too).  Writing to it writes the argument."""
    @fl.compile
    def f(x, y):
        return x, y * 2

    x = np.arange(3.0)
    a, b = f(x, x)
    assert a is x
    assert b is not x
    a[0] = 42
    assert x[0] == 42


def test_returning_a_view_of_an_input_returns_a_copy():
    """Every result other than an input itself is a fresh array: x[::2] is a view in NumPy,
    but compiled it is a new array that does not share memory with x."""
    @fl.compile
    def f(x):
        return x[::2]

    x = np.arange(6.0)
    out = f(x)
    np.testing.assert_array_equal(out, x[::2])
    assert not np.shares_memory(out, x)


def test_outputs_are_c_contiguous_even_when_numpy_gives_f_order():
    """NumPy keeps the layout of its inputs (a Fortran-ordered input gives a Fortran-ordered
    result, x.T + 0 is F-ordered); fastlaunch always allocates C-contiguous outputs.  Values
    and shapes are NumPy's; only the strides differ."""
    a = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    b = np.arange(12.0).reshape(3, 4)
    for fn, arg in ((lambda x: x * 2, a), (lambda x: x.T + 0, b)):
        want = fn(arg)
        assert want.flags.f_contiguous and not want.flags.c_contiguous
        got = fl.compile(fn)(arg)
        assert got.flags.c_contiguous
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n", [1000, 100_000, 1_000_003])
def test_float32_sums_accumulate_in_float64(n):
    """fastlaunch accumulates float32 sums in float64 (then rounds to float32), while NumPy uses
    pairwise float32 summation.  Results agree closely but may differ in the last bits, so
    compare with a tolerance, never with ==.  The fastlaunch result is the more accurate one."""
    rng = np.random.default_rng(0)
    x = rng.random(n).astype(np.float32)
    got = fl.compile(lambda x: x.sum())(x)
    want = x.sum()
    exact = x.astype(np.float64).sum()
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert abs(float(got) - exact) <= abs(float(want) - exact) + float(np.spacing(np.float32(exact)))
    # fastlaunch's result is the float64 sum rounded to float32
    assert abs(float(got) - exact) <= float(np.spacing(np.float32(exact)))


def test_float32_mean_matches_within_tolerance():
    """np.mean of float32 likewise: close to NumPy, not bit-identical."""
    x = np.random.default_rng(1).standard_normal(50_000).astype(np.float32)
    got = fl.compile(np.mean)(x)
    assert type(got) is np.float32
    np.testing.assert_allclose(got, np.mean(x), rtol=1e-4, atol=1e-6)


def test_python_bool_control_flow_on_static_argument_is_fine():
    """Control flow is allowed on anything whose value is known at trace time: static arguments,
    shapes and dtypes.  Each distinct static value is its own trace."""
    @fl.compile(static_argnames="flip")
    def f(x, flip):
        if flip:
            x = -x
        if x.shape[0] > 2 and x.dtype == np.float64:
            x = x * 2
        return x

    x = np.arange(4.0)
    np.testing.assert_array_equal(f(x, True), -x * 2)
    np.testing.assert_array_equal(f(x, False), x * 2)
    np.testing.assert_array_equal(f(x[:2], False), x[:2])
    assert f.stats["traces"] == 3


def test_python_side_effects_happen_only_while_tracing():
    """The body runs only when tracing: prints, appends, counters are not replayed."""
    log = []

    @fl.compile
    def f(x):
        log.append("ran")
        return x + 1

    for _ in range(5):
        f(np.zeros(3))
    assert log == ["ran"]


def test_random_numbers_from_a_captured_generator_are_refused():
    """np.random.* and default_rng() inside fn draw fresh numbers on every call, and so does
    a Generator passed as an argument (tests/jit/test_random.py); a Generator captured from
    a global or the enclosing function would be drawn from once, at trace time, so that is
    refused with a message saying what to do."""
    rng = np.random.default_rng(0)

    @fl.compile
    def f(x):
        return x + rng.standard_normal(x.shape)

    with pytest.raises(fl.TracingError, match="Pass the Generator as an argument"):
        f(np.zeros(4))


def test_indexing_a_numpy_constant_by_a_traced_index_needs_fl_asarray():
    """NumPy's own indexing (and np.take, whose dispatch ignores the index argument) cannot
    take a traced index: the error says to wrap the constant with fastlaunch.asarray."""
    table = np.arange(10.0) ** 2

    def plain(i):
        return table[i]

    with pytest.raises(fl.TracingError, match="fastlaunch.asarray"):
        fl.compile(plain)(np.array([1, 2]))

    def wrapped(i):
        return fl.asarray(table)[i]

    np.testing.assert_array_equal(fl.compile(wrapped)(np.array([1, 9, -1])), table[[1, 9, -1]])


def test_writing_traced_values_into_a_numpy_array_made_outside_is_refused():
    """An array made inside fn with np.zeros(...) takes traced values (it becomes a traced
    buffer, see fastlaunch/frontend/numpy/trace_buffers.py); one made outside fn, or through a
    function imported
    directly (`from numpy import zeros`), is a NumPy constant that NumPy cannot store a traced
    value into.  NumPy catches our TracingError and raises its own "setting an array element
    with a sequence"."""
    from numpy import zeros

    def direct_import(x):
        out = zeros(3)
        out[0] = x[0]
        return out

    with pytest.raises((fl.TracingError, ValueError)):
        fl.compile(direct_import)(np.ones(3))

    def inside(x):
        out = np.zeros(3)
        out[0] = x[0]
        return out

    np.testing.assert_array_equal(fl.compile(inside)(np.arange(3.0) + 1), [1.0, 0, 0])


def test_time_and_other_python_calls_are_evaluated_once_when_tracing():
    """time.time() (or reading a file, or any Python call that is not a traced NumPy operation)
    runs once, while tracing: its value is a constant of the program."""
    import time
    calls = []

    def now():
        calls.append(1)
        return time.time()

    f = fl.compile(lambda x: x * 0 + now())
    first = f(np.zeros(2))
    time.sleep(0.002)
    np.testing.assert_array_equal(f(np.zeros(2)), first)
    assert len(calls) == 1


class _Model:
    def __init__(self, k):
        self.k = k

    @fl.compile(static_argnums=0)
    def apply(self, x):
        return x * self.k


def test_method_state_is_read_when_tracing():
    """A compiled method takes `self` as a static argument (it is not an array): what it reads
    from self is fixed at trace time, and with the default identity hash each object is traced
    once, whatever its attributes become.  Pass changing state as arguments."""
    m = _Model(2.0)
    x = np.ones(3)
    np.testing.assert_array_equal(m.apply(x), x * 2.0)
    m.k = 5.0
    np.testing.assert_array_equal(m.apply(x), x * 2.0)     # still the traced value
    np.testing.assert_array_equal(_Model(5.0).apply(x), x * 5.0)   # another object: traced
    with pytest.raises(TypeError, match="static arguments"):
        fl.compile(_Model.apply.__wrapped__)(m, x)         # self not static: refused, with a hint


def test_no_floating_point_warnings_and_casts_give_numpys_values():
    """NaN, inf and out-of-range floats cast to integers give NumPy's (x86-64) values, with
    no RuntimeWarning from the compiled call (NumPy warns)."""
    import warnings
    x = np.array([np.nan, np.inf, -1.0, 300.0, 3e9, -3e9, 1e20])
    cf = fl.compile(lambda x: (x.astype(np.int64), x.astype(np.int32), x.astype(np.uint8),
                               x / 0.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = cf(x)
    with np.errstate(all="ignore"):
        want = (x.astype(np.int64), x.astype(np.int32), x.astype(np.uint8), x / 0.0)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert got[2][2] == 255


def test_python_random_and_time_calls_while_tracing_warn_once_per_trace():
    """random.random() and time.time() inside fn run once, while tracing: every call replays
    the value they gave then.  A FrozenValueWarning names the call and where it was made,
    once per trace and module (not once per call of them); fastlaunch's own timers do not
    warn, and the functions themselves are given back after the trace."""
    import random
    import time
    from random import uniform          # imported by name: swapped in this module too

    def noisy(x):
        a = x * random.random() + uniform(0, 1) * random.random()
        return a + time.time() - time.perf_counter()

    f = fl.compile(noisy)
    with pytest.warns(fl.FrozenValueWarning) as got:
        first = f(np.ones(3))
    texts = sorted(str(w.message) for w in got if issubclass(w.category, fl.FrozenValueWarning))
    assert len(texts) == 2, texts
    assert texts[0].startswith("random.random() was called while tracing (at "
                               f"{__file__}:"), texts[0]
    assert "frozen into the program, so every call of the compiled function uses this same " \
        "value; draw random numbers with np.random.*" in texts[0]
    assert texts[1].startswith("time.time() was called while tracing"), texts[1]
    assert "pass the time as an argument" in texts[1]
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(f(np.ones(3)), first)     # a replay: the frozen values
        fl.compile(lambda x: np.sin(x) + np.random.random(3))(np.ones(3))   # np.random: fine
    assert not hasattr(random.random, "__wrapped__") and uniform is random.uniform
    assert not hasattr(time.time, "__wrapped__")


def test_a_python_loop_over_many_steps_inside_fn_names_fl_iterate():
    """A Python loop of many iterations that differ (each reads its own row: no loop body
    can stand for them) is unrolled into the program (each iteration traced, fused and
    compiled): an UnrolledLoopWarning names fl.iterate.  A loop of identical iterations is
    rolled into one loop body (frontend/roll.py) and does not warn; nor does one call making many
    nodes (a small matrix inverse written out)."""
    def descend(p, target):
        for k in range(200):
            r = np.sin(p) - target[k]
            p = p - 0.1 * r * np.cos(p)
        return p

    with pytest.warns(fl.UnrolledLoopWarning) as got:
        f = fl.compile(descend, backend="null")
        f.lower(np.zeros(4), np.ones((200, 4)))
    (w,) = [w for w in got if issubclass(w.category, fl.UnrolledLoopWarning)]
    text = str(w.message)
    assert text.startswith("descend: a Python loop inside it ran 200 iterations while "
                           "tracing, making "), text
    assert "Make one iteration the compiled function and run the loop with fl.iterate(step, " \
        "n, ..., carry=...)" in text, text
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a = np.eye(8) * 4 + np.ones((8, 8))
        fl.compile(lambda m: np.linalg.inv(m), backend="null").lower(np.stack([a] * 3))
        # a short loop is fine
        fl.compile(lambda p: [p := p * 0.5 + 1 for _ in range(20)][-1],
                   backend="null").lower(np.zeros(4))

        def rolled(p, target):
            for _ in range(200):
                p = p - 0.1 * (np.sin(p) - target) * np.cos(p)
            return p
        g = fl.compile(rolled, backend="null")
        g(np.zeros(4), np.ones(4))
        assert "identical iterations rolled" in g.stats["history"][-1].reason
