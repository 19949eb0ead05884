"""k-means of the vector index's lists (engine layer, no SQL): Lloyd on a sample.

The arithmetic is the core's (`core.vector_nearest`, `core.vector_means`); for cosine the
means are normalized (spherical k-means). Deterministic for a given `rng` state.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from threadloom import core
from threadloom.core.similarity import Metric

__all__ = ["kmeans"]


def kmeans(
    sample: bytes,
    count: int,
    dims: int,
    metric: Metric,
    assign: Metric,
    rng: random.Random,
    iterations: int,
    stop: Callable[[], bool] = lambda: False,
) -> bytes:
    """`count` centroids of `sample` (float32 vectors of `dims`), assigned by `assign`
    (Lloyd, at most `iterations`; an emptied list restarts at a random vector; fewer
    once `stop()` says so, between iterations)."""
    size = 4 * dims
    n = len(sample) // size
    spherical = metric == "cosine"
    seeds = rng.sample(range(n), count)
    centroids = b"".join(sample[i * size : (i + 1) * size] for i in seeds)
    if spherical:
        centroids = core.vector_means(centroids, list(range(count)), count, dims, True)[0]
    previous: list[int] | None = None
    for _ in range(iterations):
        if stop():
            break
        assignment = core.vector_nearest(sample, centroids, dims, assign)
        if assignment == previous:
            break
        previous = assignment
        means, sizes = core.vector_means(sample, assignment, count, dims, spherical)
        if 0 in sizes:
            parts = [means[i * size : (i + 1) * size] for i in range(count)]
            for i, members in enumerate(sizes):
                if not members:
                    start = rng.randrange(n) * size
                    parts[i] = sample[start : start + size]
            means = b"".join(parts)
        centroids = means
    return centroids
