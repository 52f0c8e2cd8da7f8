"""How the NumPy workloads reach the peers that cannot take NumPy code as is.

- `rebind(fn, ns)`: the same source with the global `np` bound to another array namespace
  (jax.numpy, or DR below for Dr.Jit).
- `DRJIT_PORTS`: Dr.Jit rewrites, only where the source cannot run verbatim
  (`DRJIT_UNSUPPORTED`: what it cannot run at all); `JAX_PORTS`, `TORCH_PORTS` likewise, and
  `torch_namespace()` for torch.compile.
- `NUMBA_LOOPS`: explicit float32 loops equivalent to each workload, for `numba.njit`.
  (`@njit` of the NumPy code itself is also timed, as the "numba-np" runner; it types Python
  float constants as float64, so most workloads come back float64 there.)

Everything here is plain Python; the peers are imported by runners.py only.
"""
from __future__ import annotations

import math
import types

import numpy as np


def rebind(fn, namespace):
    """A copy of `fn` whose global `np` is `namespace` (nested functions follow it)."""
    g = dict(fn.__globals__)
    g["np"] = namespace
    new = types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__qualname__ = fn.__qualname__
    return new


# ---------------------------------------------------------------------------------- Dr.Jit

def drjit_namespace():
    """The NumPy functions the workloads use, mapped onto Dr.Jit (imports drjit)."""
    import drjit as dr

    def _reduce(op):
        def f(x, axis=None, keepdims=False):
            if axis is None and not dr.is_tensor_v(x):
                return op(x)                       # 1-D JIT array: reduce to width 1
            return op(x, axis=axis, keepdims=keepdims)
        return f

    return types.SimpleNamespace(
        sin=dr.sin, cos=dr.cos, sqrt=dr.sqrt, exp=dr.exp, log=dr.log, tanh=dr.tanh,
        abs=dr.abs, maximum=dr.maximum, where=dr.select, clip=dr.clip,
        sum=_reduce(dr.sum), max=_reduce(dr.max), mean=_reduce(dr.mean),
        linalg=types.SimpleNamespace(norm=dr.norm))


def step_drjit(p, m, v, target, lr):
    """fastlaunch.__main__.step with `p.size` -> `dr.width(p)` (Dr.Jit arrays have no .size)."""
    import drjit as dr
    y = dr.sin(p) + p * p
    r = y - target
    loss = dr.mean(r * r)
    g = 2 * r * (dr.cos(p) + 2 * p) / dr.width(p)
    m = 0.9 * m + 0.1 * g
    v = 0.999 * v + 0.001 * g * g
    p = p - lr * m / (dr.sqrt(v) + 1e-8)
    return p, m, v, loss


def softmax_user_drjit(x):
    """workloads.softmax_user with the array methods as Dr.Jit functions (TensorXf has no
    .max/.sum methods) and `e /= s` as `e = e / s`."""
    import drjit as dr
    z = x - dr.max(x, axis=1, keepdims=True)
    e = dr.exp(z)
    return e / dr.sum(e, axis=1, keepdims=True)


DRJIT_PORTS = {"step": step_drjit, "softmax_user": softmax_user_drjit}
# workloads Dr.Jit's array types cannot express (no matrix product of tensors, no scatter-add
# of rows written as np.add.at): the runner reports them n/a with this reason
DRJIT_UNSUPPORTED = {"mlp_layer": "no matrix product of TensorXf in Dr.Jit's NumPy-like API",
                     "kmeans": "np.add.at has no Dr.Jit counterpart in this port"}


# ------------------------------------------------------------------------------------- JAX

def kmeans_jax(x, c):
    """kmeans_assign with np.add.at -> .at[].add (JAX arrays are immutable)."""
    import jax.numpy as jnp
    d = ((x[:, None, :] - c[None, :, :]) ** 2).sum(axis=2)
    a = jnp.argmin(d, axis=1)
    sums = jnp.zeros(c.shape, x.dtype).at[a].add(x)
    counts = jnp.zeros(c.shape[0], x.dtype).at[a].add(1.0)
    return sums / jnp.maximum(counts, 1.0)[:, None]


JAX_PORTS = {"kmeans": kmeans_jax}


# ----------------------------------------------------------------------- torch (inductor)

