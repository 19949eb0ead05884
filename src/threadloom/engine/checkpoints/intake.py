"""Create-only imports of a scope's logical documents (engine layer).

`Documents.import_documents` (view.py) is this mixin's: the documents of one thread go
in in put order, one transaction per thread, values and pending writes already stored
kept, a checkpoint already stored required to be identical.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from threadloom.engine.checkpoints.scope import Scope
from threadloom.engine.checkpoints.writer import chunk_deltas, remember_bases, same_checkpoint
from threadloom.engine.content.deltas import blocks_column
from threadloom.engine.format import idkeys, refkeys
from threadloom.engine.format.tables import (
    CHECKPOINT_ROWS,
    DOCUMENT_FIELDS,
    INSERT_CHECKPOINT,
    INSERT_VALUE,
    INSERT_WRITE,
    TABLE_OF,
    VALS,
    WRITE_ROWS,
    BodyTable,
)
from threadloom.errors import ProtocolError


class ImportCount:
    """Documents `import_documents` stored, and those it found already stored."""

    def __init__(self) -> None:
        self.stored = 0
        self.present = 0


class Intake:
    """Imports into `self.scope` (a mixin of `Documents`)."""

    scope: Scope

    def import_documents(self, documents: Iterable[tuple[str, Mapping[str, Any]]]) -> ImportCount:
        """Store logical documents of this scope, create-only, one transaction per thread.

        `documents` are `(collection, data)` pairs as `documents()` yields them (without the
        key) or as the document service holds them, in put order (values before what
        references them). A value or pending write already stored is kept; a checkpoint
        already stored must be identical.

        Raises:
            ProtocolError: a document of another agent id (re-key it first) or malformed.
            CheckpointConflictError: a checkpoint id is stored with other content.
        """
        scope = self.scope
        threads: dict[str, list[tuple[str, Mapping[str, Any], dict[str, Any]]]] = {}
        for collection, data in documents:
            table = TABLE_OF.get(collection)
            if table is None:
                raise ProtocolError(f"{collection!r} is not a LangGraph document collection")
            if data.get("agent_id") != scope.agent_id:
                raise ProtocolError(
                    f"a document of agent id {data.get('agent_id')!r} cannot go into scope "
                    f"{scope.agent_id!r}: re-key it (export/import --agent-id) first"
                )
            thread_id = data.get("thread_id")
            if not isinstance(thread_id, str) or not thread_id:
                raise ProtocolError(f"a {collection} document has no thread_id")
            ref = data.get("ref")
            if table == "vals" and not (isinstance(ref, str) and ref):
                raise ProtocolError(f"a {collection} document needs a ref (text), not {ref!r}")
            body = {k: v for k, v in data.items() if k not in DOCUMENT_FIELDS[table]}
            threads.setdefault(thread_id, []).append((collection, data, body))
        count = ImportCount()
        for thread_id, docs in threads.items():
            scope.retrying(lambda: self._import(thread_id, docs, count), "import")  # noqa: B023
            scope.memory.forget(thread_id)
        return count

    def _import(
        self,
        thread_id: str,
        docs: Sequence[tuple[str, Mapping[str, Any], dict[str, Any]]],
        count: ImportCount,
    ) -> None:
        scope = self.scope
        content = scope.content
        planned = scope.planned()  # before the bases the deltas below are made against
        packs = content.pack_many(body for _, _, body in docs)
        # A list's chunk versions as deltas of one stored whole, as a put stores them.
        chunks = [i for i, (collection, _, _) in enumerate(docs) if TABLE_OF[collection] == "vals"]
        chosen = [packs[i] for i in chunks]
        bases = chunk_deltas(
            scope, thread_id, [(str(docs[i][1]["ref"]), docs[i][2]) for i in chunks], chosen
        )
        for i, packed in zip(chunks, chosen, strict=True):
            packs[i] = packed
        inserted: set[str] = set()
        stored = ImportCount()
        now = time.time()
        heads = False
        with scope.file.write() as conn:
            thread, seq, _ = scope.reserve(conn, thread_id, len(docs), now, packs, planned)
            for offset, ((collection, data, body), packed) in enumerate(
                zip(docs, packs, strict=True)
            ):
                table = TABLE_OF[collection]

                def common(described: BodyTable, *columns: Any) -> tuple[Any, ...]:
                    sealed = scope.seal(described, packed.digest, thread_id, *columns)  # noqa: B023
                    blocks = blocks_column(packed.body, len(packed.keys))  # noqa: B023
                    return (seq + offset, packed.body, sealed, now, blocks)  # noqa: B023

                if table == "vals":
                    ref = data["ref"]
                    conn.execute(INSERT_VALUE, (thread, refkeys.key(ref), *common(VALS, ref)))
                elif table == "checkpoints":
                    head = (
                        data["checkpoint_ns"],
                        data["checkpoint_id"],
                        data.get("parent_id"),
                        int(data["_schema"]),
                    )
                    conn.execute(
                        INSERT_CHECKPOINT,
                        (thread, *head, *common(CHECKPOINT_ROWS, *head, 0), 0),
                    )
                else:
                    columns = (
                        data["checkpoint_ns"],
                        data["checkpoint_id"],
                        data["task_id"],
                        data["index"],
                        data.get("task_path") or "",
                        data["channel"],
                        int(data["_schema"]),
                    )
                    stored_as = (*columns[:2], idkeys.key(columns[2]), *columns[3:])
                    conn.execute(INSERT_WRITE, (thread, *stored_as, *common(WRITE_ROWS, *columns)))
                if conn.changes():
                    stored.stored += 1
                    if table == "vals":
                        inserted.add(data["ref"])
                    content.link(conn, [packed], now)
                    heads |= table == "checkpoints" and data["checkpoint_ns"] == ""
                    continue
                stored.present += 1
                scope.unheld(conn, thread, [packed])
                if table == "checkpoints":
                    same_checkpoint(scope, conn, thread, data, body)
            if heads:
                scope.reindex(conn, thread, recount=False)
            due = content.note_inline(conn, packs)
        remember_bases(scope, bases, inserted)
        count.stored += stored.stored
        count.present += stored.present
        if due:
            content.train()
