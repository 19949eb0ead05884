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
import base64
import contextlib
import hashlib
import hmac
import json
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import jwt
import nats
import nats.errors
from nats.aio.client import Client as NatsConnection
from nats.aio.msg import Msg

from threadloom.engine.checkpoints import CheckpointStore, StoredDocument
from threadloom.engine.file import File
from threadloom.engine.scope import agent_ids, namespaces
from threadloom.errors import CheckpointConflictError, ThreadloomError
from threadloom.nats.client import SUBJECT
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
FIRST_PARTY = frozenset({"api", "engine", "dagster"})
PLATFORM = frozenset({"api", "engine"})
OPERATORS = frozenset({"eq", "ne", "lt", "lte", "gt", "gte", "in", "nin", "contains", "exists"})
MAX_PAGE = 1000
DEFAULT_PAGE = 100
MAX_IN_VALUES = 500
#: Per-item overhead of the page budget estimate (the SQL backend's DOCUMENT_OVERHEAD).
ITEM_OVERHEAD = 64
UNAUTHENTICATED = "missing or invalid auth token"


class ServiceError(Exception):
    """An error reply: `code` and `message` go into the response's CallError."""

    def __init__(self, code: str, message: str | None = None) -> None:
        super().__init__(message or code)
        self.code = code
        self.message = message or code


def authenticate(token: str | None, secret: str) -> str:
    """Return the identity (`sub`) of a valid HS256 service or module token.

    Raises:
        ServiceError: UNAUTHENTICATED for anything else (SPEC §7.3).
    """
    if not token:
        raise ServiceError("UNAUTHENTICATED", UNAUTHENTICATED)
    try:
        header = jwt.get_unverified_header(token)
        key = secret
        if header.get("kid") == "module":
            claimed = jwt.decode(token, options={"verify_signature": False}).get("sub")
            if not isinstance(claimed, str) or not claimed or claimed in FIRST_PARTY:
                raise ServiceError("UNAUTHENTICATED", UNAUTHENTICATED)
            digest = hmac.new(
                secret.encode(), f"abi.module-key.v1:{claimed}".encode(), hashlib.sha256
            ).digest()
            key = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
        claims = jwt.decode(
            token,
            key,
            algorithms=["HS256"],
            options={"require": ["sub", "exp", "iat"], "verify_aud": False},
        )
    except jwt.PyJWTError:
        raise ServiceError("UNAUTHENTICATED", UNAUTHENTICATED) from None
    if "aud" in claims or not isinstance(claims.get("sub"), str) or not claims["sub"]:
        raise ServiceError("UNAUTHENTICATED", UNAUTHENTICATED)
    return str(claims["sub"])


