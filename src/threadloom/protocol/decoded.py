"""What the serializer made of a list chunk, kept so a re-read skips the serializer.

No I/O. A list channel's elements are stored in content-addressed chunk documents
(SPEC §4), and a value over the inline limit in a blob of its own: one chunk or blob
ref always names the same payloads, so what the serializer makes of them once is what
it makes every time. `DecodedChunks` keeps that as a pickle made in this process from
the serializer's own result (never written to a file, never read from one) and
unpickles it on every later read of the chunk. Each read still gets fresh objects
(graph nodes mutate what a read returns), built several times faster than LangGraph's
msgpack hooks build them (bench/README.md, "Reads: the decoded chunks").

A pickle is kept only when it names no class outside `kept_classes` (the classes the
adapter knows the serializer builds with no side effect: LangChain's messages, dates,
UUIDs; plain dicts, lists, strings and numbers need none) and loads back equal to what
the serializer made. Anything else (an application's own classes, whose constructors
and validators the serializer runs on every read; a class without `__eq__`; a NaN) is
decoded by the serializer on every read, as before. So is a chunk too big to keep.
Reading a chunk still fetches and checks its stored documents first: the cache only
replaces the decoding of bytes already verified.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable, Collection
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
#: Estimated bytes an entry costs besides its pickle: its key (a tuple of the thread id
#: and a 66-character ref), the map's slot and its group's (524 measured with tracemalloc
#: over 20,000 entries).
_OVERHEAD = 512


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


class _Checked(pickle.Unpickler):
    """Loads a pickle only if every class it names is one of `allowed`."""

    def __init__(self, data: bytes, allowed: Collection[tuple[str, str]]) -> None:
        super().__init__(io.BytesIO(data))
        self._allowed = allowed

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self._allowed:
            raise pickle.UnpicklingError(f"{module}.{name} is decoded on every read")
        return super().find_class(module, name)


def _pickled(values: list[Any], allowed: Collection[tuple[str, str]]) -> bytes:
    # Whatever the elements' classes do when pickled, compared or loaded again is theirs
    # to raise: any failure only means this chunk is decoded every time.
    try:
        data = pickle.dumps(values, protocol=pickle.HIGHEST_PROTOCOL)
        same = bool(_Checked(data, allowed).load() == values)
    except Exception:
        return _REFUSED
    return data if same and data else _REFUSED


class DecodedChunks:
    """Decoded list chunks (and whole values' blobs) by (thread id, ref), as pickles.

    Args:
        loads: the serializer's `loads_typed`.
        capacity: bytes of pickles kept (0 keeps none: every read decodes).
        budget: the byte budget the entries are charged to as well.
        kept_classes: the `(module, qualified name)` of every class a kept pickle may
            name (none: only builtin containers, strings and numbers are kept).

    `hits` and `misses` count reads served each way (approximate when threads read at
    once: they are statistics, not accounts).
    """

    def __init__(
        self,
        loads: Loads,
        capacity: int = DECODED_BYTES,
        budget: Budget | None = None,
        kept_classes: Collection[tuple[str, str]] = frozenset(),
    ):
        self._loads = loads
        self._kept: Lru[tuple[str, str], bytes] = Lru(capacity, _cost, budget=budget, group=0)
        #: A chunk whose payloads exceed this is not pickled: it could not stay kept.
        self._largest = capacity // 4
        self._classes = frozenset(kept_classes)
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
            try:
                values: list[Any] = pickle.loads(kept)
            except Exception:
                # A class it names went away since (a module reloaded or unloaded): the
                # serializer decides what these bytes are now.
                self._kept.put(key, _REFUSED)
            else:
                self.hits += 1
                return values
        values = load_elements(items, self._loads)
        self.misses += 1
        if kept is None:
            # Met once: only noted, so a chunk read once costs no pickling (a cold read,
            # threads read once and forgotten); pickled when met again.
            self._kept.put(key, _SEEN)
        elif kept == _SEEN:
            big = sum(len(payload) for _, payload in items) > self._largest
            self._kept.put(key, _REFUSED if big else _pickled(values, self._classes))
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
