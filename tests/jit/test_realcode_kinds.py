"""Functions of the kinds real code is made of (robotics filters, CFD teaching codes,
machine learning from scratch), written here in our own words: each compiled once and
replayed on new values, against NumPy, float32 and float64."""
import math

import numpy as np
import pytest

import fastlaunch as fl


def close(got, want, dtype):
    tol = 2e-4 if np.dtype(dtype) == np.float32 else 1e-10
    if isinstance(want, (tuple, list)):
        for g, w in zip(got, want):
            close(g, w, dtype)
        return
    if isinstance(want, dict):
        assert list(got) == list(want)
        for k in want:
            close(got[k], want[k], dtype)
        return
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                               rtol=tol, atol=tol)


def replays(fn, make, dtype, n=4):
    f = fl.compile(fn)
    for seed in range(n):
        args = make(np.random.default_rng(seed), dtype)
        close(f(*args), fn(*args), dtype)
    assert f.stats["traces"] == 1


DTYPES = [np.float32, np.float64]


# ---- robotics ----------------------------------------------------------------------------
def ekf_step(x, P, u, z, cfg):
    """A unicycle EKF: motion model with math on the state's elements, a range-bearing-free
    position measurement."""
    dt = cfg["dt"]
    v, w = u[0], u[1]
    yaw = x[2]
    x_pred = x + np.array([v * math.cos(yaw) * dt, v * math.sin(yaw) * dt, w * dt],
                          dtype=x.dtype)
    F = np.array([[1.0, 0.0, -v * math.sin(yaw) * dt],
                  [0.0, 1.0, v * math.cos(yaw) * dt],
                  [0.0, 0.0, 1.0]], dtype=x.dtype)
    P_pred = F @ P @ F.T + cfg["Q"]
    H = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=x.dtype)
    y = z - H @ x_pred
    S = H @ P_pred @ H.T + cfg["R"]
    K = P_pred @ H.T @ np.linalg.inv(S)
    x_new = x_pred + K @ y
    P_new = (np.eye(3, dtype=x.dtype) - K @ H) @ P_pred
    return x_new, P_new


def ekf_args(rng, dtype):
    A = rng.standard_normal((3, 3))
    return (rng.standard_normal(3).astype(dtype), (A @ A.T + np.eye(3)).astype(dtype),
            rng.uniform(0.1, 1.0, 2).astype(dtype), rng.standard_normal(2).astype(dtype),
            {"dt": 0.1, "Q": (0.01 * np.eye(3)).astype(dtype),
             "R": (0.1 * np.eye(2)).astype(dtype)})


@pytest.mark.parametrize("dtype", DTYPES)
def test_ekf_with_math_on_state_elements_and_a_config_dict(dtype):
    replays(ekf_step, ekf_args, dtype)


def particle_weights(particles, z, landmarks, sigma):
    """Particle filter update: distances to landmarks, Gaussian likelihood, normalised
    weights and the effective sample size."""
    d = np.sqrt(((particles[:, None, :2] - landmarks[None, :, :]) ** 2).sum(-1))
    lik = np.exp(-0.5 * ((d - z[None, :]) / sigma) ** 2).prod(axis=1)
    w = lik + 1e-300 if particles.dtype == np.float64 else lik + np.float32(1e-30)
    w = w / w.sum()
    return w, 1.0 / np.sum(w ** 2)


