"""Golden vectors every backend of `threadloom.core` must reproduce exactly.

SHA-256: FIPS 180-4 examples and the padding boundaries (55/56/63/64/65 bytes). Refs: the
worked examples of SPEC §3.4 and the released planner's cold `c3` documents (a 40-element
list in two chunks, a value blob, parts). CDC: cut points committed when the chunker was
written; changing them changes how every stored payload is cut.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.core.conftest import Backend
from tests.helpers import jsonl
from threadloom.core import CHUNK_SIZE
from threadloom.core.cdc import GEAR, GEAR_SEED
from threadloom.protocol import constants

NATIVE = Path(__file__).resolve().parents[2] / "native"

SHA256_VECTORS = [
    (b"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
    (b"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
    (b"a" * 55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"),
    (b"a" * 56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"),
    (b"a" * 63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"),
    (b"a" * 64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"),
    (b"a" * 65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"),
    (
        b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
    ),
    (bytes(range(256)) * 4096, "fbbab289f7f94b25736c58be46a994c441fd02552cc6022352e3d86d2fab7c83"),
    (b"a" * 1_000_000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"),
]

HELLO = ("msgpack", bytes.fromhex("a568656c6c6f"))
HELLO_E = "e-7d83bb30fe25a2f0b6add075cbeb81d6ac3b9d1767709ddb776bafdad13b033d"
HELLO_C = "c-f45778e06febf5503b3770d1e2798ccd3879eca8ed5af00ea85d700ab20d9d43"
HELLO_B = "b-478fcdf0f525b6398666005484c6509eb7eb8e8e5573c72b80a5c9edbb4e7be9"
S2000_B = "b-3b156ae3fe58b4772b90217d80bbc56d10ba999b89a20c7be0715e33e32131ea"
B262244_DIGEST = "7cee303cdba1cbe246c1ff3e29e57247c1ae5f197a3206d2cd8f4f13335d1cf4"


def noise(size: int, seed: bytes = b"threadloom cdc golden") -> bytes:
    """Return `size` fixed pseudo-random bytes: SHA-256 of `seed` and a counter, concatenated."""
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += hashlib.sha256(seed + counter.to_bytes(8, "big")).digest()
        counter += 1
    return bytes(out[:size])


NOISE = noise(1 << 18)
NOISE_DIGEST = "04fd543c4a265938c21731ec150b204d73eb17cdb66ed0c421aa14e2e59a0ddd"

CDC_VECTORS: list[tuple[bytes, tuple[int, int, int], list[int]]] = [
    (
        NOISE,
        (2048, 8192, 65536),
        [8575, 21619, 33144, 45236, 53828, 62185, 72706, 82685, 95256, 103863, 115414,
         124245, 134217, 144481, 151794, 163783, 173727, 184837, 194406, 202350, 211323,
         220134, 228622, 237263, 248224, 259507, 262144],
    ),
    (
        NOISE[:16384],
        (64, 256, 1024),
        [285, 497, 854, 1139, 1809, 2084, 2389, 2703, 2879, 3380, 3543, 3833, 4203, 4559,
         5102, 5423, 5637, 5888, 6219, 6495, 6852, 7135, 7229, 7538, 7833, 8100, 8374, 8575,
         8832, 9131, 9431, 9581, 9869, 10180, 10518, 10775, 11133, 11391, 11584, 11856,
         12132, 12488, 12758, 13017, 13386, 13654, 13932, 13998, 14313, 14405, 14694, 14871,
         15163, 15470, 15788, 15998, 16314, 16384],
    ),
    (
        NOISE[:300],
        (2, 8, 32),
        [3, 15, 24, 35, 47, 56, 65, 75, 87, 98, 107, 116, 125, 134, 145, 156, 166, 177, 187,
         196, 205, 215, 225, 239, 246, 257, 268, 280, 291, 300],
    ),
    (bytes(100_000), (2048, 8192, 65536), [65536, 100000]),
    (b"", (2048, 8192, 65536), []),
    (b"x", (2048, 8192, 65536), [1]),
    (NOISE[:2048], (2048, 8192, 65536), [2048]),
]  # fmt: skip


def test_noise_is_the_committed_buffer() -> None:
    """The pseudo-random buffer behind the CDC vectors is the one they were computed on."""
    assert hashlib.sha256(NOISE).hexdigest() == NOISE_DIGEST


@pytest.mark.parametrize(("data", "digest"), SHA256_VECTORS, ids=lambda v: f"{len(v)}")
def test_sha256_vectors(impl: Backend, data: bytes, digest: str) -> None:
    """sha256_hex gives the FIPS 180-4 digests, across every padding boundary."""
    assert impl.sha256_hex(data) == digest == hashlib.sha256(data).hexdigest()


def test_sha256_accepts_any_bytes_like(impl: Backend) -> None:
    """sha256_hex hashes bytearray and memoryview inputs like the bytes they hold."""
    data = NOISE[:1000]
    expected = hashlib.sha256(data).hexdigest()
    assert impl.sha256_hex(bytearray(data)) == expected
    assert impl.sha256_hex(memoryview(data)[:]) == expected


def test_spec_hello_refs(impl: Backend) -> None:
    """The element "hello" gives SPEC §3.4's e-, c- and b- refs and chunk text."""
    refs = impl.list_refs([HELLO])
    assert refs.element_refs == [HELLO_E]
    assert refs.chunks == [[[HELLO_E, 6]]]
    assert refs.chunk_refs == [HELLO_C]
    assert refs.list_ref == HELLO_B
    assert impl.chunk_texts([HELLO]) == [f'[["{HELLO_E}", 6]]']


