"""A deterministic embedder for store tests: token counts hashed into a fixed-size vector.

No model, no network: each lower-cased word (`[a-z0-9]+`) adds 1.0 to the coordinate its
blake2b hash picks, so texts sharing words are close and the exact scores of any distance
can be computed from `vector()`. Every call is recorded, to tell `embed_query` (how a
search query should be embedded) from `embed_documents` (how stored texts are).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence

from langchain_core.embeddings import Embeddings

DIMS = 512
_WORD = re.compile(r"[a-z0-9]+")


class HashingEmbedder(Embeddings):
    """Bag-of-words vectors of `dims` coordinates; `calls` lists (method, texts) in order."""

    def __init__(self, dims: int = DIMS) -> None:
        self.dims = dims
        self.calls: list[tuple[str, list[str]]] = []

    def vector(self, text: str) -> list[float]:
        """The vector of `text` (not recorded as a call)."""
        out = [0.0] * self.dims
        for word in _WORD.findall(text.lower()):
            digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
            out[int.from_bytes(digest, "big") % self.dims] += 1.0
        return out

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(("embed_documents", list(texts)))
        return [self.vector(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        self.calls.append(("embed_query", [text]))
        return self.vector(text)

    def documents_embedded(self) -> list[str]:
        """Every text passed to `embed_documents`, in order."""
        return [
            text for method, texts in self.calls if method == "embed_documents" for text in texts
        ]

    def queries_embedded(self) -> list[str]:
        """Every text passed to `embed_query`, in order."""
        return [text for method, texts in self.calls if method == "embed_query" for text in texts]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity (0.0 when either vector is zero)."""
    na, nb = math.sqrt(dot(a, a)), math.sqrt(dot(b, b))
    return dot(a, b) / (na * nb) if na and nb else 0.0


def dot(a: Sequence[float], b: Sequence[float]) -> float:
    """The inner product."""
    return sum(x * y for x, y in zip(a, b, strict=True))


def l2(a: Sequence[float], b: Sequence[float]) -> float:
    """The Euclidean distance."""
    return math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b, strict=True)))


def l1(a: Sequence[float], b: Sequence[float]) -> float:
    """The Manhattan distance."""
    return sum(abs(x - y) for x, y in zip(a, b, strict=True))
