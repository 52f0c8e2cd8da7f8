"""SciPy functions that convert their arguments with np.asarray, traced through fastlaunch's
own compositions (fastlaunch/frontend/scipy_funcs.py): scipy.linalg.inv/solve/cholesky/det and the
densities of scipy.stats.norm and scipy.stats.multivariate_normal, checked against SciPy
itself; the interception is only active while a thread traces and leaves SciPy's own calls
unchanged."""
from __future__ import annotations

import threading

import numpy as np
import pytest
import scipy.linalg
import scipy.stats
from scipy.linalg import inv as inv_by_name
from scipy.stats import multivariate_normal, norm

import fastlaunch as fl

from .harness import check, check_many, cover, make

SCI = "scipy equivalents"


def _spd(n, key, dtype=np.float64):
    a = make((n, n), dtype, domain=(-1, 1), special=False, key=key)
    return (a @ a.T + n * np.eye(n)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scipy_linalg(dtype):
    s = _spd(5, ("s",), dtype)
    b = make((5,), dtype, special=False, key=("b",))
    b2 = make((5, 3), dtype, special=False, key=("b2",))
    check_many({
        "inv": lambda s, b, b2: scipy.linalg.inv(s),
        "inv, no finite check": lambda s, b, b2: scipy.linalg.inv(s, check_finite=False),
        "det": lambda s, b, b2: scipy.linalg.det(s),
        "cholesky (upper)": lambda s, b, b2: scipy.linalg.cholesky(s),
        "cholesky lower": lambda s, b, b2: scipy.linalg.cholesky(s, lower=True),
        "solve vector": lambda s, b, b2: scipy.linalg.solve(s, b),
        "solve matrix": lambda s, b, b2: scipy.linalg.solve(s, b2),
        "solve pos": lambda s, b, b2: scipy.linalg.solve(s, b, assume_a="pos"),
        "solve sym from the lower triangle": lambda s, b, b2:
            scipy.linalg.solve(np.tril(s), b, assume_a="sym", lower=True),
        "solve transposed": lambda s, b, b2: scipy.linalg.solve(s + np.triu(s, 1), b,
                                                                transposed=True),
        "inv of an int matrix": lambda s, b, b2: scipy.linalg.inv(np.round(s).astype(np.int64)),
    }, s, b, b2, tol="reduce", atol=_linalg_atol(dtype))


def _linalg_atol(dtype):
    # float32: SciPy factors in float32; its det (a float64 result) carries float32 rounding,
    # ours is computed in float64 as np.linalg does
    if dtype != np.float32:
        return 1e-10
    return lambda label, expected: 1e-6 * abs(float(expected)) if label == "det" else 1e-4


def test_scipy_linalg_checks_when_the_function_runs():
    f = fl.compile(lambda a: scipy.linalg.inv(a))
    s = _spd(3, ("s",))
    np.testing.assert_allclose(f(s), scipy.linalg.inv(s))
    bad = s.copy()
    bad[0, 1] = np.nan
    for fn in (scipy.linalg.inv, f):
        with pytest.raises(ValueError, match="infs or NaNs"):
            fn(bad)
    for fn in (scipy.linalg.inv, f):
        with pytest.raises(np.linalg.LinAlgError):
            fn(np.ones((3, 3)))
    g = fl.compile(lambda a: scipy.linalg.cholesky(a))
    g(s)
    for fn in (scipy.linalg.cholesky, g):
        with pytest.raises(np.linalg.LinAlgError):
            fn(-s)


def test_scipy_linalg_refusals():
    s = _spd(3, ("s",))
    check(lambda a: scipy.linalg.inv(a[:, :2]), s)                 # not square: ValueError
    with pytest.raises(fl.TracingError, match="assume_a"):
        fl.compile(lambda a: scipy.linalg.solve(a, a[0], assume_a="banded"))(s)


def test_norm_densities():
    x = make((50,), np.float64, domain=(-4, 4), special=False)
    loc = make((50,), np.float32, domain=(-1, 1), special=False, key=("loc",))
    xs = np.concatenate([x[:45], [np.inf, -np.inf, np.nan, 0.0, 1.0]])
    check_many({
        "cdf": lambda x, loc: norm.cdf(x),
        "cdf loc scale": lambda x, loc: norm.cdf(x, loc=0.5, scale=2.0),
        "cdf traced loc": lambda x, loc: norm.cdf(x, loc),
        "cdf scalar": lambda x, loc: norm.cdf(x[3]),
        "cdf frozen": lambda x, loc: norm(0.25, 3.0).cdf(x),
        "pdf": lambda x, loc: norm.pdf(x, 1.0, 0.5),
        "pdf traced scale": lambda x, loc: norm.pdf(x, 0.0, np.abs(loc) + 0.5),
        "logpdf": lambda x, loc: norm.logpdf(x, loc, 2.0),
        "bad scale (nan)": lambda x, loc: norm.cdf(x, 0.0, loc),
    }, xs, loc, tol="transc", atol=1e-12)


def test_norm_with_python_scalar_arguments():
    """Scalars passed as arguments stay runtime parameters (filterpy's norm_cdf pattern)."""
    f = fl.compile(lambda lo, hi, mu, sd: abs(norm.cdf(lo, loc=mu, scale=sd) -
                                              norm.cdf(hi, loc=mu, scale=sd)))
    for args in ((-1.0, 1.0, 0.2, 1.5), (0.0, 3.0, -1.0, 0.5), (2.0, 2.5, 0.0, -1.0)):
        want = abs(norm.cdf(args[0], loc=args[2], scale=args[3]) -
                   norm.cdf(args[1], loc=args[2], scale=args[3]))
        got = f(*args)
        assert type(got) is type(want)
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)
    assert f.stats["traces"] == 1


