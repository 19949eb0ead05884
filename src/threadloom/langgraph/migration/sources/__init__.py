"""Migration sources: the registry of the kinds `threadloom.migrate` reads, one module each.

Adapter layer. `base.py` holds what every source offers the copier (`Source`,
`ThreadHistory`), how a kind declares itself (`SourceKind`) and the loop the LangGraph
savers share; each kind is one module that declares `KIND`:

- `sqlite.py`: a LangGraph SqliteSaver file (AsyncSqliteSaver writes the same file);
- `postgres.py`: a PostgresSaver database, given by its URL;
- `naas_sqlite.py`: the naas document service's SQLite file;
- `nats.py`: the document service over NATS, recognized here, read by the command line.

A kind added later is one module declaring its `KIND`, registered in `REGISTERED` below;
`threadloom.migrate` derives its `KINDS`, its recognition and its opening from it.
Importing this package loads no LangGraph (see `base.py`).
"""

from __future__ import annotations

from threadloom.engine.format import Found
from threadloom.langgraph.migration.sources import naas_sqlite, nats, postgres, sqlite
from threadloom.langgraph.migration.sources.base import (
    OpenedStore,
    Options,
    SaverSource,
    Source,
    SourceKind,
    TaskPaths,
    ThreadHistory,
    paths_if_same,
)
from threadloom.langgraph.migration.sources.naas_sqlite import NaasSqliteSource, history_of
from threadloom.langgraph.migration.sources.postgres import PostgresSaverSource
from threadloom.langgraph.migration.sources.sqlite import SqliteSaverSource

__all__ = [
    "KINDS",
    "REGISTERED",
    "NaasSqliteSource",
    "OpenedStore",
    "Options",
    "PostgresSaverSource",
    "SaverSource",
    "Source",
    "SourceKind",
    "SqliteSaverSource",
    "TaskPaths",
    "ThreadHistory",
    "by_found",
    "by_name",
    "by_scheme",
    "file_store",
    "history_of",
    "paths_if_same",
]

#: Every kind, in the order `--from` lists them (a kind added later registers here).
REGISTERED: tuple[SourceKind, ...] = (sqlite.KIND, postgres.KIND, naas_sqlite.KIND, nats.KIND)
#: The names of the kinds `threadloom.migrate` reads (the command line adds "nats").
KINDS: tuple[str, ...] = tuple(kind.name for kind in REGISTERED if not kind.by_cli)


def by_name(name: str | None) -> SourceKind | None:
    """The registered kind called `name` (None: none is)."""
    return next((kind for kind in REGISTERED if kind.name == name), None)


def by_scheme(scheme: str) -> SourceKind | None:
    """The kind whose URLs have `scheme` (case-insensitive; None: no kind's)."""
    return next((kind for kind in REGISTERED if scheme.lower() in kind.schemes), None)


def by_found(found: Found) -> SourceKind | None:
    """The kind whose files `engine.format.identify` names `found` (None: no kind's)."""
    return next((kind for kind in REGISTERED if kind.found is found), None)


def file_store() -> SourceKind:
    """The file kind that reads a file's LangGraph Store (its tables, `Identity.store`)."""
    return next(kind for kind in REGISTERED if kind.found is not None and kind.store)
