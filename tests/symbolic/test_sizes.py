"""Symbolic sizes (fastlaunch/program/symbolic.py): one template per size class, instances at new
sizes without tracing, every result equal to NumPy's, relations checked on every call."""
import dataclasses
import pickle

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fastlaunch as fl
from fastlaunch.program import bytecode, symbolic

DTYPES = [np.float32, np.float64]


def _rand(shape, dtype, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _check(c, fn, *args):
    got = c(*args)
    want = fn(*args)
    tol = dict(rtol=1e-5, atol=1e-6) if got.dtype == np.float32 else dict(rtol=1e-10)
    np.testing.assert_allclose(got, want, **tol)
    assert got.shape == want.shape and got.dtype == want.dtype


def ew(x, y):
    return np.sin(x) * y + 1


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pattern", ["n/n", "n/1", "1/n", "rows", "cols"])
def test_broadcast_patterns_many_sizes(dtype, pattern):
    c = fl.compile(ew)
    sizes = [5, 9, 2, 17, 1000, 3, 64, 33]
    for k, n in enumerate(sizes):
        x, y = {"n/n": ((n,), (n,)), "n/1": ((n,), (1,)), "1/n": ((1,), (n,)),
                "rows": ((n, 7), (7,)), "cols": ((n, 7), (n, 1))}[pattern]
        _check(c, ew, _rand(x, dtype, k), _rand(y, dtype, k + 50))
    assert c.stats["traces"] <= 2, c.stats["history"]
    assert c.stats["symbolic"], c.stats


def test_twenty_sizes_trace_at_most_twice():
    def step(p, t, lr):
        r = np.sin(p) - t
        return p - lr * 2 * r * np.cos(p)
    c = fl.compile(step)
    for n in range(2, 42, 2):
        p, t = _rand(n, np.float64, n), _rand(n, np.float64, n + 1)
        np.testing.assert_allclose(c(p, t, 0.1), step(p, t, 0.1), rtol=1e-12)
    s = c.stats
    assert s["traces"] == 2 and s["entries"] == 20, s
    assert "symbolic sizes n0" in s["history"][1].reason
    assert s["symbolic"] == ["symbolic sizes n0 = leaf 0 dim 0 (= leaf 1 dim 0) (18 sizes)"]


def test_dynamic_true_and_false():
    c = fl.compile(ew, dynamic=True)
    for n in (10, 20, 30):
        _check(c, ew, _rand(n, np.float32), _rand(n, np.float32, 1))
    assert c.stats["traces"] == 1
    c = fl.compile(ew, dynamic=False)
    for n in (10, 20, 30):
        _check(c, ew, _rand(n, np.float32), _rand(n, np.float32, 1))
    assert c.stats["traces"] == 3 and not c.stats["symbolic"]
    with pytest.raises(TypeError, match="dynamic"):
        fl.compile(ew, dynamic="yes")


def test_empty_and_one_are_specialised():
    c = fl.compile(ew, dynamic=True)
    _check(c, ew, _rand(10, np.float64), _rand(10, np.float64, 1))
    _check(c, ew, _rand(0, np.float64), _rand(0, np.float64, 1))
    _check(c, ew, _rand(1, np.float64), _rand(1, np.float64, 1))
    _check(c, ew, _rand(11, np.float64), _rand(11, np.float64, 1))
    assert c.stats["traces"] == 3          # 10 (symbolic), 0 and 1 their own classes


def test_broken_relation_takes_new_entry():
    c = fl.compile(ew, dynamic=True)
    _check(c, ew, _rand(8, np.float64), _rand(8, np.float64, 1))       # x and y equal: one n
    _check(c, ew, _rand(12, np.float64), _rand(12, np.float64, 1))
    assert c.stats["traces"] == 1
    # the relation n(x) == n(y) broken: NumPy's broadcasting error, never a wrong size
    with pytest.raises(ValueError):
        c(_rand(12, np.float64), _rand(13, np.float64))
    # (n, 1) with (1, m): m is in the kernel's code (specialised), n symbolic; n == m would
    # be another equality pattern: a new entry
    def outer(a, b):
        return a * b
    c = fl.compile(outer, dynamic=True)
    _check(c, outer, _rand((5, 1), np.float64), _rand((1, 9), np.float64))
    _check(c, outer, _rand((6, 1), np.float64), _rand((1, 9), np.float64))
    assert c.stats["traces"] == 1
    _check(c, outer, _rand((9, 1), np.float64), _rand((1, 9), np.float64))
    assert c.stats["traces"] == 2
    _check(c, outer, _rand((6, 1), np.float64), _rand((1, 4), np.float64))   # m moved
    assert c.stats["traces"] == 3


def test_slice_bound_is_a_relation():
    def inner(x):
        return x[1:-1] * 2 + x[2:] - x[:-2]
    c = fl.compile(inner, dynamic=True)
    for n in (10, 11, 40, 4):
        _check(c, inner, _rand(n, np.float64))
    assert c.stats["traces"] == 1, c.stats["history"]
    _check(c, inner, _rand(3, np.float64))     # a range's last index n - 3 == 0: another trace
    assert c.stats["traces"] == 2


def test_python_use_of_size_specialises():
    def loop(x):
        acc = x * 0
        for i in range(x.shape[0]):
            acc = acc + x[i]
        return acc
    c = fl.compile(loop, dynamic=True)
    for n in (3, 4, 5):
        np.testing.assert_allclose(c(_rand(n, np.float64)), loop(_rand(n, np.float64)))
    assert c.stats["traces"] == 3
    assert "every size is specialised" in c.stats["static_sizes"][0]

    def branch(x):
        return x * 2 if len(x) > 8 else x - 1
    c = fl.compile(branch, dynamic=True)
    for n in (4, 6, 12, 20):
        _check(c, branch, _rand(n, np.float64))
    assert c.stats["traces"] == 4


def test_reductions_stay_static_with_reason():
    def centred(x):
        return x - x.mean(axis=0)
    c = fl.compile(centred)
    for n in (10, 11, 12):
        _check(c, centred, _rand((n, 3), np.float64))
    assert c.stats["traces"] == 3
    assert "every size is specialised" in c.stats["history"][1].reason


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(4, 300), min_size=3, max_size=6),
       st.sampled_from(DTYPES), st.sampled_from(["n/n", "n/1", "rows"]))
