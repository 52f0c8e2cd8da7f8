"""Random numbers drawn inside a traced function (issue 11): fresh on every call, with the
right distributions (fastlaunch/frontend/numpy/random.py; Philox4x32-10 in the kernels)."""
import os
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

import fastlaunch as fl

N = 200_000


def draws(x):
    g = np.random.default_rng()
    return (np.random.random(x.shape), np.random.standard_normal(x.shape),
            np.random.uniform(-2.0, 3.0, size=x.shape), np.random.normal(1.5, 0.5, x.shape),
            np.random.randint(0, 7, size=x.shape), g.random(x.shape, dtype=np.float32),
            g.standard_normal(x.shape, dtype=np.float32), g.integers(-3, 3, size=x.shape,
                                                                     endpoint=True),
            g.exponential(2.0, size=x.shape))


@pytest.fixture(scope="module")
def two_calls():
    f = fl.compile(draws)
    x = np.zeros(N)
    return f(x), f(x), f


def test_numbers_differ_between_calls(two_calls):
    a, b, f = two_calls
    for p, q in zip(a, b):
        assert not np.array_equal(p, q)
    assert f.stats["traces"] == 1


def test_dtypes_match_numpy(two_calls):
    a, _, _ = two_calls
    np.random.seed(0)
    want = draws(np.zeros(3))
    assert [p.dtype for p in a] == [q.dtype for q in want]


@pytest.mark.parametrize("i,cdf", [(0, "uniform"), (1, "norm"), (5, "uniform"), (6, "norm")])
def test_kolmogorov_smirnov(two_calls, i, cdf):
    sample = two_calls[0][i].astype(np.float64)
    assert stats.kstest(sample, cdf).pvalue > 1e-4


def test_moments(two_calls):
    a = two_calls[0]
    tol = 5 / np.sqrt(N)                       # about five standard errors
    u, z, uni, nor, ri, _, _, ints, ex = a
    assert abs(u.mean() - 0.5) < tol and abs(u.var() - 1 / 12) < tol
    assert abs(z.mean()) < 5 * tol and abs(z.var() - 1) < 5 * tol
    assert abs(uni.mean() - 0.5) < 5 * tol and uni.min() >= -2 and uni.max() < 3
    assert abs(nor.mean() - 1.5) < tol and abs(nor.std() - 0.5) < tol
    assert set(np.unique(ri)) == set(range(7))
    assert set(np.unique(ints)) == set(range(-3, 4))
    counts = np.bincount(ri, minlength=7)
    assert stats.chisquare(counts).pvalue > 1e-4
    assert abs(ex.mean() - 2.0) < 10 * tol and ex.min() >= 0
    assert 0.0 <= u.min() and u.max() < 1.0


def test_independent_streams_are_uncorrelated(two_calls):
    a, b, _ = two_calls
    assert abs(np.corrcoef(a[0], a[2])[0, 1]) < 0.02      # two draws of one call
    assert abs(np.corrcoef(a[0], b[0])[0, 1]) < 0.02      # one draw of two calls
    assert abs(np.corrcoef(a[0][:-1], a[0][1:])[0, 1]) < 0.02   # neighbouring elements


def test_generator_argument_draws_from_it_each_call():
    def noisy(x, rng):
        return x + rng.normal(0.0, 1.0, size=x.shape)

    f = fl.compile(noisy)
    x = np.zeros(1000)
    g1, g2 = np.random.default_rng(7), np.random.default_rng(7)
    a1, b1 = f(x, g1), f(x, g1)
    a2 = f(x, g2)
    assert not np.array_equal(a1, b1)         # the Generator advanced between calls
    np.testing.assert_array_equal(a1, a2)     # the same Generator state: the same numbers
    assert f.stats["traces"] == 1


def test_captured_generator_is_refused():
    rng = np.random.default_rng(0)

    def frozen(x):
        return x + rng.normal(size=x.shape)

    with pytest.raises(fl.TracingError, match="captures: they would be drawn once"):
        fl.compile(frozen)(np.zeros(3))


