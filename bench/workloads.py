"""The benchmark workloads: plain NumPy functions and the float32 inputs they are timed on.

Every runner executes the function defined here (fastlaunch and Numba-on-NumPy-code call it
as is; JAX and Dr.Jit run the same source with `np` rebound to their array namespace, see
runners.py). Where a peer cannot run the code verbatim, its rewrite lives in ports.py.

Inputs are fixed per size: each timed call computes the same thing from the same arrays, so
every runner does identical work and no state (e.g. the optimiser's m, v) drifts between runners.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from fastlaunch.__main__ import step  # the README's optimisation step, verbatim

DTYPE = np.float32
ROW = 256            # softmax row length


def chain(x, y):
    """A 12-op elementwise chain: one fused kernel, 2 inputs read, 1 output written."""
    a = x * 1.5 + y
    a = a * a - 0.5
    a = np.abs(a) + 1.0
    a = np.sqrt(a)
    a = a * y - x
    a = np.maximum(a, 0.1)
    return a / (a + 1.0)


def softmax(x):
    """Row softmax of a 2-D array (rows of ROW elements)."""
    e = np.exp(x - np.max(x, axis=1, keepdims=True))
    return e / np.sum(e, axis=1, keepdims=True)


def normalise(x):
    """A full reduction feeding an elementwise op."""
    return x / np.sqrt(np.sum(x * x))


def black_scholes(S, K, T, r, sigma):
    """European call price; the normal CDF is the erf-free tanh approximation
    0.5 * (1 + tanh(sqrt(2/pi) * (d + 0.044715 d^3))) (abs. error < 1.8e-4; the same code for
    every runner); an option at or past expiry (T <= 0) is worth its intrinsic value."""
    def cdf(d):
        return 0.5 * (1.0 + np.tanh(0.7978845608 * (d + 0.044715 * d * d * d)))
    sqrt_t = np.sqrt(T)
    d1 = (np.log(S / K) + (r + 0.5 * sigma * sigma) * T) / (sigma * sqrt_t)
    d2 = d1 - sigma * sqrt_t
    price = S * cdf(d1) - K * np.exp(-r * T) * cdf(d2)
    return np.where(T > 0.0, price, np.maximum(S - K, 0.0))


# ---- the same computations as users write them (issue 31): no one tuned these for fastlaunch

def black_scholes_poly(S, K, T, r, sigma):
    """Black-Scholes as textbooks write it: the normal CDF is Abramowitz & Stegun 26.2.17, a
    polynomial in k = 1 / (1 + 0.2316419 |d|) times the density exp(-d*d/2), reflected by
    np.where on the sign of d (abs. error < 7.5e-8)."""
    def cnd(d):
        k = 1.0 / (1.0 + 0.2316419 * np.abs(d))
        poly = k * (0.319381530 + k * (-0.356563782 + k * (1.781477937 + k * (
            -1.821255978 + k * 1.330274429))))
        w = 1.0 - 0.3989422804014327 * np.exp(-d * d / 2) * poly
        return np.where(d < 0, 1.0 - w, w)
    sqrt_t = np.sqrt(T)
    d1 = (np.log(S / K) + (r + sigma ** 2 / 2) * T) / (sigma * sqrt_t)
    d2 = d1 - sigma * sqrt_t
    return S * cnd(d1) - K * np.exp(-r * T) * cnd(d2)


def chain_user(x, y):
    """An elementwise chain of 14 operations written with temporaries and np.clip, no division
    (Numba's loop vectorises): one fused kernel, 2 inputs read, 1 output written."""
    t = 2.0 * x - y
    u = t * t + 0.25 * y
    u = np.clip(u, -4.0, 4.0)
    v = np.sqrt(np.abs(u - x))
    return np.maximum(v, y) * 1.5 - 0.125 * t


def softmax_user(x):
    """Row softmax with array methods and an in-place division, as often written."""
    z = x - x.max(axis=-1, keepdims=True)
    e = np.exp(z)
    e /= e.sum(axis=-1, keepdims=True)
    return e


def normalise_norm(x):
    """The normalisation through np.linalg.norm."""
    return x / np.linalg.norm(x)


FEATURES = 128       # MLP layer width
CLUSTERS = 16        # k-means clusters


def mlp_layer(x, W, b):
    """One dense layer: tanh(x @ W + b), x of (n / FEATURES, FEATURES), W square."""
    return np.tanh(x @ W + b)


def kmeans_assign(x, c):
    """One k-means step over 2-D points x (n/2, 2): assign each point to its nearest centre,
    then the new centres are the means of their points (np.add.at; empty clusters stay 0)."""
    d = ((x[:, None, :] - c[None, :, :]) ** 2).sum(axis=2)
    a = np.argmin(d, axis=1)
    sums = np.zeros(c.shape, x.dtype)
    np.add.at(sums, a, x)
    counts = np.zeros(c.shape[0], x.dtype)
    np.add.at(counts, a, 1.0)
    return sums / np.maximum(counts, 1.0)[:, None]


def _step_args(n, rng):
    return (rng.standard_normal(n).astype(DTYPE), (rng.standard_normal(n) * 0.1).astype(DTYPE),
            (rng.random(n) * 0.1).astype(DTYPE), rng.standard_normal(n).astype(DTYPE), 1e-2)


def _chain_args(n, rng):
    return rng.standard_normal(n).astype(DTYPE), rng.standard_normal(n).astype(DTYPE)


def softmax_shape(n: int) -> tuple:
    """(rows, ROW) holding n elements; a single row below ROW elements."""
    return (n // ROW, ROW) if n >= ROW else (1, n)


def _softmax_args(n, rng):
    return ((rng.standard_normal(softmax_shape(n)) * 4).astype(DTYPE),)


def _normalise_args(n, rng):
    return (rng.standard_normal(n).astype(DTYPE),)


def _black_scholes_args(n, rng):
    return (rng.uniform(10, 100, n).astype(DTYPE), rng.uniform(10, 100, n).astype(DTYPE),
            rng.uniform(0.25, 2.0, n).astype(DTYPE), 0.02, 0.3)


def _mlp_args(n, rng):
    rows = max(1, n // FEATURES)
    return (rng.standard_normal((rows, FEATURES)).astype(DTYPE),
            (rng.standard_normal((FEATURES, FEATURES)) / np.sqrt(FEATURES)).astype(DTYPE),
            rng.standard_normal(FEATURES).astype(DTYPE))


def _kmeans_args(n, rng):
    points = max(CLUSTERS, n // 2)
    return (rng.standard_normal((points, 2)).astype(DTYPE),
            rng.standard_normal((CLUSTERS, 2)).astype(DTYPE))


@dataclass(frozen=True)
class Workload:
    name: str
    fn: Callable                   # the NumPy code
    make_args: Callable            # (n, rng) -> tuple of float32 arrays and Python scalars
    description: str

    def args(self, n: int, seed: int = 0) -> tuple:
        return self.make_args(n, np.random.default_rng(seed))


WORKLOADS = {w.name: w for w in [
    Workload("step", step, _step_args,
             "the README's optimisation step (loss reduction + Adam-like update; 4 outputs)"),
    Workload("chain", chain, _chain_args, "12-op elementwise chain"),
    Workload("softmax", softmax, _softmax_args, f"row softmax, rows of {ROW}"),
    Workload("normalise", normalise, _normalise_args, "x / np.sqrt(np.sum(x*x))"),
    Workload("black_scholes", black_scholes, _black_scholes_args,
             "Black-Scholes call price (S, K, T arrays; r, sigma Python floats; exp, log, "
             "sqrt, tanh, where)"),
    Workload("black_scholes_poly", black_scholes_poly, _black_scholes_args,
             "Black-Scholes, textbook form: polynomial normal CDF of exp(-d*d/2) under np.where "
             "on the sign (exp, log, sqrt, where)"),
    Workload("chain_user", chain_user, _chain_args,
             "14-op elementwise chain with temporaries and np.clip"),
    Workload("softmax_user", softmax_user, _softmax_args,
             f"row softmax via x.max / e.sum methods and e /= ..., rows of {ROW}"),
    Workload("normalise_norm", normalise_norm, _normalise_args, "x / np.linalg.norm(x)"),
    Workload("mlp_layer", mlp_layer, _mlp_args,
             f"tanh(x @ W + b), x of (n/{FEATURES}, {FEATURES}), W {FEATURES}x{FEATURES}"),
    Workload("kmeans", kmeans_assign, _kmeans_args,
             f"k-means step: nearest of {CLUSTERS} centres for n/2 2-D points, new centres "
             "with np.add.at"),
]}


def as_list(out) -> list:
    """A workload's result as a list of outputs."""
    return list(out) if isinstance(out, (tuple, list)) else [out]


def bytes_moved(args, outputs) -> int:
    """Each array input read once, each output written once (Python scalars count as nothing)."""
    arrays = [a for a in args if isinstance(a, np.ndarray)] + [np.asarray(o) for o in outputs]
    return int(sum(a.nbytes for a in arrays))
