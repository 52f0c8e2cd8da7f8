"""Pickling compiled functions: by reference where importable, by value (cloudpickle) otherwise,
with their options; never raw pointers.  Shipped programs spare the receiving process tracing
and compiling.  Workers are fresh spawned processes, as Dask's, joblib's and
concurrent.futures' process pools start them."""
import concurrent.futures
import multiprocessing
import pathlib
import pickle
import sys

import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch import jit

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "ecosystem"))
import fl_pipelines  # noqa: E402  (importable by name in spawned workers, which inherit sys.path)

cloudpickle = pytest.importorskip("cloudpickle")
SPAWN = multiprocessing.get_context("spawn")


def numpy_smooth(x):
    return fl_pipelines.smooth.__wrapped__(x)


@pytest.fixture(scope="module")
def pool():
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=SPAWN) as ex:
        yield ex


# ---- in this process ------------------------------------------------------------------------
def test_importable_compiled_function_pickles_by_reference():
    f = fl_pipelines.smooth
    data = pickle.dumps(f)
    assert b"fl_pipelines" in data and b"smooth" in data and len(data) < 200
    assert pickle.loads(data) is f                  # pickle's global lookup, like a function
    assert cloudpickle.loads(cloudpickle.dumps(f)) is f


def test_by_value_round_trip_keeps_the_options():
    f = fl_pipelines.scaled                         # module.scaled is not the function's name
    x = np.linspace(-2, 2, 9)
    f(x, 2.0, 1)
    g = pickle.loads(pickle.dumps(f))
    assert g is not f and g.__wrapped__ is fl_pipelines.scale_and_shift
    assert g._static == (2,) and g.max_entries == 7 and g.replay is True
    assert g.backend is f.backend and g.pickle_programs is False
    assert g.stats["entries"] == 0                  # nothing traced travels without programs
    np.testing.assert_allclose(g(x, 2.0, 1), fl_pipelines.scale_and_shift(x, 2.0, 1))
    assert g.stats["traces"] == 1

    h = pickle.loads(pickle.dumps(fl.compile(np.tanh, replay=False, backend="null")))
    assert h.replay is False and h.backend.name == "null" and h.__wrapped__ is np.tanh


def test_lambda_and_closure_pickle_by_value():
    offset = np.arange(5.0)

    def make(k):
        return fl.compile(lambda x: x * k + offset)

    f2, f3 = make(2.0), make(3.0)
    x = np.ones(5)
    for f, k in ((f2, 2.0), (f3, 3.0)):
        for dumps in (cloudpickle.dumps, pickle.dumps):   # plain pickle nests cloudpickle's bytes
            g = pickle.loads(dumps(f))
            np.testing.assert_array_equal(g(x), x * k + offset)


def test_same_bytes_unpickle_to_one_function_per_process():
    """A process pool sends the function with every task: the worker keeps one copy, so it
    traces each signature once rather than once per task."""
    k = 1.5
    f = fl.compile(lambda x: x * k)
    data = pickle.dumps(f)
    a, b = pickle.loads(data), pickle.loads(data)
    assert a is b
    a(np.ones(3))
    b(np.ones(3))
    assert a.stats["traces"] == 1


# Shipped programs use the saved-program format, which loads on host backends only today
# (tests/persist/test_saved.py fails under --backend devsim): these tests pin the CPU backend.
def test_pickle_programs_ships_entries_and_installs_them_without_tracing():
    f = fl.compile(fl_pipelines.scale_and_shift, static_argnums=2, backend="cpu").with_programs(
        np.zeros(6, np.float32), 1.0, 3)
    assert f.pickle_programs and f.stats["entries"] == 1
    backend = f.backend
    before = getattr(backend, "compile_count", 0)
    g = pickle.loads(pickle.dumps(f))
    assert g.stats["traces"] == 0 and g.stats["programs_loaded"] == 1 and g.stats["entries"] == 1
    x = np.linspace(-1, 1, 6, dtype=np.float32)
    got = g(x, 0.5, 3)
    np.testing.assert_allclose(got, fl_pipelines.scale_and_shift(x, 0.5, 3), rtol=1e-6)
    assert got.dtype == np.float32
    assert g.stats["traces"] == 0 and getattr(backend, "compile_count", 0) == before
    # another signature is traced as usual
    g(x.astype(np.float64), 0.5, 3)
    assert g.stats["traces"] == 1
    # the introspection record of a shipped entry
    assert "BIND" in g.lower(x, 0.5, 3).bytecode


