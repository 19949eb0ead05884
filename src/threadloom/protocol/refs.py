"""References and document keys (SPEC §3).

Every digest is SHA-256 in lowercase hex. JSON text fed to a hash follows
Python's `json.dumps` defaults exactly (`", "` and `": "` separators, ASCII
only), which is what the released planner hashes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from json.encoder import encode_basestring_ascii
from typing import Any

from threadloom.core.hashing import sha256_hex
from threadloom.errors import ProtocolError
from threadloom.protocol.constants import (
    BLOBS,
    CHECKPOINTS,
    CHECKPOINTS_V1,
    ITEMS,
    PART_SIZE,
    PARTS,
    WRITES,
    WRITES_V1,
)

_NUL = b"\0"


def json_text(value: Any) -> str:
    """Return the JSON text the protocol hashes: `json.dumps` with its defaults.

    Every key and ref hashes a list of strings, ints and None (nested once for a
    chunk's entries): those are written here with the encoder's own string quoting,
    without the encoder object `json.dumps` builds on every call (a tenth of a short
    put's planning); anything else goes to `json.dumps` itself.
    """
    kind = type(value)
    if kind is list or kind is tuple:
        text = _json_list(value)
        if text is not None:
            return text
    return json.dumps(value)


def _json_list(items: Sequence[Any]) -> str | None:
    """`json.dumps(items)` for a list or tuple of str, int, None and such lists, else None."""
    parts = []
    for item in items:
        kind = type(item)
        if kind is str:
            parts.append(encode_basestring_ascii(item))
        elif kind is int:
            parts.append(int.__repr__(item))
        elif item is None:
            parts.append("null")
        elif kind is list or kind is tuple:
            if len(item) == 2 and type(item[0]) is str and type(item[1]) is int:
                # A chunk's `[ref, size]` entry (a chunk holds up to CHUNK_SIZE): at once.
                parts.append(f"[{encode_basestring_ascii(item[0])}, {int.__repr__(item[1])}]")
                continue
            inner = _json_list(item)
            if inner is None:
                return None
            parts.append(inner)
        else:
            return None
    return "[" + ", ".join(parts) + "]"


def document_key(agent_id: str, *parts: str | int | None) -> str:
    """Return the document id of `parts` under `agent_id` (SPEC §3.3)."""
    return sha256_hex(json_text([agent_id, *parts]).encode("utf-8"))


def element_ref(kind: str, payload: bytes) -> str:
    """Return the `e-` ref of one list element's typed serialization."""
    return "e-" + sha256_hex(kind.encode(), _NUL, payload)


def value_blob_ref(kind: str, payload: bytes) -> str:
    """Return the `b-` ref of a value blob (domain `v`)."""
    return "b-" + sha256_hex(b"v", kind.encode(), _NUL, payload)


def chunk_ref(entries: Sequence[Sequence[Any]]) -> str:
    """Return the `c-` ref of a chunk's `[[e_ref, payload_length], ...]` entries."""
    return "c-" + sha256_hex(json_text(entries).encode())


def list_blob_ref(chunk_refs: Sequence[str]) -> str:
    """Return the `b-` ref of a list blob over `chunk_refs` (domain `l`)."""
    return "b-" + sha256_hex(b"l", json_text(chunk_refs).encode())


def part_refs(payload: bytes) -> list[str]:
    """Return the `p-<digest>.<n>` refs of the PART_SIZE slices of `payload`."""
    digest = sha256_hex(payload)
    count = max(1, -(-len(payload) // PART_SIZE))
    return [f"p-{digest}.{index}" for index in range(count)]


def collection_of(ref: str) -> str:
    """Return the collection a ref lives in, chosen by its first letter."""
    if ref.startswith("b-"):
        return BLOBS
    if ref.startswith(("c-", "e-")):
        return ITEMS
    if ref.startswith("p-"):
        return PARTS
    raise ProtocolError(f"Unknown reference {ref!r}: refs start with b-, c-, e- or p-")


def key_of(collection: str, data: Mapping[str, Any]) -> str:
    """Return the document key (SPEC §3.3) of a document of `collection` from its own fields.

    Raises:
        ProtocolError: the collection is not a LangGraph collection, or a field is missing.
    """
    parts: tuple[Any, ...]
    try:
        if collection in (CHECKPOINTS, CHECKPOINTS_V1):
            parts = (data["thread_id"], data["checkpoint_ns"], data["checkpoint_id"])
        elif collection in (WRITES, WRITES_V1):
            parts = (
                data["thread_id"],
                data["checkpoint_ns"],
                data["checkpoint_id"],
                data["task_id"],
                data["index"],
            )
        elif collection in (BLOBS, ITEMS, PARTS):
            parts = (data["thread_id"], data["ref"])
        else:
            raise ProtocolError(f"{collection!r} is not a LangGraph document collection")
        return document_key(data["agent_id"], *parts)
    except KeyError as missing:
        raise ProtocolError(f"a {collection} document lacks the field {missing}") from None
