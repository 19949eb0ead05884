"""`threadloom serve`: a threadloom file as the naas document service, over NATS (SPEC §7).

It answers `abi.svc.document.v1.<op>` (queue group `q`) for the LangGraph collections of
the file, so that the naas SDK saver (and `threadloom export`/`import`) can use a
developer's file as the engine's memory: `ensure_collection`, `collections`,
`collection_spec`, `namespaces`, `put`, `get`, `delete`, `find` (every operator of
§7.7, `order_by`, `limit`, cursors, the page byte budget) and `count`, with the
authentication of §7.3, the versions of §7.8 and the error codes of §7.9.

Where it differs from the engine's service, on purpose (the file's invariants):

- only the five LangGraph schema-2 collections exist (`drop_collection` and other
  collections are INVALID_ARGUMENT; the schema-1 collections are COLLECTION_NOT_FOUND,
  which the savers read as empty);
- a document's id must be the key its fields define (SPEC §3.3);
- values and checkpoints are create-only: an upsert or compare-and-swap that would change
  one is INVALID_ARGUMENT (an identical one is accepted); pending writes are replaced and
  versioned as on the engine;
- replies larger than the broker limit are refused (PAYLOAD_TOO_LARGE); the overflow
  transfer protocol is not spoken (checkpoint traffic never needs it).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import nats
import nats.errors
from nats.aio.client import Client as NatsConnection
from nats.aio.msg import Msg

from threadloom.core.lru import Lru
from threadloom.engine.checkpoints import CheckpointStore, StoredDocument
from threadloom.engine.file import File
from threadloom.engine.scope import agent_ids, namespaces
from threadloom.errors import CheckpointConflictError, ThreadloomError
from threadloom.nats import query
from threadloom.nats.access import (
    MAX_NAMESPACE_BYTES,
    MAX_TOKEN_LIFETIME,
    PLATFORM,
    Grants,
    authenticate,
)
from threadloom.nats.client import SUBJECT
from threadloom.nats.codes import NOT_GRANTED, NOT_PLATFORM, ServiceError
from threadloom.nats.index import IdIndex
from threadloom.nats.transfer import COLLECTIONS
from threadloom.protocol import BLOBS, CHECKPOINTS, ITEMS, PARTS, WRITES
from threadloom.protocol.refs import key_of

try:
    from naas_abi_proto.document.v1 import document_pb2 as pb
    from naas_abi_proto.document.values import decode_data, decode_value, encode_data
except ImportError as error:  # pragma: no cover - the `nats` extra is missing
    raise ImportError("threadloom serve needs the `nats` extra") from error

OPS = (
    "ensure_collection",
    "drop_collection",
    "collections",
    "collection_spec",
    "put",
    "get",
    "delete",
    "find",
    "count",
    "namespaces",
)
_REQUESTS = {
    "ensure_collection": (pb.EnsureCollectionRequest, pb.EnsureCollectionResponse),
    "drop_collection": (pb.DropCollectionRequest, pb.DropCollectionResponse),
    "collections": (pb.CollectionsRequest, pb.CollectionsResponse),
    "collection_spec": (pb.CollectionSpecRequest, pb.CollectionSpecResponse),
    "put": (pb.PutRequest, pb.PutResponse),
    "get": (pb.GetRequest, pb.GetResponse),
    "delete": (pb.DeleteRequest, pb.DeleteResponse),
    "find": (pb.FindRequest, pb.FindResponse),
    "count": (pb.CountRequest, pb.CountResponse),
    "namespaces": (pb.NamespacesRequest, pb.NamespacesResponse),
}


@dataclass(frozen=True)
class Limits:
    """What bounds the service's memory whatever its callers send (docs/cli.md, serve)."""

    #: Longest namespace name, in UTF-8 bytes (longer: INVALID_ARGUMENT).
    namespace_bytes: int = MAX_NAMESPACE_BYTES
    #: Namespaces ensured but not yet holding a document, remembered at once (more:
    #: INVALID_ARGUMENT until documents go into them).
    empty_namespaces: int = 1024
    #: Scopes (namespace + agent id) held open at once (least recently used closed).
    stores: int = 64
    #: Document keys held in the id indexes of all namespaces (about 500 bytes each; the
    #: index in use is kept whatever its size).
    index_keys: int = 200_000