def test_spec_value_blob_ref(impl: Backend) -> None:
    """The value blob of "S" * 2000 gives SPEC §3.4's b- ref."""
    payload = bytes.fromhex("da07d0") + b"S" * 2000
    assert impl.value_blob_refs([("msgpack", payload)]) == [S2000_B]


def test_spec_part_digest(impl: Backend) -> None:
    """The payload of "B" * 262244 hashes to the digest of SPEC §3.4's part refs."""
    payload = bytes.fromhex("db00040064") + b"B" * 262244
    assert impl.sha256_hex(payload) == B262244_DIGEST


def test_empty_list(impl: Backend) -> None:
    """An empty list has no element or chunk, and its list ref hashes `l[]`."""
    refs = impl.list_refs([])
    expected = "b-" + hashlib.sha256(b"l[]").hexdigest()
    assert refs == ([], [], [], expected)
    assert impl.chunk_texts([]) == []
    assert impl.value_blob_refs([]) == []


def _stored_payload(value: dict[str, Any], parts: dict[str, bytes]) -> bytes:
    if "payload" in value:
        return bytes(value["payload"])
    return b"".join(parts[ref] for ref in value["parts"])


def test_released_planner_documents(impl: Backend) -> None:
    """The cold c3 vector's list blob, chunks, elements, value blobs and parts have the refs
    the released planner gave them."""
    rows = jsonl("puts_cold_c3.jsonl")
    docs = {row["data"]["ref"]: row["data"] for row in rows if "ref" in row["data"]}
    parts = {ref: bytes(doc["payload"]) for ref, doc in docs.items() if ref.startswith("p-")}
    lists = [doc for doc in docs.values() if "chunks" in doc]
    assert len(lists) == 1 and lists[0]["length"] == 40
    listed = lists[0]
    entries = [entry for ref in listed["chunks"] for entry in docs[ref]["elements"]]
    typed = [
        (docs[ref]["value"]["kind"], _stored_payload(docs[ref]["value"], parts))
        for ref, _ in entries
    ]
    refs = impl.list_refs(typed)
    assert refs.element_refs == [ref for ref, _ in entries]
    assert refs.chunks == [docs[ref]["elements"] for ref in listed["chunks"]]
    assert refs.chunk_refs == listed["chunks"]
    assert refs.list_ref == listed["ref"]
    assert impl.chunk_texts(typed) == [json.dumps(docs[ref]["elements"]) for ref in refs.chunk_refs]

    blobs = [doc for doc in docs.values() if "value" in doc and doc["ref"].startswith("b-")]
    assert len(blobs) == 2
    typed_blobs = [(doc["value"]["kind"], _stored_payload(doc["value"], parts)) for doc in blobs]
    assert impl.value_blob_refs(typed_blobs) == [doc["ref"] for doc in blobs]
    for ref in parts:
        value = next(
            d["value"] for d in docs.values() if ref in d.get("value", {}).get("parts", ())
        )
        assert ref.startswith("p-" + impl.sha256_hex(_stored_payload(value, parts)) + ".")


@pytest.mark.parametrize(
    ("data", "sizes", "cuts"),
    CDC_VECTORS,
    ids=lambda v: f"{len(v)}" if isinstance(v, bytes) else "",
)
def test_cdc_vectors(
    impl: Backend, data: bytes, sizes: tuple[int, int, int], cuts: list[int]
) -> None:
    """cdc_cuts gives the committed cut points."""
    assert impl.cdc_cuts(data, *sizes) == cuts


def test_gear_table_matches_the_c_source() -> None:
    """The gear table committed in native/cdc.c is the one core.cdc derives from GEAR_SEED."""
    source = (NATIVE / "cdc.c").read_text()
    table = source[source.index("tl_gear[256] = {") : source.index("};")]
    words = [int(word, 16) for word in re.findall(r"0x([0-9a-f]{16})ull", table)]
    assert words == list(GEAR)
    assert f"{GEAR_SEED:#x}" in source
    assert len(set(GEAR)) == 256


def test_chunk_size_matches_the_protocol() -> None:
    """core's CHUNK_SIZE is the protocol's (the C core hard-codes the same 32)."""
    assert CHUNK_SIZE == constants.CHUNK_SIZE == 32
