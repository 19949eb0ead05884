"""Who may use `threadloom serve`: grants of namespaces per identity, token lifetimes."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import jwt
import pytest

from tests.nats._service import SECRET, blob, call
from threadloom.engine.file import File
from threadloom.errors import DocumentServiceError, InvalidArgumentError
from threadloom.nats import issue_token
from threadloom.nats.access import MAX_TOKEN_LIFETIME, Grants, authenticate
from threadloom.nats.serve import FileDocumentService
from threadloom.protocol import BLOBS
from threadloom.protocol.refs import key_of


def service(db: File, *specs: str) -> FileDocumentService:
    return FileDocumentService(db, SECRET, grants=Grants.parse(specs) if specs else None)


#: One valid request per operation, in the namespace the test names.
OPERATIONS: dict[str, dict[str, Any]] = {
    "ensure_collection": {},
    "drop_collection": {"collection": BLOBS},
    "collections": {},
    "collection_spec": {"collection": BLOBS},
    "put": {"collection": BLOBS, "id": key_of(BLOBS, blob("t", 7)), "data": blob("t", 7)},
    "get": {"collection": BLOBS, "id": key_of(BLOBS, blob("t", 1))},
    "delete": {"collection": BLOBS, "id": key_of(BLOBS, blob("t", 1))},
    "find": {"collection": BLOBS, "where": [("thread_id", "eq", "t")]},
    "count": {"collection": BLOBS},
}


@pytest.mark.parametrize("op", sorted(OPERATIONS))
def test_every_operation_outside_the_grant_is_permission_denied(db: File, op: str) -> None:
    """Identity b, granted ns-b, cannot touch a document of ns-a (nor learn whether it
    exists); in ns-b the same request is answered."""
    served = service(db, "a=ns-a", "b=ns-b")
    for ns in ("ns-a", "ns-b"):
        call(served, "ensure_collection", identity=ns[-1], ns=ns)
        put_blob_as(served, ns[-1], ns, blob("t", 1))
    with pytest.raises(DocumentServiceError) as refused:
        call(served, op, identity="b", ns="ns-a", **OPERATIONS[op])
    assert refused.value.code == "PERMISSION_DENIED"
    with pytest.raises(DocumentServiceError) as unknown:
        call(served, op, identity="b", ns="ns-nowhere", **OPERATIONS[op])
    assert unknown.value.code == "PERMISSION_DENIED"
    try:
        call(served, op, identity="b", ns="ns-b", **OPERATIONS[op])
    except DocumentServiceError as exc:
        assert op == "drop_collection" and exc.code == "INVALID_ARGUMENT"
    # a's document is still there, unchanged
    got = call(served, "get", identity="a", ns="ns-a", **OPERATIONS["get"])
    assert got.document.id == key_of(BLOBS, blob("t", 1))
    served.close()


def put_blob_as(served: FileDocumentService, identity: str, ns: str, data: dict[str, Any]) -> None:
    call(
        served, "put", identity=identity, ns=ns, collection=BLOBS, id=key_of(BLOBS, data), data=data
    )


def test_namespaces_lists_only_granted_ones(db: File) -> None:
    """`namespaces` keeps the engine's platform rule, then lists only the namespaces the
    caller is granted; a platform identity without grants is refused."""
    served = service(db, "api=team-*,solo", "m=*")
    for ns in ("team-1", "team-2", "solo", "other"):
        call(served, "ensure_collection", identity="m", ns=ns)
    assert list(call(served, "namespaces").namespaces) == ["solo", "team-1", "team-2"]
    for identity in ("m", "engine"):
        with pytest.raises(DocumentServiceError) as refused:
            call(served, "namespaces", identity=identity)
        assert refused.value.code == "PERMISSION_DENIED"
    served.close()


def test_without_grants_only_the_engines_identities_are_served(db: File) -> None:
    """The default: api, engine and dagster on every namespace, a module on none;
    `*=*` restores serving every authenticated identity, as it must be asked for."""
    default = service(db)
    for identity in ("api", "engine", "dagster"):
        call(default, "ensure_collection", identity=identity, ns=f"ns-{identity}")
    with pytest.raises(DocumentServiceError) as refused:
        call(default, "ensure_collection", identity="a-module", ns="ns")
    assert refused.value.code == "PERMISSION_DENIED"
    default.close()
    everyone = service(db, "*=*")
    call(everyone, "ensure_collection", identity="a-module", ns="anything")
    everyone.close()


def test_grants_are_parsed_strictly() -> None:
    """Exact names, trailing-* prefixes, `*` identities, repeated identities merge; a `*`
    inside a name, an empty side or a name above the limit is refused."""
    grants = Grants.parse(["a=x,team-*", "a=y", "*=shared"])
    assert grants.allows("a", "x") and grants.allows("a", "y") and grants.allows("a", "team-")
    assert grants.allows("a", "team-9") and not grants.allows("a", "team")
    assert grants.allows("z", "shared") and not grants.allows("z", "x")
    assert grants.holds("z") and not Grants.parse(["a=x"]).holds("z")
    assert grants.describe() == ["*=shared", "a=x,y,team-*"]
    for bad in ["a", "=x", "a=", "a=x,,y", "a=te*m", "a=" + "n" * 256]:
        with pytest.raises(InvalidArgumentError):
            Grants.parse([bad])


def test_a_grants_file_holds_one_grant_a_line(tmp_path: Path) -> None:
    """Comments and blank lines are skipped; an unreadable file is a clear error."""
    path = tmp_path / "grants"
    path.write_text("# who may use what\napi=*\n\nmodule.a = a-* , shared  # team a\n")
    assert Grants.read(path) == ["api=*", "module.a = a-* , shared"]
    assert Grants.parse(Grants.read(path)).allows("module.a", "shared")
    with pytest.raises(InvalidArgumentError, match="cannot read the grants file"):
        Grants.read(tmp_path / "missing")


def _token(claims: dict[str, Any]) -> str:
    return jwt.encode(claims, SECRET, "HS256")


def test_tokens_living_longer_than_the_maximum_are_refused() -> None:
    """A 100-year token, one without iat, one without exp: UNAUTHENTICATED; the engine's
    one-hour token and one exactly at the limit pass."""
    now = int(time.time())
    century = 100 * 365 * 24 * 3600
    refused = [
        _token({"sub": "api", "iat": now, "exp": now + century}),
        _token({"sub": "api", "exp": now + 60}),
        _token({"sub": "api", "iat": now}),
        _token({"sub": "api", "iat": now, "exp": now + MAX_TOKEN_LIFETIME + 1}),
    ]
    for token in refused:
        with pytest.raises(DocumentServiceError) as error:
            authenticate(token, SECRET)
        assert error.value.code == "UNAUTHENTICATED"
        assert error.value.detail == "missing or invalid auth token"
    assert authenticate(issue_token(SECRET, "api"), SECRET) == "api"
    at_limit = _token({"sub": "api", "iat": now, "exp": now + MAX_TOKEN_LIFETIME})
    assert authenticate(at_limit, SECRET) == "api"
    with pytest.raises(DocumentServiceError):
        authenticate(issue_token(SECRET, "api", ttl=600), SECRET, max_lifetime=300)
