"""threadloom.nats.DocumentClient against naas-abi-core's real document service (SPEC §7).

Every expectation here is a behaviour of the real service (its codes, paging and
versions); the client must map each one to the error the docs promise.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from tests.nats._peers import RunningDocumentService
from threadloom.errors import (
    CollectionNotFoundError,
    DocumentNotFoundError,
    InvalidArgumentError,
    InvalidRequestError,
    PayloadTooLargeError,
    PermissionDeniedError,
    ServiceUnavailableError,
    UnauthenticatedError,
    VersionConflictError,
)
from threadloom.nats import Credentials, DocumentClient, issue_token

T = TypeVar("T")


def run(
    service: RunningDocumentService,
    namespace: str,
    body: Callable[[DocumentClient], Awaitable[T]],
    credentials: Credentials | None = None,
) -> T:
    async def main() -> T:
        creds = credentials or Credentials(secret=service.jwt_secret)
        async with await DocumentClient.connect(service.url, namespace, creds) as client:
            return await body(client)

    return asyncio.run(main())


def test_put_get_find_count_delete(
    document_service: RunningDocumentService, document_namespace: str
) -> None:
    """The operations the savers use, with the versions of SPEC §7.8."""

    async def body(client: DocumentClient) -> dict[str, Any]:
        await client.ensure_collection("notes", ["thread_id", "ref"])
        await client.ensure_collection("notes", ["thread_id", "ref"])  # idempotent
        first = await client.put("notes", "a", {"thread_id": "t", "n": 1, "raw": b"\x00\xff"})
        again = await client.put("notes", "a", {"thread_id": "t", "n": 2, "raw": b""})
        with pytest.raises(VersionConflictError):
            await client.put("notes", "a", {"thread_id": "t"}, if_version=0)
        with pytest.raises(VersionConflictError):
            await client.put("notes", "a", {"thread_id": "t"}, if_version=1)
        for i in range(40):
            await client.put(
                "notes", f"n{i:02d}", {"thread_id": "u", "ref": f"r{i:02d}"}, if_version=0
            )
        small_pages = [
            d async for d in client.find("notes", [("thread_id", "eq", "u")], max_bytes=200)
        ]
        some = [
            d.id
            async for d in client.find(
                "notes", [("ref", "in", ["r01", "r07", "zz"])], order_by=("ref", "desc")
            )
        ]
        counted = await client.count("notes", [("thread_id", "eq", "u")])
        got = await client.get("notes", "a")
        await client.delete("notes", "a")
        await client.delete("notes", "a")  # idempotent
        with pytest.raises(DocumentNotFoundError):
            await client.get("notes", "a")
        with pytest.raises(VersionConflictError):
            await client.delete("notes", "n00", if_version=7)
        with pytest.raises(CollectionNotFoundError):
            await client.get("absent", "x")
        with pytest.raises(InvalidRequestError, match="Page size"):
            await client.find_page("notes", limit=0)
        return {
            "versions": (first.version, again.version, got.version),
            "data": got.data,
            "pages": [d.id for d in small_pages],
            "some": some,
            "count": counted,
            "collections": await client.collections(),
            "created": got.created_at,
        }

    out = run(document_service, document_namespace, body)
    assert out["versions"] == (1, 2, 2)
    assert out["data"] == {"thread_id": "t", "n": 2, "raw": b""}
    assert out["pages"] == [f"n{i:02d}" for i in range(40)]
    assert out["some"] == ["n07", "n01"]
    assert out["count"] == 40
    assert out["collections"] == ["notes"]
    assert out["created"] is not None and out["created"].utcoffset() is not None


def test_a_find_with_a_tiny_budget_pages_one_item_at_a_time(
    document_service: RunningDocumentService, document_namespace: str
) -> None:
    """max_bytes=1 gives one item per page and a cursor; the loop still sees every item."""

    async def body(client: DocumentClient) -> tuple[int, int]:
        await client.ensure_collection("pages", ["thread_id"])
        for i in range(5):
            await client.put("pages", f"p{i}", {"thread_id": "t"})
        items, cursor = await client.find_page("pages", max_bytes=1)
        every = [d async for d in client.find("pages", max_bytes=1)]
        return len(items), len(every) if cursor else -1

    assert run(document_service, document_namespace, body) == (1, 5)


def test_authentication_and_permissions(
    document_service: RunningDocumentService, document_namespace: str
) -> None:
    """A token of another secret is UNAUTHENTICATED; `namespaces` needs a platform
    identity; a fixed token works like a secret; bad credentials are refused locally."""

    async def namespaces(client: DocumentClient) -> list[str]:
        await client.ensure_collection("x")
        return await client.namespaces()

    assert document_namespace in run(document_service, document_namespace, namespaces)
    token = issue_token(document_service.jwt_secret, "api")
    assert document_namespace in run(
        document_service, document_namespace, namespaces, Credentials(token=token)
    )
    with pytest.raises(UnauthenticatedError, match="missing or invalid auth token"):
        run(document_service, document_namespace, namespaces, Credentials(secret="wrong"))
    with pytest.raises(PermissionDeniedError):
        run(
            document_service,
            document_namespace,
            lambda c: c.namespaces(),
            Credentials(secret=document_service.jwt_secret, identity="some-module"),
        )
    with pytest.raises(InvalidArgumentError):
        Credentials()
    with pytest.raises(InvalidArgumentError):
        Credentials(token="t", secret="s")


def test_requests_above_the_broker_limit_are_refused_before_sending(
    document_service: RunningDocumentService, document_namespace: str
) -> None:
    """A 9 MiB document cannot go through an 8 MiB broker: refused with a clear error."""

    async def body(client: DocumentClient) -> int:
        await client.ensure_collection("big")
        with pytest.raises(PayloadTooLargeError, match="exceeds the broker's limit"):
            await client.put("big", "x", {"payload": b"\0" * (9 * 1024 * 1024)})
        return client.max_payload

    assert run(document_service, document_namespace, body) == 8 * 1024 * 1024


def test_no_broker_and_no_service_are_named(nats_server: str, document_namespace: str) -> None:
    """An unreachable broker and a broker without the service raise ServiceUnavailableError."""

    async def unreachable() -> None:
        await DocumentClient.connect(
            "nats://127.0.0.1:9", document_namespace, Credentials(token="t")
        )

    with pytest.raises(ServiceUnavailableError, match="cannot reach"):
        asyncio.run(unreachable())

    async def silent() -> None:
        # A subject no service answers: the client retries for NO_RESPONDERS_SECONDS.
        async with await DocumentClient.connect(
            nats_server, document_namespace, Credentials(token="t")
        ) as client:
            await client._call("no_such_operation", _Empty())

    with pytest.raises(ServiceUnavailableError, match="no document service answers"):
        asyncio.run(silent())


class _Empty:
    def SerializeToString(self) -> bytes:  # noqa: N802 - protobuf's name
        return b""
