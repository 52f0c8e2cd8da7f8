"""Idioms of third-party NumPy code that fastlaunch now compiles unchanged (issue 30), each
checked against NumPy in float32 and float64, on the trace's values and on new ones.  The
code is ours, written in the style of the robotics, CFD and machine-learning code where the
patterns were found."""
import numpy as np
import pytest

import fastlaunch as fl

DTYPES = [np.float32, np.float64]


def same_as_numpy(fn, *arg_sets, rtol=None):
    cf = fl.compile(fn)
    for args in arg_sets:
        want = fn(*[np.copy(a) if isinstance(a, np.ndarray) else a for a in args])
        got = cf(*[np.copy(a) if isinstance(a, np.ndarray) else a for a in args])
        want = want if isinstance(want, tuple) else (want,)
        got = got if isinstance(got, tuple) else (got,)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            g, w = np.asarray(g), np.asarray(w)
            assert g.shape == w.shape, (g.shape, w.shape)
            assert g.dtype == w.dtype, (g.dtype, w.dtype)
            tol = rtol or (2e-6 if w.dtype == np.float32 else 1e-13)
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    return cf


# ---- scalars as NumPy hands them out ------------------------------------------------------------
def wrap_angle(x):
    """An angle helper of the kind robotics code shares: a float in, a float out."""
    is_float = isinstance(x, float)
    x = np.asarray(x).flatten()
    out = (x + np.pi) % (2 * np.pi) - np.pi
    return out.item() if is_float else out


@pytest.mark.parametrize("dtype", DTYPES)
def test_isinstance_float_and_item_of_an_element(dtype):
    def step(state, rate):
        heading = state[2, 0] + rate * 0.1        # a NumPy scalar: np.float64 is a float,
        state[2] = wrap_angle(heading)            # np.float32 is not (then a 1-element array)
        return state, wrap_angle(state[:, 0])
    mk = lambda v: (np.array([[1.0], [2.0], [v]], dtype), dtype(0.5))  # noqa: E731
    same_as_numpy(step, mk(3.1), mk(-3.0), mk(0.2))


def test_traced_scalars_look_like_numpy_scalars_to_isinstance():
    def fn(x):
        i = np.argmax(x)
        assert isinstance(x[0], np.floating) and isinstance(i, np.integer)
        assert isinstance(x[0], float) == (x.dtype == np.float64)
        assert not isinstance(x, (float, np.generic))
        return x[i] + x[np.argmin(x)]
    for dtype in DTYPES:
        same_as_numpy(fn, (np.array([1.0, 4.0, -2.0], dtype),), (np.array([3.0, 0.0, 9.0], dtype),))


@pytest.mark.parametrize("dtype", DTYPES)
def test_item_and_tolist_are_python_numbers(dtype):
    def fn(x):
        first, rest = x[0].item(), x.tolist()[1:]
        total = first
        for v in rest:                            # a Python loop over Python floats
            total = total * 0.5 + v
        return total * x, x.sum().item() + 1, np.array(x.tolist()) * 2
    same_as_numpy(fn, (np.array([1.0, 2.0, 3.5], dtype),), (np.array([-1.0, 0.25, 8.0], dtype),))


# ---- methods of constant arrays made inside fn, on traced operands -------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_constant_matrix_methods_take_traced_operands(dtype):
    def motion(x, u):
        F = np.array([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0]], dtype)
        B = np.array([[0.1, 0], [0, 0.1], [0, 0.1]], dtype)
        return F.dot(x) + B.dot(u), np.eye(3, dtype=dtype).clip(x.min(), x.max())
    same_as_numpy(motion, (np.ones((3, 1), dtype), np.ones((2, 1), dtype)),
                  (np.arange(3.0, dtype=dtype).reshape(3, 1), np.full((2, 1), -2.0, dtype)))


# ---- indexing idioms -------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_range_as_an_index_array(dtype):
    def nll(probs, labels):
        picked = probs[range(probs.shape[0]), labels]       # the log-likelihood idiom
        grad = probs.copy()
        grad[range(len(labels)), labels] -= 1
        return -np.log(picked).mean(), grad, probs[range(1, 4)]
    rng = np.random.default_rng(0)
    mk = lambda: (rng.random((5, 3)).astype(dtype) + 0.1, rng.integers(0, 3, 5))  # noqa: E731
    same_as_numpy(nll, mk(), mk())


