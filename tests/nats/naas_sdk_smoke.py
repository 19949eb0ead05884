"""Drive the real document service with the naas SDK, inside the naas venv (smoke tests).

Usage: python naas_sdk_smoke.py documents NAMESPACE | saver NAMESPACE THREAD_ID, with
NAAS_NATS_URL and NAAS_JWT_SECRET in the environment. Prints one JSON object on stdout
(bytes as {"hex": ...}); exits non-zero on any unexpected error.

- `documents`: ensure_collection, put and get of one document with an `api` token, then
  a get with a token signed by another secret, which must be refused.
- `saver`: the SDK's LangGraph saver (`naas_abi_sdk.langgraph.DocumentCheckpointSaver`)
  puts one tiny checkpoint and reads it back with get_tuple.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from naas_abi_core.engine.nats_auth import issue_service_token
from naas_abi_proto.document.v1 import document_pb2 as pb
from naas_abi_proto.document.values import decode_data, encode_data
from naas_abi_sdk.document import DocumentClient
from naas_abi_sdk.langgraph import DocumentCheckpointSaver
from naas_abi_sdk.transport import RPCError, Transport

DOCUMENT = {"text": "héllo", "count": 3, "raw": b"\x00\xff", "tags": ["a", None], "nested": {}}


def plain(value: Any) -> Any:
    """`value` with bytes as {"hex": ...}, so that it prints as JSON."""
    if isinstance(value, bytes):
        return {"hex": value.hex()}
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


async def documents(url: str, secret: str, namespace: str) -> dict[str, Any]:
    """Ensure a collection, put and get a document, then try a get with a bad token."""
    transport = Transport(url, issue_service_token("api", secret))
    intruder = Transport(url, issue_service_token("api", "not-the-" + secret))
    try:
        client = DocumentClient(transport).for_namespace(namespace)
        spec = pb.CollectionSpec(
            name="smoke", fields=[pb.FieldSpec(name="text", type="string", indexed=True)]
        )
        await client.ensure_collection(pb.EnsureCollectionRequest(spec=spec))
        put = await client.put(
            pb.PutRequest(collection="smoke", id="doc-1", data=encode_data(DOCUMENT))
        )
        got = await client.get(pb.GetRequest(collection="smoke", id="doc-1"))
        try:
            await (
                DocumentClient(intruder)
                .for_namespace(namespace)
                .get(pb.GetRequest(collection="smoke", id="doc-1"))
            )
            refused: dict[str, Any] = {"code": None}
        except RPCError as exc:
            refused = {"code": exc.code, "message": str(exc)}
        return {
            "sent": plain(DOCUMENT),
            "put": {"id": put.document.id, "version": put.document.version},
            "get": {
                "id": got.document.id,
                "version": got.document.version,
                "created_at": got.document.created_at,
                "data": plain(decode_data(got.document.data)),
            },
            "bad_token": refused,
        }
    finally:
        await intruder.close()
        await transport.close()


async def saver(url: str, secret: str, namespace: str, thread_id: str) -> dict[str, Any]:
    """Put one tiny checkpoint with the SDK saver and read it back with get_tuple."""
    transport = Transport(url, issue_service_token("api", secret))
    try:
        documents = DocumentClient(transport).for_namespace(namespace)
        checkpointer = DocumentCheckpointSaver(documents, agent_id="engine.v1")
        await checkpointer.setup()
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": ["hi", "there"], "raw": b"\x01\x02"}
        version = checkpointer.get_next_version(None, None)
        checkpoint["channel_versions"] = {"messages": version, "raw": version}
        config: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        stored = await checkpointer.aput(
            config, checkpoint, {"source": "input", "step": -1}, checkpoint["channel_versions"]
        )
        loaded = await checkpointer.aget_tuple({"configurable": {"thread_id": thread_id}})
        if loaded is None:
            raise RuntimeError("get_tuple found no checkpoint after put")
        return {
            "put_config": stored,
            "checkpoint_id": checkpoint["id"],
            "loaded_config": loaded.config,
            "channel_values": plain(loaded.checkpoint["channel_values"]),
            "metadata": plain(loaded.metadata),
        }
    finally:
        await transport.close()


def main(argv: list[str]) -> int:
    """Run the command named in `argv` and print its JSON result."""
    url, secret = os.environ["NAAS_NATS_URL"], os.environ["NAAS_JWT_SECRET"]
    if argv[:1] == ["documents"] and len(argv) == 2:
        result = asyncio.run(documents(url, secret, argv[1]))
    elif argv[:1] == ["saver"] and len(argv) == 3:
        result = asyncio.run(saver(url, secret, argv[1], argv[2]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
