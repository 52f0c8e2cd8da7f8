"""Central finite differences along random directions: the reference for gradient tests."""
from __future__ import annotations

import numpy as np


def directional(f, args, argnum, direction, eps=1e-6):
    """(f(x + eps d) - f(x - eps d)) / 2 eps for argument `argnum`, evaluated with NumPy."""
    plus, minus = list(args), list(args)
    x = np.asarray(args[argnum], np.float64)
    plus[argnum] = x + eps * direction
    minus[argnum] = x - eps * direction
    return (float(f(*plus)) - float(f(*minus))) / (2 * eps)


def check_gradient(f, grads, args, argnums, rng, rtol=1e-6, atol=1e-8, eps=1e-6, trials=2):
    """Every gradient, projected on random directions, against central differences of the
    NumPy function f (float64 arguments).  Central differences err by O(eps^2 f''') plus
    rounding O(ulp(f)/eps): the tolerances cover both for the smooth cases tested."""
    for k, i in enumerate(argnums):
        g = np.asarray(grads[k], np.float64)
        x = np.asarray(args[i])
        assert g.shape == x.shape, (g.shape, x.shape)
        for _ in range(trials):
            d = rng.standard_normal(x.shape)
            num = directional(f, args, i, d, eps)
            ana = float(np.sum(g * d))
            scale = abs(num) + float(np.sum(np.abs(g * d)))
            assert abs(num - ana) <= rtol * scale + atol, \
                f"argument {i}: finite differences {num!r}, gradient {ana!r}"