def test_hypothesis_sizes(sizes, dtype, pattern):
    def fn(x, y):
        return np.exp(-x * x) * y - np.abs(y)
    c = fl.compile(fn, dynamic=True)
    for k, n in enumerate(sizes):
        shapes = {"n/n": ((n,), (n,)), "n/1": ((n,), (1,)), "rows": ((n, 3), (3,))}[pattern]
        x, y = _rand(shapes[0], dtype, k), _rand(shapes[1], dtype, k + 9)
        _check(c, fn, x, y)
    assert c.stats["traces"] == 1


def test_in_place_update_symbolic():
    def upd(x, y):
        x += y * 2
    c = fl.compile(upd, dynamic=True)
    for n in (5, 9, 100):
        x, y = _rand(n, np.float64), _rand(n, np.float64, 1)
        want = x + y * 2
        c(x, y)
        np.testing.assert_allclose(x, want)
    assert c.stats["traces"] == 1


def _launch_word(program):
    (pc,) = [pc for pc, op, _ in program.instructions() if op == 0x0404]   # LAUNCH
    return pc + 2                                                          # its n


def test_bad_size_expression_is_rejected_by_the_verifier():
    c = fl.compile(ew, dynamic=True)
    _check(c, ew, _rand(10, np.float64), _rand(10, np.float64, 1))
    (t,) = [t for ts in c._templates.values() for t in ts]
    at = _launch_word(t.base.info.lowered.program)   # code words lead the template's integers
    (i,) = [i for i, (p, _, _) in enumerate(t.exprs) if p == at]
    p, poly, sign = t.exprs[i]
    assert poly == [(1, (0,))]                    # LAUNCH n = n0
    t.exprs[i] = (p, [(1, (0,)), (1, ())], sign)  # corrupted: n0 + 1, one past every buffer
    # the instance is refused by bytecode.verify; the call is traced instead: NumPy's result
    _check(c, ew, _rand(12, np.float64), _rand(12, np.float64, 1))
    assert c.stats["traces"] == 2
    assert t.refusals and t.instances == 0


def test_verifier_rejects_launch_past_a_buffer():
    c = fl.compile(ew, dynamic=False)
    x = _rand(10, np.float64)
    program = c.lower(x, x).program
    code = program.code.copy()
    code[_launch_word(program)] = 11
    with pytest.raises(bytecode.VerifyError, match="launch|LAUNCH"):
        bytecode.verify(dataclasses.replace(program, code=code))


