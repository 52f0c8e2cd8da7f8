"""Patterns from the third-party harness of issue 30 (second round), each checked against
NumPy in float32 and float64, on the trace's values and on new ones: a bound method that keeps
its state in its object, einsum broadcasting a dimension of size one, a mask that is still a
constant when it is first used.  The code is ours, written in the style of the code where the
patterns were found."""
import numpy as np
import pytest

import fastlaunch as fl

DTYPES = [np.float32, np.float64]


def tol(dtype):
    return 2e-6 if dtype == np.float32 else 1e-13


# ---- obj.method that rebinds attributes of obj --------------------------------------------------
class MomentSketch:
    """An adaptive step whose moments live on the object, created on the first call."""

    def __init__(self, rate=0.01, decay=0.9):
        self.rate, self.decay = rate, decay
        self.first = None
        self.scale = None

    def step(self, w, g):
        if self.first is None:
            self.first = np.zeros_like(g)
            self.scale = np.zeros_like(g)
        self.first = self.decay * self.first + (1 - self.decay) * g
        self.scale += g * g                  # augmented assignment of an attribute
        return w - self.rate * self.first / np.sqrt(self.scale + 1e-8)


class CachingLayer:
    """A layer that keeps its input for a backward pass, as layer classes do."""

    def __init__(self, weights):
        self.weights = weights
        self.seen = None

    def forward(self, x):
        self.seen = x
        return np.tanh(x @ self.weights)


@pytest.mark.parametrize("dtype", DTYPES)
def test_bound_method_that_rebinds_its_state_replays_it(dtype):
    rng = np.random.default_rng(0)
    mine, ref = MomentSketch(), MomentSketch()
    step = fl.compile(mine.step)
    w = rng.standard_normal(6).astype(dtype)
    for _ in range(4):                       # the state changes on every call
        g = rng.standard_normal(6).astype(dtype)
        got, want = step(w, g), ref.step(w, g)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=tol(dtype), atol=tol(dtype))
        np.testing.assert_allclose(mine.first, ref.first, rtol=tol(dtype), atol=tol(dtype))
        np.testing.assert_allclose(mine.scale, ref.scale, rtol=tol(dtype), atol=tol(dtype))
        assert type(mine.scale) is np.ndarray and mine.scale.dtype == ref.scale.dtype
        w = got
    # the first call (no moments yet) and the later ones are two signatures, traced once each
    assert step.__func__.trace_count == 2


@pytest.mark.parametrize("dtype", DTYPES)
def test_bound_method_reads_attributes_on_every_call(dtype):
    rng = np.random.default_rng(1)
    layer = CachingLayer(rng.standard_normal((4, 3)).astype(dtype))
    forward = fl.compile(layer.forward)
    for _ in range(3):
        x = rng.standard_normal((5, 4)).astype(dtype)
        np.testing.assert_allclose(forward(x), np.tanh(x @ layer.weights),
                                   rtol=tol(dtype) * 10, atol=tol(dtype))
        assert layer.seen is x or np.array_equal(layer.seen, x)
        layer.weights = rng.standard_normal((4, 3)).astype(dtype)   # new values are read


def test_bound_method_keeps_static_argnums_in_its_own_numbering():
    class Scaler:
        def __init__(self):
            self.last = None

        def apply(self, x, n):
            self.last = x
            for _ in range(n):
                x = x * 2.0
            return x
    s = Scaler()
    f = fl.compile(s.apply, static_argnums=1)
    np.testing.assert_array_equal(f(np.ones(3), 3), np.full(3, 8.0))
    np.testing.assert_array_equal(f(np.ones(3), 1), np.full(3, 2.0))
    np.testing.assert_array_equal(s.last, np.ones(3))


def test_rebinding_through_a_helper_method_still_says_what_to_do():
    class Indirect:
        def __init__(self):
            self.v = np.zeros(2)

        def _keep(self, v):
            self.v = v

        def run(self, x):
            self._keep(x * 2)
            return x + 1
    obj = Indirect()
    with pytest.raises(fl.TracingError, match=r"rebinds self\.v.*@fastlaunch\.compile"):
        fl.compile(obj.run)(np.ones(2))
    np.testing.assert_array_equal(obj.v, np.zeros(2))          # no tracer left on it


