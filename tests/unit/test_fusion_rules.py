"""Fusion rules beyond plain elementwise chains: sibling fusion (a reduction and a map over the
same iteration space in one pass), checked on the fused plan and against NumPy."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch.__main__ import step
from fastlaunch.backends import cuda_schedule
from fastlaunch.ir.graph import Op
from fastlaunch.ir.kernel import Compute, Load, walk

from _stages import fused

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def f32(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def step_args(n):
    return (f32(n, seed=1), f32(n, seed=2) * 0.1, np.abs(f32(n, seed=3)) * 0.1, f32(n, seed=4),
            1e-2)


def check(fn, *args, rtol=2e-5):
    want = fn(*args)
    got = fl.compile(fn)(*args)
    want, got = (list(x) if isinstance(x, tuple) else [x] for x in (want, got))
    for w, g in zip(want, got):
        w, g = np.asarray(w), np.asarray(g)
        assert w.dtype == g.dtype and w.shape == g.shape
        scale = max(float(np.max(np.abs(w.astype(np.float64)))), 1e-30) if w.size else 1
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=0,
                                   atol=rtol * scale)


# ---- sibling fusion ----------------------------------------------------------------------
def test_optimisation_step_is_one_pass():
    """The loss's reduction stores the update's three results from its own loop: each input
    is loaded once per element and sin(p) computed once (acceptance 3 of issue 13; the plan is
    pinned in golden/fused/optimisation_step.txt)."""
    _, _, plan = fused(step, *step_args(64))
    big = [k for k in plan.kernels if k.sizes() == (64,)]
    assert len(big) == 1
    (k,) = big
    assert k.reduction is not None and k.reduction.op is Op.SUM and len(k.stores) == 3
    exprs = walk(k._roots())
    loads = [e for e in exprs if isinstance(e, Load)]
    assert len(loads) == 4 and len({e.arg for e in loads}) == 4
    assert sum(isinstance(e, Compute) and e.op is Op.SIN for e in exprs) == 1
    # what remains is 0-d: the mean's division
    assert all(other.sizes() == () for other in plan.kernels if other is not k)


def test_map_that_reads_the_reduction_is_not_its_sibling():
    def normalise(x):
        return x / np.sqrt(np.sum(x * x))
    _, _, plan = fused(normalise, f32(1000))
    assert all(not (k.reduction is not None and k.stores) for k in plan.kernels)


def test_unrelated_arrays_are_not_siblings():
    def f(x, y):
        return np.sum(x), y * 2.0
    _, _, plan = fused(f, f32(1000), f32(1000, seed=1))
    assert all(not (k.reduction is not None and k.stores) for k in plan.kernels)


def test_row_reduction_takes_its_sibling_column_reduction_does_not():
    def rows(x):
        return x.sum(axis=1), np.tanh(x) * 2.0

    def cols(x):
        return x.sum(axis=0), np.tanh(x) * 2.0
    _, _, plan = fused(rows, f32(16, 32))
    assert [(k.label, len(k.stores)) for k in plan.kernels] == [("sum+map", 1)]
    _, _, plan = fused(cols, f32(16, 32))
    assert all(not k.stores for k in plan.kernels if k.reduction is not None)
    check(rows, f32(16, 32))
    check(cols, f32(16, 32))


@pytest.mark.parametrize("n", [1, 64, 16384, 20000, 65536, 100003])
def test_step_matches_numpy(n):
    check(step, *step_args(n), rtol=2e-5)


SIBLINGS = {
    "max": lambda x, y: (np.max(x * y), np.exp(x * y) + 1.0),
    "argmax": lambda x, y: (np.argmax(x + y), (x + y) * 3.0),
    "mean-var": lambda x, y: (np.mean(x * y), x * y - 1.0, x - y),
    "rows-min": lambda x, y: (np.min(x.reshape(50, -1) - y.reshape(50, -1), axis=1),
                              np.abs(x - y).reshape(50, -1)),
}


@pytest.mark.parametrize("name", sorted(SIBLINGS))
@pytest.mark.parametrize("n", [100, 40000])
def test_siblings_match_numpy(name, n):
    fn = SIBLINGS[name]
    x, y = f32(n), f32(n, seed=1)
    _, _, plan = fused(fn, x, y)
    assert any(k.reduction is not None and k.stores for k in plan.kernels)
    check(fn, x, y)


def test_cuda_schedule_splits_siblings_apart():
    """The GPU's block reduction has no place for per-element stores: its schedule runs the
    map and the reduction as two kernels."""
    _, _, plan = fused(step, *step_args(1 << 16))
    scheduled = cuda_schedule.schedule(plan)
    assert not any(k.reduction is not None and k.stores for k in scheduled.kernels)
    assert sum(len(k.stores) for k in scheduled.kernels) == 3   # the 3 results
    # the mean's division: the epilogue of the last combine, not of the partials
    reductions = [k.reduction for k in scheduled.kernels if k.reduction is not None]
    assert [r.then is not None for r in reductions] == [False] * (len(reductions) - 1) + [True]


def test_fused_step_is_the_same_on_any_number_of_threads():
    """Partials per fixed chunk, combined in order: the bits do not depend on the threads."""
    code = textwrap.dedent("""
        import hashlib, numpy as np, fastlaunch as fl
        from fastlaunch.__main__ import step
        rng = np.random.default_rng(0)
        n = 300007
        args = (rng.standard_normal(n).astype(np.float32),
                rng.standard_normal(n).astype(np.float32), rng.random(n).astype(np.float32),
                rng.standard_normal(n).astype(np.float32), 1e-2)
        out = fl.compile(step)(*args)
        print(hashlib.sha256(b"".join(np.asarray(o).tobytes() for o in out)).hexdigest())
    """)
    digests = set()
    for threads in ("1", "2", "3"):
        env = dict(os.environ, FASTLAUNCH_NUM_THREADS=threads, PYTHONPATH=ROOT)
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=300, env=env)
        assert p.returncode == 0, p.stderr
        digests.add(p.stdout.strip())
    assert len(digests) == 1


# ---- the recomputation cost model --------------------------------------------------------
def mlp(x, w1, b1, w2, b2, w3, b3):
    h = np.tanh(x @ w1 + b1)
    h = np.tanh(h @ w2 + b2)
    return h @ w3 + b3


def heat(u, steps=10):
    for _ in range(steps):
        u = u[1:-1, 1:-1] + 0.1 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]
                                   - 4.0 * u[1:-1, 1:-1])
    return u


def heat_inplace(u, steps=10):
    for _ in range(steps):
        out = u.copy()
        out[1:-1, 1:-1] = u[1:-1, 1:-1] + 0.1 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2]
                                                 + u[1:-1, 2:] - 4.0 * u[1:-1, 1:-1])
        u = out
    return u


def mlp_args(m=64, k=128):
    return (f32(m, k), f32(k, k, seed=1) * 0.1, f32(k, seed=2), f32(k, k, seed=3) * 0.1,
            f32(k, seed=4), f32(k, k, seed=5) * 0.1, f32(k, seed=6))


def test_op_costs():
    from fastlaunch.ir import fuse
    from fastlaunch.ir.graph import Graph
    g = Graph()
    x = g.add(Op.ARG, np.float32, (4,), position=0)
    assert fuse.op_cost(g.add(Op.ADD, np.float32, (4,), (x, x))) == 1
    assert fuse.op_cost(g.add(Op.TANH, np.float32, (4,), (x,))) == fuse.TRANSCENDENTAL_COST
    assert fuse.op_cost(g.add(Op.DIV, np.float32, (4,), (x, x))) == 4


def test_mlp_materialises_each_activation_once():
    """tanh(x @ W + b) is read 128 times per element by the next product: computed once into a
    temporary, never inside the next product's loop."""
    _, _, plan = fused(mlp, *mlp_args())
    for k in plan.kernels:
        tanhs = [e for e in walk(k._roots()) if isinstance(e, Compute) and e.op is Op.TANH]
        assert not (tanhs and k.reduction is not None), k.describe()
    assert sum(1 for k in plan.kernels if k.reduction is None and any(
        isinstance(e, Compute) and e.op is Op.TANH for e in walk(k._roots()))) == 2
    check(mlp, *mlp_args(), rtol=1e-4)