def test_save_and_pickle_with_symbolic_entries(tmp_path):
    c = fl.compile(ew, pickle_programs=True, dynamic=True)
    for n in (10, 20, 30):
        _check(c, ew, _rand(n, np.float32), _rand(n, np.float32, 1))
    assert c.stats["traces"] == 1 and c.stats["entries"] == 3
    # a saved program is the static program of the example's sizes
    x, y = _rand(20, np.float32), _rand(20, np.float32, 1)
    c.save(tmp_path / "p.flp", x, y)
    loaded = fl.load(tmp_path / "p.flp")
    np.testing.assert_allclose(loaded(x, y), ew(x, y), rtol=1e-6)
    # pickled: the base entry's program and the template travel; instances are derived
    # again, and the receiver traces no size of the class
    d = pickle.loads(pickle.dumps(c))
    for n in (20, 10, 7, 333):
        _check(d, ew, _rand(n, np.float32, n), _rand(n, np.float32, n + 1))
    assert d.stats["traces"] == 0 and d.stats["programs_loaded"] == 1, d.stats
    assert d.stats["symbolic"] == [c.stats["symbolic"][0].replace("(2 sizes)", "(3 sizes)")]


def _rows(a, b):
    return np.tanh(a) * b - a


def test_shipped_template_from_with_programs():
    """with_programs on a dynamic function builds the template as a call would; the receiver
    instantiates it for new row counts (the row length, compiled into the kernel, stays
    specialised)."""
    c = fl.compile(_rows, dynamic=True).with_programs(_rand((5, 8), np.float64),
                                                       _rand((1, 8), np.float64))
    _check(c, _rows, _rand((6, 8), np.float64), _rand((1, 8), np.float64))
    assert c.stats["traces"] == 1 and c.stats["symbolic"]
    d = pickle.loads(pickle.dumps(c))
    for r in (3, 40, 2, 1000):
        _check(d, _rows, _rand((r, 8), np.float64, r), _rand((1, 8), np.float64, r + 1))
    assert d.stats["traces"] == 0, d.stats["history"]
    # a size of another class (a dim of 1 where the template has a symbol) is traced
    _check(d, _rows, _rand((1, 8), np.float64), _rand((1, 8), np.float64, 2))
    assert d.stats["traces"] == 1, d.stats["history"]


def test_tampered_shipped_template_is_refused():
    from fastlaunch import jit
    from fastlaunch.program import saved
    c = fl.compile(ew, pickle_programs=True, dynamic=True)
    _check(c, ew, _rand(10, np.float64), _rand(10, np.float64, 1))
    fn, options, programs, templates = c.__reduce__()[1]
    (at, good), = templates
    bad = [dict(good, exprs=[(10 ** 6, [(1, (0,))], 1)]),        # a position past the program
           dict(good, base_ints=good["base_ints"][:-1]),         # another base program
           dict(good, exprs=[(0, [(1, (5,))], 1)]),               # a symbol it does not have
           dict(good, where="n"), {"key": good["key"]}]
    for record in bad:
        with pytest.raises(saved.SavedProgramError, match="shipped symbolic template"):
            jit._rebuild(fn, options, programs, [(at, record)])
    with pytest.raises(saved.SavedProgramError, match="names program"):
        jit._rebuild(fn, options, programs, [(len(programs), good)])
    # a template whose expressions give an out-of-bounds program: every instance is
    # verified, so it is never installed; the call is traced instead
    p, poly, sign = good["exprs"][0]
    skewed = dict(good, exprs=[(p, [(c * 2 + 1, m) for c, m in poly], sign)]
                  + good["exprs"][1:])
    d = jit._rebuild(fn, options, programs, [(at, skewed)])
    x, y = _rand(50, np.float64), _rand(50, np.float64, 1)
    _check(d, ew, x, y)


def test_class_key():
    a = np.ones((3, 1))
    assert symbolic.class_key([a], [], []) == symbolic.class_key([np.ones((9, 1))], [], [])
    assert symbolic.class_key([a.T], [], []) != symbolic.class_key([a], [], [])
    assert symbolic.class_key([np.ones((4, 3))[:, ::2]], [], []) is None


def test_scalar_used_as_value_is_a_relation():
    def power(x, k):
        for _ in range(k):
            x = x * 1.5
        return x
    c = fl.compile(power, dynamic=True)
    for n, k in ((6, 2), (9, 2), (9, 3), (12, 3), (20, 2)):
        x = _rand(n, np.float64)
        np.testing.assert_allclose(c(x, k), power(x, k))
    assert c.stats["traces"] == 2        # k = 2 and k = 3: one template each


def test_schedule_regime_is_a_relation(monkeypatch):
    """An instance runs the base's kernel code: past the streaming-store threshold the static
    schedule would pick other code (non-temporal stores), so such a size takes a trace."""
    from fastlaunch.backends import cpu_schedule
    monkeypatch.setattr(cpu_schedule, "STREAM_BYTES", 64 << 10)
    c = fl.compile(ew, dynamic=True)
    _check(c, ew, _rand(100, np.float64), _rand(100, np.float64, 1))
    _check(c, ew, _rand(200, np.float64), _rand(200, np.float64, 1))
    assert c.stats["traces"] == 1
    big = 8 << 10                                   # 3 x 64 KiB moved: past the threshold
    _check(c, ew, _rand(big, np.float64), _rand(big, np.float64, 1))
    assert c.stats["traces"] == 2
    assert "stream" in c.lower(_rand(big, np.float64), _rand(big, np.float64)).kernels[0][1]


