"""A particle step with gathers: each particle reads a force field at its grid cell and the
position of a partner particle (a spring), then integrates."""
import numpy as np


def particle_step(pos, vel, field, partner, dt):
    grid = field.shape[0]
    cell = np.clip((pos * grid).astype(np.int64), 0, grid - 1)
    force = field[cell[:, 0], cell[:, 1]]               # (n, 2): gather from the field
    spring = pos[partner] - pos                          # gather the partner's position
    vel = 0.99 * vel + dt * (force + 0.5 * spring)
    pos = pos + dt * vel
    pos = np.where(pos < 0.0, -pos, np.where(pos > 1.0, 2.0 - pos, pos))   # reflect at walls
    energy = 0.5 * np.sum(vel * vel)
    return pos, vel, energy


def example_inputs(n=100_000, grid=64, seed=0):
    rng = np.random.default_rng(seed)
    pos = rng.random((n, 2))
    vel = 0.01 * rng.standard_normal((n, 2))
    field = 0.1 * rng.standard_normal((grid, grid, 2))
    partner = rng.permutation(n)
    return pos, vel, field, partner, 0.01


if __name__ == "__main__":
    from _run import compare
    compare(particle_step, example_inputs())
