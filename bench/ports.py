"""How the NumPy workloads reach the peers that cannot take NumPy code as is.

- `rebind(fn, ns)`: the same source with the global `np` bound to another array namespace
  (jax.numpy, or DR below for Dr.Jit).
- `DRJIT_PORTS`: Dr.Jit rewrites, only where the source cannot run verbatim.
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
        abs=dr.abs, maximum=dr.maximum, where=dr.select,
        sum=_reduce(dr.sum), max=_reduce(dr.max), mean=_reduce(dr.mean))


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


DRJIT_PORTS = {"step": step_drjit}


# ----------------------------------------------------------------------------------- Numba
# float32 constants throughout: numba types a Python float literal as float64 and would
# promote the arithmetic (and the outputs) to float64.

F = np.float32


def step_loop(p, m, v, target, lr):
    n = p.size
    lr32 = F(lr)
    p_out = np.empty_like(p)
    m_out = np.empty_like(m)
    v_out = np.empty_like(v)
    loss = np.empty(1, np.float32)     # numba boxes a float32 scalar as a Python float
    acc = 0.0
    for i in range(n):
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
    for i in range(x.size):
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
    for i in range(rows):
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
    for i in range(x.size):
        acc += x[i] * x[i]
    norm = F(math.sqrt(acc))
    out = np.empty_like(x)
    for i in range(x.size):
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
    for i in range(S.size):
        sqrt_t = np.sqrt(T[i])
        d1 = (np.log(S[i] / K[i]) + (r32 + half * s32 * s32) * T[i]) / (s32 * sqrt_t)
        d2 = d1 - s32 * sqrt_t
        n1 = half * (one + np.tanh(c * (d1 + k3 * d1 * d1 * d1)))
        n2 = half * (one + np.tanh(c * (d2 + k3 * d2 * d2 * d2)))
        out[i] = S[i] * n1 - K[i] * np.exp(-r32 * T[i]) * n2
    return out


NUMBA_LOOPS = {"step": step_loop, "chain": chain_loop, "softmax": softmax_loop,
               "normalise": normalise_loop, "black_scholes": black_scholes_loop}
