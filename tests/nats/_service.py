"""Driving `FileDocumentService` in process: a real file, decoded requests, no broker."""

from __future__ import annotations

from typing import Any

from naas_abi_proto.document.v1 import document_pb2 as pb
from naas_abi_proto.document.values import encode_data, encode_value

from threadloom.nats.serve import FileDocumentService
from threadloom.nats.transfer import COLLECTIONS
from threadloom.protocol import BLOBS
from threadloom.protocol.refs import key_of

SECRET = "threadloom-serve-tests-secret-of-some-length"

REQUESTS = {
    "ensure_collection": pb.EnsureCollectionRequest,
    "drop_collection": pb.DropCollectionRequest,
    "collections": pb.CollectionsRequest,
    "collection_spec": pb.CollectionSpecRequest,
    "put": pb.PutRequest,
    "get": pb.GetRequest,
    "delete": pb.DeleteRequest,
    "find": pb.FindRequest,
    "count": pb.CountRequest,
    "namespaces": pb.NamespacesRequest,
}


def blob(thread_id: str, n: int, agent_id: str = "a") -> dict[str, Any]:
    """A small value document."""
    return {
        "agent_id": agent_id,
        "thread_id": thread_id,
        "ref": f"b-{n:064x}",
        "_schema": 2,
        "value": {"kind": "msgpack", "payload": n.to_bytes(4, "big")},
    }


def request(op: str, namespace: str = "ns", **fields: Any) -> Any:
    """The decoded request of `op` (`data` a dict, `where` a list of triples)."""
    if "data" in fields:
        fields["data"] = encode_data(fields["data"])
    if "where" in fields:
        fields["where"] = [
            pb.Predicate(field=f, operator=o, value=encode_value(v)) for f, o, v in fields["where"]
        ]
    if op == "ensure_collection":
        name = fields.pop("collection", BLOBS)
        fields["spec"] = pb.CollectionSpec(
            name=name, fields=[pb.FieldSpec(name=f, type="string") for f in COLLECTIONS[name]]
        )
    if op != "namespaces":
        fields["namespace"] = namespace
    return REQUESTS[op](**fields)


def call(
    service: FileDocumentService, op: str, identity: str = "api", ns: str = "ns", **fields: Any
) -> Any:
    """Answer `op` as the service does for `identity` (raises its DocumentServiceError)."""
    return service.dispatch(op, request(op, ns, **fields), identity)


def put_blob(service: FileDocumentService, data: dict[str, Any], ns: str = "ns") -> str:
    """Store a value document through the service; return its id."""
    key = key_of(BLOBS, data)
    call(service, "put", ns=ns, collection=BLOBS, id=key, data=data)
    return key
