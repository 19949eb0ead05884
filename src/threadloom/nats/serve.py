"""`threadloom serve`: a threadloom file as the naas document service, over NATS (SPEC §7).

It answers `abi.svc.document.v1.<op>` (queue group `q`) for the LangGraph collections of
the file, so that the naas SDK saver (and `threadloom export`/`import`) can use a
developer's file as the engine's memory. This module is the NATS front end only: the
subscription, the protobuf requests and replies, the authentication of §7.3, the grants
and the broker's payload limit. The operations themselves (and where they differ from
the engine's service, on purpose) are `threadloom.documents.service.FileDocuments`, which
the naas adapter (`threadloom.naas`) answers with too.

Replies larger than the broker limit are refused (PAYLOAD_TOO_LARGE); the overflow
transfer protocol is not spoken (checkpoint traffic never needs it).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any

import nats
import nats.errors
from nats.aio.client import Client as NatsConnection
from nats.aio.msg import Msg

from threadloom.documents import query
from threadloom.documents.service import FileDocuments, Limits
from threadloom.engine import File
from threadloom.engine.checkpoints import StoredDocument
from threadloom.errors import DocumentServiceError, ThreadloomError
from threadloom.nats.access import MAX_TOKEN_LIFETIME, PLATFORM, Grants, authenticate
from threadloom.nats.client import SUBJECT
from threadloom.nats.codes import NOT_GRANTED, NOT_PLATFORM

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


class FileDocumentService:
    """The document service of one threadloom file, over NATS.

    Args:
        file: the open file.
        secret: the JWT secret tokens must be signed with (the project's `nats.jwt_secret`).
        grants: which identities may use which namespaces (default: `Grants.platform()`).
        max_token_lifetime: most seconds between a token's `iat` and `exp`.
        limits: the memory bounds.

    Close it (`close`) before the file.
    """

    def __init__(
        self,
        file: File,
        secret: str,
        *,
        grants: Grants | None = None,
        max_token_lifetime: int = MAX_TOKEN_LIFETIME,
        limits: Limits | None = None,
    ) -> None:
        if not secret:
            raise DocumentServiceError("INVALID_ARGUMENT", "the JWT secret is empty")
        if max_token_lifetime <= 0:
            raise DocumentServiceError(
                "INVALID_ARGUMENT", "the maximum token lifetime must be positive"
            )
        self.secret = secret
        self.grants = grants if grants is not None else Grants.platform()
        self.max_token_lifetime = max_token_lifetime
        self.documents = FileDocuments(file, limits=limits)
        self.max_payload = 1024 * 1024
        self._subscriptions: list[Any] = []

    def close(self) -> None:
        """Release what the service holds of the file (before closing the file)."""
        self.documents.close()

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
                    raise DocumentServiceError(
                        "INVALID_ARGUMENT", f"bad {op} request: {exc}"
                    ) from None
                reply = await asyncio.to_thread(self.dispatch, op, request, identity)
                body = reply.SerializeToString()
                if len(body) + 512 > self.max_payload:
                    raise DocumentServiceError("PAYLOAD_TOO_LARGE")
                await connection.publish(message.reply, body)
            except DocumentServiceError as exc:
                await self._error(connection, message.reply, response_type, exc.code, exc.detail)
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
            DocumentServiceError: PERMISSION_DENIED outside the identity's grants, INVALID_ARGUMENT
                for a bad name or query, and the codes of each operation.
        """
        if op == "namespaces":
            if identity not in PLATFORM:
                raise DocumentServiceError("PERMISSION_DENIED", NOT_PLATFORM)
            if not self.grants.holds(identity):
                raise DocumentServiceError("PERMISSION_DENIED", NOT_GRANTED)
            found = [n for n in self.documents.namespaces() if self.grants.allows(identity, n)]
            return pb.NamespacesResponse(namespaces=found)
        self.documents.check_namespace(request.namespace)
        if not self.grants.allows(identity, request.namespace):
            raise DocumentServiceError("PERMISSION_DENIED", NOT_GRANTED)
        try:
            return getattr(self, "_" + op)(request.namespace, request)
        except query.QueryError as exc:
            raise DocumentServiceError("INVALID_ARGUMENT", str(exc)) from None

    def _ensure_collection(self, namespace: str, request: Any) -> Any:
        fields = [(spec.name, spec.type) for spec in request.spec.fields]
        self.documents.ensure_collection(namespace, request.spec.name, fields)
        return pb.EnsureCollectionResponse()

    def _drop_collection(self, namespace: str, request: Any) -> Any:
        self.documents.drop_collection(namespace, request.collection)
        return pb.DropCollectionResponse()  # pragma: no cover - always refused

    def _collections(self, namespace: str, request: Any) -> Any:
        return pb.CollectionsResponse(collections=self.documents.collections(namespace))

    def _collection_spec(self, namespace: str, request: Any) -> Any:
        names = self.documents.collection_fields(namespace, request.collection)
        fields = [pb.FieldSpec(name=f, type="string", indexed=True) for f in names]
        return pb.CollectionSpecResponse(
            spec=pb.CollectionSpec(name=request.collection, fields=fields)
        )

    def _put(self, namespace: str, request: Any) -> Any:
        try:
            data = decode_data(request.data)
        except ValueError as exc:
            raise DocumentServiceError("INVALID_ARGUMENT", str(exc)) from None
        stored = self.documents.put(
            namespace, request.collection, request.id, data, _version(request)
        )
        return pb.PutResponse(document=_document(stored))

    def _get(self, namespace: str, request: Any) -> Any:
        found = self.documents.get(namespace, request.collection, request.id)
        return pb.GetResponse(document=_document(found))

    def _delete(self, namespace: str, request: Any) -> Any:
        self.documents.delete(namespace, request.collection, request.id, _version(request))
        return pb.DeleteResponse()

    def _find(self, namespace: str, request: Any) -> Any:
        order = (
            query.ordering(request.order_by.field, request.order_by.direction)
            if request.HasField("order_by")
            else None
        )
        budget = self.max_payload // 4
        if request.HasField("max_bytes") and request.max_bytes > 0:
            budget = min(budget, request.max_bytes)
        items, cursor = self.documents.find(
            namespace,
            request.collection,
            _predicates(request.where),
            order,
            request.limit if request.HasField("limit") else None,
            request.cursor if request.HasField("cursor") else None,
            budget=budget,
        )
        response = pb.FindResponse(items=[_document(d) for d in items])
        if cursor is not None:
            response.cursor = cursor
        return response

    def _count(self, namespace: str, request: Any) -> Any:
        count = self.documents.count(namespace, request.collection, _predicates(request.where))
        return pb.CountResponse(count=count)


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
    """The decoded predicates of a request (SPEC §7.5 values)."""
    decoded = []
    for predicate in where:
        try:
            value = decode_value(predicate.value)
        except ValueError as exc:
            raise DocumentServiceError("INVALID_ARGUMENT", str(exc)) from None
        decoded.append((predicate.field, predicate.operator, value))
    return decoded


def _version(request: Any) -> int | None:
    """A request's `if_version`, None when unset."""
    return request.if_version if request.HasField("if_version") else None


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
    file = File.open(path)
    try:
        service = FileDocumentService(
            file,
            secret,
            grants=grants,
            max_token_lifetime=max_token_lifetime,
            limits=limits,
        )
    except BaseException:
        file.close()
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
        file.close()
