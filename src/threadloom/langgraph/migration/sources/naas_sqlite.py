"""The `naas-sqlite` source: the naas document service's SQLite file, one scope of it.

Adapter layer. The file is read through its documented format
(`engine/foreign/naas_file.py`): schema-2 documents as they are,
schema-1 checkpoints restored (SPEC §2.6, §5.3). `history_of` also serves the command
line's over-NATS path, which fetches the same documents from the service. Recognized by
`engine.format.identify` (`Found.NAAS_DOCUMENTS`); the file holds no Store.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from threadloom.engine.foreign import NaasDocumentsFile
from threadloom.engine.format import DESCRIPTIONS, Found
from threadloom.errors import MigrationError
from threadloom.langgraph.migration.sources.base import Source, SourceKind, ThreadHistory
from threadloom.protocol import CHECKPOINTS, CHECKPOINTS_V1, WRITES_V1, restore

if TYPE_CHECKING:
    from langgraph.checkpoint.serde.base import SerializerProtocol


class NaasSqliteSource(Source):
    """The LangGraph documents of one naas scope in its document service's SQLite file.

    Schema-2 documents are stored as they are (byte for byte the service's); a schema-1
    checkpoint (the whole checkpoint in one document, SPEC §2.6) is restored with its
    schema-1 writes and written as schema 2, unless the thread holds it in schema 2 too.
    """

    kind = "naas-sqlite"

    def __init__(
        self,
        path: str,
        namespace: str,
        agent_id: str,
        serde: SerializerProtocol | None = None,
    ) -> None:
        self.path = path
        self.namespace = namespace
        self.agent_id = agent_id
        self.file = NaasDocumentsFile(path)
        self.loads = (serde if serde is not None else _default_serde()).loads_typed

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "path": self.path,
            "namespace": self.namespace,
            "agent_id": self.agent_id,
        }

    def thread_ids(self) -> list[str]:
        found = self.file.thread_ids(self.namespace, self.agent_id)
        if found:
            return found
        others = self.file.scopes()
        if others:
            listed = ", ".join(
                f"{s.namespace} / {s.agent_id} ({s.threads} threads)" for s in others
            )
            raise MigrationError(
                f"{self.path!r} holds no checkpoints of namespace {self.namespace!r}, agent id "
                f"{self.agent_id!r}; it holds {listed}: give --namespace and --agent-id"
            )
        return []

    def histories(self, thread_ids: Sequence[str]) -> Iterator[ThreadHistory]:
        for thread_id, docs in self.file.threads(self.namespace, self.agent_id, thread_ids):
            yield history_of(
                thread_id, [(d.collection, d.data) for d in docs], self.path, loads=self.loads
            )

    def close(self) -> None:
        self.file.close()


def history_of(
    thread_id: str,
    docs: Sequence[tuple[str, dict[str, Any]]],
    where: str,
    *,
    loads: Any = None,
) -> ThreadHistory:
    """A thread's history from its documents, as the naas document service holds them.

    Schema-2 documents are kept as they are (`documents`); each schema-1 checkpoint that
    the thread does not also hold in schema 2 is restored with its schema-1 writes
    (`checkpoints`, oldest first) with `loads` (default: LangGraph's
    `JsonPlusSerializer().loads_typed`). `where` names the source in errors.

    Raises:
        MigrationError: a schema-1 document the serializer cannot load.
    """
    from threadloom.langgraph.tuples import checkpoint_tuple

    if loads is None:
        loads = _default_serde().loads_typed
    current = {(d["checkpoint_ns"], d["checkpoint_id"]) for c, d in docs if c == CHECKPOINTS}
    history = ThreadHistory(thread_id)
    legacy: list[dict[str, Any]] = []
    legacy_writes: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for collection, data in docs:
        if collection == CHECKPOINTS_V1:
            if (data["checkpoint_ns"], data["checkpoint_id"]) not in current:
                legacy.append(data)
        elif collection == WRITES_V1:
            key = (data["checkpoint_ns"], data["checkpoint_id"])
            legacy_writes.setdefault(key, []).append(data)
        else:
            history.documents.append((collection, data))
    for data in sorted(legacy, key=lambda d: d["checkpoint_id"]):
        writes = legacy_writes.get((data["checkpoint_ns"], data["checkpoint_id"]), [])
        try:
            restored = restore(data, writes, {}, loads)
        except Exception as exc:  # a document the serializer cannot load
            raise MigrationError(
                f"schema-1 checkpoint {data['checkpoint_id']!r} of thread {thread_id!r} "
                f"in {where} cannot be read ({exc})"
            ) from None
        history.checkpoints.append(checkpoint_tuple(restored))
    return history


def _default_serde() -> SerializerProtocol:
    """LangGraph's JsonPlusSerializer (imported when a source opens, not with the module)."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    return JsonPlusSerializer()


KIND = SourceKind(
    name=NaasSqliteSource.kind,
    wanted=DESCRIPTIONS[Found.NAAS_DOCUMENTS],
    opens=lambda path, options: NaasSqliteSource(
        path, options.namespace, options.agent_id, options.serde
    ),
    found=Found.NAAS_DOCUMENTS,
)
