"""Copying a LangGraph Store (SqliteStore, PostgresStore) into the threadloom Store.

Adapter layer. The source is read through its public API: `search(())` page by page,
in its own order, with `refresh_ttl=False` so reading changes nothing (a SqliteStore file
is opened read-only besides). Each item keeps its namespace, key, value, `created_at`
and `updated_at`; the target embeds and text-indexes it with its own index config
(`Store.import_items`). Items whose key the target holds are `present` and left alone,
so a rerun copies nothing; each page is one transaction. TTLs are not copied: the public
API does not return them. The source opens through the source kinds' registry
(`sources/`): the kind of its URL's scheme, or the file kind with a Store.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from langgraph.store.base import BaseStore, GetOp, Item

from threadloom.engine.format import Found, identify
from threadloom.errors import MigrationError, NotOurFileError
from threadloom.langgraph.migration import sources
from threadloom.langgraph.migration.report import StoreReport
from threadloom.langgraph.migration.sources import OpenedStore
from threadloom.langgraph.migration.urls import redact, scrub
from threadloom.langgraph.store import Store

#: Items read (and written) per page.
PAGE = 500


class StoreSource:
    """A LangGraph Store to copy from, open for reading.

    Args:
        source: a SqliteStore (or SqliteSaver-with-Store) file, or a PostgreSQL URL.

    Raises:
        MigrationError: the source holds no LangGraph Store, or cannot be read.
    """

    def __init__(self, source: str | None) -> None:
        if not source:
            raise MigrationError("give the Store's source with --store-source (a file or a URL)")
        self.source = source
        self.store, self._close, self.described = _open(source)

    def close(self) -> None:
        """Close the source's connection."""
        self._close()


def copy_store(source: StoreSource, target: str, *, apply: bool, index: Any = None) -> StoreReport:
    """Copy every item of `source` into the threadloom Store of the file `target`.

    Raises:
        MigrationError: reading the source failed (the pages copied before stay).
    """
    report = StoreReport(source.described)
    store = _target(target, apply, index)
    try:
        report.embedded = store is not None and store.embeddings is not None
        namespaces: set[tuple[str, ...]] = set()
        for page in _pages(source.store, source.source):
            namespaces.update(tuple(item.namespace) for item in page)
            report.items += len(page)
            held = _held(store, page)
            lacking = [item for item, found in zip(page, held, strict=True) if not found]
            report.present += len(page) - len(lacking)
            report.missing += len(lacking)
            if apply and lacking and store is not None:
                report.copied += store.import_items(lacking)
        report.namespaces = len(namespaces)
        if not report.embedded:
            report.unembedded = report.copied if apply else report.missing
    finally:
        if store is not None:
            store.close()
    return report


def _open(source: str) -> OpenedStore:
    """The source store, how to close it, and how the report names it: opened by the kind
    whose URLs have the source's scheme, or for a file by the file kind with a Store."""
    scheme = source.split("://", 1)[0].lower() if "://" in source else ""
    if scheme:
        kind = sources.by_scheme(scheme)
        if kind is None or kind.store is None:
            raise MigrationError(f"{redact(source)} is no Store threadloom can read")
        return kind.store(source)
    if not os.path.exists(source):
        raise MigrationError(f"no such file: {source!r}; give the SqliteStore file")
    try:
        identity = identify(source)
    except NotOurFileError as exc:
        raise MigrationError(str(exc)) from None
    if not identity.store:
        naas = identity.found is Found.NAAS_DOCUMENTS
        raise MigrationError(
            f"{source!r} is {identity.description}, which holds no LangGraph SqliteStore "
            "tables; give the Store's file or URL with --store-source"
            + (" (a naas document file has no Store)" if naas else "")
        )
    opens = sources.file_store().store
    assert opens is not None  # file_store() is a kind with a Store
    return opens(source)


def _pages(store: BaseStore, source: str) -> Iterator[list[Item]]:
    offset = 0
    while True:
        try:
            page = store.search((), limit=PAGE, offset=offset, refresh_ttl=False)
        except Exception as exc:  # the driver's errors: no store tables, a lost connection
            raise MigrationError(
                f"reading the Store at {redact(source)} failed ({scrub(str(exc), source)}); "
                "the target keeps every page copied before"
            ) from None
        if not page:
            return
        yield list(page)
        if len(page) < PAGE:
            return
        offset += len(page)


def _target(path: str, apply: bool, index: Any) -> Store | None:
    if apply:
        return Store(path, index=index)
    if os.path.exists(path):
        return Store(path, index=index, readonly=True)
    return None


def _held(store: Store | None, page: list[Item]) -> list[bool]:
    if store is None:
        return [False] * len(page)
    found = store.batch(
        [GetOp(tuple(item.namespace), item.key, refresh_ttl=False) for item in page]
    )
    return [hit is not None for hit in found]