def test_integer_contraction_materialises_an_expensive_operand():
    """The same rule for a product that stays a compiled reduction (integers)."""
    def f(x, w):
        h = np.abs(x @ w - 3) * 2 + x // 3
        return h @ w
    x = np.arange(48, dtype=np.int64).reshape(6, 8) % 7
    w = np.arange(64, dtype=np.int64).reshape(8, 8) % 5
    _, _, plan = fused(f, x, w)
    assert [k.reduction is not None for k in plan.kernels] == [True, False, True]
    check(f, x, w)


def test_cheap_operand_of_a_short_contraction_is_fused():
    def f(x, w):
        return (x * 2.0) @ w
    _, _, plan = fused(f, f32(8, 8), f32(8, 2, seed=1))
    assert len(plan.kernels) == 1


@pytest.mark.parametrize("fn", [heat, heat_inplace], ids=["shrinking", "copy-and-update"])
def test_stencil_steps_are_materialised_once_each(fn):
    """Each step reads the previous one at five offsets: one pass per step (as ten calls of a
    one-step function would make), never the previous steps recomputed inside the next."""
    u = f32(24, 24)
    _, _, plan = fused(fn, u)
    assert len(plan.kernels) == (10 if fn is heat else 20)
    check(fn, u, rtol=1e-5)