class FileDocumentService:
    """The document service of one threadloom file.

    Args:
        db: the open file.
        secret: the JWT secret tokens must be signed with (the project's `nats.jwt_secret`).
    """

    def __init__(self, db: File, secret: str) -> None:
        if not secret:
            raise ServiceError("INVALID_ARGUMENT", "the JWT secret is empty")
        self.db = db
        self.secret = secret
        self.max_payload = 1024 * 1024
        self._stores: dict[tuple[str, str], CheckpointStore] = {}
        self._ensured: set[str] = set()
        self._keys: dict[str, dict[str, tuple[str, str, dict[str, Any]]]] = {}
        self._lock = threading.RLock()
        self._subscriptions: list[Any] = []

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
                identity = authenticate((message.headers or {}).get("Nats-Auth-Token"), self.secret)
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
        """Answer one decoded request (runs on a worker thread)."""
        if op == "namespaces":
            if identity not in PLATFORM:
                raise ServiceError(
                    "PERMISSION_DENIED", "namespaces needs a platform service identity"
                )
            return pb.NamespacesResponse(namespaces=self._namespaces())
        namespace = request.namespace
        if not namespace or "\0" in namespace:
            raise ServiceError(
                "INVALID_ARGUMENT", "Names must be nonempty strings without NUL characters"
            )
        with self._lock:
            return getattr(self, "_" + op)(namespace, request)

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
        self._ensured.add(namespace)
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
            self._remember(namespace, key, agent_id, collection, data)
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
        self._keys.get(namespace, {}).pop(request.id, None)
        return pb.DeleteResponse()

    def _find(self, namespace: str, request: Any) -> Any:
        collection = self._collection(namespace, request.collection)
        where = _predicates(request.where)
        limit = request.limit if request.HasField("limit") else DEFAULT_PAGE
        if not 1 <= limit <= MAX_PAGE:
            raise ServiceError(
                "INVALID_ARGUMENT", "Page size must be an integer between 1 and 1000"
            )
        order = (
            (request.order_by.field, request.order_by.direction or "asc")
            if request.HasField("order_by")
            else None
        )
        if order is not None and order[1] not in ("asc", "desc"):
            raise ServiceError("INVALID_ARGUMENT", "Order direction must be asc or desc")
        fingerprint = _fingerprint(namespace, collection, where, order)
        items = self._matching(namespace, collection, where)
        keyed = sorted(
            ((_order_key(d.data, order), d) for d in items),
            key=lambda pair: (pair[0], pair[1].key),
            reverse=order is not None and order[1] == "desc",
        )
        start = 0
        if request.HasField("cursor"):
            after = _read_cursor(request.cursor, fingerprint)
            start = next(
                (
                    i
                    for i, (k, d) in enumerate(keyed)
                    if _after((k, d.key), after, order is not None and order[1] == "desc")
                ),
                len(keyed),
            )
        budget = self.max_payload // 4
        if request.HasField("max_bytes") and request.max_bytes > 0:
            budget = min(budget, request.max_bytes)
        page: list[tuple[Any, StoredDocument]] = []
        used = 0
        for pair in keyed[start:]:
            size = _estimate(pair[1])
            if page and (len(page) >= limit or used + size > budget):
                break
            page.append(pair)
            used += size
        response = pb.FindResponse(items=[_document(d) for _, d in page])
        if start + len(page) < len(keyed):
            last_key, last = page[-1]
            response.cursor = _write_cursor((last_key, last.key), fingerprint)
        return response

    def _count(self, namespace: str, request: Any) -> Any:
        collection = self._collection(namespace, request.collection)
        found = self._matching(namespace, collection, _predicates(request.where))
        return pb.CountResponse(count=len(found))

    # -- the file --------------------------------------------------------------------------

    def _namespaces(self) -> list[str]:
        return sorted(set(namespaces(self.db)) | self._ensured)

    def _exists(self, namespace: str) -> bool:
        return namespace in self._ensured or namespace in self._namespaces()

    def _collection(self, namespace: str, name: str) -> str:
        if name not in COLLECTIONS or not self._exists(namespace):
            raise ServiceError("COLLECTION_NOT_FOUND")
        return name

    def _store(self, namespace: str, agent_id: str) -> CheckpointStore:
        store = self._stores.get((namespace, agent_id))
        if store is None:
            store = CheckpointStore(self.db, namespace=namespace, agent_id=agent_id)
            self._stores[(namespace, agent_id)] = store
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
        for attempt in range(2):
            index = self._keys.get(namespace)
            if index is None or attempt == 1:
                index = self._index(namespace)
            entry = index.get(id)
            if entry is not None:
                agent_id, where, fields = entry
                if where != collection:
                    return None
                found = self._find_one(
                    self._store(namespace, agent_id),
                    collection,
                    {"agent_id": agent_id, **fields},
                )
                if found is not None:
                    return found
        return None

    def _index(self, namespace: str) -> dict[str, tuple[str, str, dict[str, Any]]]:
        """Key -> (agent id, collection, fields) of the namespace, read from key columns."""
        index: dict[str, tuple[str, str, dict[str, Any]]] = {}
        for agent_id in self._agents(namespace):
            for key, (collection, fields) in self._store(namespace, agent_id).keys().items():
                index[key] = (agent_id, collection, fields)
        self._keys[namespace] = index
        return index

    def _remember(
        self, namespace: str, key: str, agent_id: str, collection: str, data: Mapping[str, Any]
    ) -> None:
        index = self._keys.get(namespace)
        if index is not None:
            names = ("thread_id", "ref", "checkpoint_ns", "checkpoint_id", "task_id", "index")
            fields = {k: data[k] for k in names if k in data}
            index[key] = (agent_id, collection, fields)

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
                if all(_matches(item.data, p) for p in where):
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


def _predicates(where: Sequence[Any]) -> list[tuple[str, str, Any]]:
    out = []
    for predicate in where:
        if predicate.operator not in OPERATORS:
            raise ServiceError(
                "INVALID_ARGUMENT", f"Unsupported predicate operator: {predicate.operator}"
            )
        try:
            value = decode_value(predicate.value)
        except ValueError as exc:
            raise ServiceError("INVALID_ARGUMENT", str(exc)) from None
        if predicate.operator in ("in", "nin") and (
            not isinstance(value, list) or len(value) > MAX_IN_VALUES
        ):
            raise ServiceError(
                "INVALID_ARGUMENT", f"{predicate.operator} needs a list of at most 500 values"
            )
        if predicate.operator == "exists" and not isinstance(value, bool):
            raise ServiceError("INVALID_ARGUMENT", "exists needs a boolean")
        out.append((predicate.field, predicate.operator, value))
    return out


