"""Nothing falls back to NumPy at replay: the matrix products and np.linalg functions a
compiled function calls run as kernels and library calls (LIBCALL), never as NumPy calls.

Replay is checked two ways: NumPy's functions are replaced by counting wrappers after the
trace (a fallback that looked them up would count), and a profiler hook sees every Python
function called during the replayed calls (none may belong to NumPy)."""
import sys

import numpy as np
import pytest

import fastlaunch as fl

COUNTED = [(np.linalg, n) for n in ("inv", "solve", "det", "slogdet", "cholesky", "eigh",
                                    "svd", "lstsq", "pinv", "matrix_rank", "norm")] + \
          [(np, n) for n in ("matmul", "dot", "einsum", "inner", "tensordot")]


def _kalman_like(x, P, F, H, R, z, W, b):
    """A Kalman-style update and a small MLP: every matrix function the tracer supports."""
    xp = F @ x
    Pp = F @ P @ F.T
    S = H @ Pp @ H.T + R
    K = np.linalg.solve(S, H @ Pp).T
    x1 = xp + np.einsum("ij,j->i", K, z - H @ xp)
    P1 = Pp - K @ H @ Pp
    sign, logdet = np.linalg.slogdet(S)
    L = np.linalg.cholesky(S)
    w, v = np.linalg.eigh(S)
    h = np.tanh(np.dot(W, x1) + b)
    # a regression step: least squares, the pseudo-inverse, the SVD and the rank of H
    coef, _, rank, sv = np.linalg.lstsq(H, z, rcond=None)
    U, s, Vh = np.linalg.svd(H, full_matrices=False)
    fit = (U * s) @ Vh
    return (x1, P1, np.linalg.inv(S), np.linalg.det(S), sign * logdet, L, w, np.abs(v), h,
            coef, rank, sv, np.linalg.pinv(H) @ z, np.abs(U), s, fit,
            np.linalg.matrix_rank(H), np.linalg.svd(H, compute_uv=False))


def _args(dtype):
    rng = np.random.default_rng(3)
    n, m = 24, 20
    F = (np.eye(n) + 0.01 * rng.standard_normal((n, n))).astype(dtype)
    H = rng.standard_normal((m, n)).astype(dtype)
    P = np.eye(n, dtype=dtype)
    R = np.eye(m, dtype=dtype)
    return (rng.standard_normal(n).astype(dtype), P, F, H, R, rng.standard_normal(m).astype(dtype),
            rng.standard_normal((32, n)).astype(dtype), rng.standard_normal(32).astype(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_replay_makes_no_numpy_calls(monkeypatch, dtype):
    args = _args(dtype)
    g = fl.compile(_kalman_like)
    first = g(*args)
    expected = _kalman_like(*args)
    rtol = 2e-3 if dtype == np.float32 else 1e-9
    for got, want in zip(first, expected):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)
    assert "LIBCALL" in g.lower(*args).program.disassemble()
    _assert_replays_without_numpy(monkeypatch, g, args, first)


def _small_filter(x, P, F, H, R, z):
    """A batch of small Kalman updates: every np.linalg function that small matrices run as
    elementwise kernels (fastlaunch/frontend/small_linalg.py), no LAPACK call (the products are
    gemm calls)."""
    xp = np.einsum("ij,bj->bi", F, x)
    Pp = F @ P @ F.T
    S = H @ Pp @ H.T + R
    K = np.swapaxes(np.linalg.solve(S, H @ Pp), -1, -2)
    x1 = xp + np.einsum("bij,bj->bi", K, z - np.einsum("ij,bj->bi", H, xp))
    sign, logdet = np.linalg.slogdet(S)
    return (x1, np.linalg.inv(S), np.linalg.det(S), sign * logdet, np.linalg.cholesky(S),
            np.linalg.solve(S, z[..., None])[..., 0], np.linalg.solve(S[0], z[0]))


def test_small_matrices_replay_without_numpy_or_library_calls(monkeypatch):
    rng = np.random.default_rng(4)
    n, m, b = 4, 3, 64
    F = np.eye(n) + 0.05 * rng.standard_normal((n, n))
    H = rng.standard_normal((m, n))
    P = np.broadcast_to(np.eye(n), (b, n, n)) * (1 + rng.random((b, 1, 1)))
    args = (rng.standard_normal((b, n)), P, F, H, np.eye(m), rng.standard_normal((b, m)))
    g = fl.compile(_small_filter)
    first = g(*args)
    for got, want in zip(first, _small_filter(*args)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    text = g.lower(*args).program.disassemble()
    assert [line for line in text.splitlines() if "LIBCALL" in line and "gemm" not in line] == []
    _assert_replays_without_numpy(monkeypatch, g, args, first)


def _assert_replays_without_numpy(monkeypatch, g, args, first):
    """NumPy's functions counted and a profiler hook on: three replays call none of them and
    run no NumPy code (the detectors are shown to work first), and give the first results."""
    counts = {}
    for module, name in COUNTED:
        original = getattr(module, name)

        def counting(*a, _name=name, _original=original, **k):
            counts[_name] = counts.get(_name, 0) + 1
            return _original(*a, **k)
        monkeypatch.setattr(module, name, counting)

    seen = []

    def profile(frame, event, arg):
        if event in ("call", "c_call"):
            mod = frame.f_globals.get("__name__", "") if event == "call" else \
                getattr(arg, "__module__", "") or ""
            if mod.startswith("numpy"):
                seen.append((event, mod, frame.f_code.co_name if event == "call" else arg))

    sys.setprofile(profile)
    try:
        for _ in range(3):
            again = g(*args)
    finally:
        sys.setprofile(None)
    # the two detectors work: a NumPy call under them is seen
    sys.setprofile(profile)
    try:
        np.linalg.norm(args[0])
    finally:
        sys.setprofile(None)
    assert counts == {"norm": 1} and seen, (counts, seen)
    counts.clear()
    seen.clear()
    sys.setprofile(profile)
    try:
        for _ in range(3):
            again = g(*args)
    finally:
        sys.setprofile(None)
    assert counts == {}, f"NumPy functions called during replay: {counts}"
    assert seen == [], f"NumPy code ran during replay: {seen[:10]}"
    for got, want in zip(again, first):
        np.testing.assert_array_equal(got, want)
    assert len(g.traces) == 1