def particle_args(rng, dtype):
    return (rng.uniform(0, 10, (200, 3)).astype(dtype), rng.uniform(1, 8, 4).astype(dtype),
            rng.uniform(0, 10, (4, 2)).astype(dtype), 2.0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_particle_filter_weights(dtype):
    replays(particle_weights, particle_args, dtype)


def complementary_filter(angle, gyro, accel, dt, alpha):
    """Attitude from a gyro and an accelerometer, as drone codes fuse them: one step per
    sample, in a Python loop over a short window."""
    out = np.empty_like(gyro[:, 0])
    for i in range(gyro.shape[0]):
        acc_angle = np.arctan2(accel[i, 1], accel[i, 2])
        angle = alpha * (angle + gyro[i, 0] * dt) + (1 - alpha) * acc_angle
        out[i] = angle
    return out


def complementary_args(rng, dtype):
    return (dtype(0.1), rng.standard_normal((20, 3)).astype(dtype),
            rng.standard_normal((20, 3)).astype(dtype), 0.01, 0.98)


@pytest.mark.parametrize("dtype", DTYPES)
def test_complementary_filter_loop(dtype):
    replays(complementary_filter, complementary_args, dtype)


# ---- CFD teaching codes ------------------------------------------------------------------
def poisson_jacobi(p, b, dx, dy, iters):
    """Pressure Poisson by Jacobi sweeps with Neumann and Dirichlet boundaries, the cavity
    flow lessons' way: slices of a copy, boundary rows written after each sweep."""
    for _ in range(iters):
        pn = p.copy()
        p[1:-1, 1:-1] = (((pn[1:-1, 2:] + pn[1:-1, :-2]) * dy ** 2 +
                          (pn[2:, 1:-1] + pn[:-2, 1:-1]) * dx ** 2) /
                         (2 * (dx ** 2 + dy ** 2)) -
                         dx ** 2 * dy ** 2 / (2 * (dx ** 2 + dy ** 2)) * b[1:-1, 1:-1])
        p[:, -1] = p[:, -2]
        p[0, :] = p[1, :]
        p[:, 0] = p[:, 1]
        p[-1, :] = 0
    return p


def poisson_args(rng, dtype):
    return (rng.standard_normal((24, 20)).astype(dtype),
            rng.standard_normal((24, 20)).astype(dtype), 0.05, 0.04, 5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_poisson_jacobi_with_boundary_rows(dtype):
    f = fl.compile(poisson_jacobi, static_argnames="iters")
    for seed in range(3):
        args = poisson_args(np.random.default_rng(seed), dtype)
        want = poisson_jacobi(args[0].copy(), *args[1:])
        p = args[0].copy()
        got = f(p, *args[1:])
        close(got, want, dtype)
        close(p, want, dtype)                # written in place, as NumPy's code does


def lax_wendroff(u, c):
    """Linear advection by Lax-Wendroff on a periodic grid (np.roll)."""
    up, um = np.roll(u, -1), np.roll(u, 1)
    return u - 0.5 * c * (up - um) + 0.5 * c ** 2 * (up - 2 * u + um)


@pytest.mark.parametrize("dtype", DTYPES)
def test_lax_wendroff_periodic(dtype):
    replays(lax_wendroff, lambda rng, dt: (rng.standard_normal(64).astype(dt), 0.4), dtype)


def heat_2d_steps(T, alpha, steps):
    """Explicit heat steps with fixed-temperature walls: in-place interior updates of one
    array, the lessons' `T[1:-1, 1:-1] += ...`."""
    for _ in range(steps):
        T[1:-1, 1:-1] += alpha * (T[2:, 1:-1] + T[:-2, 1:-1] + T[1:-1, 2:] + T[1:-1, :-2]
                                  - 4 * T[1:-1, 1:-1])
    return T.mean()


@pytest.mark.parametrize("dtype", DTYPES)
def test_heat_steps_in_place(dtype):
    f = fl.compile(heat_2d_steps, static_argnames="steps")
    for seed in range(3):
        T0 = np.random.default_rng(seed).uniform(0, 100, (16, 18)).astype(dtype)
        a, b = T0.copy(), T0.copy()
        close(f(a, 0.2, 4), heat_2d_steps(b, 0.2, 4), dtype)
        close(a, b, dtype)


# ---- machine learning from scratch -------------------------------------------------------
def softmax_regression_step(W, b, X, y, lr, num_classes):
    """Multinomial logistic regression: one-hot by indexing an identity, a stable softmax,
    cross-entropy and its gradient."""
    Y = np.eye(num_classes, dtype=X.dtype)[y]
    z = X @ W + b
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    loss = -np.mean(np.sum(Y * np.log(p + 1e-7), axis=1))
    g = (p - Y) / X.shape[0]
    return W - lr * X.T @ g, b - lr * g.sum(axis=0), loss


def softmax_args(rng, dtype):
    return (rng.standard_normal((5, 3)).astype(dtype), np.zeros(3, dtype),
            rng.standard_normal((32, 5)).astype(dtype), rng.integers(0, 3, 32), 0.1, 3)


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_regression_with_one_hot_by_eye(dtype):
    f = fl.compile(softmax_regression_step, static_argnames="num_classes")
    for seed in range(3):
        args = softmax_args(np.random.default_rng(seed), dtype)
        close(f(*args), softmax_regression_step(*args), dtype)


def mlp_backprop(params, X, Y, lr):
    """Two-layer network, ReLU by a mask, manual backpropagation, parameters in a dict."""
    z1 = X @ params["W1"] + params["b1"]
    a1 = z1 * (z1 > 0)
    out = a1 @ params["W2"] + params["b2"]
    d_out = 2 * (out - Y) / len(X)
    grads = {"W2": a1.T @ d_out, "b2": d_out.sum(0)}
    d_a1 = d_out @ params["W2"].T
    d_z1 = d_a1 * (z1 > 0)
    grads["W1"] = X.T @ d_z1
    grads["b1"] = d_z1.sum(0)
    return {k: params[k] - lr * grads[k] for k in params}, np.mean((out - Y) ** 2)


def mlp_args(rng, dtype):
    params = {"W1": rng.standard_normal((4, 8)), "b1": np.zeros(8),
              "W2": rng.standard_normal((8, 2)), "b2": np.zeros(2)}
    return ({k: v.astype(dtype) for k, v in params.items()},
            rng.standard_normal((16, 4)).astype(dtype),
            rng.standard_normal((16, 2)).astype(dtype), 0.05)


@pytest.mark.parametrize("dtype", DTYPES)
def test_mlp_backprop_with_a_parameter_dict(dtype):
    replays(mlp_backprop, mlp_args, dtype)


def knn_predict(X_train, y_train, X, k):
    """k-nearest neighbours by the expanded squared distance, argsort and a vote."""
    d = (X ** 2).sum(1)[:, None] - 2 * X @ X_train.T + (X_train ** 2).sum(1)[None, :]
    nearest = np.argsort(d, axis=1)[:, :k]
    votes = y_train[nearest]
    return (votes.mean(axis=1) > 0.5).astype(np.int64)


def knn_args(rng, dtype):
    return (rng.standard_normal((40, 3)).astype(dtype), rng.integers(0, 2, 40),
            rng.standard_normal((10, 3)).astype(dtype), 5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_knn_argsort_vote(dtype):
    f = fl.compile(knn_predict, static_argnames="k")
    for seed in range(3):
        args = knn_args(np.random.default_rng(seed), dtype)
        np.testing.assert_array_equal(f(*args), knn_predict(*args))


def adam_step(params, grads, state, cfg):
    """Adam over a dict of parameters, the step count in the state, bias correction with
    Python-float powers of the count."""
    t = state["t"] + 1
    m = {k: cfg["b1"] * state["m"][k] + (1 - cfg["b1"]) * grads[k] for k in params}
    v = {k: cfg["b2"] * state["v"][k] + (1 - cfg["b2"]) * grads[k] ** 2 for k in params}
    mh = {k: m[k] / (1 - cfg["b1"] ** t) for k in params}
    vh = {k: v[k] / (1 - cfg["b2"] ** t) for k in params}
    new = {k: params[k] - cfg["lr"] * mh[k] / (np.sqrt(vh[k]) + cfg["eps"]) for k in params}
    return new, {"t": t, "m": m, "v": v}


def adam_args(rng, dtype):
    shapes = {"w": (3, 4), "b": (4,)}
    p = {k: rng.standard_normal(s).astype(dtype) for k, s in shapes.items()}
    g = {k: rng.standard_normal(s).astype(dtype) for k, s in shapes.items()}
    st = {"t": int(rng.integers(0, 50)), "m": {k: np.zeros(s, dtype) for k, s in shapes.items()},
          "v": {k: np.zeros(s, dtype) for k, s in shapes.items()}}
    return p, g, st, {"lr": 1e-3, "b1": 0.9, "b2": 0.999, "eps": 1e-8}


@pytest.mark.parametrize("dtype", DTYPES)
def test_adam_over_nested_dicts_with_an_int_count(dtype):
    replays(adam_step, adam_args, dtype)


# ---- more of the same kinds, each replayed on new values -------------------------------
def rk4_pendulum(state, dt, g, length):
    def deriv(s):
        return np.array([s[1], -g / length * math.sin(s[0])], dtype=s.dtype)

    k1 = deriv(state)
    k2 = deriv(state + 0.5 * dt * k1)
    k3 = deriv(state + 0.5 * dt * k2)
    k4 = deriv(state + dt * k3)
    return state + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)


def batchnorm_forward_backward(x, gamma, beta, dout):
    n = x.shape[0]
    mu = x.mean(axis=0)
    xmu = x - mu
    ivar = 1.0 / np.sqrt(np.mean(xmu ** 2, axis=0) + 1e-5)
    xhat = xmu * ivar
    dxhat = dout * gamma
    dx = (1.0 / n) * ivar * (n * dxhat - dxhat.sum(axis=0) - xhat * (dxhat * xhat).sum(axis=0))
    return gamma * xhat + beta, dx, (dout * xhat).sum(axis=0), dout.sum(axis=0)


def kalman_constant_velocity(x, P, z, dt, q, r):
    F = np.array([[1, dt], [0, 1]], dtype=x.dtype)
    H = np.array([[1.0, 0.0]], dtype=x.dtype)
    Q = q * np.array([[dt ** 4 / 4, dt ** 3 / 2], [dt ** 3 / 2, dt ** 2]], dtype=x.dtype)
    x = F.dot(x)
    P = F.dot(P).dot(F.T) + Q
    K = P.dot(H.T).dot(np.linalg.inv(H.dot(P).dot(H.T) + r))
    return x + K.dot(z - H.dot(x)), (np.eye(2, dtype=x.dtype) - K.dot(H)).dot(P)


def burgers_by_gradient(u, dx, nu, dt):
    ux = np.gradient(u, dx)
    return u - dt * u * ux + dt * nu * np.gradient(ux, dx)


def cross_entropy_with_labels(logits, y):
    m = y.shape[0]
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    loss = -np.log(p[range(m), y]).mean()
    p[range(m), y] -= 1
    return loss, p / m


def gmm_responsibilities(X, means, covs, weights):
    r = np.zeros((X.shape[0], means.shape[0]), dtype=X.dtype)
    for k in range(means.shape[0]):
        d = X - means[k]
        quad = np.sum(d @ np.linalg.inv(covs[k]) * d, axis=1)
        r[:, k] = weights[k] * np.exp(-0.5 * quad) / np.sqrt((2 * np.pi) ** 2 *
                                                              np.linalg.det(covs[k]))
    return r / r.sum(1, keepdims=True)


MORE = {
    "rk4": (rk4_pendulum, lambda rng, dt: (rng.standard_normal(2).astype(dt), 0.01, 9.81, 1.0)),
    "batchnorm": (batchnorm_forward_backward, lambda rng, dt: tuple(
        rng.standard_normal(s).astype(dt) for s in ((8, 4), (4,), (4,), (8, 4)))),
    "kalman": (kalman_constant_velocity, lambda rng, dt: (
        rng.standard_normal(2).astype(dt), (np.eye(2) * rng.uniform(1, 2)).astype(dt),
        rng.standard_normal(1).astype(dt), 0.1, 0.5, 0.2)),
    "burgers": (burgers_by_gradient, lambda rng, dt: (rng.standard_normal(50).astype(dt), 0.1,
                                                       0.01, 0.001)),
    "cross-entropy": (cross_entropy_with_labels, lambda rng, dt: (
        rng.standard_normal((6, 3)).astype(dt), rng.integers(0, 3, 6))),
    "gmm": (gmm_responsibilities, lambda rng, dt: (
        rng.standard_normal((20, 2)).astype(dt), rng.standard_normal((3, 2)).astype(dt),
        np.stack([np.eye(2) * rng.uniform(1, 2) for _ in range(3)]).astype(dt),
        np.array([0.2, 0.3, 0.5], dt))),
}


@pytest.mark.parametrize("name", sorted(MORE))
@pytest.mark.parametrize("dtype", DTYPES)
def test_more_real_code_kinds(name, dtype):
    fn, make = MORE[name]
    replays(fn, make, dtype)
