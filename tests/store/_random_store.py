"""A Store whose embedder gives each new text a random vector (seeded), for the tests of
the vector index that need many items and no meaning in them."""

from __future__ import annotations

import random
from pathlib import Path

from langgraph.store.base import PutOp

from threadloom import Store

#: The vectors' dimensions.
DIMS = 8


def random_store(path: Path) -> Store:
    """A Store at `path` indexing `text` with a seeded random vector per distinct text."""
    rng = random.Random(1)
    table: dict[str, list[float]] = {}

    def embed(texts: list[str]) -> list[list[float]]:
        return [table.setdefault(t, [rng.gauss(0, 1) for _ in range(DIMS)]) for t in texts]

    index = {"dims": DIMS, "embed": embed, "fields": ["text"]}
    return Store(path, index=index)  # type: ignore[arg-type]


def stored_docs(path: Path, count: int = 300) -> None:
    """Put `count` documents ("d0", "doc 0", ...) into a `random_store` at `path`, closed."""
    store = random_store(path)
    try:
        store.batch([PutOp(("docs",), f"d{n}", {"text": f"doc {n}"}) for n in range(count)])
    finally:
        store.close()