class FileDocumentService:
    """The document service of one threadloom file.

    Args:
        db: the open file.
        secret: the JWT secret tokens must be signed with (the project's `nats.jwt_secret`).
        grants: which identities may use which namespaces (default: `Grants.platform()`).
        max_token_lifetime: most seconds between a token's `iat` and `exp`.
        limits: the memory bounds.

    Close it (`close`) before the file.
    """

    def __init__(
        self,
        db: File,
        secret: str,
        *,
        grants: Grants | None = None,
        max_token_lifetime: int = MAX_TOKEN_LIFETIME,
        limits: Limits | None = None,
    ) -> None:
        if not secret:
            raise ServiceError("INVALID_ARGUMENT", "the JWT secret is empty")
        if max_token_lifetime <= 0:
            raise ServiceError("INVALID_ARGUMENT", "the maximum token lifetime must be positive")
        self.db = db
        self.secret = secret
        self.grants = grants if grants is not None else Grants.platform()
        self.max_token_lifetime = max_token_lifetime
        self.limits = limits or Limits()
        self.max_payload = 1024 * 1024
        self._stores: Lru[tuple[str, str], CheckpointStore] = Lru(self.limits.stores)
        #: Namespaces ensured before the file held a scope of them, oldest first.
        self._ensured: dict[str, None] = {}
        self.ids = IdIndex(db, self._store, self.limits.index_keys)
        self._lock = threading.RLock()
        self._subscriptions: list[Any] = []

    def close(self) -> None:
        """Release what the service holds of the file (before closing the file)."""
        with self._lock:
            self.ids.close()
            self._stores.clear()

    # -- NATS ------------------------------------------------------------------------------

    async def start(self, connection: NatsConnection) -> None:
        """Subscribe every operation on `connection` (queue group `q`)."""
        self.max_payload = int(connection.max_payload)
        for op in OPS:
            self._subscriptions.append(
                await connection.subscribe(
                    SUBJECT + op, queue="q", cb=self._handler(op, connection)
                )
            )

    async def stop(self) -> None:
        for subscription in self._subscriptions:
            with contextlib.suppress(nats.errors.Error):
                await subscription.unsubscribe()
        self._subscriptions = []

    def _handler(self, op: str, connection: NatsConnection) -> Callable[[Msg], Any]:
        request_type, response_type = _REQUESTS[op]

        async def handle(message: Msg) -> None:
            if not message.reply:
                return
            try:
                identity = authenticate(
                    (message.headers or {}).get("Nats-Auth-Token"),
                    self.secret,
                    self.max_token_lifetime,
                )
                request = request_type()
                try:
                    request.ParseFromString(message.data)
                except Exception as exc:  # protobuf's DecodeError
                    raise ServiceError("INVALID_ARGUMENT", f"bad {op} request: {exc}") from None
                reply = await asyncio.to_thread(self.dispatch, op, request, identity)
                body = reply.SerializeToString()
                if len(body) + 512 > self.max_payload:
                    raise ServiceError("PAYLOAD_TOO_LARGE")
                await connection.publish(message.reply, body)
            except ServiceError as exc:
                await self._error(connection, message.reply, response_type, exc.code, exc.message)
            except ThreadloomError:
                await self._error(
                    connection, message.reply, response_type, "STORAGE_ERROR", "STORAGE_ERROR"
                )
            except Exception:  # noqa: BLE001 - any other failure is INTERNAL, as on the engine
                await self._error(connection, message.reply, response_type, "INTERNAL", "INTERNAL")

        return handle

    @staticmethod
    async def _error(
        connection: NatsConnection, reply: str, response_type: Any, code: str, text: str
    ) -> None:
        response = response_type()
        response.error.code = code
        response.error.message = text
        response.error.retryable = False
        await connection.publish(
            reply, response.SerializeToString(), headers={"Abi-Error-Code": code}
        )

    # -- operations ------------------------------------------------------------------------

    def dispatch(self, op: str, request: Any, identity: str) -> Any:
        """Answer one decoded request of an authenticated `identity` (on a worker thread).

        Raises:
            ServiceError: PERMISSION_DENIED outside the identity's grants, INVALID_ARGUMENT
                for a bad name or query, and the codes of each operation.
        """
        if op == "namespaces":
            if identity not in PLATFORM:
                raise ServiceError("PERMISSION_DENIED", NOT_PLATFORM)
            if not self.grants.holds(identity):
                raise ServiceError("PERMISSION_DENIED", NOT_GRANTED)
            with self._lock:
                found = [n for n in self._namespaces() if self.grants.allows(identity, n)]
            return pb.NamespacesResponse(namespaces=found)
        namespace = request.namespace
        if not namespace or "\0" in namespace:
            raise ServiceError(
                "INVALID_ARGUMENT", "Names must be nonempty strings without NUL characters"
            )
        if len(namespace.encode()) > self.limits.namespace_bytes:
            raise ServiceError(
                "INVALID_ARGUMENT",
                f"namespace names are at most {self.limits.namespace_bytes} bytes (UTF-8)",
            )
        if not self.grants.allows(identity, namespace):
            raise ServiceError("PERMISSION_DENIED", NOT_GRANTED)
        with self._lock:
            try:
                return getattr(self, "_" + op)(namespace, request)
            except query.QueryError as exc:
                raise ServiceError("INVALID_ARGUMENT", str(exc)) from None

    def _ensure_collection(self, namespace: str, request: Any) -> Any:
        name = request.spec.name
        if name not in COLLECTIONS:
            raise ServiceError(
                "INVALID_ARGUMENT",
                f"threadloom serve holds only the LangGraph collections, not {name!r}",
            )
        for spec in request.spec.fields:
            if spec.type and spec.type != "string":
                raise ServiceError(
                    "INVALID_ARGUMENT", f"field {spec.name!r} of {name} is a string field"
                )
        if namespace not in self._ensured and not self._in_file(namespace):
            if len(self._ensured) >= self.limits.empty_namespaces:
                # Those that received documents meanwhile are the file's now.
                for held in [n for n in self._ensured if self._in_file(n)]:
                    del self._ensured[held]
            if len(self._ensured) >= self.limits.empty_namespaces:
                raise ServiceError(
                    "INVALID_ARGUMENT",
                    f"{self.limits.empty_namespaces} namespaces are ensured but hold no "
                    "document yet; put documents into them first (or restart the service)",
                )
            self._ensured[namespace] = None
        return pb.EnsureCollectionResponse()

    def _drop_collection(self, namespace: str, request: Any) -> Any:
        raise ServiceError(
            "INVALID_ARGUMENT",
            "threadloom serve does not drop collections; delete or prune threads instead",
        )

    def _collections(self, namespace: str, request: Any) -> Any:
        names = sorted(COLLECTIONS) if self._exists(namespace) else []
        return pb.CollectionsResponse(collections=names)

    def _collection_spec(self, namespace: str, request: Any) -> Any:
        self._collection(namespace, request.collection)
        fields = [
            pb.FieldSpec(name=f, type="string", indexed=True)
            for f in COLLECTIONS[request.collection]
        ]
        return pb.CollectionSpecResponse(
            spec=pb.CollectionSpec(name=request.collection, fields=fields)
        )

    def _put(self, namespace: str, request: Any) -> Any:
        collection = self._collection(namespace, request.collection)
        try:
            data = decode_data(request.data)
            key = key_of(collection, data)
        except (ValueError, ThreadloomError) as exc:
            raise ServiceError("INVALID_ARGUMENT", str(exc)) from None
        agent_id = data.get("agent_id")
        if not isinstance(agent_id, str) or not agent_id:
            raise ServiceError("INVALID_ARGUMENT", "a LangGraph document needs its agent_id")
        if request.id != key:
            raise ServiceError(
                "INVALID_ARGUMENT",
                f"document id {request.id!r} is not the key its fields define ({key}, SPEC §3.3)",
            )
        wanted = request.if_version if request.HasField("if_version") else None
        if wanted is not None and wanted < 0:
            raise ServiceError("INVALID_ARGUMENT", "if_version must not be negative")
        store = self._store(namespace, agent_id)
        existing = self._find_one(store, collection, data)
        if existing is None:
            if wanted:
                raise ServiceError("VERSION_CONFLICT")
            try:
                store.import_documents([(collection, data)])
            except CheckpointConflictError:
                raise ServiceError("VERSION_CONFLICT") from None
            self.ids.remember(namespace, key, agent_id, collection, data)
            # What was just stored, without reading it back.
            stored = StoredDocument(collection, key, data, time.time(), 1)
        else:
            if wanted == 0 or (wanted is not None and wanted != existing.version):
                raise ServiceError("VERSION_CONFLICT")
            if collection == WRITES:
                version = store.replace_write(data)
                stored = StoredDocument(collection, key, data, existing.created_at, version)
            elif existing.data != data:
                raise ServiceError(
                    "INVALID_ARGUMENT",
                    f"{collection} documents are create-only in a threadloom file; "
                    "this one exists with other content",
                )
            else:
                stored = existing
        return pb.PutResponse(document=_document(stored))

    def _get(self, namespace: str, request: Any) -> Any:
        self._collection(namespace, request.collection)
        found = self._by_id(namespace, request.collection, request.id)
        if found is None:
            raise ServiceError("DOCUMENT_NOT_FOUND")
        return pb.GetResponse(document=_document(found))

    def _delete(self, namespace: str, request: Any) -> Any:
        self._collection(namespace, request.collection)
        wanted = request.if_version if request.HasField("if_version") else None
        if wanted is not None and wanted < 0:
            raise ServiceError("INVALID_ARGUMENT", "if_version must not be negative")
        found = self._by_id(namespace, request.collection, request.id)
        if found is None:
            if wanted is not None:
                raise ServiceError("VERSION_CONFLICT")
            return pb.DeleteResponse()
        if wanted is not None and wanted != found.version:
            raise ServiceError("VERSION_CONFLICT")
        store = self._store(namespace, found.data["agent_id"])
        store.delete_document(request.collection, found.data)
        self.ids.forget(namespace, request.id)
        return pb.DeleteResponse()

    def _find(self, namespace: str, request: Any) -> Any:
        collection = self._collection(namespace, request.collection)
        where = _predicates(request.where)
        limit = query.page_size(request.limit if request.HasField("limit") else None)
        order = (
            query.ordering(request.order_by.field, request.order_by.direction)
            if request.HasField("order_by")
            else None
        )
        budget = self.max_payload // 4
        if request.HasField("max_bytes") and request.max_bytes > 0:
            budget = min(budget, request.max_bytes)
        items, cursor = query.page(
            self._matching(namespace, collection, where),
            order,
            limit=limit,
            budget=budget,
            bound=query.fingerprint(namespace, collection, where, order),
            cursor=request.cursor if request.HasField("cursor") else None,
        )
        response = pb.FindResponse(items=[_document(d) for d in items])
        if cursor is not None:
            response.cursor = cursor
        return response

    def _count(self, namespace: str, request: Any) -> Any:
        collection = self._collection(namespace, request.collection)
        found = self._matching(namespace, collection, _predicates(request.where))
        return pb.CountResponse(count=len(found))

    # -- the file --------------------------------------------------------------------------

    def _namespaces(self) -> list[str]:
        return sorted(set(namespaces(self.db)) | set(self._ensured))

    def _in_file(self, namespace: str) -> bool:
        return bool(agent_ids(self.db, namespace))

    def _exists(self, namespace: str) -> bool:
        return namespace in self._ensured or self._in_file(namespace)

    def _collection(self, namespace: str, name: str) -> str:
        if name not in COLLECTIONS or not self._exists(namespace):
            raise ServiceError("COLLECTION_NOT_FOUND")
        return name

    def _store(self, namespace: str, agent_id: str) -> CheckpointStore:
        store = self._stores.get((namespace, agent_id))
        if store is None:
            # The service never reads through the decoded-value cache: no cache.
            store = CheckpointStore(self.db, namespace=namespace, agent_id=agent_id, cache_bytes=0)
            self._stores.put((namespace, agent_id), store)
        return store

    def _agents(self, namespace: str) -> list[str]:
        return agent_ids(self.db, namespace)

    def _find_one(
        self, store: CheckpointStore, collection: str, data: Mapping[str, Any]
    ) -> StoredDocument | None:
        key = key_of(collection, data)
        if collection in (BLOBS, ITEMS, PARTS):
            found = store.find_documents(
                collection, thread_id=data["thread_id"], refs=[data["ref"]]
            )
        else:
            found = store.find_documents(
                collection,
                thread_id=data["thread_id"],
                checkpoint_ns=data["checkpoint_ns"],
                checkpoint_ids=[data["checkpoint_id"]],
            )
        return next((d for d in found if d.key == key), None)

    def _by_id(self, namespace: str, collection: str, id: str) -> StoredDocument | None:
        """The document `id` of the collection, found through the id index."""
        entry = self.ids.lookup(namespace, id)
        if entry is None or entry.collection != collection:
            return None
        found = self._find_one(
            self._store(namespace, entry.agent_id),
            collection,
            {"agent_id": entry.agent_id, **entry.fields},
        )
        if found is None:
            # Deleted since it was indexed (deletions do not move thread seqs).
            self.ids.forget(namespace, id)
        return found

    def _matching(
        self, namespace: str, collection: str, where: Sequence[tuple[str, str, Any]]
    ) -> list[StoredDocument]:
        """Documents of the collection matching every predicate (the file narrows first)."""
        narrow: dict[str, Any] = {}
        agents = self._agents(namespace)
        for field, op, value in where:
            if field == "agent_id" and op == "eq":
                agents = [a for a in agents if a == value]
            elif field == "thread_id" and op == "eq" and isinstance(value, str):
                narrow["thread_id"] = value
            elif collection in (WRITES, CHECKPOINTS):
                if field == "checkpoint_ns" and op == "eq" and isinstance(value, str):
                    narrow["checkpoint_ns"] = value
                elif field == "checkpoint_id" and op in ("eq", "in"):
                    ids = [value] if op == "eq" else value
                    if all(isinstance(v, str) for v in ids):
                        narrow["checkpoint_ids"] = ids
                elif field == "checkpoint_id" and op == "lt" and isinstance(value, str):
                    narrow["before"] = value
            elif field == "ref" and op in ("eq", "in"):
                refs = [value] if op == "eq" else value
                if all(isinstance(v, str) for v in refs):
                    narrow["refs"] = refs
        found: list[StoredDocument] = []
        for agent_id in agents:
            for item in self._store(namespace, agent_id).find_documents(collection, **narrow):
                if query.matches_all(item.data, where):
                    found.append(item)
        return found


