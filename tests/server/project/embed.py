"""The test project's embeddings: letter counts, deterministic and offline."""

from __future__ import annotations


def embed(texts: list[str]) -> list[list[float]]:
    """One 4-dimensional vector per text: how often it holds a, e, i and o."""
    return [[float(t.lower().count(c)) + 0.01 for c in "aeio"] for t in texts]