# ---- einsum: a dimension of size one broadcasts ------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("subscripts, sa, sb", [
    ("mnd,mdo->mno", (1, 7, 2), (4, 2, 3)),    # one input batch against a batch of weights
    ("ij,jk->ik", (3, 1), (4, 5)),             # a summed label of size one against four
    ("ij,jk->ik", (3, 4), (1, 5)),
    ("bi,bi->b", (1, 4), (6, 4)),
    ("ij,jk->ik", (3, 4), (4, 5)),             # no broadcasting
])
def test_einsum_broadcasts_size_one_dimensions_as_numpy(dtype, subscripts, sa, sb):
    rng = np.random.default_rng(2)
    f = fl.compile(lambda a, b: np.einsum(subscripts, a, b))
    for _ in range(2):
        a = rng.standard_normal(sa).astype(dtype)
        b = rng.standard_normal(sb).astype(dtype)
        want = np.einsum(subscripts, a, b)
        got = f(a, b)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=tol(dtype) * 10, atol=tol(dtype) * 10)


def test_einsum_still_refuses_sizes_that_do_not_broadcast():
    with pytest.raises(ValueError, match="dimension 'j' is 2 and 4"):
        fl.compile(lambda a, b: np.einsum("ij,jk->ik", a, b))(np.ones((3, 2)), np.ones((4, 5)))


# ---- a mask still constant when first used -------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_escape_iteration_whose_first_mask_is_a_constant(dtype):
    """z starts as zeros made inside the function, so the first mask is a constant (all
    True): its count is known and z[m] = f(z[m], c[m]) is an ordinary indexed write; later
    masks are traced and the same assignment is a where."""
    def escape(c, steps):
        z = np.zeros(c.shape, dtype)
        count = np.zeros(c.shape, dtype=int)
        for k in range(steps):
            inside = np.less(abs(z), 2.0)
            count[inside] = k
            z[inside] = z[inside] ** 2 + c[inside]
        count[count == steps - 1] = 0
        return z, count
    rng = np.random.default_rng(3)
    f = fl.compile(escape, static_argnames="steps")
    for _ in range(2):
        c = (rng.uniform(-2, 1, (6, 7)) + 1j * rng.uniform(-1.2, 1.2, (6, 7))).astype(dtype)
        (z, n), (wz, wn) = f(c, 6), escape(c, 6)
        assert z.dtype == wz.dtype and n.dtype == wn.dtype
        np.testing.assert_array_equal(n, wn)
        finite = np.isfinite(wz)
        np.testing.assert_allclose(z[finite], wz[finite], rtol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_constant_mask_read_and_write_of_a_created_buffer(dtype):
    def fill(x):
        out = np.zeros(x.shape, dtype)
        keep = np.arange(x.size).reshape(x.shape) % 3 == 0     # a constant mask
        out[keep] = x[keep] * 2                                  # a value per True element
        return out, out[keep].sum()
    rng = np.random.default_rng(4)
    f = fl.compile(fill)
    for _ in range(2):
        x = rng.standard_normal((4, 5)).astype(dtype)
        (a, s), (wa, ws) = f(x), fill(x)
        np.testing.assert_allclose(a, wa, rtol=tol(dtype))
        np.testing.assert_allclose(s, ws, rtol=tol(dtype) * 10)


# ---- a sweep along the other axis through a transpose ---------------------------------------------
def upwind_sweep(q):
    """One explicit step along axis 0 with fixed end values, as a dimension-split solver
    writes it; the other axis is swept through a transpose."""
    out = q.copy()
    out[1:-1] = q[1:-1] - 0.4 * (q[1:-1] - q[:-2]) + 0.1 * (q[2:] - 2 * q[1:-1] + q[:-2])
    return out


def split_step(q):
    return upwind_sweep(upwind_sweep(q).T).T


def split_step_by_slices(q):
    a = upwind_sweep(q)
    out = a.copy()
    out[:, 1:-1] = (a[:, 1:-1] - 0.4 * (a[:, 1:-1] - a[:, :-2])
                    + 0.1 * (a[:, 2:] - 2 * a[:, 1:-1] + a[:, :-2]))
    return out


@pytest.mark.parametrize("dtype", DTYPES)
def test_sweep_through_a_transpose_matches_numpy_and_the_sliced_form(dtype):
    rng = np.random.default_rng(5)
    f, by_slices = fl.compile(split_step), fl.compile(split_step_by_slices)
    for shape in ((40, 40), (33, 57)):
        for _ in range(2):
            q = rng.standard_normal(shape).astype(dtype)
            want = split_step(q)
            got = f(q)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)       # the same operations per element
            np.testing.assert_array_equal(by_slices(q), want)
    q = rng.standard_normal((64, 48)).astype(dtype)
    # the transposes cancel: no transposed temporary and no copy back through a transpose,
    # as many kernels as the form written with slices
    assert len(f.lower(q).kernels) == len(by_slices.lower(q).kernels)