def heat_copy_update(u):
    return heat_inplace(u, steps=1)


def box_update_3d(u):
    out = u * 2.0
    out[2:-1, 1:, :-3] = np.sin(u[2:-1, 1:, :-3])
    return out


def _border_elements(plan):
    return sum(k.size for k in plan.kernels if k.label == "map-border")


def test_copy_then_update_stores_only_the_border():
    """`out = u.copy(); out[1:-1, 1:-1] = ...`: the copy is stored around the interior (four
    slabs), not in full and then overwritten: each element of out is written once."""
    u = f32(64, 64)
    _, _, plan = fused(heat_copy_update, u)
    assert [k.label for k in plan.kernels].count("map-border") == 4
    assert [k.label for k in plan.kernels].count("map") == 0
    assert _border_elements(plan) == 64 * 64 - 62 * 62
    check(heat_copy_update, u, rtol=1e-5)


@pytest.mark.parametrize("shape", [(40, 30, 20), (41, 7, 64)])
def test_border_slabs_of_a_3d_box_are_disjoint_and_complete(shape):
    u = f32(*shape)
    _, _, plan = fused(box_update_3d, u)
    inside = (shape[0] - 3) * (shape[1] - 1) * (shape[2] - 3)
    assert _border_elements(plan) == u.size - inside
    check(box_update_3d, u, rtol=1e-5)


@pytest.mark.parametrize("fn, shape", [(heat_copy_update, (7, 9)), (box_update_3d, (6, 5, 8))])
def test_small_or_mostly_kept_bases_are_copied_whole(fn, shape):
    """Below BORDER_MIN_BYTES one copy kernel beats 2 ndim slab launches."""
    u = f32(*shape)
    _, _, plan = fused(fn, u)
    assert not any(k.label == "map-border" for k in plan.kernels)
    check(fn, u, rtol=1e-5)


def test_a_small_region_update_copies_the_base_whole():
    def corner(u):
        out = np.exp(u)
        out[:10, :10] = 0.0
        return out
    u = f32(100, 100)
    _, _, plan = fused(corner, u)
    assert not any(k.label == "map-border" for k in plan.kernels)
    check(corner, u, rtol=1e-5)


# ---- row fusion: reductions feeding elementwise work on the same rows --------------------
def softmax(x):
    e = np.exp(x - np.max(x, axis=1, keepdims=True))
    return e / np.sum(e, axis=1, keepdims=True)


def row_var(x):
    return np.sum((x - np.mean(x, axis=1, keepdims=True)) ** 2, axis=1)


def test_row_softmax_is_one_kernel_with_two_phases():
    """max, then sum of exp, then the division: one kernel per row block, the row read from
    memory once (later phases find it in cache); not a softmax special case: see row_var."""
    _, _, plan = fused(softmax, f32(64, 256))
    (k,) = plan.kernels
    assert [ph.op for ph in k.prelude] == [Op.MAX, Op.SUM] and k.space == (64,)
    _, _, plan = fused(row_var, f32(64, 256))
    (k,) = plan.kernels
    assert [ph.op for ph in k.prelude] == [Op.SUM] and k.reduction.op is Op.SUM


def test_long_rows_are_not_row_fused():
    _, _, plan = fused(softmax, f32(4, 1 << 14))
    assert not any(k.prelude for k in plan.kernels)


def test_row_value_read_at_another_row_is_not_folded():
    def f(x):
        m = np.max(x, axis=1, keepdims=True)
        return x - m[::-1]
    _, _, plan = fused(f, f32(8, 16))
    assert not any(k.prelude for k in plan.kernels)
    check(f, f32(8, 16))