@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_assignment_with_a_masked_right_hand_side(dtype):
    def limiter(a, b):
        out = a.copy()
        m = a > 0
        out[m] = b[m]                            # the same mask on both sides: a where
        out[a < -1] = -b[a < -1] * 2
        return out
    rng = np.random.default_rng(1)
    same_as_numpy(limiter, *[(rng.standard_normal(9).astype(dtype),
                              rng.standard_normal(9).astype(dtype)) for _ in range(2)])


@pytest.mark.parametrize("dtype", DTYPES)
def test_pad_width_from_a_python_int_argument(dtype):
    def ghost_cells(u, n):
        return np.pad(u, n), np.pad(u, (n, n + 1), mode="edge"), np.pad(u, [(n, 0)], "wrap")
    u = np.arange(5, dtype=dtype)
    cf = same_as_numpy(ghost_cells, (u, 2), (u * 2, 2), (u, 1))
    assert cf.stats["entries"] == 2              # specialised on each n

    def traced_width(u, w):
        return np.pad(u, w[0])
    with pytest.raises(fl.TracingError, match="np.pad's pad_width must be known"):
        fl.compile(traced_width)(u, np.array([2]))


# ---- np.bincount ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_bincount_takes_the_bound_of_its_values(dtype):
    def counts(labels, d):
        nearest = np.argmin(d, axis=1)                        # one of 4 centroids
        return (np.bincount(labels % 3), np.bincount(np.clip(labels, 0, 5)),
                np.bincount(nearest, weights=d[:, 0]), np.bincount(nearest))
    rng = np.random.default_rng(2)
    mk = lambda: (rng.integers(0, 9, 40), rng.random((40, 4)).astype(dtype))  # noqa: E731
    cf = same_as_numpy(counts, mk(), mk(), rtol=1e-5 if dtype == np.float32 else 1e-12)
    labels, d = mk()
    d[:, 3] = 2.0                                  # centroid 3 never nearest: NumPy gives 3 bins
    with pytest.raises(ValueError, match="minlength=4"):
        cf(labels, d)


def test_bincount_of_unbounded_values_says_minlength():
    with pytest.raises(fl.TracingError, match="minlength=k"):
        fl.compile(lambda x: np.bincount(x))(np.array([0, 2, 1]))


# ---- Python-level idioms around NumPy calls -----------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_functions_given_lists_of_traced_values(dtype):
    def fn(x):
        dx, dy = x[0] - x[1], x[2] - x[3]
        return (np.linalg.norm([dx, dy]), np.sum([x[0] * 2, x[1], 1.0]), np.max([dx, dy, 0.0]),
                np.diag([x[0], x[1]]), np.mean((x[2], x[3])), np.dot([x[0], x[1]], [x[2], x[3]]),
                np.cross([x[0], x[1], x[2]], [1.0, 0.0, 0.0]))
    rng = np.random.default_rng(3)
    same_as_numpy(fn, (rng.standard_normal(4).astype(dtype),), (rng.standard_normal(4).astype(dtype),),
                  rtol=1e-6 if dtype == np.float32 else 1e-13)


def test_python_number_arguments_are_ints_and_floats_to_isinstance():
    def padded(x, pad, scale):
        p = pad
        if isinstance(p, int):                     # a config value passed as a Python int
            p = (p, p)
        if not isinstance(scale, float):
            raise TypeError("scale must be a float")
        mode = "same" if pad == "same" else "valid"       # compares as Python does
        return np.pad(x, p) * scale, mode == "valid", pad != None  # noqa: E711
    x = np.arange(4.0)
    same_as_numpy(padded, (x, 1, 2.0), (x * 3, 1, 0.5))


def test_tuple_inside_an_index_is_an_index_list():
    def features(X):
        out = np.empty((X.shape[0], 4))
        for i, combo in enumerate([(), (0,), (1, 2), (0, 0, 1)]):
            out[:, i] = np.prod(X[:, combo], axis=1)
        return out
    rng = np.random.default_rng(4)
    same_as_numpy(features, (rng.standard_normal((6, 3)),), (rng.standard_normal((6, 3)),))