@pytest.mark.parametrize("dtype", DTYPES)
def test_transposed_update_of_a_transposed_array_is_still_the_update(dtype):
    def fn(x, v):
        t = x.T.copy()
        t[1:3, ::2] = np.sin(v) * 2 + t[1:3, ::2]       # a strided region, a computed value
        return t.T, t
    rng = np.random.default_rng(6)
    f = fl.compile(fn)
    for _ in range(2):
        x = rng.standard_normal((5, 4)).astype(dtype)
        v = rng.standard_normal((2, 3)).astype(dtype)
        for g, w in zip(f(x, v), fn(x, v)):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=tol(dtype) * 10, atol=tol(dtype) * 10)


def test_indexing_the_indices_of_np_where_is_a_tracing_error_that_says_why():
    def candidates(seq):
        found = np.where(seq > 0)[0]
        return found[:, None] + np.arange(3)          # the count of found depends on the data
    with pytest.raises(fl.TracingError, match="count that depends on the data.*np.where"):
        fl.compile(candidates)(np.ones(6))


# ---- np.power with a scalar exponent: NumPy's fast cases ------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("e", [-1.0, 0.0, 0.5, 1.0, 2.0])
def test_power_by_a_scalar_exponent_has_numpys_bits(dtype, e):
    """NumPy's float power loop computes these scalar exponents without pow (1/x, 1, sqrt, x,
    x*x), and pow's bits differ from those for some x: an activation's derivative written
    `1 - np.power(t, 2)` must give NumPy's values, and run as a multiply."""
    rng = np.random.default_rng(7)
    literal = fl.compile(lambda x: np.power(x, e))
    traced = fl.compile(lambda x, k: np.power(x, k))
    for _ in range(2):
        x = (rng.standard_normal(4000) * np.exp(rng.standard_normal(4000) * 4)).astype(dtype)
        x[:5] = [np.inf, -np.inf, np.nan, 0.0, -0.0]
        with np.errstate(all="ignore"):
            want = np.power(x, dtype(e))
            np.testing.assert_array_equal(literal(x), np.power(x, e))
            np.testing.assert_array_equal(traced(x, dtype(e)), want)
            # the same compiled function, another exponent: pow, chosen when it runs (within
            # pow's documented accuracy, docs/math-accuracy.md)
            np.testing.assert_allclose(traced(x, dtype(3.0)), np.power(x, dtype(3.0)),
                                       rtol=2e-6 if dtype == np.float32 else 1e-14)
    assert " pow " not in literal.lower(x).graph          # the graph as text


# ---- scipy.linalg.svd (a covariance ellipse's axes) ----------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, full", [((2, 2), True), ((5, 3), True), ((3, 6), False)])
def test_scipy_linalg_svd_is_traced(dtype, shape, full):
    linalg = pytest.importorskip("scipy.linalg")

    def axes(P):
        U, s, Vt = linalg.svd(P, full_matrices=full)
        return U, s, Vt, linalg.svd(P, compute_uv=False)
    rng = np.random.default_rng(8)
    f = fl.compile(axes)
    for _ in range(2):
        P = rng.standard_normal(shape).astype(dtype)
        got, want = f(P), axes(P)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            # the same LAPACK routine (gesdd): the same signs
            np.testing.assert_allclose(g, w, rtol=1e-4 if dtype == np.float32 else 1e-12,
                                       atol=1e-5 if dtype == np.float32 else 1e-12)
    with pytest.raises(fl.TracingError, match="lapack_driver='gesvd'"):
        fl.compile(lambda P: linalg.svd(P, lapack_driver="gesvd"))(np.eye(2, dtype=dtype))


# ---- what a data-dependent `if` inside a `while` loop should become --------------------------------
def merge_resample(weights, positions):
    """Systematic resampling's merge: a `while` loop whose `if` on traced values moves its
    counters, so the number of iterations depends on the data."""
    edges = np.cumsum(weights)
    picked = np.zeros(len(weights), dtype=int)
    i = j = 0
    while i < len(weights):
        if positions[i] < edges[j]:
            picked[i] = j
            i += 1
        else:
            j += 1
    return picked


def zero_positive(x):
    out = x.copy()
    for i in range(len(x)):
        if x[i] > 0:
            out[i] = 0.0
    return out


def test_an_if_that_steers_a_while_loop_points_to_iterate():
    with pytest.raises(fl.TracingError, match=r"np\.where.*inside a `while` loop.*"
                                              r"fastlaunch\.iterate\(step, n, \.\.\., until="):
        fl.compile(merge_resample)(np.full(4, 0.25), np.array([0.1, 0.3, 0.6, 0.9]))
    with pytest.raises(fl.TracingError, match=r"np\.where\(cond, a, b\)") as err:
        fl.compile(zero_positive)(np.ones(3))
    assert "iterate" not in str(err.value)         # a `for` loop's `if`: np.where is the fix