def test_multivariate_normal_densities():
    s = _spd(3, ("s",))
    x = make((3,), np.float64, special=False, key=("x",))
    xs = make((6, 3), np.float64, special=False, key=("xs",))
    mean = make((3,), np.float64, special=False, key=("m",))
    check_many({
        "logpdf": lambda s, x, xs, mean: multivariate_normal.logpdf(x, mean, s),
        "pdf": lambda s, x, xs, mean: multivariate_normal.pdf(x, mean, s),
        "logpdf of rows": lambda s, x, xs, mean: multivariate_normal.logpdf(xs, mean, s),
        "allow_singular": lambda s, x, xs, mean: multivariate_normal.logpdf(x, mean, s, True),
        "no mean": lambda s, x, xs, mean: multivariate_normal.logpdf(xs, cov=s),
        "scalar cov": lambda s, x, xs, mean: multivariate_normal.logpdf(x, mean, 2.0),
        "diagonal cov": lambda s, x, xs, mean: multivariate_normal.pdf(x, mean, np.diag(s)),
        "one dimension": lambda s, x, xs, mean: multivariate_normal.logpdf(x, 0.5, 2.0),
        "column vectors": lambda s, x, xs, mean:
            multivariate_normal.logpdf(x.reshape(3, 1).flatten(), mean.reshape(3, 1).flatten(), s),
        "singular, on and off the support": lambda s, x, xs, mean:
            multivariate_normal.logpdf(np.stack([x * [1, 1, 0], x]), np.zeros(3),
                                       np.diag([1.0, 2.0, 0.0]), allow_singular=True),
    }, s, x, xs, mean, tol="transc", atol=1e-10)


def test_multivariate_normal_checks_when_the_function_runs():
    f = fl.compile(lambda x, c: multivariate_normal.logpdf(x, None, c))
    x = np.array([0.1, -0.2])
    f(x, np.eye(2))
    cases = ((np.diag([1.0, 0.0]), np.linalg.LinAlgError, "positive definite"),
             (np.diag([1.0, -1.0]), ValueError, "positive semidefinite"),
             (np.array([[1.0, np.inf], [np.inf, 1.0]]), ValueError, "infs or NaNs"))
    for cov, exc, text in cases:
        with pytest.raises(exc, match=text):
            multivariate_normal.logpdf(x, None, cov)
        with pytest.raises(exc, match=text):
            f(x, cov)


def test_intercepted_only_while_tracing_and_only_traced_calls():
    original_inv, original_cdf = scipy.linalg.inv, type(norm).__dict__.get("cdf")
    seen = {}

    def body(a):
        # a SciPy call on a plain array inside the trace is SciPy's own
        seen["plain"] = scipy.linalg.inv(np.eye(2) * 2)
        seen["patched"] = scipy.linalg.inv is not original_inv
        return scipy.linalg.inv(a)

    f = fl.compile(body)
    s = _spd(2, ("s",))
    np.testing.assert_allclose(f(s), scipy.linalg.inv(s))
    np.testing.assert_array_equal(seen["plain"], np.eye(2) / 2)
    assert seen["patched"]
    assert scipy.linalg.inv is original_inv                  # restored after the trace
    assert type(norm).__dict__.get("cdf") is original_cdf     # (norm_gen inherits cdf)


def test_other_threads_get_scipys_results_while_a_trace_runs():
    started, release = threading.Event(), threading.Event()
    results = []

    def slow_body(a):
        started.set()
        release.wait(10)
        return scipy.linalg.inv(a)

    def other():
        started.wait(10)
        a = np.array([[2.0, 0.0], [0.0, 4.0]])
        results.append((scipy.linalg.inv(a), norm.cdf(0.0)))
        release.set()

    t = threading.Thread(target=other)
    t.start()
    fl.compile(slow_body)(np.eye(2))
    t.join()
    np.testing.assert_array_equal(results[0][0], [[0.5, 0.0], [0.0, 0.25]])
    assert results[0][1] == 0.5


def test_name_imported_into_the_module_is_intercepted():
    s = _spd(3, ("s",))
    f = fl.compile(lambda a: inv_by_name(a) @ a)
    np.testing.assert_allclose(f(s), np.eye(3), atol=1e-12)
    assert inv_by_name is scipy.linalg.inv


def test_unlisted_scipy_function_is_still_a_clear_error():
    with pytest.raises(fl.TracingError, match="scipy.linalg.schur"):
        fl.compile(lambda a: scipy.linalg.schur(a))(np.eye(2))


for _name in ("scipy.linalg.inv", "scipy.linalg.det", "scipy.linalg.cholesky",
              "scipy.linalg.solve"):
    cover(_name, SCI, ["float32", "float64"], test="test_scipy_equivalents.py::test_scipy_linalg",
          note="traced as np.linalg (check_finite: a runtime check); 2-D matrices; solve: "
               "assume_a general/sym/her/pos, a 1-D or 2-D right-hand side")
for _name in ("scipy.stats.norm.cdf", "scipy.stats.norm.pdf", "scipy.stats.norm.logpdf"):
    cover(_name, SCI, ["float64"], test="test_scipy_equivalents.py::test_norm_densities",
          note="also through frozen distributions (norm(loc, scale).cdf); loc and scale as "
               "positional or keyword arguments")
for _name in ("scipy.stats.multivariate_normal.logpdf", "scipy.stats.multivariate_normal.pdf"):
    cover(_name, SCI, ["float64"],
          test="test_scipy_equivalents.py::test_multivariate_normal_densities",
          note="SciPy's eigendecomposition method (pseudo-inverse, pseudo-determinant, the "
               "support of a singular covariance); its value errors are runtime checks; not "
               "through frozen distributions")
