"""Decoding: schema-1 and schema-2 documents back to checkpoint tuples (SPEC §5.3).

No I/O. Every split value is joined and checked against its recorded size; a
referenced document absent from `fetched` raises MissingDocumentsError naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from threadloom.errors import MissingDocumentsError, ProtocolError
from threadloom.protocol.decoded import load_elements

Fetched = Mapping[str, Mapping[str, Any]]


class Restored(NamedTuple):
    """A checkpoint as LangGraph's `CheckpointTuple` holds it, field for field.

    The adapters turn it into a `CheckpointTuple` (`CheckpointTuple._make`); as tuples
    the two compare equal.
    """

    config: dict[str, Any]
    checkpoint: dict[str, Any]
    metadata: dict[str, Any]
    parent_config: dict[str, Any] | None
    pending_writes: list[tuple[str, str, Any]]


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


class RawList(NamedTuple):
    """A list channel's elements as typed payloads and the chunks they came in (or a
    value stored in a blob of its own, `whole`).

    Attributes:
        items: each element's `(kind, payload)`, in list order.
        parts: each chunk's ref and number of elements, in list order (`items` is
            their elements end to end), so a reader can decode chunk by chunk.
        whole: the channel's value is not a list but one value stored in a blob of its
            own: `items` holds its payload and `parts` the blob's ref.
    """

    items: list[tuple[str, bytes]]
    parts: tuple[tuple[str, int], ...] = ()
    whole: bool = False


RawChannel = tuple[str, bytes] | RawList


def raw_channels(
    channels: Mapping[str, Mapping[str, Any]],
    fetched: Fetched,
    chunks: dict[str, list[tuple[str, bytes]]] | None = None,
) -> dict[str, RawChannel]:
    """Return each channel's typed payload (or a list channel's elements), not yet loaded.

    Args:
        channels: the checkpoint document's channel entries.
        fetched: value documents by ref.
        chunks: the elements of list chunks already met, by chunk ref (filled here): the
            checkpoints of one thread share most chunks of a growing list, so a caller
            reading many of them with the same `fetched` passes one dict to all.

    Raises:
        ProtocolError: a list blob's chunks do not hold its recorded number of elements.
        MissingDocumentsError: a referenced document is absent.
    """
    raw: dict[str, RawChannel] = {}
    for channel, entry in channels.items():
        if "value" in entry:
            raw[channel] = raw_value(entry["value"], fetched)
            continue
        blob = _get(fetched, entry["blob"])
        if "chunks" not in blob:
            # A value over INLINE_LIMIT stored whole: decoded alone, by its blob's ref.
            raw[channel] = RawList([raw_value(blob["value"], fetched)], ((entry["blob"], 1),), True)
            continue
        met = chunks if chunks is not None else {}
        items: list[tuple[str, bytes]] = []
        parts: list[tuple[str, int]] = []
        for chunk in blob["chunks"]:
            elements = met.get(chunk)
            if elements is None:
                elements = [
                    raw_value(_get(fetched, element)["value"], fetched)
                    for element, _size in _get(fetched, chunk)["elements"]
                ]
                met[chunk] = elements
            items.extend(elements)
            parts.append((chunk, len(elements)))
        if len(items) != blob["length"]:
            raise ProtocolError(
                f"List blob {entry['blob']} records {blob['length']} elements "
                f"but its chunks hold {len(items)}"
            )
        raw[channel] = RawList(items, tuple(parts))
    return raw


#: What decodes one list chunk: `(chunk ref, its stored elements) -> elements`
#: (`DecodedChunks.reader`), fresh objects on every call.
Elements = Callable[[str, list[tuple[str, bytes]]], list[Any]]


def load_channels(
    raw: Mapping[str, RawChannel], loads: Any, elements: Elements | None = None
) -> dict[str, Any]:
    """Deserialize raw channels into channel values (fresh objects on every call).

    Args:
        raw: the channels' raw payloads (`raw_channels`).
        loads: the serializer's `loads_typed`.
        elements: decodes a list chunk by its ref (`DecodedChunks.reader`); None
            decodes each list whole with `loads`.
    """
    values: dict[str, Any] = {}
    for channel, item in raw.items():
        if not isinstance(item, RawList):
            values[channel] = loads(item)
        elif item.whole:
            ref = item.parts[0][0]
            values[channel] = elements(ref, item.items)[0] if elements else loads(item.items[0])
        elif elements is not None and item.parts:
            whole: list[Any] = []
            start = 0
            for ref, count in item.parts:
                whole.extend(elements(ref, item.items[start : start + count]))
                start += count
            values[channel] = whole
        else:
            values[channel] = load_elements(item.items, loads)
    return values


class Undecoded(NamedTuple):
    """A channel value's typed payload as stored, not deserialized (`restore(...,
    undecoded=True)`): a list channel gives a list of them, one per element."""

    kind: str
    payload: bytes


def undecoded_channels(raw: Mapping[str, RawChannel]) -> dict[str, Any]:
    """The raw channels as `Undecoded` payloads (a list channel: one per element)."""
    return {
        channel: [Undecoded(*typed) for typed in item.items]
        if isinstance(item, RawList) and not item.whole
        else Undecoded(*(item.items[0] if isinstance(item, RawList) else item))
        for channel, item in raw.items()
    }


def channel_values(
    channels: Mapping[str, Mapping[str, Any]],
    fetched: Fetched,
    loads: Any,
    elements: Elements | None = None,
) -> dict[str, Any]:
    """Return the channel values of a schema-2 checkpoint from its entries."""
    return load_channels(raw_channels(channels, fetched), loads, elements)


def restore(
    data: Mapping[str, Any],
    writes: Iterable[Mapping[str, Any]],
    fetched: Fetched,
    loads: Any,
    *,
    sort_key: Callable[[Mapping[str, Any]], Any] | None = None,
    raw: Mapping[str, RawChannel] | None = None,
    undecoded: bool = False,
    elements: Elements | None = None,
) -> Restored:
    """Rebuild a checkpoint tuple from a checkpoint document, its writes and fetched documents.

    Args:
        data: the checkpoint document's data (schema 1 or 2).
        writes: data of its pending-write documents, any order.
        fetched: value documents by ref (unused for schema 1).
        loads: the serializer's `loads_typed`.
        sort_key: order of the pending writes; the protocol's `(task_id, index)` by default
            (LangGraph savers may pass its `(task_path, task_id, index)`).
        raw: the channels' raw payloads when already known (`raw_channels`).
        undecoded: leave a schema-2 checkpoint's channel values as their stored payloads
            (`Undecoded`), for a copy that writes them elsewhere without decoding them.
        elements: decodes a list chunk by its ref (`load_channels`).

    Raises:
        ProtocolError: unsupported schema or inconsistent documents.
        MissingDocumentsError: a referenced document is absent.
    """
    schema = data.get("_schema")
    if schema == 2:
        checkpoint = loads(raw_value(data["checkpoint"], fetched))
        if raw is None:
            raw = raw_channels(data["channels"], fetched)
        checkpoint["channel_values"] = (
            undecoded_channels(raw) if undecoded else load_channels(raw, loads, elements)
        )
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
    return Restored(config, checkpoint, metadata, parent_config, pending)


def _protocol_order(write: Mapping[str, Any]) -> tuple[str, int]:
    return (write["task_id"], write["index"])
