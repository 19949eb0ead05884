"""A naas document adapter: agent memory in a threadloom file, the rest in a fallback.

Outer layer (naas). naas loads it through `config.yaml` (docs/naas.md):

    services:
      document:
        document_adapter:
          adapter: custom
          python_module: threadloom.naas
          module_callable: DocumentAdapter
          custom_config:
            path: storage/memory.db

It satisfies naas's `IDocumentAdapter` and routes each call by collection:

- the LangGraph schema-2 collections (`langgraph_*_v2`, in any namespace) are the
  file's documents, answered by `threadloom.documents.FileDocuments` (the code behind
  `threadloom serve`): content-addressed, deduplicated, compressed, `verify`-able;
- the schema-1 collections answer as naas expects when they are absent (ensure is a
  no-op, reads raise `CollectionNotFound`, which naas's saver reads as no schema-1
  memory; writes are refused: schema 1 is never written);
- every other collection (job runs, module data, the activity log) goes to the fallback,
  a naas adapter built from `fallback` exactly as `document_adapter` builds one (default:
  naas's SQLite adapter on `storage/documents.sqlite`).

naas's semantics hold (`if_version` None = upsert, 0 = create-only, n > 0 = compare and
swap; `VersionConflict`, `DocumentNotFound`, `CollectionNotFound`, `ValueError` for a bad
query or document, `DocumentStorageError` for the storage), and calls may come from any
thread.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from threadloom.documents import FileDocuments, query
from threadloom.engine import File
from threadloom.engine.checkpoints import StoredDocument, agent_ids
from threadloom.errors import (
    DocumentServiceError,
    InvalidArgumentError,
    NaasMemoryWarning,
    ThreadloomError,
)
from threadloom.protocol import CHECKPOINTS, CHECKPOINTS_V1, COLLECTIONS
from threadloom.protocol.constants import LEGACY_COLLECTIONS

try:
    from naas_abi_core.engine.engine_configuration.EngineConfiguration_DocumentService import (
        DocumentAdapterConfiguration,
    )
    from naas_abi_core.services.document.DocumentPort import (
        CollectionNotFound,
        CollectionSpec,
        Document,
        DocumentNotFound,
        DocumentStorageError,
        FieldSpec,
        IDocumentAdapter,
        Page,
        VersionConflict,
    )
except ImportError as error:  # pragma: no cover - not in a naas project
    raise ImportError(
        "threadloom.naas runs inside a naas project: it needs naas-abi-core "
        "(pip install '/path/to/threadloom[naas]', the path of threadloom's clone)"
    ) from error

#: The fallback when `custom_config` names none: naas's own default document adapter.
DEFAULT_FALLBACK: Mapping[str, Any] = {
    "adapter": "sqlite",
    "config": {"path": "storage/documents.sqlite"},
}
#: Every collection a LangGraph saver reads (schema 2 in the file, schema 1 as absent).
_LANGGRAPH = frozenset(COLLECTIONS) | frozenset(LEGACY_COLLECTIONS)
#: A naas error code -> the exception naas's callers catch.
_RAISED: Mapping[str, type[Exception]] = {
    "VERSION_CONFLICT": VersionConflict,
    "DOCUMENT_NOT_FOUND": DocumentNotFound,
    "COLLECTION_NOT_FOUND": CollectionNotFound,
    "INVALID_ARGUMENT": ValueError,
}


class DocumentAdapter:
    """naas's `IDocumentAdapter` over a threadloom file, with a fallback for the rest.

    Args:
        path: the threadloom file (created if missing, its folder too); relative paths
            are relative to the working directory, as naas's own paths are.
        fallback: the adapter of every collection that is not LangGraph's, as naas's
            `document_adapter` block (`{adapter: sqlite, config: {path: ...}}`,
            `postgresql`, `nats_rpc`, or `custom`); None keeps only the LangGraph
            collections (any other is refused with `ValueError`).
        synchronous: SQLite `synchronous` level of the file, `NORMAL` or `FULL`.

    Raises:
        NotOurFileError: `path` holds another application's file (left untouched).
        ValueError: the fallback block is not one naas accepts.
        InvalidArgumentError: (a TypeError) the fallback is not a block (e.g. a path).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = "storage/memory.db",
        fallback: Mapping[str, Any] | None = DEFAULT_FALLBACK,
        synchronous: str = "NORMAL",
    ) -> None:
        self.path = Path(path)
        self.fallback: IDocumentAdapter | None = None
        if fallback is not None:
            if not isinstance(fallback, Mapping):
                raise InvalidArgumentError(
                    f"fallback must be a naas document adapter block (a dict), not "
                    f"{type(fallback).__name__} {fallback!r}; for a SQLite file give "
                    f"fallback={{'adapter': 'sqlite', 'config': {{'path': {str(fallback)!r}}}}}"
                )
            self.fallback = DocumentAdapterConfiguration.model_validate(dict(fallback)).load()
        self._closed = False
        self._close_lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = File.open(self.path, synchronous=synchronous)
        except BaseException:
            if self.fallback is not None:
                self.fallback.close()
            raise
        self.documents = FileDocuments(self._file)
        try:
            self._warn_about_unmoved_memory()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Close the file and the fallback (idempotent; later calls are invalid)."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        try:
            self.documents.close()
            self._file.close()
        finally:
            if self.fallback is not None:
                self.fallback.close()

    def _check_open(self) -> None:
        if self._closed:
            raise DocumentStorageError(f"the threadloom document adapter on {self.path} is closed")

    # -- collections -----------------------------------------------------------------------

    def ensure_collection(self, namespace: str, spec: CollectionSpec) -> None:
        self._check_open()
        if spec.name in LEGACY_COLLECTIONS:
            return  # read as absent: schema 1 is never written here
        if spec.name not in COLLECTIONS:
            self._other(spec.name).ensure_collection(namespace, spec)
            return
        if spec.unique_together or any(f.unique for f in spec.fields):
            raise ValueError(
                f"{spec.name} takes no uniqueness constraints: its document ids are the "
                "keys its fields define (SPEC §3.3)"
            )
        with _answers():
            self.documents.ensure_collection(
                namespace, spec.name, [(f.name, f.type) for f in spec.fields]
            )

    def drop_collection(self, namespace: str, collection: str) -> None:
        self._check_open()
        if collection in COLLECTIONS or collection in LEGACY_COLLECTIONS:
            raise ValueError(
                f"{collection} is agent memory in {self.path}: delete or prune threads "
                "(threadloom delete, threadloom prune) instead of dropping it"
            )
        self._other(collection).drop_collection(namespace, collection)

    def collections(self, namespace: str) -> list[str]:
        self._check_open()
        found: set[str] = set()
        if self.fallback is not None:  # what it holds of LangGraph's is not read
            found = set(self.fallback.collections(namespace)) - _LANGGRAPH
        try:
            with _answers():
                found |= set(self.documents.collections(namespace))
        except ValueError:
            pass  # a name the file takes no document under
        return sorted(found)

    def collection_spec(self, namespace: str, collection: str) -> CollectionSpec:
        self._check_open()
        if collection in LEGACY_COLLECTIONS:
            raise CollectionNotFound(collection)
        if collection not in COLLECTIONS:
            return self._other(collection).collection_spec(namespace, collection)
        with _answers():
            names = self.documents.collection_fields(namespace, collection)
        fields = tuple(FieldSpec(name=n, type="string", indexed=True) for n in names)
        return CollectionSpec(name=collection, fields=fields)

    def namespaces(self) -> list[str]:
        self._check_open()
        with _answers():
            found = set(self.documents.namespaces())
        if self.fallback is not None:
            found |= set(self.fallback.namespaces())
        return sorted(found)

    # -- documents -------------------------------------------------------------------------

    def put(
        self,
        namespace: str,
        collection: str,
        id: str,
        data: dict[str, Any],
        if_version: int | None,
    ) -> Document:
        self._check_open()
        if collection in LEGACY_COLLECTIONS:
            raise ValueError(
                f"{collection} is schema 1, which threadloom reads as absent and never "
                "writes; move old memory in with `threadloom migrate <documents.sqlite> --db FILE`"
            )
        if collection not in COLLECTIONS:
            return self._other(collection).put(namespace, collection, id, data, if_version)
        with _answers():
            return _document(self.documents.put(namespace, collection, id, data, if_version))

    def get(self, namespace: str, collection: str, id: str) -> Document:
        self._check_open()
        if collection in LEGACY_COLLECTIONS:
            raise CollectionNotFound(collection)
        if collection not in COLLECTIONS:
            return self._other(collection).get(namespace, collection, id)
        with _answers():
            return _document(self.documents.get(namespace, collection, id))

    def delete(self, namespace: str, collection: str, id: str, if_version: int | None) -> None:
        self._check_open()
        if collection in LEGACY_COLLECTIONS:
            raise CollectionNotFound(collection)
        if collection not in COLLECTIONS:
            self._other(collection).delete(namespace, collection, id, if_version)
            return
        with _answers():
            self.documents.delete(namespace, collection, id, if_version)

    def find(
        self,
        namespace: str,
        collection: str,
        where: Sequence[tuple[str, str, Any]],
        order_by: tuple[str, str] | None,
        limit: int,
        cursor: str | None,
        *,
        max_bytes: int | None = None,
    ) -> Page:
        self._check_open()
        if collection in LEGACY_COLLECTIONS:
            raise CollectionNotFound(collection)
        if collection not in COLLECTIONS:
            return self._other(collection).find(
                namespace, collection, where, order_by, limit, cursor, max_bytes=max_bytes
            )
        with _answers():
            order = None if order_by is None else query.ordering(*order_by)
            items, following = self.documents.find(
                namespace, collection, where, order, limit, cursor, budget=max_bytes
            )
        return Page(items=[_document(d) for d in items], cursor=following)

    def count(self, namespace: str, collection: str, where: Sequence[tuple[str, str, Any]]) -> int:
        self._check_open()
        if collection in LEGACY_COLLECTIONS:
            raise CollectionNotFound(collection)
        if collection not in COLLECTIONS:
            return int(self._other(collection).count(namespace, collection, where))
        with _answers():
            return self.documents.count(namespace, collection, where)

    # -- routing ---------------------------------------------------------------------------

    def _other(self, collection: str) -> IDocumentAdapter:
        """The fallback, for a collection that is not LangGraph's."""
        if self.fallback is None:
            raise ValueError(
                f"{collection} is not a LangGraph collection and this adapter has no "
                "fallback; set custom_config.fallback (docs/naas.md)"
            )
        return self.fallback

    def _warn_about_unmoved_memory(self) -> None:
        """Say so when the fallback holds agent memory of a scope the file never held.

        A scope (namespace, agent id) with a checkpoint in the fallback (schema 2 or 1)
        that the file has no scope of: memory written before the switch, that nothing
        reads now. One document per collection and namespace is read (in naas's id
        order), and a scope the file holds is never named, so what was deleted or pruned
        there since the move is not brought back. Advisory: a fallback that cannot
        answer yet is not checked.
        """
        if self.fallback is None:
            return
        try:
            unmoved = sorted(self._unmoved())
        except Exception:  # noqa: BLE001 - advisory only; the adapter works without it
            return
        if unmoved:
            commands = "; ".join(
                f"`threadloom migrate <documents.sqlite> --db {self.path} --namespace "
                f"{namespace} --agent-id {agent_id} --apply`"
                for namespace, agent_id in unmoved
            )
            warnings.warn(
                "the fallback document store holds agent memory that "
                f"{self.path} has none of ({len(unmoved)} scope(s)); move it in with "
                f"{commands} (docs/naas.md)",
                NaasMemoryWarning,
                stacklevel=3,
            )

    def _unmoved(self) -> set[tuple[str, str]]:
        """Scopes with a checkpoint in the fallback and none in the file."""
        assert self.fallback is not None
        found: set[tuple[str, str]] = set()
        for namespace in self.fallback.namespaces():
            try:
                self.documents.check_namespace(namespace)
            except DocumentServiceError:
                continue  # a name the file takes no document under
            held = set(self.fallback.collections(namespace))
            for collection in (CHECKPOINTS, CHECKPOINTS_V1):
                if collection not in held:
                    continue
                page = self.fallback.find(namespace, collection, [], None, 1, None)
                agent_id = page.items[0].data.get("agent_id") if page.items else None
                if isinstance(agent_id, str) and agent_id not in agent_ids(self._file, namespace):
                    found.add((namespace, agent_id))
        return found


def _document(found: StoredDocument) -> Document:
    when = datetime.fromtimestamp(found.created_at, timezone.utc)
    return Document(
        id=found.key, data=found.data, created_at=when, updated_at=when, version=found.version
    )


@contextmanager
def _answers() -> Iterator[None]:
    """Raise what naas's callers catch for the operations' refusals and storage errors."""
    try:
        yield
    except DocumentServiceError as exc:
        raised = _RAISED.get(exc.code)
        if raised is None:
            raise DocumentStorageError(exc.detail) from None
        raise raised(exc.detail) from None
    except query.QueryError as exc:
        raise ValueError(str(exc)) from None
    except ThreadloomError as exc:
        raise DocumentStorageError(f"threadloom file: {exc}") from exc