@pytest.mark.parametrize("fn", [softmax, row_var,
                                lambda x: x / np.abs(x).sum(axis=-1, keepdims=True),
                                lambda x: (x - x.min(axis=(1, 2), keepdims=True)) * 2.0,
                                lambda x: np.any(x > x.mean(axis=-1, keepdims=True) + 2, axis=-1)],
                         ids=["softmax", "var", "l1", "min-2-axes", "any"])
@pytest.mark.parametrize("shape", [(3, 4, 50), (1, 2, 300), (5, 7, 1)])
def test_row_fused_results_match_numpy(fn, shape):
    x = f32(*shape) * 3
    if fn in (softmax, row_var):
        x = x.reshape(-1, shape[-1])
    check(fn, x, rtol=2e-6)


def test_row_fused_kernels_survive_save_and_load(tmp_path):
    x = f32(16, 64)
    f = fl.compile(softmax)
    f.save(str(tmp_path / "s.fl"), x)
    for machine_code in (True, False):
        g = fl.load(str(tmp_path / "s.fl"), machine_code=machine_code)
        np.testing.assert_allclose(g(x), softmax(x), rtol=1e-5, atol=1e-7)


def test_row_softmax_computes_exp_once_per_element():
    """The sum phase keeps the row of exp(x - max) on the stack; the division loads it."""
    from fastlaunch.backends import cpu_schedule
    from fastlaunch.codegen.llvm_cpu import generate
    _, _, plan = fused(softmax, f32(64, 256))
    (k,) = cpu_schedule.schedule(plan).kernels
    text = generate(k)
    assert text.count("call float @fastlaunch_expf(") == 1
    assert "alloca [256 x float]" in text


def test_saved_prelude_is_checked():
    """A kernel description whose phase reads its own or a later phase is refused, never
    handed to the code generator."""
    import copy
    from fastlaunch.program.kernel_json import KernelFormatError, kernel_from_json, kernel_to_json
    _, _, plan = fused(softmax, f32(8, 16))
    (k,) = plan.kernels
    j = kernel_to_json(k)
    assert kernel_from_json(copy.deepcopy(j)).describe() == k.describe()
    bad = copy.deepcopy(j)
    bad["prelude"][0], bad["prelude"][1] = bad["prelude"][1], bad["prelude"][0]
    with pytest.raises(KernelFormatError, match="phase"):
        kernel_from_json(bad)
    bad = copy.deepcopy(j)
    bad["prelude"][0][0] = "argmax"
    with pytest.raises(KernelFormatError, match="prelude"):
        kernel_from_json(bad)
    bad = copy.deepcopy(j)
    bad["prelude"] = bad["prelude"][:1]
    with pytest.raises(KernelFormatError, match="phase"):
        kernel_from_json(bad)


def test_cost_model_holds_for_the_cuda_backend():
    """The decision is the fused plan's, so a GPU's compiled contractions get it too."""
    low = fl.compile(mlp, backend="cuda").lower(*mlp_args(8, 32))
    for k in low.plan.kernels:
        tanhs = [e for e in walk(k._roots()) if isinstance(e, Compute) and e.op is Op.TANH]
        assert not (tanhs and k.reduction is not None)


# ---- shared operands at one index ------------------------------------------------------
def chebyshev(x, coefs):
    """Clenshaw's recurrence: every term is read by the next two."""
    b0, b1, b2 = x * 0.0, x * 0.0, x * 0.0
    for c in coefs:
        b2, b1 = b1, b0
        b0 = x * b1 - b2 + c
    return 0.5 * (b0 - b2)


COEFS = [float(c) for c in np.random.default_rng(3).standard_normal(30)]


def test_a_recurrence_reading_each_term_twice_is_one_kernel():
    """The size estimate counts each term once (the kernel computes it once): before, it
    counted a term per read, which grows like Fibonacci and cut the series into ~20 kernels
    (one memory pass and one LLVM compile each; np.i0 took 20 of them)."""
    x = np.linspace(-1, 1, 257)
    fn = lambda x: chebyshev(x, COEFS)           # noqa: E731
    _, _, plan = fused(fn, x)
    assert len(plan.kernels) == 1
    check(fn, x, rtol=1e-13)
    import scipy.special as sp
    for f in (np.i0, sp.i0e):
        _, _, plan = fused(lambda x: f(x), x * 9)
        assert len(plan.kernels) == 1, f
        check(lambda x: f(x), x * 9, rtol=1e-13)


