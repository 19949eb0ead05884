"""Checking documents against their own names (SPEC §3): what a receiver of documents it
did not plan (a thread bundle) verifies before it stores them.

Protocol layer, no I/O. A value's ref is a digest of its content, so every value
document is checked by recomputing its ref: `e-` and `b-` value refs from the typed
payload (assembled from its `p-` parts when it was split), `c-` from the chunk's
entries, a list `b-` from its chunk refs, and every part against the digest its ref
names (with the payload's size). A checkpoint or a pending write is named by its key,
which its identifying fields determine (`key_of`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from threadloom.core.hashing import sha256_hex
from threadloom.protocol.constants import BLOBS, ITEMS, PARTS
from threadloom.protocol.refs import (
    chunk_ref,
    element_ref,
    key_of,
    list_blob_ref,
    value_blob_ref,
)

Named = tuple[str, str, Mapping[str, Any]]


def problems(documents: Iterable[Named]) -> list[str]:
    """What is wrong with `(collection, key, data)` documents, one line each: a key that
    is not the document's own, a value whose content does not hash to its ref, a value
    split into parts that are missing or do not add up (empty when all hold)."""
    found: list[str] = []
    docs = list(documents)
    parts = {
        (data.get("thread_id"), data.get("ref")): data
        for collection, _, data in docs
        if collection == PARTS
    }
    for collection, key, data in docs:
        try:
            if key_of(collection, data) != key:
                found.append(f"{collection} {key}: the key is not the document's own")
                continue
            if collection in (BLOBS, ITEMS):
                wrong = _value(data, parts)
                if wrong:
                    found.append(f"{collection} {data['ref']}: {wrong}")
            elif collection == PARTS:
                digest, _, index = str(data["ref"])[2:].rpartition(".")
                if not (digest and index.isdigit() and isinstance(data["payload"], bytes)):
                    found.append(f"{collection} {data['ref']}: not a part ref and payload")
        except Exception as exc:  # noqa: BLE001 - any malformed field is one problem named
            found.append(f"{collection} {key}: malformed ({type(exc).__name__}: {exc})")
    return found


def _value(data: Mapping[str, Any], parts: Mapping[tuple[Any, Any], Mapping[str, Any]]) -> str:
    """Why a `b-`, `c-` or `e-` document's content does not hash to its ref ("" if it does)."""
    ref = str(data["ref"])
    if ref.startswith("c-"):
        return "" if chunk_ref(data["elements"]) == ref else "its entries hash to another ref"
    if "chunks" in data:
        if not ref.startswith("b-"):
            return "a list of chunks under a ref that is not a blob's"
        return "" if list_blob_ref(data["chunks"]) == ref else "its chunks hash to another ref"
    stored = data["value"]
    kind = stored["kind"]
    if "parts" in stored:
        pieces = [parts.get((data["thread_id"], p)) for p in stored["parts"]]
        if any(p is None for p in pieces):
            return "a part it lists is missing"
        payload = b"".join(bytes(p["payload"]) for p in pieces if p is not None)
        digest = str(stored["parts"][0])[2:].rpartition(".")[0]
        if len(payload) != stored["size"] or sha256_hex(payload) != digest:
            return "its parts do not add up to the payload their refs name"
    else:
        payload = bytes(stored["payload"])
    if ref.startswith("e-"):
        expected = element_ref(kind, payload)
    elif ref.startswith("b-"):
        expected = value_blob_ref(kind, payload)
    else:
        return "a value under a ref that is neither b- nor e-"
    return "" if expected == ref else "its payload hashes to another ref"
