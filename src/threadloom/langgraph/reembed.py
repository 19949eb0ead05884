"""Re-embedding stored items, and giving text entries to items that lack them.

Adapter layer, beside `store.py`. `reembed` fills the vectors of items written without
them (`threadloom migrate --store` from the CLI has no embedder) or, with `every`,
refreshes every item's vectors (another embedder); `reembed_file` does it for a path and
an index config, replacing the file's vectors when the new embedder has other dims or
another metric (`threadloom reembed`). `fill_text` gives a text entry to the items older
versions wrote with vectors and none. Items are read a page at a time; a page is
embedded outside any transaction (only texts the file's embedding cache does not hold for
this embedder, store_embed.py: with an unchanged embedder, `every` re-embeds nothing) and
written in one, and an item changed meanwhile is left to its own put, so a run that stops
is finished by running it again.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from langgraph.store.base import IndexConfig

from threadloom.engine import File
from threadloom.engine.items import Items, Reindex
from threadloom.errors import (
    EmbedderError,
    InvalidArgumentError,
    ThreadloomError,
    VectorConfigError,
)
from threadloom.langgraph.store_index import Indexing, check_count
from threadloom.langgraph.store_ops import check_labels


class Indexed(Protocol):
    """What re-embedding needs of a Store (`Store`, `AsyncStore`)."""

    file: File
    items: Items
    indexing: Indexing

    def _retrain(self) -> None: ...


#: Items read, embedded and written per transaction.
PAGE: Final = 128


@dataclass
class Reembedded:
    """What re-embedding found and did (or, in a dry run, would do).

    Attributes:
        prefix: the namespace prefix (labels; [] for every item).
        items: items under the prefix.
        unembedded: those of them without a vector before.
        embedded: items given new vectors (dry run: that would be).
        vectors: vectors written.
        dropped: vectors of another embedder deleted first (dims or metric changed).
        every: every item was re-embedded, not only those without a vector.
        applied: False for a dry run (nothing changed).
    """

    prefix: list[str]
    items: int = 0
    unembedded: int = 0
    embedded: int = 0
    vectors: int = 0
    dropped: int = 0
    every: bool = False
    applied: bool = True

    def as_json(self) -> dict[str, object]:
        """A JSON-ready dict."""
        return {
            "prefix": list(self.prefix),
            "applied": self.applied,
            "every": self.every,
            "items": self.items,
            "unembedded": self.unembedded,
            "embedded": self.embedded,
            "vectors": self.vectors,
            "dropped": self.dropped,
        }


def reembed(
    store: Indexed, prefix: Sequence[str] = (), *, every: bool = False, apply: bool = True
) -> Reembedded:
    """Embed the items under `prefix` that have no vector (`every`: all of them) with the
    store's index config, and refresh their text entries; see `Store.reembed`."""
    indexing = store.indexing
    if indexing.embeddings is None:
        raise InvalidArgumentError(
            "this Store has no index config, so there is nothing to embed with; open it "
            "with index={'dims': ..., 'embed': ...}"
        )
    check_labels(prefix, full=False)
    reindex = Reindex(store.items)
    report = Reembedded(list(prefix), every=every, applied=apply)
    with store.file.read() as conn:
        report.items, report.unembedded = reindex.counts(conn, prefix)
    if not apply:
        report.embedded = report.items if every else report.unembedded
        return report
    after = 0
    while True:
        with store.file.read() as conn:
            page = reindex.page(conn, prefix, after=after, limit=PAGE, every=every)
        if not page:
            return report
        after = page[-1].id
        entries, texts, slots = indexing.entries(page, embed=True)
        embedder = indexing.embedder
        assert embedder is not None  # with embeddings, as checked above
        try:
            vectors, keys = embedder.embed(store.file, texts) if texts else ([], None)
        except ThreadloomError:
            raise  # the file's, or a count the embedder got wrong: said as it is
        except Exception as exc:  # the application's embedder: any error it raises
            raise EmbedderError(
                f"the embedder failed ({type(exc).__name__}: {exc}) after {report.embedded} "
                "items were embedded; fix it and run again to embed the rest"
            ) from exc
        check_count(len(vectors), len(slots))
        for n, ((at, path), vector) in enumerate(zip(slots, vectors, strict=True)):
            held = entries[at].vectors
            assert held is not None
            held.append((path, vector))
            if keys is not None:
                entries[at].keys = [*(entries[at].keys or []), keys[n]]
        with store.file.write() as conn:
            written = reindex.apply(conn, entries)
            due = store.items.vectors is not None and store.items.vectors.due(conn) is not None
        report.embedded += written
        report.vectors += sum(len(e.vectors or ()) for e in entries)
        if due:
            store._retrain()


def reembed_file(
    path: str | os.PathLike[str],
    index: IndexConfig,
    *,
    prefix: Sequence[str] = (),
    every: bool = False,
    apply: bool = True,
) -> Reembedded:
    """`reembed` on the file at `path` with the Store index config `index`.

    When the file's vectors have other dims or another metric than `index` says, they
    are all replaced: that needs `every=True` and no prefix (the old vectors are deleted
    first, in their own transaction; a run that stops leaves items without vectors, which
    a run without `every` fills).

    Raises:
        VectorConfigError: the file's vectors differ from `index` and not every item is
            re-embedded.
        EmbedderError: the embedder raised (the pages embedded before stay).
    """
    from threadloom.langgraph.store import Store

    dropped = 0
    try:
        store = Store(path, index=index, readonly=not apply)
    except VectorConfigError:
        if not every or prefix:
            raise

        dropped = _drop_vectors(path, apply)
        if not apply:
            with Store(path, readonly=True) as plain:
                report = Reembedded([], every=True, applied=False, dropped=dropped)
                with plain.file.read() as conn:
                    report.items, _ = Reindex(plain.items).counts(conn, ())
                report.unembedded = report.embedded = report.items
                return report
        store = Store(path, index=index)
    with store:
        report = reembed(store, prefix, every=every, apply=apply)
    report.dropped = dropped
    return report


def _drop_vectors(path: str | os.PathLike[str], apply: bool) -> int:
    """Delete every vector of the file (`apply`), or count them; return how many."""
    file = File.open(path, readonly=not apply)
    try:
        reindex = Reindex(Items(file))
        if not apply:
            with file.read() as conn:
                return reindex.vector_count(conn)
        with file.write() as conn:
            return reindex.drop_vectors(conn)
    finally:
        file.close()


def fill_text(store: Indexed) -> int:
    """Give a text entry to every item with vectors and none (written by an older
    version's Store with an index), once per file; return how many were filled."""
    indexing = store.indexing
    if store.file.readonly or not indexing.text:
        return 0
    reindex = Reindex(store.items)
    with store.file.read() as conn:
        if reindex.text_filled(conn):
            return 0
    filled = 0
    after = 0
    while True:
        with store.file.read() as conn:
            page = reindex.textless_page(conn, after=after, limit=PAGE * 8)
        if page:
            after = page[-1].id
            entries, _, _ = indexing.entries(page, embed=False)
        with store.file.write() as conn:
            if page:
                filled += reindex.apply(conn, entries)
            else:
                reindex.mark_text_filled(conn)
        if not page:
            return filled
