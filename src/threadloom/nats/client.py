"""A namespace-bound client of the naas document service over NATS (SPEC §7).

Requests are the `abi.document.v1` protobuf messages of naas-abi-proto, sent with
nats-py request/reply on `abi.svc.document.v1.<op>` with the `Nats-Auth-Token` header;
a reply whose `error` is set raises the `DocumentServiceError` subclass of its code.

Limits: a request larger than the broker's `max_payload` is refused before it is sent
(`PayloadTooLargeError`; this client does not speak the overflow transfer protocol,
which checkpoint traffic never needs), and `find` asks for pages of at most a quarter
of `max_payload` (the server's own page budget), so no reply exceeds the limit.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import nats
import nats.errors
from nats.aio.client import Client as NatsConnection

from threadloom.errors import (
    CollectionNotFoundError,
    DocumentNotFoundError,
    DocumentServiceError,
    InvalidRequestError,
    PayloadTooLargeError,
    PermissionDeniedError,
    ServiceUnavailableError,
    UnauthenticatedError,
    VersionConflictError,
)
from threadloom.nats.auth import Credentials
from threadloom.protocol import MAX_PAGE

try:
    from naas_abi_proto.document.v1 import document_pb2 as pb
    from naas_abi_proto.document.values import decode_data, encode_data, encode_value
except ImportError as error:  # pragma: no cover - the `nats` extra is missing
    raise ImportError(
        "threadloom.nats needs the `nats` extra: pip install '.[nats]' in threadloom's clone"
    ) from error

SUBJECT = "abi.svc.document.v1."
#: Seconds a request waits for its reply.
TIMEOUT = 10.0
#: How long a request is retried while no service answers (the SDK's choice, SPEC §7.2).
NO_RESPONDERS_SECONDS = 5.0
#: Bytes a header block adds to a request at most (token, names, framing).
_HEADER_ALLOWANCE = 2048

_ERRORS: dict[str, type[DocumentServiceError]] = {
    "DOCUMENT_NOT_FOUND": DocumentNotFoundError,
    "COLLECTION_NOT_FOUND": CollectionNotFoundError,
    "VERSION_CONFLICT": VersionConflictError,
    "UNAUTHENTICATED": UnauthenticatedError,
    "PERMISSION_DENIED": PermissionDeniedError,
    "INVALID_ARGUMENT": InvalidRequestError,
    "PAYLOAD_TOO_LARGE": PayloadTooLargeError,
}


@dataclass(frozen=True)
class Document:
    """One stored document, as the service returns it."""

    id: str
    data: dict[str, Any]
    version: int
    created_at: datetime | None
    updated_at: datetime | None


Where = Sequence[tuple[str, str, Any]]


class DocumentClient:
    """The document service for one namespace, over one NATS connection.

    Build it with `await DocumentClient.connect(url, namespace, credentials)`; close it
    with `await client.close()` (or `async with`).

    Args:
        connection: an open nats-py connection (closed by `close` only if `owned`).
        namespace: the document namespace every request names.
        credentials: the token, or the secret and identity that sign one.
        timeout: seconds a request waits for its reply.
        owned: close the connection with the client.
    """

    def __init__(
        self,
        connection: NatsConnection,
        namespace: str,
        credentials: Credentials,
        *,
        timeout: float = TIMEOUT,
        owned: bool = False,
    ) -> None:
        if not isinstance(namespace, str) or not namespace or "\0" in namespace:
            raise InvalidRequestError(
                "INVALID_ARGUMENT", "the namespace must be a non-empty string without NUL"
            )
        self.connection = connection
        self.namespace = namespace
        self.credentials = credentials
        self.timeout = timeout
        self._owned = owned

    @classmethod
    async def connect(
        cls,
        url: str,
        namespace: str,
        credentials: Credentials,
        *,
        timeout: float = TIMEOUT,
    ) -> DocumentClient:
        """Connect to the broker at `url` and bind a client to `namespace`.

        Raises:
            ServiceUnavailableError: the broker cannot be reached.
        """

        async def quiet(_: Exception) -> None:
            # nats-py prints a traceback per failed attempt by default; the error raised
            # below says what happened.
            return None

        try:
            connection = await nats.connect(
                url,
                allow_reconnect=False,
                connect_timeout=timeout,
                max_reconnect_attempts=1,
                error_cb=quiet,
            )
        except (OSError, nats.errors.Error, asyncio.TimeoutError) as exc:
            raise ServiceUnavailableError(
                "UNAVAILABLE",
                f"cannot reach the NATS broker at {url} ({exc or type(exc).__name__}); check "
                "the URL and that the broker runs",
            ) from exc
        return cls(connection, namespace, credentials, timeout=timeout, owned=True)

    async def close(self) -> None:
        """Close the connection if this client opened it."""
        if self._owned and not self.connection.is_closed:
            await self.connection.drain()

    async def __aenter__(self) -> DocumentClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    @property
    def max_payload(self) -> int:
        """The broker's limit on one message (request or reply), in bytes."""
        return int(self.connection.max_payload)

    # -- operations ------------------------------------------------------------------------

    async def ensure_collection(
        self, name: str, fields: Sequence[str] = (), *, indexed: bool = True
    ) -> None:
        """Create `name` (idempotent), declaring `fields` as indexed strings."""
        spec = pb.CollectionSpec(
            name=name,
            fields=[pb.FieldSpec(name=f, type="string", indexed=indexed) for f in fields],
        )
        await self._call(
            "ensure_collection", pb.EnsureCollectionRequest(namespace=self.namespace, spec=spec)
        )

    async def collections(self) -> list[str]:
        """The collections of the namespace, sorted."""
        reply = await self._call("collections", pb.CollectionsRequest(namespace=self.namespace))
        return list(reply.collections)

    async def namespaces(self) -> list[str]:
        """Every namespace of the service (needs the `api` or `engine` identity)."""
        reply = await self._call("namespaces", pb.NamespacesRequest())
        return list(reply.namespaces)

    async def put(
        self,
        collection: str,
        id: str,
        data: Mapping[str, Any],
        *,
        if_version: int | None = None,
    ) -> Document:
        """Store a document: upsert, create-only (`if_version=0`) or compare-and-swap."""
        request = pb.PutRequest(
            namespace=self.namespace, collection=collection, id=id, data=encode_data(dict(data))
        )
        if if_version is not None:
            request.if_version = if_version
        reply = await self._call("put", request)
        return _document(reply.document)

    async def get(self, collection: str, id: str) -> Document:
        """Return a document.

        Raises:
            DocumentNotFoundError: no document has this id.
        """
        reply = await self._call(
            "get", pb.GetRequest(namespace=self.namespace, collection=collection, id=id)
        )
        return _document(reply.document)

    async def delete(self, collection: str, id: str, *, if_version: int | None = None) -> None:
        """Delete a document (a missing one is not an error unless `if_version` is set)."""
        request = pb.DeleteRequest(namespace=self.namespace, collection=collection, id=id)
        if if_version is not None:
            request.if_version = if_version
        await self._call("delete", request)

    async def count(self, collection: str, where: Where = ()) -> int:
        """How many documents match `where` (predicates ANDed)."""
        reply = await self._call(
            "count",
            pb.CountRequest(
                namespace=self.namespace, collection=collection, where=_predicates(where)
            ),
        )
        return int(reply.count)

    async def find_page(
        self,
        collection: str,
        where: Where = (),
        *,
        order_by: tuple[str, str] | None = None,
        limit: int | None = None,
        cursor: str | None = None,
        max_bytes: int | None = None,
    ) -> tuple[list[Document], str | None]:
        """One page of `find`: the documents and the cursor of the next page (None: end)."""
        budget = self.max_payload // 4
        request = pb.FindRequest(
            namespace=self.namespace,
            collection=collection,
            where=_predicates(where),
            max_bytes=min(max_bytes, budget) if max_bytes else budget,
        )
        if order_by is not None:
            request.order_by.CopyFrom(pb.OrderBy(field=order_by[0], direction=order_by[1]))
        if limit is not None:
            request.limit = limit
        if cursor is not None:
            request.cursor = cursor
        reply = await self._call("find", request)
        following = reply.cursor if reply.HasField("cursor") else None
        return [_document(item) for item in reply.items], following

    async def find(
        self,
        collection: str,
        where: Where = (),
        *,
        order_by: tuple[str, str] | None = None,
        max_bytes: int | None = None,
    ) -> AsyncIterator[Document]:
        """Every matching document, page after page until the cursor ends."""
        cursor: str | None = None
        while True:
            items, cursor = await self.find_page(
                collection,
                where,
                order_by=order_by,
                limit=MAX_PAGE,
                cursor=cursor,
                max_bytes=max_bytes,
            )
            for item in items:
                yield item
            if cursor is None:
                return

    # -- transport -------------------------------------------------------------------------

    async def _call(self, op: str, request: Any) -> Any:
        payload = request.SerializeToString()
        token = self.credentials.token()
        size = len(payload) + len(token) + _HEADER_ALLOWANCE
        if size > self.max_payload:
            raise PayloadTooLargeError(
                "PAYLOAD_TOO_LARGE",
                f"a {op} request of {len(payload)} bytes exceeds the broker's limit of "
                f"{self.max_payload} bytes; raise max_payload on the broker or send less",
            )
        subject = SUBJECT + op
        deadline = time.monotonic() + NO_RESPONDERS_SECONDS
        delay = 0.05
        while True:
            try:
                message = await self.connection.request(
                    subject, payload, timeout=self.timeout, headers={"Nats-Auth-Token": token}
                )
                break
            except nats.errors.NoRespondersError:
                if time.monotonic() + delay > deadline:
                    raise ServiceUnavailableError(
                        "UNAVAILABLE",
                        f"no document service answers on {subject}; start the service (or "
                        "`threadloom serve`) on this broker",
                    ) from None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)
            except nats.errors.TimeoutError:
                raise ServiceUnavailableError(
                    "DEADLINE_EXCEEDED",
                    f"the document service did not answer {op} within {self.timeout} s",
                ) from None
        headers = message.headers or {}
        if "Nats-Service-Error-Code" in headers or "Nats-Service-Error" in headers:
            code = headers.get("Nats-Service-Error-Code", "INTERNAL")
            raise DocumentServiceError(code, headers.get("Nats-Service-Error", code))
        reply = _REPLIES[op]()
        reply.ParseFromString(message.data)
        if reply.HasField("error") and reply.error.code:
            error = _ERRORS.get(reply.error.code, DocumentServiceError)
            raise error(reply.error.code, reply.error.message or reply.error.code)
        return reply


_REPLIES: dict[str, Any] = {
    "ensure_collection": pb.EnsureCollectionResponse,
    "collections": pb.CollectionsResponse,
    "namespaces": pb.NamespacesResponse,
    "put": pb.PutResponse,
    "get": pb.GetResponse,
    "delete": pb.DeleteResponse,
    "find": pb.FindResponse,
    "count": pb.CountResponse,
}


def _predicates(where: Where) -> list[Any]:
    return [pb.Predicate(field=f, operator=op, value=encode_value(v)) for f, op, v in where]


def _document(message: Any) -> Document:
    return Document(
        id=message.id,
        data=decode_data(message.data),
        version=int(message.version),
        created_at=_time(message.created_at),
        updated_at=_time(message.updated_at),
    )


def _time(text: str) -> datetime | None:
    return datetime.fromisoformat(text) if text else None