def torch_namespace():
    """The NumPy functions the workloads use, mapped onto torch (imports torch)."""
    import torch

    def _reduce(op):
        def f(x, axis=None, keepdims=False):
            return op(x) if axis is None else op(x, dim=axis, keepdim=keepdims)
        return f

    def maximum(a, b):
        return torch.clamp(a, min=b) if isinstance(b, float) else torch.maximum(a, b)

    return types.SimpleNamespace(
        sin=torch.sin, cos=torch.cos, sqrt=torch.sqrt, exp=torch.exp, log=torch.log,
        tanh=torch.tanh, abs=torch.abs, maximum=maximum, where=torch.where, clip=torch.clip,
        sum=_reduce(torch.sum), max=_reduce(torch.amax), mean=_reduce(torch.mean),
        linalg=types.SimpleNamespace(norm=torch.linalg.vector_norm))


def step_torch(p, m, v, target, lr):
    """fastlaunch.__main__.step with `p.size` -> `p.numel()` (a method in torch)."""
    import torch
    y = torch.sin(p) + p * p
    r = y - target
    loss = torch.mean(r * r)
    g = 2 * r * (torch.cos(p) + 2 * p) / p.numel()
    m = 0.9 * m + 0.1 * g
    v = 0.999 * v + 0.001 * g * g
    p = p - lr * m / (torch.sqrt(v) + 1e-8)
    return p, m, v, loss


def kmeans_torch(x, c):
    """kmeans_assign with np.add.at -> index_add."""
    import torch
    d = ((x[:, None, :] - c[None, :, :]) ** 2).sum(dim=2)
    a = torch.argmin(d, dim=1)
    sums = torch.zeros(c.shape, dtype=x.dtype).index_add(0, a, x)
    counts = torch.zeros(c.shape[0], dtype=x.dtype).index_add(
        0, a, torch.ones(a.shape[0], dtype=x.dtype))
    return sums / torch.clamp(counts, min=1.0)[:, None]


def softmax_user_torch(x):
    """workloads.softmax_user with x.max(axis=, keepdims=) -> x.amax(dim=, keepdim=) (torch's
    .max returns values and indices)."""
    z = x - x.amax(dim=-1, keepdim=True)
    e = z.exp()
    e /= e.sum(dim=-1, keepdim=True)
    return e


TORCH_PORTS = {"step": step_torch, "kmeans": kmeans_torch, "softmax_user": softmax_user_torch}


# ----------------------------------------------------------------------------------- Numba
# float32 constants throughout: numba types a Python float literal as float64 and would
# promote the arithmetic (and the outputs) to float64.

F = np.float32
prange = range      # the loops' parallel loop: numba.prange for the numba-par runner


def step_loop(p, m, v, target, lr):
    n = p.size
    lr32 = F(lr)
    p_out = np.empty_like(p)
    m_out = np.empty_like(m)
    v_out = np.empty_like(v)
    loss = np.empty(1, np.float32)     # numba boxes a float32 scalar as a Python float
    acc = 0.0
    for i in prange(n):
        x = p[i]
        r = (np.sin(x) + x * x) - target[i]
        acc += r * r
        g = F(2) * r * (np.cos(x) + F(2) * x) / F(n)
        mi = F(0.9) * m[i] + F(0.1) * g
        vi = F(0.999) * v[i] + F(0.001) * g * g
        m_out[i] = mi
        v_out[i] = vi
        p_out[i] = x - lr32 * mi / (np.sqrt(vi) + F(1e-8))
    loss[0] = acc / n
    return p_out, m_out, v_out, loss


def chain_loop(x, y):
    out = np.empty_like(x)
    for i in prange(x.size):
        xi = x[i]
        yi = y[i]
        a = xi * F(1.5) + yi
        a = a * a - F(0.5)
        a = np.sqrt(abs(a) + F(1.0))
        a = max(a * yi - xi, F(0.1))
        out[i] = a / (a + F(1.0))
    return out


def softmax_loop(x):
    rows, cols = x.shape
    out = np.empty_like(x)
    for i in prange(rows):
        mx = x[i, 0]
        for j in range(1, cols):
            mx = max(mx, x[i, j])
        s = F(0.0)
        for j in range(cols):
            e = np.exp(x[i, j] - mx)
            out[i, j] = e
            s += e
        for j in range(cols):
            out[i, j] = out[i, j] / s
    return out


def normalise_loop(x):
    acc = 0.0
    for i in prange(x.size):
        acc += x[i] * x[i]
    norm = F(math.sqrt(acc))
    out = np.empty_like(x)
    for i in prange(x.size):
        out[i] = x[i] / norm
    return out