def test_fixed_seed_inside_is_deterministic_like_numpy():
    def seeded(x):
        return x + np.random.default_rng(42).random(x.shape)

    f = fl.compile(seeded)
    np.testing.assert_array_equal(f(np.zeros(4)), seeded(np.zeros(4)))


def test_seed_option_makes_streams_reproducible():
    f1 = fl.compile(draws, seed=123)
    f2 = fl.compile(draws, seed=123)
    x = np.zeros(10)
    for p, q in zip(f1(x), f2(x)):
        np.testing.assert_array_equal(p, q)


def test_unsupported_draws_say_so():
    with pytest.raises(fl.TracingError, match="np.random.shuffle"):
        fl.compile(lambda x: np.random.shuffle(x))(np.arange(3.0))
    assert np.random.shuffle.__module__ is not None and not hasattr(np.random.shuffle,
                                                                     "__wrapped__")


def test_random_fused_with_reduction_is_consistent():
    def mc_pi(x):
        u = np.random.random((2,) + x.shape)
        inside = (u[0] ** 2 + u[1] ** 2) < 1.0
        return 4 * inside.mean(), u

    f = fl.compile(mc_pi)
    est, u = f(np.zeros(N))
    assert est == 4 * ((u[0] ** 2 + u[1] ** 2) < 1.0).mean()   # the same numbers in both
    assert abs(est - np.pi) < 0.05


@pytest.mark.parametrize("machine_code", [True, False])
def test_saved_program_draws_fresh_numbers(tmp_path, machine_code):
    f = fl.compile(lambda x: x + np.random.standard_normal(x.shape))
    x = np.zeros(1000)
    f.save(tmp_path / "r.flp", x)
    g = fl.load(tmp_path / "r.flp", machine_code=machine_code)
    a, b = g(x), g(x)
    assert not np.array_equal(a, b)
    assert abs(a.mean()) < 0.2 and abs(a.std() - 1) < 0.2


# ---- choice: a population drawn from, uniformly or with probabilities ---------------------------
def choices(x, p):
    g = np.random.default_rng()
    return (np.random.choice([-1, 1], x.shape[0]),            # a list population
            np.random.choice(5, size=x.shape),                   # an int: arange(5)
            g.choice(x[:4], x.shape[0]),                         # a traced population
            g.choice(4, x.shape[0], p=p),                        # traced probabilities
            np.random.choice([10, 20, 30], x.shape[0], p=[0.5, 0.3, 0.2]),  # constant ones
            g.choice(np.arange(12.0).reshape(3, 4), 5, axis=1),  # columns of a matrix
            np.random.choice(x[:4]))                             # one draw: a scalar


@pytest.fixture(scope="module")
def choice_calls():
    f = fl.compile(choices)
    x = np.arange(N, dtype=np.float64) % 7 + 1
    p = np.array([0.1, 0.2, 0.3, 0.4])
    return f(x, p), f(x, p), f, x, p


def test_choice_matches_numpy_types_and_shapes(choice_calls):
    a, b, f, x, p = choice_calls
    want = choices(x[:10], p)
    for got, w in zip(a, want):
        assert type(got) is type(w) or (isinstance(got, np.ndarray) and isinstance(w, np.ndarray))
        assert np.asarray(got).dtype == np.asarray(w).dtype
    assert [np.shape(g) for g in a[1:2]] == [x.shape]
    assert a[5].shape == (3, 5) and np.isscalar(a[6])
    for p1, p2 in zip(a[:6], b[:6]):
        assert not np.array_equal(p1, p2)                 # fresh draws on every call
    assert f.stats["traces"] == 1