def test_with_programs_needs_replay():
    with pytest.raises(ValueError, match="with_programs needs replay=True"):
        fl.compile(fl_pipelines.numpy_pipeline, replay=False).with_programs(np.ones(3))


def test_shipped_entry_serves_keyword_and_container_calls():
    f = fl.compile(lambda d, s: {"y": d["a"] * s + d["b"]}, backend="cpu").with_programs(
        {"a": np.ones(4), "b": np.zeros(4)}, 2.0)
    g = pickle.loads(pickle.dumps(f))
    d = {"a": np.arange(4.0), "b": np.full(4, 0.5)}
    np.testing.assert_array_equal(g(d, s=3.0)["y"], d["a"] * 3.0 + 0.5)
    assert g.stats["traces"] == 0


def test_corrupted_shipped_program_is_a_clear_error():
    f = fl.compile(fl_pipelines.scale_and_shift, static_argnums=2, backend="cpu").with_programs(
        np.zeros(3), 1.0, 1)
    fn, options, programs = f.__reduce__()[1][:3]
    bad = bytearray(programs[0])
    bad[-1] ^= 0xFF
    with pytest.raises(fl.SavedProgramError, match="corrupted"):
        jit._rebuild(fn, options, [bytes(bad)])


def test_without_cloudpickle_a_lambda_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(jit, "_cloudpickle", lambda: None)
    with pytest.raises(pickle.PicklingError, match="install cloudpickle"):
        pickle.dumps(fl.compile(lambda x: x + 1))
    # importable functions need no cloudpickle
    g = pickle.loads(pickle.dumps(fl_pipelines.scaled))
    assert g.__wrapped__ is fl_pipelines.scale_and_shift


def test_compiled_methods_bind_and_pickle():
    obj = Scaler(3.0)
    x = np.arange(4.0)
    np.testing.assert_array_equal(obj.apply(x), x * 3.0 + 1)
    bound = pickle.loads(pickle.dumps(obj.apply))       # functools.partial(compiled, obj)
    np.testing.assert_array_equal(bound(x), x * 3.0 + 1)
    assert pickle.loads(pickle.dumps(Scaler.apply)) is Scaler.apply


class Scaler:
    def __init__(self, k):
        self.k = k

    def __hash__(self):
        return hash(self.k)

    def __eq__(self, other):
        return isinstance(other, Scaler) and other.k == self.k

    @fl.compile(static_argnums=0)            # `self` is a static argument: its value is baked in
    def apply(self, x):
        return x * self.k + 1


# ---- __dask_tokenize__ ----------------------------------------------------------------------
def test_dask_token_is_stable_and_tells_functions_and_options_apart():
    tokenize = pytest.importorskip("dask.base").tokenize

    def make(k):
        return fl.compile(lambda x: x * k)

    assert tokenize(fl_pipelines.smooth) == tokenize(fl_pipelines.smooth)
    assert tokenize(make(2.0)) == tokenize(make(2.0))
    assert tokenize(make(2.0)) != tokenize(make(3.0))       # closure values are part of it
    a = fl.compile(fl_pipelines.scale_and_shift)
    assert tokenize(a) == tokenize(fl.compile(fl_pipelines.scale_and_shift))
    assert tokenize(a) != tokenize(fl.compile(fl_pipelines.scale_and_shift, static_argnums=2))
    assert tokenize(a) != tokenize(fl.compile(fl_pipelines.scale_and_shift, replay=False))
    a(np.ones(3), 1.0, 2.0)                                    # entries are not part of it
    assert tokenize(a) == tokenize(fl.compile(fl_pipelines.scale_and_shift))


