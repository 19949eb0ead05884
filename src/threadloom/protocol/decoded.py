"""What the serializer made of a list chunk, kept so a re-read skips the serializer.

No I/O. A list channel's elements are stored in content-addressed chunk documents
(SPEC §4), and a value over the inline limit in a blob of its own: one chunk or blob
ref always names the same payloads, so what the serializer makes of them once is what
it makes every time. `DecodedChunks` keeps that as a pickle made
in this process from the serializer's own result (never written to a file, never read
from one) and unpickles it on every later read of the chunk. Each read still gets
fresh objects (graph nodes mutate what a read returns), built several times faster than
LangGraph's msgpack hooks build them (bench/README.md, "Reads: the decoded chunks").

A pickle is kept only when it loads back equal to what the serializer made; elements
that cannot be pickled or do not come back equal (a class without `__eq__`, a NaN, a
class defined in a function) are decoded by the serializer on every read, as before.
Reading a chunk still fetches and checks its stored documents first: the cache only
replaces the decoding of bytes already verified.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

from threadloom.core.lru import Budget, Lru

Typed = tuple[str, bytes]
Loads = Callable[[Typed], Any]

#: Bytes of decoded chunks a scope keeps (pickles; charged to the memory budget).
DECODED_BYTES = 4 * 1024 * 1024
#: A chunk whose elements do not survive a pickle round trip: decoded every time.
_REFUSED = b""
#: A chunk met once (a pickle is at least two bytes long).
_SEEN = b"1"
#: Estimated bytes an entry costs besides its pickle (key, map slot).
_OVERHEAD = 160


def frame(items: list[Typed]) -> Typed | None:
    """Plain msgpack elements as one msgpack array (None when not all are msgpack).

    A msgpack array is its header followed by its elements' encodings, so the elements
    decode in one crossing into the decoder instead of one each.
    """
    count = len(items)
    if count < 2 or any(kind != "msgpack" for kind, _ in items):
        return None
    if count < 0x10000:
        header = bytes((0xDC,)) + count.to_bytes(2, "big")
    else:
        header = bytes((0xDD,)) + count.to_bytes(4, "big")
    return "msgpack", header + b"".join(payload for _, payload in items)


def load_elements(items: list[Typed], loads: Loads) -> list[Any]:
    """Deserialize list elements: one decoder call when they frame, else one each."""
    framed = frame(items)
    if framed is not None:
        loaded = loads(framed)
        if isinstance(loaded, list) and len(loaded) == len(items):
            return loaded
    return [loads(typed) for typed in items]


def _cost(pickled: bytes) -> int:
    return len(pickled) + _OVERHEAD


def _pickled(values: list[Any]) -> bytes:
    # Whatever the elements' classes do when pickled, compared or loaded again is theirs
    # to raise: any failure only means this chunk is decoded every time.
    try:
        data = pickle.dumps(values, protocol=pickle.HIGHEST_PROTOCOL)
        same = bool(pickle.loads(data) == values)
    except Exception:
        return _REFUSED
    return data if same and data else _REFUSED


class DecodedChunks:
    """Decoded list chunks (and whole values' blobs) by (thread id, ref), as pickles.

    Args:
        loads: the serializer's `loads_typed`.
        capacity: bytes of pickles kept (0 keeps none: every read decodes).
        budget: the byte budget the entries are charged to as well.
    """

    def __init__(self, loads: Loads, capacity: int = DECODED_BYTES, budget: Budget | None = None):
        self._loads = loads
        self._kept: Lru[tuple[str, str], bytes] = Lru(capacity, _cost, budget=budget, group=0)
        self.hits = 0
        self.misses = 0

    def elements(self, thread_id: str, ref: str, items: list[Typed]) -> list[Any]:
        """The elements of chunk `ref` of thread `thread_id`: fresh objects every call.

        Args:
            thread_id: the thread reading it (what `forget` drops by).
            ref: the chunk document's ref (or a whole value's blob ref).
            items: the chunk's elements as stored, already fetched and checked (a whole
                value: its one payload).
        """
        key = (thread_id, ref)
        kept = self._kept.get(key)
        if kept is not None and len(kept) > 1:
            self.hits += 1
            values: list[Any] = pickle.loads(kept)
            return values
        values = load_elements(items, self._loads)
        self.misses += 1
        if kept is None:
            # Met once: only noted, so a chunk read once costs no pickling (a cold read,
            # threads read once and forgotten); pickled when met again.
            self._kept.put(key, _SEEN)
        elif kept == _SEEN:
            self._kept.put(key, _pickled(values))
        return values

    def reader(self, thread_id: str) -> Callable[[str, list[Typed]], list[Any]]:
        """`elements` bound to one thread, as `restore` and `load_channels` take it."""

        def elements(ref: str, items: list[Typed]) -> list[Any]:
            return self.elements(thread_id, ref, items)

        return elements

    @property
    def weight(self) -> int:
        """Bytes of pickles (and their overhead) kept now."""
        return self._kept.weight

    def forget(self, thread_id: str | None = None) -> None:
        """Drop what is kept of `thread_id`, or of every thread."""
        if thread_id is None:
            self._kept.clear()
        else:
            self._kept.drop_group(thread_id)