def test_a_term_a_reduction_also_reads_is_still_materialised():
    """x = x - x.mean() repeated: each step's value is read by the mean (a reduction, in its
    own kernel) and by the next step: materialised once past RECOMPUTE_OPS, not recomputed
    inside every later reduction."""
    def f(x):
        for _ in range(40):
            x = np.sin(x) * 1.5 + x - x.mean()
        return x
    x = f32(64)
    _, _, plan = fused(f, x)
    assert len(plan.kernels) < 100
    check(f, x, rtol=1e-4)


# ---- packs (ir.Op.PACK: small matrices assembled from their entries) -------------------------
def _mats(b=6, n=3, seed=0):
    return np.random.default_rng(seed).standard_normal((b, n, n)) + 3 * np.eye(n)


def _labels(fn, *args):
    return [k.label for k in fused(fn, *args)[2].kernels]


def test_a_pack_read_at_its_own_index_is_unrolled_into_the_consumer():
    """inv(a) * 2 + a: one kernel over the batch stores every entry of the result (the
    entries' computation shared), then the singular-matrix check's two kernels."""
    fn = lambda a: np.linalg.inv(a) * 2.0 + a          # noqa: E731
    assert _labels(fn, _mats()) == ["map+unrolled", "all", "map"]
    check(fn, _mats(), rtol=1e-12)


def test_a_pack_read_elsewhere_is_stored_once_by_one_kernel():
    """Read through a transpose and at its own index (two readers): one pack kernel stores it
    (into the result it is), never each entry on its own."""
    def fn(a):
        x = np.linalg.inv(a)
        return x.T, x, x[:, 0] * 3.0
    labels = _labels(fn, _mats())
    assert labels.count("pack") == 1 and len(labels) <= 6, labels
    check(fn, _mats(), rtol=1e-12)


def test_a_pack_written_in_place_reads_old_values_safely():
    """y += inv(a) reads each element of y where it stores it (no temporary); y = inv(a) +
    y.T reads other elements of y, so the unrolled stores go through a temporary."""
    def add(y, a):
        y += np.linalg.inv(a)

    def swap(y, a):
        y[...] = np.linalg.inv(a) + np.swapaxes(y, -1, -2)
    a = _mats()
    for fn, temps in ((add, 0), (swap, 1)):
        plan = fused(fn, _mats(seed=1), a)[2]
        assert sum(1 for b in plan.buffers if b.role == "temp" and b.shape == a.shape) == temps
        y, want = _mats(seed=1), _mats(seed=1)
        fl.compile(fn)(y, a)
        fn(want, a)
        np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)


