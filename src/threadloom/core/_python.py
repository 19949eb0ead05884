"""The pure-Python backend: the specification of every function the C core accelerates.

Layer: core (imports nothing above it). Each function here is the oracle the native backend
(`core._native`) is tested against, byte for byte: hashlib for SHA-256, `json.dumps` with its
defaults for the JSON text the protocol hashes (SPEC §3.1, §3.2).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from itertools import pairwise
from typing import NamedTuple

import blake3

from threadloom.core.cdc import cdc_cuts
from threadloom.core.msgpack import array_spans
from threadloom.core.similarity import bounds as vector_bounds
from threadloom.core.similarity import chunk_bounds as vector_chunk_bounds
from threadloom.core.similarity import means as vector_means
from threadloom.core.similarity import nearest as vector_nearest
from threadloom.core.similarity import quantize as vector_quantize
from threadloom.core.similarity import top as vector_top
from threadloom.core.similarity import vector_scores

NAME = "python"
CHUNK_SIZE = 32
"""Element refs per chunk (SPEC §1.1 `CHUNK_SIZE`)."""

Buffer = bytes | bytearray | memoryview
Typed = tuple[str, Buffer]

__all__ = [
    "CHUNK_SIZE",
    "NAME",
    "ListRefs",
    "array_spans",
    "cdc_blocks",
    "cdc_cuts",
    "chunk_texts",
    "list_refs",
    "sha256_hex",
    "value_blob_refs",
    "vector_bounds",
    "vector_chunk_bounds",
    "vector_means",
    "vector_nearest",
    "vector_quantize",
    "vector_scores",
    "vector_top",
]


class ListRefs(NamedTuple):
    """The refs of one list value (SPEC §4.2 step 3).

    Attributes:
        element_refs: the `e-` ref of each element, in list order.
        chunks: the entries of each chunk, `[[e_ref, payload_length], ...]`, 32 per chunk.
        chunk_refs: the `c-` ref of each chunk.
        list_ref: the `b-` ref of the list blob over `chunk_refs`.
    """

    element_refs: list[str]
    chunks: list[list[list[str | int]]]
    chunk_refs: list[str]
    list_ref: str


def sha256_hex(data: Buffer) -> str:
    """Return the lowercase hex SHA-256 of `data`."""
    return hashlib.sha256(data).hexdigest()


def _typed_hash(prefix: bytes, kind: str, payload: Buffer) -> str:
    digest = hashlib.sha256(prefix)
    digest.update(kind.encode())
    digest.update(b"\0")
    digest.update(payload)
    return digest.hexdigest()


def _chunks(typed: Sequence[Typed]) -> tuple[list[str], list[list[list[str | int]]]]:
    element_refs = ["e-" + _typed_hash(b"", kind, payload) for kind, payload in typed]
    entries: list[list[str | int]] = [
        [ref, len(payload)] for ref, (_, payload) in zip(element_refs, typed, strict=True)
    ]
    chunks = [entries[i : i + CHUNK_SIZE] for i in range(0, len(entries), CHUNK_SIZE)]
    return element_refs, chunks


def list_refs(typed: Sequence[Typed]) -> ListRefs:
    """Return the element, chunk and list-blob refs of a list of typed payloads.

    `e-` = sha256(kind ‖ \\0 ‖ payload); `c-` = sha256(json.dumps(chunk entries));
    `b-` = sha256("l" ‖ json.dumps(chunk refs)). An empty list has no chunk.
    """
    element_refs, chunks = _chunks(typed)
    chunk_refs = ["c-" + sha256_hex(json.dumps(chunk).encode()) for chunk in chunks]
    list_ref = "b-" + sha256_hex(b"l" + json.dumps(chunk_refs).encode())
    return ListRefs(element_refs, chunks, chunk_refs, list_ref)


def cdc_blocks(
    data: Buffer, min_size: int, avg_size: int, max_size: int
) -> tuple[list[int], list[bytes]]:
    """Return the cuts of `data` (`cdc_cuts`) and the BLAKE3 digest (32 bytes) of each
    block they delimit: the content store's blocks and their keys."""
    cuts = cdc_cuts(data, min_size, avg_size, max_size)
    view = memoryview(data)
    keys = [blake3.blake3(view[start:end]).digest() for start, end in pairwise([0, *cuts])]
    return cuts, keys


def chunk_texts(typed: Sequence[Typed]) -> list[str]:
    """Return the JSON text of each chunk of `typed`: the exact bytes its `c-` ref hashes."""
    return [json.dumps(chunk) for chunk in _chunks(typed)[1]]


def value_blob_refs(typed: Sequence[Typed]) -> list[str]:
    """Return the value-blob `b-` ref, sha256("v" ‖ kind ‖ \\0 ‖ payload), of each typed payload."""
    return ["b-" + _typed_hash(b"v", kind, payload) for kind, payload in typed]