def _token_in_worker(name):
    from dask.base import tokenize
    return tokenize(getattr(fl_pipelines, name))


def test_dask_token_is_the_same_in_another_process(pool):
    tokenize = pytest.importorskip("dask.base").tokenize
    for name in ("smooth", "scaled", "normalise"):
        assert pool.submit(_token_in_worker, name).result(timeout=120) == \
            tokenize(getattr(fl_pipelines, name))


# ---- spawned workers ------------------------------------------------------------------------
def test_process_pool_spawn_gives_numpy_results(pool):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(1000)
    k = 0.5
    closure = fl.compile(lambda x: np.exp(x * k) - 1)
    jobs = [
        (fl_pipelines.smooth, (x,), numpy_smooth(x)),
        (fl_pipelines.scaled, (x, 2.0, 1), fl_pipelines.scale_and_shift(x, 2.0, 1)),
        (fl_pipelines.normalise, (x, 3), np.abs(x) ** 3 / ((np.abs(x) ** 3).sum() + 1.0)),
        (closure, (x,), np.exp(x * k) - 1),
    ]
    futures = [pool.submit(fl_pipelines.call_and_report, f, *args) for f, args, _ in jobs]
    for fut, (_, _, want) in zip(futures, jobs):
        got, report = fut.result(timeout=120)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        assert report["traces"] == 1 and report["programs_loaded"] == 0


def test_shipped_programs_worker_compiles_nothing(monkeypatch):
    """A fresh worker with no kernel cache: re-tracing compiles the kernels, shipped programs
    load them (the counters say so)."""
    monkeypatch.setenv("FASTLAUNCH_CACHE_DIR", "")      # the workers' kernel disk cache is off
    x = np.linspace(-3, 3, 4097)
    plain = fl.compile(fl_pipelines.numpy_pipeline, backend="cpu")
    shipped = fl.compile(fl_pipelines.numpy_pipeline, backend="cpu").with_programs(x)
    want = fl_pipelines.numpy_pipeline(x)
    for f in (shipped, plain):                           # one fresh worker each
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=SPAWN) as ex:
            got, report = ex.submit(fl_pipelines.call_and_report, f, x).result(timeout=120)
        np.testing.assert_allclose(got, want, rtol=1e-12)
        if f is shipped:
            assert report == {"compiled_kernels": 0, "traces": 0, "programs_loaded": 1,
                              "entries": 1}
        else:
            assert report["traces"] == 1 and report["compiled_kernels"] > 0


def test_joblib_with_a_compiled_function():
    joblib = pytest.importorskip("joblib")
    x = np.random.default_rng(1).standard_normal((4, 300))
    k = 2.0
    closure = fl.compile(lambda row: np.sqrt(np.abs(row)) * k)
    with joblib.parallel_config(backend="loky", n_jobs=2):
        out = joblib.Parallel()(joblib.delayed(closure)(row) for row in x)
        smoothed = joblib.Parallel()(joblib.delayed(fl_pipelines.smooth)(row) for row in x)
    np.testing.assert_allclose(np.stack(out), np.sqrt(np.abs(x)) * k, rtol=1e-12)
    np.testing.assert_allclose(np.stack(smoothed), np.stack([numpy_smooth(r) for r in x]),
                               rtol=1e-12)


def shipped_step(w, x, idx, lr):
    """A step whose plan has every kind of buffer: a gather with its status word, a matrix
    product (a library call on the CPU), a reduction the CPU splits, a constant."""
    g = x.T @ (x @ w) + w[idx].sum() + np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])
    return w - lr * g, np.sum(np.exp(-x * x)) + (w * w).sum()


def shipped_args():
    rng = np.random.default_rng(1)
    return [rng.standard_normal(8), rng.standard_normal((40000, 8)) * 1e-3,
            np.array([1, 3, -2]), 1e-3]