def test_choice_distributions(choice_calls):
    a, _, _, x, p = choice_calls
    signs, fives, pop, weighted, consts, cols, _ = a
    assert set(np.unique(signs)) == {-1, 1}
    assert stats.chisquare(np.bincount(signs + 1)[[0, 2]]).pvalue > 1e-4
    assert stats.chisquare(np.bincount(fives, minlength=5)).pvalue > 1e-4
    assert set(np.unique(pop)) == set(x[:4])
    assert stats.chisquare(np.unique(pop, return_counts=True)[1]).pvalue > 1e-4
    counts = np.bincount(weighted, minlength=4)
    assert stats.chisquare(counts, p * N).pvalue > 1e-4
    vals, counts = np.unique(consts, return_counts=True)
    assert list(vals) == [10, 20, 30]
    assert stats.chisquare(counts, np.array([0.5, 0.3, 0.2]) * N).pvalue > 1e-4
    m = np.arange(12.0).reshape(3, 4)
    assert all(any(np.array_equal(c, m[:, j]) for j in range(4)) for c in cols.T)


def test_choice_probabilities_are_checked_when_the_function_runs():
    f = fl.compile(lambda p: np.random.choice(3, 5, p=p))
    assert f(np.array([0.2, 0.3, 0.5])).shape == (5,)
    for bad, text in (([0.5, 0.6, -0.1], "non-negative"), ([0.2, 0.2, 0.2], "sum to 1"),
                      ([np.nan, 0.5, 0.5], "NaN")):
        bad = np.array(bad)
        with pytest.raises(ValueError, match=text):
            np.random.choice(3, 5, p=bad)
        with pytest.raises(ValueError, match=text):
            f(bad)


def test_choice_refusals_and_numpys_errors():
    with pytest.raises(fl.TracingError, match="replace=False"):
        fl.compile(lambda x: np.random.choice(x, 2, replace=False))(np.arange(5.0))
    for body in (lambda x: np.random.choice(x.reshape(2, 2), 3),       # legacy: 1-D only
                 lambda x: np.random.choice(x, 3, p=[0.5, 0.5]),       # p of another size
                 lambda x: np.random.choice(0, 3),
                 lambda x: np.random.choice(x[:0], 3)):
        with pytest.raises(ValueError):
            body(np.arange(4.0))
        with pytest.raises(ValueError):
            fl.compile(body)(np.arange(4.0))


# ---- after fork -------------------------------------------------------------------------------
AFTER_FORK = r"""
import multiprocessing as mp, os, sys
import numpy as np
import fastlaunch as fl

def body(x):
    return np.random.random(x.shape), np.random.default_rng().normal(size=x.shape)

unseeded = fl.compile(body)
seeded = fl.compile(body, seed=7)
x = np.zeros(6)
for f in (unseeded, seeded):
    f(x)                                   # traced (and a few numbers drawn) before the forks

def draw(_=None):
    return [np.concatenate(f(x)) for f in (unseeded, seeded)]

def child():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(w, np.concatenate(draw()).tobytes())
        os._exit(0)
    os.waitpid(pid, 0)
    got = os.read(r, 1 << 16)
    return np.frombuffer(got, np.float64).reshape(2, -1)

children = [child(), child()]             # two children, one after another
parent = np.array(draw())                 # the parent's next numbers
with mp.get_context("fork").Pool(3) as pool:
    workers = [np.array(d) for d in pool.map(draw, range(3), chunksize=1)]
rows = [parent] + children + workers
for which in range(2):                     # unseeded, seeded
    seen = [r[which].tobytes() for r in rows]
    assert len(set(seen)) == len(seen), f"function {which}: a process drew another's numbers"
np.save(sys.argv[1], np.array([c[1] for c in children]))   # the seeded children's draws
print("fork draws ok")
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_forked_processes_draw_numbers_of_their_own(tmp_path):
    """Children forked with os.fork and the workers of a fork-context Pool draw numbers of
    their own, unseeded or seeded, none a parent's or a sibling's; a seeded function's
    children draw the same numbers in a second run that forks the same way.  Before: every
    child drew exactly its parent's next numbers."""
    runs = []
    for i in range(2):
        out = tmp_path / f"run{i}.npy"
        proc = subprocess.run([sys.executable, "-c", AFTER_FORK, str(out)], capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0 and "fork draws ok" in proc.stdout, \
            f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-3000:]}"
        runs.append(np.load(out))
    np.testing.assert_array_equal(runs[0], runs[1])
