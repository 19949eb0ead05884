"""A source reader: the LangGraph documents of a naas document service SQLite file.

Engine layer. The naas engine's document service keeps every document in one SQLite file
(`DocumentSecondaryAdapterSQLite`, `storage/documents.sqlite`, naas-abi-core 3.1.0): a
table `abi_documents(namespace, collection, id, data, created_at, updated_at, version)`
whose `data` is the document as canonical JSON (sorted keys, ASCII) with bytes and
datetimes tagged (`{"$t": "bytes", "$v": <base64>}`, `{"$t": "datetime", "$v": <ISO>}`)
and user keys that start with `$` escaped by another `$` (`document_codec.encode`). This
module reads that format and decodes it as the service's `document_codec.decode` does;
it never writes: the file is opened read-only, immutable when no `-wal` file exists, so
not even a side file appears.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple

import apsw

from threadloom.engine.format import look
from threadloom.errors import MigrationError
from threadloom.protocol import (
    BLOBS,
    CHECKPOINTS,
    CHECKPOINTS_V1,
    ITEMS,
    PARTS,
    WRITES,
    WRITES_V1,
)

#: The LangGraph collections a thread's documents live in (schema 2, then schema 1).
COLLECTIONS = (CHECKPOINTS, WRITES, BLOBS, ITEMS, PARTS, CHECKPOINTS_V1, WRITES_V1)
#: Collections that hold checkpoints (a thread exists where one of them has a document).
_CHECKPOINT_COLLECTIONS = (CHECKPOINTS, CHECKPOINTS_V1)
_INT64 = range(-(2**63), 2**63)


class NaasScope(NamedTuple):
    """A namespace and agent id of the file that hold checkpoints, and how many threads."""

    namespace: str
    agent_id: str
    threads: int


class NaasDocument(NamedTuple):
    """One document of the file: its collection and decoded data."""

    collection: str
    data: dict[str, Any]


def decode(value: Any) -> Any:
    """A stored JSON value as the document service returns it (`document_codec.decode`)."""
    if type(value) is int and value not in _INT64:
        return float(value)
    if isinstance(value, float) and value.is_integer():
        integer = int(Decimal(str(value)))
        if integer in _INT64 and integer != value:
            return integer
    if isinstance(value, dict):
        tag = value.get("$t")
        if tag == "datetime":
            return datetime.fromisoformat(value["$v"])
        if tag == "bytes":
            return base64.b64decode(value["$v"], validate=True)
        return {
            (key[1:] if key.startswith("$$") else key): decode(item) for key, item in value.items()
        }
    if isinstance(value, list):
        return [decode(item) for item in value]
    return value


def _numeric_order(left: str, right: str) -> int:
    """The service's `document_numeric` collation (`document_codec.compare_numeric_text`)."""
    a, b = Decimal(left), Decimal(right)
    return (a > b) - (a < b)


class NaasDocumentsFile:
    """A naas document service SQLite file, open read-only.

    Args:
        path: the file (recognised as one by `recognize.identify` first).

    Raises:
        MigrationError: the file cannot be opened or lacks the service's tables.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self._conn = look(path)
        except apsw.Error as exc:
            raise MigrationError(f"cannot open {path!r} ({exc}); check its permissions") from None
        try:
            # The service's indexes order numbers with its own collation; SQLite's check
            # needs it to read their definitions (the functions they call are not run).
            self._conn.create_collation("document_numeric", _numeric_order)
            checked = [str(row[0]) for row in self._conn.execute("PRAGMA quick_check")]
            if checked != ["ok"]:
                raise apsw.CorruptError("; ".join(checked[:3]))
            names = {
                str(row[0])
                for row in self._conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")
            }
        except apsw.Error as exc:
            self._conn.close()
            raise MigrationError(
                f"{path!r} cannot be read as a naas document file ({exc}); it was left "
                "untouched and nothing was copied: restore it from a backup"
            ) from None
        if "abi_documents" not in names:
            self._conn.close()
            raise MigrationError(
                f"{path!r} has no abi_documents table, so it is not a naas document service "
                "file; give the engine's storage/documents.sqlite"
            )

    def close(self) -> None:
        """Close the connection (idempotent)."""
        self._conn.close()

    def __enter__(self) -> NaasDocumentsFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def scopes(self) -> list[NaasScope]:
        """Every (namespace, agent id) whose checkpoint collections hold documents."""
        rows = self._rows(
            "SELECT namespace, json_extract(data, '$.agent_id') AS agent, "
            "count(DISTINCT json_extract(data, '$.thread_id')) FROM abi_documents "
            "WHERE collection IN (?, ?) GROUP BY namespace, agent ORDER BY namespace, agent",
            _CHECKPOINT_COLLECTIONS,
        )
        return [NaasScope(str(ns), str(agent), int(n)) for ns, agent, n in rows]

    def thread_ids(self, namespace: str, agent_id: str) -> list[str]:
        """The threads of a scope that hold checkpoints (schema 2 or 1), sorted."""
        rows = self._rows(
            "SELECT DISTINCT json_extract(data, '$.thread_id') AS thread FROM abi_documents "
            "WHERE namespace = ? AND collection IN (?, ?) "
            "AND json_extract(data, '$.agent_id') = ? ORDER BY thread",
            (namespace, *_CHECKPOINT_COLLECTIONS, agent_id),
        )
        return [str(row[0]) for row in rows if isinstance(row[0], str)]

    def threads(
        self, namespace: str, agent_id: str, thread_ids: Sequence[str] | None = None
    ) -> Iterator[tuple[str, list[NaasDocument]]]:
        """Yield `(thread_id, documents)` of a scope, one thread at a time, by thread id.

        One pass over the scope's LangGraph documents, sorted by thread by SQLite (which
        may spill to a temporary file, never to this one), so only one thread's documents
        are held at a time.
        """
        marks = ", ".join("?" * len(COLLECTIONS))
        sql = (
            "SELECT json_extract(data, '$.thread_id') AS thread, collection, data "
            f"FROM abi_documents WHERE namespace = ? AND collection IN ({marks}) "
            "AND json_extract(data, '$.agent_id') = ?"
        )
        args: list[Any] = [namespace, *COLLECTIONS, agent_id]
        if thread_ids is not None:
            sql += f" AND thread IN ({', '.join('?' * len(thread_ids))})"
            args.extend(thread_ids)
        current: str | None = None
        found: list[NaasDocument] = []
        try:
            for thread, collection, data in self._conn.execute(sql + " ORDER BY thread", args):
                if not isinstance(thread, str):
                    continue
                if thread != current:
                    if current is not None:
                        yield current, found
                    current, found = thread, []
                found.append(NaasDocument(str(collection), decode(json.loads(str(data)))))
        except (apsw.Error, ValueError) as exc:
            raise MigrationError(
                f"reading the naas document file {self.path!r} failed ({exc}); the target "
                "keeps every thread copied before this one"
            ) from None
        if current is not None:
            yield current, found

    def _rows(self, sql: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
        try:
            return [tuple(row) for row in self._conn.execute(sql, args)]
        except apsw.Error as exc:
            raise MigrationError(
                f"reading the naas document file {self.path!r} failed ({exc})"
            ) from None