@pytest.mark.parametrize("backend", ["cpu", "devsim"])
def test_a_shipped_entry_iterates_saves_and_pickles_again(backend, tmp_path):
    """Before: a function unpickled with shipped programs had entries without a plan
    (plan=None), so fl.iterate, .save() and pickling it again raised AttributeError.  The
    plan is rebuilt from the kernel descriptions the shipped bytes hold (checked: it records
    the shipped program again)."""
    args = shipped_args()
    f = fl.compile(shipped_step, backend=backend).with_programs(*args)
    g = pickle.loads(pickle.dumps(f))
    assert g.stats["traces"] == 0 and g.stats["programs_loaded"] == 1
    want_plan = f.lower(*args).plan
    got_plan = g.lower(*args).plan
    assert g.stats["traces"] == 0
    assert [type(k).__name__ for k in got_plan.kernels] == \
        [type(k).__name__ for k in want_plan.kernels]
    assert sorted(b.role for b in got_plan.buffers) == sorted(b.role for b in want_plan.buffers)
    # fl.iterate builds its loop from the rebuilt plan
    want = fl.iterate(f, 5, *args, carry=0)
    got = fl.iterate(g, 5, *args, carry=0)
    assert g.stats["traces"] == 0
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    # save() writes the same program
    g.save(tmp_path / "g.flp", *args)
    f.save(tmp_path / "f.flp", *args)
    loaded = fl.load(tmp_path / "g.flp")
    for a, b in zip(loaded(*args), f(*args)):
        np.testing.assert_array_equal(a, b)
    # pickled again: still shipped, still no trace
    h = pickle.loads(pickle.dumps(g))
    assert h.stats["traces"] == 0 and h.stats["programs_loaded"] == 1
    for a, b in zip(h(*args), shipped_step(*args)):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    assert h.stats["traces"] == 0


def test_a_shipped_program_that_its_plan_does_not_record_is_refused():
    """The rebuilt plan must record the shipped program exactly: bytes whose code differs
    from what their kernels' plan records are refused, not given a plan that lies."""
    import json
    from fastlaunch.program import saved
    f = fl.compile(shipped_step, backend="cpu").with_programs(*shipped_args())
    data = f.__reduce__()[1][2][0]
    meta, program, objects = saved._parse(data, "shipped")
    program.slots[-1].label = "in0@dev"          # a temporary posing as an argument's shadow
    blobs = [json.dumps(meta).encode(), program.to_bytes()] + list(objects)
    import hashlib
    import struct
    payload = b"".join(struct.pack("<Q", len(b)) + b for b in blobs)
    forged = saved._HEADER.pack(saved.MAGIC, saved.FORMAT_VERSION, 0, len(payload),
                                hashlib.sha256(payload).digest()) + payload
    with pytest.raises(saved.SavedProgramError, match="not one its kernels' plan records"):
        saved.loads_artifact(forged, "cpu")


def test_shipped_symbolic_template_worker_traces_no_new_size(monkeypatch):
    """Issue 29: a function pickled with its programs carries its symbolic templates: a fresh
    worker calls it at sizes nobody traced, with no trace and no compile."""
    monkeypatch.setenv("FASTLAUNCH_CACHE_DIR", "")
    f = fl.compile(fl_pipelines.scale_and_shift, backend="cpu", dynamic=True,
                   pickle_programs=True)
    f(np.ones(100), 2.0, 1.0)
    assert f.stats["symbolic"]
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=SPAWN) as ex:
        for n in (7, 1000, 4097):
            x = np.linspace(-3, 3, n)
            got, report = ex.submit(fl_pipelines.call_and_report, f, x, 2.0, 1.0).result(
                timeout=120)
            np.testing.assert_allclose(got, fl_pipelines.scale_and_shift(x, 2.0, 1.0),
                                       rtol=1e-12)
            assert report["traces"] == 0 and report["compiled_kernels"] == 0, report
