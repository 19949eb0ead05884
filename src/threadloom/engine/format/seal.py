"""Row seals: the digest stored beside each body also binds the row's identity (format 4).

Engine layer, pure functions (no SQL). A body row's `digest` column holds

    blake3(msgpack)[:16]  XOR  blake3(identity)[:16]

where the identity is the table, the scope (namespace, agent id), the thread id and
the row's own identifying and linking columns (`tables.BodyTable.sealed`). A read
recomputes the identity from the columns it found (and the scope and thread it asked
for) and removes it from the stored digest; what is left must be the blake3 of the
decoded msgpack, which the content store checks. So damage to a body, to the digest,
or to any sealed column (a thread id, a namespace, a parent id, a write's channel or
index) fails the same check, and a row is never read as another row.

XOR keeps the seal movable without decoding: re-binding a row to another identity
(copying a thread, re-keying an agent) is `seal(seal(d, old), new)`; the SQL function
`tl_seal` (registered on every connection of a `File`) does that in bulk.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import blake3

from threadloom.engine.format import idkeys, refkeys
from threadloom.engine.format.codec import DIGEST_SIZE
from threadloom.errors import CorruptionError

#: Name of the SQL function: `tl_seal(digest, table, namespace, agent_id, thread_id, ...)`.
SQL_FUNCTION: Final = "tl_seal"
#: Name of the SQL aggregate `tl_census(tag, part, ...)`: the census of a set.
SQL_CENSUS: Final = "tl_census"
#: Names of the SQL function `tl_xor(a, b)` and aggregate `tl_mix(digest)`.
SQL_XOR: Final = "tl_xor"
SQL_MIX: Final = "tl_mix"
#: The census of no checkpoint.
EMPTY: Final = bytes(DIGEST_SIZE)

_NULL: Final = b"\xff"


def identity(*parts: str | int | bytes | None) -> bytes:
    """The digest of a row's identity. Each part is typed, and text is length-prefixed,
    so no two different lists of parts encode alike: `s<length>:<text>`, `i<int>` or
    `n` (None), joined by U+001F."""
    encoded = "\x1f".join(
        [f"s{len(part)}:{part}" if type(part) is str else _part(part) for part in parts]
    )
    return blake3.blake3(encoded.encode("utf-8", "surrogatepass")).digest(length=DIGEST_SIZE)


def prefix(*parts: str | int | None) -> str:
    """The encoding of the first parts of identities that share them (`identity_after`)."""
    return "\x1f".join([_part(part) for part in parts]) + "\x1f"


def identity_after(start: str, *parts: str | int | None) -> bytes:
    """`identity(*first, *parts)` given `start = prefix(*first)`."""
    if len(parts) == 1 and type(parts[0]) is str:
        # One text part (a Store item's key, on every read of an item): `_part` inlined.
        text = f"{start}s{len(parts[0])}:{parts[0]}"
    else:
        text = start + "\x1f".join([_part(part) for part in parts])
    return blake3.blake3(text.encode("utf-8", "surrogatepass")).digest(length=DIGEST_SIZE)


def _part(part: str | int | bytes | None) -> str:
    if type(part) is str:
        return f"s{len(part)}:{part}"
    if type(part) is bytes:
        # A ref as `vals` stores it (format 11) or a task id as `writes` does (format
        # 12): the seal binds the text.
        return _part(idkeys.text(part) if idkeys.is_key(part) else refkeys.text(part))
    return "n" if part is None else f"i{_integer(part)}"


class Sealer:
    """`seal` for the rows of one scope, with the scope's part of every identity encoded
    once (the hot path of reads: one call per checkpoint and pending write decoded)."""

    def __init__(self, namespace: str, agent_id: str) -> None:
        self._prefix = {}
        for table in ("vals", "checkpoints", "writes"):
            self._prefix[table] = "\x1f".join(map(_part, (table, namespace, agent_id))) + "\x1f"

    def seal(self, table: str, digest: bytes, *parts: str | int | None) -> bytes:
        """`seal(digest, table, namespace, agent_id, *parts)`."""
        prefix = self._prefix.get(table)
        if prefix is None or len(digest) != DIGEST_SIZE:
            raise ValueError(f"cannot seal a {table} row with a {len(digest)}-byte digest")
        # `_part` inlined for text, the usual column (one call less per part: this runs
        # for every row a put writes and every body a read checks).
        text = prefix + "\x1f".join(
            [f"s{len(part)}:{part}" if type(part) is str else _part(part) for part in parts]
        )
        bound = blake3.blake3(text.encode("utf-8", "surrogatepass")).digest(length=DIGEST_SIZE)
        return xor(digest, bound)


def _integer(part: object) -> int:
    if isinstance(part, int):
        return int(part)
    # Written rows hold only text, ints and NULL in sealed columns (STRICT tables); a
    # read finding another type found a damaged record header.
    raise CorruptionError(
        f"a sealed column holds {type(part).__name__}, not text or an int: the row is "
        "damaged (run `threadloom verify`) - restore the file from a backup"
    )


def xor(a: bytes, b: bytes) -> bytes:
    """The XOR of two digests."""
    mixed = int.from_bytes(a, "big") ^ int.from_bytes(b, "big")
    return mixed.to_bytes(DIGEST_SIZE, "big")


def seal(digest: bytes, *parts: str | int | None) -> bytes:
    """Bind (or, applied again, unbind) `digest` to the identity `parts`."""
    if len(digest) != DIGEST_SIZE:
        raise ValueError(f"a digest has {DIGEST_SIZE} bytes, not {len(digest)}")
    return xor(digest, identity(*parts))


def sql_seal(digest: bytes | None, *parts: str | int | bytes | None) -> bytes | None:
    """`tl_seal` as SQL sees it: NULL stays NULL; a wrong-sized digest or a column of an
    unexpected type (a damaged row) yields a value that matches no body."""
    if digest is None:
        return None
    if len(digest) != DIGEST_SIZE:
        return b""
    for part in parts:  # a loop, not any(): this runs once per row a training re-encodes
        if isinstance(part, float) or (
            isinstance(part, bytes) and not (refkeys.valid(part) or idkeys.is_key(part))
        ):
            return b""
    return xor(bytes(digest), identity(*parts))


def census(items: Iterable[tuple[str | int | None, ...]]) -> bytes:
    """The census of a set: the XOR of `identity(*item)` over its items, so adding or
    removing one is one XOR (`heads.census`, `pending.census`, format 4)."""
    total = 0
    for item in items:
        total ^= int.from_bytes(identity(*item), "big")
    return total.to_bytes(DIGEST_SIZE, "big")


class Census:
    """`tl_census(tag, part, ...)` as apsw's aggregate protocol wants it (one per group)."""

    def __init__(self) -> None:
        self.total = 0

    def step(self, *parts: object) -> None:
        usable = all(p is None or isinstance(p, (str, int)) for p in parts)
        item = parts if usable else ("damaged", repr(parts))
        self.total ^= int.from_bytes(identity(*item), "big")  # type: ignore[arg-type]

    def final(self) -> bytes:
        return self.total.to_bytes(DIGEST_SIZE, "big")


def sql_xor(a: bytes | None, b: bytes | None) -> bytes:
    """`tl_xor(a, b)` as SQL sees it (a NULL or wrong-sized side counts as damage)."""
    if a is None or b is None or len(a) != DIGEST_SIZE or len(b) != DIGEST_SIZE:
        return b""
    return xor(bytes(a), bytes(b))


class Mix:
    """`tl_mix(digest)`: the XOR of a group's digests (`pending.census`, format 4)."""

    def __init__(self) -> None:
        self.total = 0

    def step(self, *parts: object) -> None:
        digest = parts[0] if len(parts) == 1 else parts
        if isinstance(digest, bytes) and len(digest) == DIGEST_SIZE:
            self.total ^= int.from_bytes(digest, "big")
        else:
            self.total ^= int.from_bytes(identity("damaged", repr(digest)), "big")

    def final(self) -> bytes:
        return self.total.to_bytes(DIGEST_SIZE, "big")


def mix(digests: Iterable[bytes]) -> bytes:
    """`tl_mix` in Python."""
    total = 0
    for digest in digests:
        total ^= int.from_bytes(digest, "big")
    return total.to_bytes(DIGEST_SIZE, "big")
