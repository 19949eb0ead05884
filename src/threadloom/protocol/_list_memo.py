"""A planner's memo of one list channel: the encodings it keeps to extend the list on the
next put instead of encoding it again (`plan.py`, `Planner._extend`). No I/O.
"""

from __future__ import annotations

from typing import NamedTuple

from threadloom.core import ListRefs
from threadloom.protocol._fingerprint import Fingerprint

__all__ = ["KEEP_BELOW", "ListMemo", "kept_encoding", "new_memo"]


#: An element encoding of at least this many bytes (a large tool result) is not kept in a
#: list memo, only its length and ref: keeping it would push the whole list out of the
#: memo, so every later put of the thread would encode and hash the list again. A grown
#: list whose fingerprint holds still reuses its ref; one that must plan its document
#: again (its ref no longer known) is planned in full.
KEEP_BELOW = 64 * 1024
#: Estimated bytes per element of a memo beside its encoding (the bytes object, its list
#: slot, its `e-` ref and chunk entry), and per chunk (its ref and entry list).
_ELEMENT_COST = 200
_CHUNK_COST = 160


class ListMemo(NamedTuple):
    """The last planned encoding of one list channel of one thread.

    Attributes:
        payloads: the stored (redacted) msgpack encoding of each element, or None for an
            encoding of `KEEP_BELOW` bytes or more, which is not kept; a list, so a grown
            list shares the old encodings instead of copying them.
        sizes: the length of each element's encoding (kept or not).
        total: the sum of `sizes`.
        kept: bytes of the encodings kept.
        refs: the refs `list_refs` returned for these elements.
        proof: the elements' fingerprint, taken before they were encoded, or None.
    """

    payloads: list[bytes | None]
    sizes: list[int]
    total: int
    kept: int
    refs: ListRefs
    proof: Fingerprint | None = None

    @property
    def whole(self) -> bool:
        """True when every element's encoding is kept."""
        return self.kept == self.total

    @property
    def size(self) -> int:
        """Estimated bytes this memo holds (for LIST_MEMO_BYTES): the encodings kept, each a
        bytes object in a list with its element ref, and the fingerprint."""
        overhead = _ELEMENT_COST * len(self.payloads) + _CHUNK_COST * len(self.refs.chunk_refs)
        return self.kept + overhead + (self.proof.size if self.proof is not None else 0)


def kept_encoding(payload: bytes) -> bytes | None:
    """What a memo keeps of one element's encoding: the bytes, or None from KEEP_BELOW on."""
    return payload if len(payload) < KEEP_BELOW else None


def new_memo(
    payloads: list[bytes | None],
    sizes: list[int],
    refs: ListRefs,
    proof: Fingerprint | None,
) -> ListMemo:
    kept = sum(len(p) for p in payloads if p is not None)
    return ListMemo(payloads, sizes, sum(sizes), kept, refs, proof)