# -- documents, predicates, ordering, cursors -----------------------------------------------


def _document(found: StoredDocument) -> Any:
    when = datetime.fromtimestamp(found.created_at, timezone.utc).isoformat()
    return pb.Document(
        id=found.key,
        data=encode_data(found.data),
        created_at=when,
        updated_at=when,
        version=found.version,
    )


def _predicates(where: Sequence[Any]) -> list[query.Predicate]:
    """The decoded predicates of a request (SPEC §7.5 values), checked."""
    decoded = []
    for predicate in where:
        try:
            value = decode_value(predicate.value)
        except ValueError as exc:
            raise ServiceError("INVALID_ARGUMENT", str(exc)) from None
        decoded.append((predicate.field, predicate.operator, value))
    return query.predicates(decoded)


async def serve(
    path: str,
    url: str,
    secret: str,
    *,
    grants: Grants | None = None,
    max_token_lifetime: int = MAX_TOKEN_LIFETIME,
    limits: Limits | None = None,
    ready: Callable[[], None] | None = None,
) -> None:
    """Serve the file at `path` on the broker at `url` until cancelled (SIGINT/SIGTERM).

    See `FileDocumentService` for `grants`, `max_token_lifetime` and `limits`.
    """
    database = File.open(path)
    try:
        service = FileDocumentService(
            database,
            secret,
            grants=grants,
            max_token_lifetime=max_token_lifetime,
            limits=limits,
        )
    except BaseException:
        database.close()
        raise
    connection = await nats.connect(url, allow_reconnect=True, max_reconnect_attempts=-1)
    try:
        await service.start(connection)
        if ready is not None:
            ready()
        await asyncio.Event().wait()
    finally:
        await service.stop()
        with contextlib.suppress(nats.errors.Error):
            await connection.drain()
        service.close()
        database.close()
