"""Fusion decisions: how many kernels a traced graph becomes, and of which kind.

Uses the null backend: the plan and the program are built, nothing is compiled or run.
"""
import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch.__main__ import step


def lower(fn, *args, **kwargs):
    return fl.compile(fn, backend="null").lower(*args, **kwargs)


def kernels(fn, *args):
    return lower(fn, *args).plan.kernels


def labels(fn, *args):
    return [k.label for k in kernels(fn, *args)]


def temp_slots(lowered):
    return [s for s in lowered.program.slots if s.role == "temp"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_elementwise_chain_is_one_kernel(dtype):
    def f(x, y, z):
        a = np.sin(x) * y + 2.0
        b = np.exp(-a) / (1.0 + z * z)
        return np.sqrt(np.abs(b)) - x

    x = np.ones(1000, dtype)
    low = lower(f, x, x, x)
    assert len(low.plan.kernels) == 1
    assert low.plan.kernels[0].label == "map"
    assert low.plan.kernels[0].rspace == ()
    assert low.program.launch_count() == 1
    assert temp_slots(low) == []          # nothing is materialised between the operations


def test_broadcasting_chain_is_one_kernel():
    def f(x, row, col):
        return (x - row) * col + 1.0

    low = lower(f, np.ones((16, 32)), np.ones(32), np.ones((16, 1)))
    assert len(low.plan.kernels) == 1
    assert temp_slots(low) == []


@pytest.mark.parametrize("n", [9, 1000, 4096])
def test_sum_of_squares_is_one_pass(n):
    """The elementwise x*x feeds the reduction inside one kernel: no separate map kernel
    (n > ops.SMALL_REDUCE: a reduction; the next test has the unrolled sums)."""
    x = np.ones(n, np.float32)
    low = lower(lambda x: np.sum(x * x), x)
    ks = low.plan.kernels
    assert len(ks) == 1
    k = ks[0]
    assert k.label == "sum"
    assert k.rspace == (n,) and k.space == ()
    assert temp_slots(low) == []
    # one read of x plus the 0-d result: no intermediate buffer traffic
    assert k.bytes_moved() <= n * x.itemsize + 8


@pytest.mark.parametrize("n", [1, 2, 7, 8])
def test_small_sum_of_squares_is_one_map(n):
    """At most ops.SMALL_REDUCE elements: the sum is unrolled into the kernel that computes
    x*x (a map over the 0-d result), still one pass, the same bits as NumPy's sum."""
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    low = lower(lambda x: np.sum(x * x), x)
    (k,) = low.plan.kernels
    assert k.label == "map" and k.space == () and k.rspace == () and k.reduction is None
    assert temp_slots(low) == []
    assert k.bytes_moved() <= n * x.itemsize + 8
    got = fl.compile(lambda x: np.sum(x * x))(x)
    want = np.sum(x * x)
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


def test_large_full_reduction_has_no_map_kernel():
    """A large reduction may be split into partial + combine, but x*x is still not materialised."""
    n = 1 << 17
    low = lower(lambda x: np.sum(x * x), np.ones(n, np.float32))
    assert all(k.label.startswith("sum") for k in low.plan.kernels)
    assert low.program.peak_temp_bytes() < n * 4 // 4


def test_row_reduction_with_elementwise_input_is_one_kernel():
    low = lower(lambda x: (x * 2.0 + 1.0).sum(axis=1), np.ones((8, 64), np.float32))
    assert [k.label for k in low.plan.kernels] == ["sum"]
    assert low.plan.kernels[0].space == (8,) and low.plan.kernels[0].rspace == (64,)


@pytest.mark.parametrize("fn", [lambda x: x / x.sum(),
                                lambda x: x - x.mean(),
                                lambda x: x / np.sqrt(np.sum(x * x))],
                         ids=["x/sum", "x-mean", "normalise"])
def test_reduction_consumed_by_later_work_is_a_boundary(fn):
    """The reduced value must sit in memory before the elementwise pass that uses it (past
    fuse.ROW_CACHE_BYTES; a shorter array is one row: see the next test)."""
    n = 1 << 15
    low = lower(fn, np.ones(n, np.float32))
    ks = low.plan.kernels
    assert len(ks) >= 2
    assert any(k.rspace for k in ks), "no reduction kernel"
    assert any(not k.rspace and k.space == (n,) for k in ks), "no elementwise pass"
    assert low.program.launch_count() == len(ks)
    # a short array is one row that stays in cache: the reduction is the kernel's prelude
    (k,) = lower(fn, np.ones(1000, np.float32)).plan.kernels
    assert k.space == () and k.rspace == (1000,) and len(k.prelude) == 1 and k.stores


def test_row_softmax_kernels():
    def softmax(x):
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    low = lower(softmax, np.ones((4, 32), np.float32))
    # max and sum are reductions whose results later work consumes: folded per row as the
    # final map's prelude phases (row fusion), so nothing is materialised
    (k,) = low.plan.kernels
    assert k.space == (4,) and k.rspace == (32,) and len(k.prelude) == 2 and k.stores
    assert low.program.peak_temp_bytes() == 0
    # rows too long to stay in cache: max and sum are reductions into per-row temporaries
    low = lower(softmax, np.ones((4, 1 << 13), np.float32))
    ks = low.plan.kernels
    assert 2 <= len(ks) <= 3 and not any(k.prelude for k in ks)
    assert ks[-1].space == (4, 1 << 13) and ks[-1].rspace == ()
    assert low.program.peak_temp_bytes() <= 2 * 4 * 4      # the two per-row values only


def test_optimisation_step_program():
    """The README's step: a loss reduction plus an update.  At 64 elements, one kernel: the
    outputs p, m, v stored in the loss's reduction loop (sibling fusion: one pass), the mean's
    division its epilogue, no temporary.  At 2**16 elements the reduction is split: several
    kernels, the partials in a temporary allocated before its first use and freed after its
    last, the division in the combine."""
    args = [np.ones(64, np.float32)] * 4 + [1e-2]
    low = lower(step, *args)
    (fused,) = low.plan.kernels
    assert len(fused.stores) == 3 and fused.sizes() == (64,)
    assert fused.reduction.then is not None
    text = low.bytecode
    assert text.count("LAUNCH") == 1 and "ALLOC" not in text and "FREE" not in text
    args = [np.ones(1 << 16, np.float32)] * 4 + [1e-2]
    low = fl.compile(step).lower(*args)       # (the CPU's schedule splits; the null's does not)
    assert len(low.plan.kernels) >= 2
    assert len(low.program.kernels) == len(low.plan.kernels)
    text = low.bytecode
    for op in ("ALLOC", "BIND", "LAUNCH", "FREE"):
        assert op in text, op
    lines = text.splitlines()
    first_alloc = next(i for i, ln in enumerate(lines) if "ALLOC" in ln)
    last_free = max(i for i, ln in enumerate(lines) if "FREE" in ln)
    assert first_alloc < last_free
    assert text.count("LAUNCH") == len(low.plan.kernels)
    (partial,) = [k for k in low.plan.kernels if k.stores and k.reduction is not None]
    assert len(partial.stores) == 3 and partial.reduction.then is None
    (combine,) = [k for k in low.plan.kernels if k.reduction is not None and not k.stores]
    assert combine.reduction.then is not None


@pytest.mark.parametrize("fn, marker", [(lambda x: x.T * 2.0, "transpose"),
                                        (lambda x: x[::2] + 1.0, "slice"),
                                        (lambda x: np.sin(x[::-1, 1::3]), "slice"),
                                        (lambda x: x.T[1:, ::2] - x[:4, 0], "transpose"),
                                        (lambda x: x.T, "transpose")],
                         ids=["T", "step", "negstep", "T-slice-bcast", "bare-T"])
def test_views_do_not_copy(fn, marker):
    """Views are index arithmetic in the consuming kernel, never a separate copy kernel."""
    low = lower(fn, np.ones((8, 6), np.float32))
    assert marker in low.graph
    assert len(low.plan.kernels) == 1
    assert temp_slots(low) == []
    assert low.program.peak_temp_bytes() == 0


def test_outputs_of_one_shape_share_one_kernel():
    def f(x, y):
        return x + y, x * y, np.sin(x), x - 1.0

    low = lower(f, np.ones((8, 8), np.float32), np.ones((8, 8), np.float32))
    assert len(low.plan.kernels) == 1
    assert len(low.program.outputs) == 4


def test_outputs_of_different_shapes_use_different_kernels():
    def f(x, y):
        return x + 1.0, y * 2.0

    low = lower(f, np.ones(8, np.float32), np.ones(16, np.float32))
    assert len(low.plan.kernels) == 2


def test_program_kernels_mirror_the_plan():
    low = lower(lambda x: x / x.sum(), np.ones(100, np.float64))
    assert [k.label for k in low.program.kernels] == [k.label for k in low.plan.kernels]
    assert len(low.kernels) == len(low.plan.kernels)
    for label, desc, _ in low.kernels:
        assert label in desc


def test_in_place_update_adds_no_extra_kernel():
    def f(x, y):
        x += y

    low = lower(f, np.ones(32), np.ones(32))
    assert len(low.plan.kernels) == 1
    assert low.program.mutated_leaves == [0]