@pytest.mark.filterwarnings("ignore::fastlaunch.jit.RetraceWarning")
@pytest.mark.parametrize("fn", [lambda x: x[:5] * 2, lambda x: x[-5:] * 2, lambda x: x[2:7] + 1])
def test_clamped_slice_bounds_take_a_trace(fn):
    """NumPy clamps a slice bound to the extent: below the bound the template's sizes would be
    wrong, and the call is traced (sign of a size expression, or the verifier)."""
    c = fl.compile(fn, dynamic=True)
    for n in (20, 30, 12, 9, 6, 4, 3, 2):
        x = _rand(n, np.float64)
        got, want = c(x), fn(x)
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_iterate_a_step_with_symbolic_entries():
    step = fl.compile(lambda x: x * 0.5 + 1)
    for n in (10, 20, 30):
        step(np.ones(n))
    assert step.stats["symbolic"]
    x = _rand(30, np.float64)
    got = fl.iterate(step, 5, x, carry=0, collect=False)
    want = x
    for _ in range(5):
        want = want * 0.5 + 1
    np.testing.assert_allclose(got, want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_devsim_instances_match_numpy(dtype):
    """The device paths (devsim: the CUDA bytecode simulated on the host, with its copies in
    and out) take symbolic instances too: every size of the class after the second is an
    instance, equal to NumPy's result, with in-place updates copied back."""
    def upd(p, g, lr):
        p -= lr * np.tanh(g)
        return p * 2.0
    c = fl.compile(upd, backend="devsim")
    for n in (10, 20, 33, 7, 128, 1000):
        p, g = _rand(n, dtype, n), _rand(n, dtype, n + 1)
        want_p = p.copy()
        want = upd(want_p, g, 0.5)
        got = c(p, g, 0.5)
        tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12)
        np.testing.assert_allclose(got, want, **tol)
        np.testing.assert_allclose(p, want_p, **tol)
    assert c.stats["traces"] == 2, c.stats["history"]
    assert c.stats["symbolic"]


def test_null_backend_sizes_stay_static_with_reason():
    """The null backend's kernels are their descriptions (sizes included), so its sizes are
    specialised, and stats say why."""
    c = fl.compile(ew, backend="null")
    for n in (10, 20):
        c(_rand(n, np.float64), _rand(n, np.float64, 1))
    assert c.stats["traces"] == 2
    assert "the kernels' code depends on it" in c.stats["static_sizes"][0]


@pytest.mark.filterwarnings("ignore::fastlaunch.jit.RetraceWarning")
@pytest.mark.parametrize("fn", [lambda x: x[:5000] * 2, lambda x: x[-5000:] + 1,
                                lambda x: x[5:5000] * 3, lambda x: x[:, :3000].T + 1,
                                lambda x: np.concatenate([x[1:], x[:4000]])],
                         ids=["head", "tail", "mid", "2d", "concat"])
def test_slice_bounds_past_the_probes_are_guarded(fn):
    """A slice bound far past every probe size (x[:5000] traced at 10, 20, probed up to about
    400) clamps in the base trace: the template keeps the sign of extent - bound, so a size
    past the bound takes another trace instead of an instance of the wrong size (before:
    x[:100000] at n = 150000 gave 150000 elements, NumPy 100000)."""
    c = fl.compile(fn)
    two_d = "T" in fn.__code__.co_names
    for n in (10, 20, 30, 6000, 7001, 12, 4999, 5000, 5001, 3000, 2999, 60):
        x = _rand((4, n) if two_d else n, np.float64)
        got, want = c(x), fn(x)
        assert got.shape == want.shape, (n, got.shape, want.shape)
        np.testing.assert_array_equal(got, want)


def test_index_guards_recorded():
    from fastlaunch.frontend import trace
    with trace.watch_sizes() as w:
        trace.note_index_guards(10, slice(2, 100))
        trace.note_index_guards(10, slice(-3, None))
        trace.note_index_guards(10, 4)
    assert w.guards == [8, 7, -90, -91, 7, 8, 6, 5]
    trace.note_index_guards(10, 4)          # outside a watch: nothing kept
    assert w.guards == [8, 7, -90, -91, 7, 8, 6, 5]
