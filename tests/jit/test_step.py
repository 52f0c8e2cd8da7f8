"""Acceptance: the README's optimisation step, compiled, follows NumPy step by step."""
import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch.__main__ import step


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
# 1,000,003 elements (5-7 s each): slow; 65,536 is past the parallel and streaming thresholds
@pytest.mark.parametrize("n", [1, 16, 1000, 65536,
                               pytest.param(1_000_003, marks=pytest.mark.slow)])
def test_step_matches_numpy_for_100_iterations(n, dtype):
    compiled = fl.compile(step)
    rng = np.random.default_rng(n)
    p = rng.standard_normal(n).astype(dtype)
    m, v = np.zeros(n, dtype), np.zeros(n, dtype)
    target = rng.standard_normal(n).astype(dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for it in range(100):
        lr = 1e-2 * (1 + it % 3)                 # a changing scalar: no re-trace
        want = step(p, m, v, target, lr)
        got = compiled(p, m, v, target, lr)
        exact = step(*(a.astype(np.float64) for a in (p, m, v, target)), lr)
        for w, g, x in zip(want, got, exact):
            assert np.asarray(g).dtype == np.asarray(w).dtype
            assert np.shape(g) == np.shape(w)
            # relative to the output's magnitude (elementwise relative error is meaningless where
            # r = y - target cancels to almost nothing)
            scale = max(np.max(np.abs(w)), 1e-30)
            err = np.max(np.abs(np.asarray(w, np.float64) - g)) / scale
            if err >= tol:
                # with one element there is no magnitude to hide cancellation behind: then ask
                # to be as close to the exact (float64) step as NumPy's own float32 result is
                ours = np.max(np.abs(np.asarray(g, np.float64) - x))
                numpys = np.max(np.abs(np.asarray(w, np.float64) - x))
                assert ours <= 2 * numpys + tol * 1e-3 * scale, \
                    f"iteration {it}: relative error {err:.2e} vs NumPy, {ours:.2e} vs exact " \
                    f"(NumPy {numpys:.2e})"
        assert isinstance(got[3], np.generic) and got[3].dtype == dtype
        p, m, v = want[:3]                       # follow NumPy's trajectory
    assert compiled.stats["traces"] == 1


def test_step_lowers_to_several_kernels_with_alloc_launch_free():
    args = [np.zeros(1 << 16, np.float32)] * 4 + [1e-2]
    lowered = fl.compile(step).lower(*args)
    assert lowered.program.launch_count() >= 2
    for op in ("ALLOC", "LAUNCH", "FREE"):
        assert op in lowered.bytecode