_MISSING = object()


def _kind(value: Any) -> int:
    """Type rank of SPEC §7.7: null/missing < bool < number < string < datetime < bytes <
    array < object."""
    if value is None or value is _MISSING:
        return 0
    if isinstance(value, bool):
        return 1
    if isinstance(value, (int, float)):
        return 2
    if isinstance(value, str):
        return 3
    if isinstance(value, datetime):
        return 4
    if isinstance(value, bytes):
        return 5
    if isinstance(value, list):
        return 6
    return 7


def _same(a: Any, b: Any) -> bool:
    """Structural equality: 1 == 1.0, a bool is not a number."""
    if _kind(a) != _kind(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


def _matches(data: Mapping[str, Any], predicate: tuple[str, str, Any]) -> bool:
    field, op, value = predicate
    present = field in data
    found = data.get(field, _MISSING)
    if op == "exists":
        return present is value
    if op == "eq":
        return present and _same(found, value)
    if op == "ne":
        return present and not _same(found, value)
    if op == "in":
        return present and any(_same(found, v) for v in value)
    if op == "nin":
        return present and not any(_same(found, v) for v in value)
    if op == "contains":
        return isinstance(found, list) and any(_same(item, value) for item in found)
    if not present or found is None or value is None or _kind(found) != _kind(value):
        return False
    if _kind(found) not in (2, 3, 4, 5):
        return False
    left, right = _comparable(found), _comparable(value)
    return bool(
        {
            "lt": left < right,
            "lte": left <= right,
            "gt": left > right,
            "gte": left >= right,
        }[op]
    )


def _comparable(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode()  # binary (UTF-8 byte) order
    return value


def _order_key(data: Mapping[str, Any], order: tuple[str, str] | None) -> tuple[Any, ...]:
    if order is None:
        return ()
    value = data.get(order[0], _MISSING)
    kind = _kind(value)
    if kind == 1 or kind == 2:
        return (kind, float(value), "")
    if kind == 3:
        return (kind, 0.0, value.encode().hex())
    if kind == 4:
        return (kind, value.timestamp(), "")
    if kind == 5:
        return (kind, 0.0, value.hex())
    if kind in (6, 7):
        return (kind, 0.0, json.dumps(value, sort_keys=True, default=str))
    return (kind, 0.0, "")


def _after(position: tuple[Any, str], cursor: tuple[Any, str], descending: bool) -> bool:
    return position < cursor if descending else position > cursor


def _fingerprint(
    namespace: str, collection: str, where: Sequence[tuple[str, str, Any]], order: Any
) -> str:
    predicates = sorted(json.dumps([f, o, _json(v)], sort_keys=True) for f, o, v in where)
    text = json.dumps([namespace, collection, predicates, order], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _json(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"bytes": value.hex()}
    if isinstance(value, datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _write_cursor(position: tuple[Any, str], fingerprint: str) -> str:
    text = json.dumps({"key": [list(position[0]), position[1]], "q": fingerprint, "v": 1})
    return base64.urlsafe_b64encode(text.encode()).decode()


def _read_cursor(cursor: str, fingerprint: str) -> tuple[Any, str]:
    try:
        found = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        if found.get("q") != fingerprint or found.get("v") != 1:
            raise ValueError("foreign cursor")
        key, last = found["key"]
        return tuple(key), str(last)
    except (ValueError, KeyError, TypeError):
        raise ServiceError("INVALID_ARGUMENT", "Invalid cursor for this query") from None


def _estimate(found: StoredDocument) -> int:
    """The page budget's estimate: canonical JSON of the data (bytes as base64) + id + 64."""

    def plain(value: Any) -> Any:
        if isinstance(value, bytes):
            return base64.b64encode(value).decode()
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list):
            return [plain(v) for v in value]
        return value

    text = json.dumps(plain(found.data), sort_keys=True, separators=(",", ":"))
    return len(text) + len(found.key) + ITEM_OVERHEAD


async def serve(
    path: str, url: str, secret: str, *, ready: Callable[[], None] | None = None
) -> None:
    """Serve the file at `path` on the broker at `url` until cancelled (SIGINT/SIGTERM)."""
    database = File.open(path)
    service = FileDocumentService(database, secret)
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
        database.close()
