"""Refs as the `vals` table stores them: binary keys (format 11, docs/FORMAT.md).

Engine layer, pure functions (no SQL). A protocol ref is text: a letter, `-`, the 64
lowercase hex digits of a SHA-256 and, for a part, `.N` (SPEC §3.1). Stored as text it
takes 66 bytes and more in every `vals` row and in the table's key; as a key it takes
33: the letter, the 32 bytes of the digest, then the suffix as it is.

    key("c-0a1b...")  ==  b"c" + bytes.fromhex("0a1b...")
    key("p-0a1b....2") == b"p" + bytes.fromhex("0a1b...") + b".2"

A ref of any other shape (a document imported with a ref this code would not write,
uppercase hex, another length) is kept whole: `b"\\x00"` then its UTF-8. No letter is
NUL, so the two forms never meet, and `text(key(ref)) == ref` for every string.

Keys of canonical refs sort as their text does (the letter, then the digest's bytes in
the order of its hex digits), so a thread's rows keep their order in the table.

Documents never see keys: every statement binds `key(ref)` and reads back
`text(key)`; seals bind the text (`seal._part` turns a key back into its ref), so a
row's seal does not depend on how its ref is stored.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from threadloom.errors import ProtocolError

#: Name of the SQL function `tl_ref_key(ref)`: `key` (the format-11 migration's).
SQL_KEY: Final = "tl_ref_key"
#: The first byte of a key holding a non-canonical ref whole.
WHOLE: Final = 0
_WHOLE_PREFIX: Final = bytes((WHOLE,))
_DIGEST: Final = 32
_HEX: Final = 2 * _DIGEST
_SUFFIX_AT: Final = 2 + _HEX


def key(ref: str) -> bytes:
    """The stored key of `ref`.

    Raises:
        ProtocolError: `ref` is not text (no document of ours names such a ref).
    """
    if type(ref) is not str:
        raise ProtocolError(f"a ref is text, not {type(ref).__name__}: {ref!r}")
    if len(ref) >= _SUFFIX_AT and ref[1] == "-" and "a" <= ref[0] <= "z" and ref.isascii():
        hexed = ref[2:_SUFFIX_AT]
        try:
            digest = bytes.fromhex(hexed)
        except ValueError:
            digest = b""
        # bytes.fromhex takes uppercase and spaces too: only the canonical form converts.
        if len(digest) == _DIGEST and hexed == hexed.lower():
            return ref[0].encode() + digest + ref[_SUFFIX_AT:].encode()
    return _WHOLE_PREFIX + ref.encode("utf-8", "surrogatepass")


def text(stored: bytes) -> str:
    """The ref a stored key holds.

    A damaged key still yields a string (never an exception): the row's seal, bound to
    the ref as written, then fails and names the damage.
    """
    if not stored:
        return ""
    if stored[0] == WHOLE:
        whole = bytes(stored[1:])
        try:
            return whole.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            return whole.decode("utf-8", "replace")
    suffix = bytes(stored[1 + _DIGEST :]).decode("latin-1")
    return f"{chr(stored[0])}-{stored[1 : 1 + _DIGEST].hex()}{suffix}"


def valid(stored: bytes) -> bool:
    """Whether `stored` has the shape of a key (a blob in another sealed column, or a
    truncated key, does not: the seal of its row then fails)."""
    if not stored:
        return False
    if stored[0] == WHOLE:
        return True
    return (
        0x61 <= stored[0] <= 0x7A
        and len(stored) >= 1 + _DIGEST
        and bytes(stored[1 + _DIGEST :]).isascii()
    )


def sql_key(ref: object) -> object:
    """`tl_ref_key` as SQL sees it, given a ref's bytes (`CAST(ref AS BLOB)`): the key of
    the text they spell. Bytes that are not UTF-8 (a damaged row) are kept whole as they
    are, so the migration goes through and the row's seal fails on the text they read as
    (`text` replaces what cannot be decoded): `verify` then names the row."""
    if not isinstance(ref, bytes):
        return key(ref) if isinstance(ref, str) else ref
    try:
        return key(ref.decode("utf-8", "surrogatepass"))
    except UnicodeDecodeError:
        return _WHOLE_PREFIX + ref


def keys(refs: Iterable[object]) -> list[bytes]:
    """`key` of each of `refs` that is text, in order: what a lookup binds (a body naming
    something else as a ref names nothing stored, and its reader says it is missing)."""
    return [key(ref) for ref in refs if type(ref) is str]


def texts(stored: Iterable[bytes]) -> list[str]:
    """`text` of each of `stored`, in order."""
    return [text(k) for k in stored]
