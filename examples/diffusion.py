"""An explicit 2-D diffusion (heat equation) step: a five-point stencil written with slices."""
import numpy as np


def diffusion_step(u, alpha):
    new = u.copy()
    new[1:-1, 1:-1] = u[1:-1, 1:-1] + alpha * (
        u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4.0 * u[1:-1, 1:-1])
    return new


def example_inputs(n=512, seed=0):
    u = np.zeros((n, n))
    u[n // 4: n // 2, n // 4: n // 2] = 1.0
    u += 0.01 * np.random.default_rng(seed).standard_normal((n, n))
    return u, 0.2


if __name__ == "__main__":
    from _run import compare
    compare(diffusion_step, example_inputs())
