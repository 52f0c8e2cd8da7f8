"""One k-means step in plain NumPy: distances by broadcasting, argmin, np.add.at centroid sums."""
import numpy as np


def kmeans_step(points, centroids):
    d = ((points[:, None, :] - centroids[None, :, :]) ** 2).sum(axis=2)   # (n, k)
    labels = np.argmin(d, axis=1)
    sums = np.zeros_like(centroids)
    np.add.at(sums, labels, points)
    counts = np.zeros_like(centroids[:, 0])
    np.add.at(counts, labels, 1)
    new = sums / np.maximum(counts, 1)[:, None]
    inertia = np.min(d, axis=1).sum()
    return new, labels, inertia


def example_inputs(n=20000, k=8, dim=3, seed=0):
    rng = np.random.default_rng(seed)
    points = rng.standard_normal((n, dim)) + rng.integers(0, 4, (n, 1))
    return points, points[rng.choice(n, k, replace=False)].copy()


if __name__ == "__main__":
    from _run import compare
    compare(kmeans_step, example_inputs())