def black_scholes_loop(S, K, T, r, sigma):
    r32 = F(r)
    s32 = F(sigma)
    c = F(0.7978845608)
    k3 = F(0.044715)
    half = F(0.5)
    one = F(1.0)
    out = np.empty_like(S)
    for i in prange(S.size):
        sqrt_t = np.sqrt(T[i])
        d1 = (np.log(S[i] / K[i]) + (r32 + half * s32 * s32) * T[i]) / (s32 * sqrt_t)
        d2 = d1 - s32 * sqrt_t
        n1 = half * (one + np.tanh(c * (d1 + k3 * d1 * d1 * d1)))
        n2 = half * (one + np.tanh(c * (d2 + k3 * d2 * d2 * d2)))
        price = S[i] * n1 - K[i] * np.exp(-r32 * T[i]) * n2
        out[i] = price if T[i] > F(0.0) else max(S[i] - K[i], F(0.0))
    return out


def black_scholes_poly_loop(S, K, T, r, sigma):
    r32 = F(r)
    s32 = F(sigma)
    out = np.empty_like(S)
    for i in prange(S.size):
        sqrt_t = np.sqrt(T[i])
        d1 = (np.log(S[i] / K[i]) + (r32 + s32 * s32 / F(2)) * T[i]) / (s32 * sqrt_t)
        d2 = d1 - s32 * sqrt_t
        c = F(0.0)
        for j in range(2):
            d = d1 if j == 0 else d2
            k = F(1) / (F(1) + F(0.2316419) * abs(d))
            poly = k * (F(0.319381530) + k * (F(-0.356563782) + k * (F(1.781477937) + k * (
                F(-1.821255978) + k * F(1.330274429)))))
            w = F(1) - F(0.3989422804014327) * np.exp(-d * d / F(2)) * poly
            w = F(1) - w if d < F(0) else w
            c = S[i] * w if j == 0 else c - K[i] * np.exp(-r32 * T[i]) * w
        out[i] = c
    return out


def chain_user_loop(x, y):
    out = np.empty_like(x)
    for i in prange(x.size):
        xi = x[i]
        yi = y[i]
        t = F(2.0) * xi - yi
        u = t * t + F(0.25) * yi
        u = min(max(u, F(-4.0)), F(4.0))
        v = np.sqrt(abs(u - xi))
        out[i] = max(v, yi) * F(1.5) - F(0.125) * t
    return out


def mlp_layer_loop(x, W, b):
    rows, k = x.shape
    cols = W.shape[1]
    out = np.empty((rows, cols), np.float32)
    for i in prange(rows):
        acc = np.empty(cols, np.float32)
        for j in range(cols):
            acc[j] = b[j]
        for p in range(k):
            xp = x[i, p]
            for j in range(cols):
                acc[j] += xp * W[p, j]
        for j in range(cols):
            out[i, j] = np.tanh(acc[j])
    return out


def kmeans_loop(x, c):
    k = c.shape[0]
    sums = np.zeros((k, 2), np.float32)
    counts = np.zeros(k, np.float32)
    for i in range(x.shape[0]):
        best, best_d = 0, np.inf
        for j in range(k):
            dx = x[i, 0] - c[j, 0]
            dy = x[i, 1] - c[j, 1]
            d = dx * dx + dy * dy
            if d < best_d:
                best, best_d = j, d
        sums[best, 0] += x[i, 0]
        sums[best, 1] += x[i, 1]
        counts[best] += F(1.0)
    for j in range(k):
        n = max(counts[j], F(1.0))
        sums[j, 0] /= n
        sums[j, 1] /= n
    return sums


NUMBA_LOOPS = {"step": step_loop, "chain": chain_loop, "softmax": softmax_loop,
               "normalise": normalise_loop, "black_scholes": black_scholes_loop,
               "black_scholes_poly": black_scholes_poly_loop, "chain_user": chain_user_loop,
               "softmax_user": softmax_loop, "normalise_norm": normalise_loop,
               "mlp_layer": mlp_layer_loop, "kmeans": kmeans_loop}


# Numba with parallel=True: the loops above with their (outermost) loops as prange.  k-means
# scatters into shared sums from every point: a prange there would race.
NUMBA_PARALLEL_UNSUPPORTED = {"kmeans": "its scatter-add into shared sums would race in a prange"}


def numba_parallel(name: str):
    """The NUMBA_LOOPS loop of workload `name` with its outer `prange` loop numba's (imports
    numba)."""
    import numba
    fn = NUMBA_LOOPS[name]
    g = dict(fn.__globals__)
    g["prange"] = numba.prange
    return types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)