# ---- small reductions: unrolled into their users (ops.SMALL_REDUCE) ------------------------
def f64(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def kmeans_labels(x, c):
    return ((x[:, None, :] - c[None, :, :]) ** 2).sum(-1).argmin(1)


def temps(plan):
    return [b for b in plan.buffers if b.role == "temp"]


def exp_count(plan):
    """exp evaluations per call, over all kernels (a Compute per element of the space)."""
    total = 0
    for k in plan.kernels:
        n = sum(isinstance(e, Compute) and e.op is Op.EXP for e in walk(k._roots()))
        total += n * int(np.prod(k.space)) * int(np.prod(k.rspace or (1,)))
    return total


def test_small_sum_fuses_into_the_next_reduction():
    """k-means (issue 12): squared distances summed over d=3 feed the argmin over the k=8
    centroids in one kernel, no (n, k) temporary between two reductions; NumPy's labels."""
    x, c = f64(1000, 3), f64(8, 3, seed=1)
    _, _, plan = fused(kmeans_labels, x, c)
    (k,) = plan.kernels
    assert k.reduction.op is Op.ARGMIN and k.rspace == (8,) and not temps(plan)
    loads = [e for e in walk(k._roots()) if isinstance(e, Load)]
    assert len(loads) == 6                       # x[i, :3] and c[j, :3]
    for dt in (np.float64, np.float32):
        np.testing.assert_array_equal(fl.compile(kmeans_labels)(x.astype(dt), c.astype(dt)),
                                      kmeans_labels(x.astype(dt), c.astype(dt)))


def test_small_sum_fuses_into_a_map():
    def dist(x, y):
        return np.sqrt(((x - y) ** 2).sum(-1))
    x, y = f64(1000, 3), f64(1000, 3, seed=1)
    _, _, plan = fused(dist, x, y)
    (k,) = plan.kernels
    assert k.reduction is None and k.space == (1000,) and not temps(plan)
    assert fl.compile(dist)(x, y).tobytes() == dist(x, y).tobytes()


@pytest.mark.parametrize("fn", [
    lambda a, b: a @ b, lambda a, b: np.dot(a, b), lambda a, b: np.matmul(a, b[:, 0]),
    lambda a, b: np.einsum("ij,jk->ik", a, b), lambda a, b: np.einsum("ij->i", a) + b[0, 0]],
    ids=["@", "dot", "matvec", "einsum", "einsum-1"])
@pytest.mark.parametrize("kdim", [3, 8])
def test_contractions_keep_their_reduction(fn, kdim):
    """Small products are contractions (BLAS gemm on the CPU where large), never unrolled:
    ops.contract and einsum leave their REDUCE unmarked."""
    a, b = f32(16, kdim), f32(kdim, 4, seed=1)
    traced, _, plan = fused(fn, a, b)
    reductions = [n for n in traced.graph.live_nodes() if n.op in (Op.SUM, Op.ANY)]
    assert reductions and not any(n.attrs.get("unroll") for n in reductions)
    assert any(k.reduction is not None and k.reduction.op is Op.SUM for k in plan.kernels)
    check(fn, a, b)


@pytest.mark.parametrize("fn, phases", [
    (softmax, [Op.MAX, Op.SUM]),
    (lambda x: x - x.mean(axis=1, keepdims=True), [Op.SUM]),
    (lambda x: x / np.sqrt((x * x).sum(axis=1))[:, None], [Op.SUM]),
    (row_var, [Op.SUM])], ids=["softmax", "center", "normalise", "var"])
@pytest.mark.parametrize("m", [3, 8])
def test_small_row_reductions_stay_row_fused(fn, phases, m):
    """A small reduction whose rows a kernel over the same rows reads (its result broadcast
    back over them; a sum of (x - mean)**2) stays a reduction, folded in that kernel's
    prelude: one kernel, as for long rows (unrolled: two kernels, or 2-4x slower)."""
    x = f32(64, m)
    _, _, plan = fused(fn, x)
    (k,) = plan.kernels
    assert [ph.op for ph in k.prelude] == phases and not temps(plan)
    check(fn, x, rtol=2e-6)


def test_small_reduction_with_a_sibling_stays_sibling_fused():
    def f(x):
        e = np.exp(np.sin(x) * np.cos(x))
        return e.sum(-1), e * 2.0
    x = f32(100, 8)
    _, _, plan = fused(f, x)
    (k,) = plan.kernels
    assert k.reduction is not None and k.stores and exp_count(plan) == 800
    check(f, x)


def test_expensive_operand_of_small_reductions_is_computed_once():
    """No recomputation cliff: exp(x) read by three unrolled reductions (one kernel, each exp
    computed once), or also by a long reduction over another axis (materialised once)."""
    def three(x):
        e = np.exp(x)
        return e.sum(-1), e.max(-1), e.min(-1)

    def with_columns(x):
        e = np.exp(x)
        return e.sum(-1), e.sum(0)
    x = f32(1000, 8)
    _, _, plan = fused(three, x)
    assert len(plan.kernels) == 1 and exp_count(plan) == x.size
    _, _, plan = fused(with_columns, x)
    assert exp_count(plan) == x.size and [t.shape for t in temps(plan)] == [(1000, 8)]
    check(three, x)
    check(with_columns, x, rtol=1e-6)


def test_unrolling_leaves_the_traced_graph_alone():
    from fastlaunch.ir import fuse
    traced, leaves, plan = fused(kmeans_labels, f64(100, 3), f64(8, 3, seed=1))
    marked = [n for n in traced.graph.live_nodes() if n.attrs.get("unroll")]
    assert [n.op for n in marked] == [Op.SUM]         # still the REDUCE the trace made
    unrolled = fuse.unroll_small_reductions(traced.graph)
    assert not any(n.attrs.get("unroll") for n in unrolled.live_nodes())
    traced, _, _ = fused(lambda x: x.sum(-1), f64(100, 9))      # nothing marked: the same graph
    assert fuse.unroll_small_reductions(traced.graph) is traced.graph
