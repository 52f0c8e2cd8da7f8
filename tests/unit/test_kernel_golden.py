"""Golden texts of the fused, unscheduled kernel descriptions, and of the CPU's schedule of them.

`fuse.plan(graph, layouts)` is the contract between the front end and every backend
(docs/architecture.md): these files pin it, buffers, loop nests, argument bindings and element
ranges included, under tests/unit/golden/fused/.  The CPU schedule of the same plans
(`cpu_schedule.schedule`: launch sizes, work estimates, tiles, reduction splits) is pinned
separately under golden/cpu_schedule/, so a fusion change and a schedule change show up as
different diffs.  A mismatch fails with a unified diff; FASTLAUNCH_UPDATE_GOLDEN=1 rewrites
the files (review the diff before committing).
"""
import numpy as np
import pytest

from fastlaunch.__main__ import step
from fastlaunch.backends import cpu_schedule

from _stages import GOLDEN_DIR, check_golden, fused, plan_text, schedule_text


def f32(*shape):
    return np.ones(shape, np.float32)


def chain(x, y):
    return np.sqrt(np.abs(np.sin(x) * y + 2.0)) - x


def rowsum(x):
    return x.sum(axis=1)


def colsum(x):
    return x.sum(axis=0)


def gather(x, idx):
    return x[idx] * 2.0


def scatter_add(x, idx, v):
    np.add.at(x, idx, v)


def matmul(x, w):
    return x @ w


def big_sum(x):
    return np.sum(x * x)


def mlp(x, w1, b1, w2, b2, w3, b3):
    """Each layer's tanh is read by the next product once per output column: materialised."""
    h = np.tanh(x @ w1 + b1)
    h = np.tanh(h @ w2 + b2)
    return h @ w3 + b3


def stencil_steps(u):
    """Three steps of a 2-D heat stencil on a shrinking domain: each step reads the previous
    one at five offsets, so every step is materialised once (not recomputed 5**k times)."""
    for _ in range(3):
        u = u[1:-1, 1:-1] + 0.1 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]
                                   - 4.0 * u[1:-1, 1:-1])
    return u


def cheap_reuse(x, y):
    """A cheap value read twice through shifted slices: recomputed, not materialised."""
    a = x + y
    return a[1:] - a[:-1]


def row_softmax(x):
    """Max, then the sum of exp, then the division, folded per row in one kernel."""
    e = np.exp(x - np.max(x, axis=1, keepdims=True))
    return e / np.sum(e, axis=1, keepdims=True)


def small_solve(a, b):
    """np.linalg.solve of 2 x 2 matrices written out over the batch (frontend/small_linalg.py): the
    elimination, the substitution and the arithmetic around it in one kernel, which unrolls
    the result's matrix dims (its stores read the pack's entries); then the singular-matrix
    check (a reduction and its status word)."""
    return np.linalg.solve(a, b) * 2.0 + 1.0


CASES = {
    "elementwise_chain": (chain, (f32(1024), f32(1024))),
    "row_sum": (rowsum, (f32(4, 16),)),       # more than ops.SMALL_REDUCE: a reduction kernel
    "small_row_sum": (rowsum, (f32(4, 8),)),  # unrolled: 8 loads added pairwise, as NumPy's
    "column_sum": (colsum, (f32(64, 128),)),
    "gather": (gather, (f32(10), np.array([1, 3, 5], np.int64))),
    "scatter_add": (scatter_add, (f32(10), np.array([1, 3, 3], np.int64), f32(3))),
    "matmul": (matmul, (f32(8, 16), f32(16, 32))),                # a BLAS call on the CPU
    "matmul_int": (matmul, (np.ones((8, 16), np.int32), np.ones((16, 32), np.int32))),  # tiled
    "large_sum": (big_sum, (f32(1 << 16),)),          # split into partial + combine on the CPU
    "optimisation_step": (step, (f32(64), f32(64), f32(64), f32(64), 1e-2)),
    "mlp": (mlp, (f32(4, 8), f32(8, 8), f32(8), f32(8, 8), f32(8), f32(8, 8), f32(8))),
    "stencil_steps": (stencil_steps, (f32(10, 10),)),
    "cheap_reuse": (cheap_reuse, (f32(16), f32(16))),
    "row_softmax": (row_softmax, (f32(4, 32),)),
    "small_solve": (small_solve, (f32(8, 2, 2), f32(8, 2, 1))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fused_plan_golden(name):
    fn, args = CASES[name]
    _, _, plan = fused(fn, *args)
    assert plan.kernels
    assert all(k.schedule is None for k in plan.kernels), "fuse.plan must not schedule"
    check_golden(f"fused/{name}.txt", plan_text(plan))


@pytest.mark.parametrize("name", sorted(CASES))
def test_cpu_schedule_golden(name):
    fn, args = CASES[name]
    _, _, plan = fused(fn, *args)
    scheduled = cpu_schedule.schedule(plan)
    assert all(k.schedule is not None for k in scheduled.kernels)
    check_golden(f"cpu_schedule/{name}.txt", schedule_text(scheduled))


def test_goldens_have_cases():
    """No golden file outlives its case (a renamed case would leave a stale file behind)."""
    for sub in ("fused", "cpu_schedule"):
        names = {p.stem for p in (GOLDEN_DIR / sub).glob("*.txt")}
        assert names == set(CASES), sub


# ---- what the goldens show, asserted directly ------------------------------------------------
def test_unscheduled_kernels_have_no_launch_size():
    fn, args = CASES["elementwise_chain"]
    _, _, plan = fused(fn, *args)
    (k,) = plan.kernels
    with pytest.raises(ValueError, match="not scheduled"):
        k.launch_size  # noqa: B018  (asking raises)
    assert "schedule:" not in plan.describe()


@pytest.mark.parametrize("name", sorted(CASES))
def test_scheduling_leaves_the_fused_plan_alone(name):
    """A schedule is a new plan: the fused one stays unscheduled (with its own buffers), so
    it can be scheduled again, for another backend, with the same result."""
    fn, args = CASES[name]
    _, _, plan = fused(fn, *args)
    before, nbuffers = plan_text(plan), len(plan.buffers)
    first = cpu_schedule.schedule(plan)
    second = cpu_schedule.schedule(plan)
    assert plan_text(plan) == before and len(plan.buffers) == nbuffers
    assert schedule_text(first) == schedule_text(second)
    assert plan_text(first) == plan_text(second)
    with pytest.raises(ValueError, match="already scheduled"):
        cpu_schedule.schedule(first)


def test_large_sum_split_is_a_schedule_decision():
    """fuse makes one reduction kernel; only the CPU schedule splits it, adding a temporary of
    partials to its own plan."""
    fn, args = CASES["large_sum"]
    _, _, plan = fused(fn, *args)
    assert [k.label for k in plan.kernels] == ["sum"]
    scheduled = cpu_schedule.schedule(plan)
    assert [k.label for k in scheduled.kernels] == ["sum partial", "sum combine"]
    nchunks = (1 << 16) // cpu_schedule.REDUCE_CHUNK
    assert scheduled.kernels[0].launch_size == nchunks
    (partials,) = scheduled.buffers[len(plan.buffers):]
    assert partials.role == "temp" and partials.shape == (nchunks,)
    assert partials.dtype == np.float64          # float32 sums accumulate in float64
