"""Decoding: schema-1 and schema-2 documents back to LangGraph's CheckpointTuple (SPEC §5.3).

No I/O. Every split value is joined and checked against its recorded size; a
referenced document absent from `fetched` raises MissingDocumentsError naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple

from threadloom.errors import MissingDocumentsError, ProtocolError

Fetched = Mapping[str, Mapping[str, Any]]


def _get(fetched: Fetched, ref: str) -> Mapping[str, Any]:
    try:
        return fetched[ref]
    except KeyError:
        raise MissingDocumentsError([ref]) from None


def raw_value(stored: Mapping[str, Any], fetched: Fetched) -> tuple[str, bytes]:
    """Return the typed `(kind, payload)` of a stored value, joining its parts if split.

    Raises:
        ProtocolError: a split value's joined length differs from its recorded size.
        MissingDocumentsError: a part is not in `fetched`.
    """
    if "payload" in stored:
        return stored["kind"], bytes(stored["payload"])
    payload = b"".join(bytes(_get(fetched, ref)["payload"]) for ref in stored["parts"])
    if len(payload) != stored["size"]:
        raise ProtocolError("A split value does not have its recorded size")
    return stored["kind"], payload


def channel_values(
    channels: Mapping[str, Mapping[str, Any]], fetched: Fetched, loads: Any
) -> dict[str, Any]:
    """Return the channel values of a schema-2 checkpoint from its entries."""
    values: dict[str, Any] = {}
    for channel, entry in channels.items():
        if "value" in entry:
            values[channel] = loads(raw_value(entry["value"], fetched))
            continue
        blob = _get(fetched, entry["blob"])
        if "chunks" not in blob:
            values[channel] = loads(raw_value(blob["value"], fetched))
            continue
        typed = [
            raw_value(_get(fetched, element)["value"], fetched)
            for chunk in blob["chunks"]
            for element, _size in _get(fetched, chunk)["elements"]
        ]
        items = _load_list(typed, loads)
        if len(items) != blob["length"]:
            raise ProtocolError(
                f"List blob {entry['blob']} records {blob['length']} elements "
                f"but its chunks hold {len(items)}"
            )
        values[channel] = items
    return values


def _load_list(typed: list[tuple[str, bytes]], loads: Any) -> list[Any]:
    """Load list elements; plain msgpack elements are framed as one array and decoded at once.

    Equivalent to loading each element (a msgpack array is its header followed by
    its elements' encodings) but crosses into the decoder once instead of per element.
    """
    if len(typed) > 1 and all(kind == "msgpack" for kind, _ in typed):
        count = len(typed)
        header = (
            bytes((0xDC,)) + count.to_bytes(2, "big")
            if count < 0x10000
            else (bytes((0xDD,)) + count.to_bytes(4, "big"))
        )
        items = loads(("msgpack", header + b"".join(payload for _, payload in typed)))
        if isinstance(items, list) and len(items) == count:
            return items
    return [loads(item) for item in typed]


def restore(
    data: Mapping[str, Any],
    writes: Iterable[Mapping[str, Any]],
    fetched: Fetched,
    loads: Any,
    *,
    sort_key: Callable[[Mapping[str, Any]], Any] | None = None,
) -> CheckpointTuple:
    """Rebuild a CheckpointTuple from a checkpoint document, its writes and fetched documents.

    Args:
        data: the checkpoint document's data (schema 1 or 2).
        writes: data of its pending-write documents, any order.
        fetched: value documents by ref (unused for schema 1).
        loads: the serializer's `loads_typed`.
        sort_key: order of the pending writes; the protocol's `(task_id, index)` by default
            (LangGraph savers may pass its `(task_path, task_id, index)`).

    Raises:
        ProtocolError: unsupported schema or inconsistent documents.
        MissingDocumentsError: a referenced document is absent.
    """
    schema = data.get("_schema")
    if schema == 2:
        checkpoint = loads(raw_value(data["checkpoint"], fetched))
        checkpoint["channel_values"] = channel_values(data["channels"], fetched, loads)
        metadata = loads(raw_value(data["metadata"], fetched))
    elif schema == 1:
        checkpoint = loads(raw_value(data["checkpoint"], {}))
        metadata = loads(raw_value(data["metadata"], {}))
    else:
        raise ProtocolError(f"Unsupported checkpoint schema: {schema!r}")
    thread_id, ns = data["thread_id"], data["checkpoint_ns"]
    config = {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": data["checkpoint_id"],
        }
    }
    parent_id = data.get("parent_id")
    parent_config = (
        {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent_id}}
        if parent_id
        else None
    )
    ordered = sorted(writes, key=sort_key or _protocol_order)
    pending = [(w["task_id"], w["channel"], loads(raw_value(w["value"], fetched))) for w in ordered]
    return CheckpointTuple(config, checkpoint, metadata, parent_config, pending)  # type: ignore[arg-type]


def _protocol_order(write: Mapping[str, Any]) -> tuple[str, int]:
    return (write["task_id"], write["index"])