class _Momentum:
    def __init__(self):
        self.velocity = None

    def update(self, w, g):
        if self.velocity is None:
            self.velocity = np.zeros_like(w)
        self.velocity = 0.9 * self.velocity + g
        return w - 0.1 * self.velocity


def test_compiling_a_bound_method_that_rebinds_self_replays_the_state():
    """fl.compile(obj.method) of a method whose code rebinds attributes of self compiles it with
    obj as its first argument (as a method compiled in its class): the state is read and
    rebound on every call (more in test_realcode_state.py)."""
    opt, ref = _Momentum(), _Momentum()
    step = fl.compile(opt.update)
    for _ in range(3):
        np.testing.assert_allclose(step(np.ones(3), np.arange(3.0)),
                                   ref.update(np.ones(3), np.arange(3.0)), rtol=1e-15)
        np.testing.assert_allclose(opt.velocity, ref.velocity, rtol=1e-15)

    class Decorated(_Momentum):
        update = fl.compile(_Momentum.update)      # the same, compiled in the class
    d, ref = Decorated(), _Momentum()
    for _ in range(3):
        np.testing.assert_allclose(d.update(np.ones(3), np.arange(3.0)),
                                   ref.update(np.ones(3), np.arange(3.0)), rtol=1e-15)


@pytest.mark.parametrize("dtype", DTYPES)
def test_masks_and_np_where_indices_with_a_column_index(dtype):
    def reflect(pos, vel, box):
        for d in range(2):
            out = np.where(pos[:, d] < 0)                 # indices: used only to index
            pos[out, d] *= -1
            vel[out, d] *= -1
            over = pos[:, d] > box
            pos[over, d] = box - (pos[over, d] - box)     # the mask and a column
            vel[over, d] *= -1
        return pos, vel, pos[np.where(vel[:, 0] > 0)].sum()
    rng = np.random.default_rng(5)
    mk = lambda: (rng.standard_normal((9, 2)).astype(dtype) * 2,  # noqa: E731
                  rng.standard_normal((9, 2)).astype(dtype), 1.5)
    same_as_numpy(reflect, mk(), mk(), rtol=1e-6 if dtype == np.float32 else 1e-13)


def test_np_where_indices_refuse_uses_that_need_their_count():
    for fn in (lambda x: len(np.where(x > 0)[0]), lambda x: np.where(x > 0)[0] + 1,
               lambda x: np.where(x > 0)):
        with pytest.raises(fl.TracingError, match="count that depends on the data"):
            fl.compile(fn)(np.arange(-2.0, 3.0))


def test_functions_held_by_the_bound_object_are_traced():
    scipy_linalg = pytest.importorskip("scipy.linalg")
    import math

    class SigmaPoints:
        def __init__(self, n):
            self.n = n
            self.sqrt = scipy_linalg.cholesky           # a SciPy function kept as an attribute
            self.angle = math.atan2

        def points(self, x, P):
            U = self.sqrt((self.n + 0.5) * P)
            return np.vstack([x, x + U, x - U]), self.angle(x[1], x[0])

    sp = SigmaPoints(3)
    rng = np.random.default_rng(6)
    a = rng.standard_normal((3, 3))
    same_as_numpy(sp.points, (rng.standard_normal(3), a @ a.T + 3 * np.eye(3)),
                  (rng.standard_normal(3), a @ a.T + np.eye(3)))
    assert sp.sqrt is scipy_linalg.cholesky and sp.angle is math.atan2     # given back


# ---- data-dependent control flow: the message says what to write ----------------------------
def test_convergence_break_points_to_iterate_and_validation_to_assert():
    def riccati(A, Q):
        X = Q
        for _ in range(150):
            Xn = A.T @ X @ A + Q
            if np.abs(Xn - X).max() < 0.01:
                break
            X = Xn
        return X

    def validated(x):
        if np.any(x < 0):
            raise ValueError("negative input")
        return np.sqrt(x)

    with pytest.raises(fl.TracingError, match=r"fastlaunch\.iterate\(step, n, \.\.\., until="):
        fl.compile(riccati)(np.eye(2) * 0.5, np.eye(2))
    with pytest.raises(fl.TracingError, match="before calling the compiled function, or write "
                                              "`assert cond, message`"):
        fl.compile(validated)(np.ones(3))
