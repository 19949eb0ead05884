"""Compressing a content block once per process, whichever writer needs it first.

Engine layer (content store), no SQL. LangGraph puts a node's pending writes and the
checkpoint that holds them at the same time, on two threads: a 20 MiB tool result is
in both bodies, cut into mostly the same blocks, and neither writer sees the other's
rows before they commit. The first `prepare` to miss a block compresses it and offers
it (`Framing`); another that misses it meanwhile waits for those bytes instead of
compressing it again.

Invariants: an offer lives as long as the bodies prepared with it (`Packed.offered`
holds it, the registry only weakly), so no longer than its writer holds them; a
compression that fails leaves its offer empty and done, and its waiters compress their
own blocks; nobody waits while holding the registry's lock.
"""

from __future__ import annotations

import threading
import weakref

from threadloom.engine.format.codec import frame_block, frame_blocks


class Framing:
    """The blocks one `prepare` compresses, offered to the other writers of the process.

    Attributes:
        keys: the keys of the blocks it compresses.
        framed: key -> framed block, filled when `done` is set (empty if that failed).
        done: set once the compression ended, well or not.
    """

    __slots__ = ("__weakref__", "done", "framed", "keys")

    def __init__(self, keys: set[bytes]) -> None:
        self.keys = keys
        self.framed: dict[bytes, bytes] = {}
        self.done = threading.Event()


class Framings:
    """The offers of one content store (a file's `BlockStore`), newest last."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offers: list[weakref.ref[Framing]] = []

    def offer(self, framing: Framing) -> None:
        """Offer `framing`'s blocks to the other writers (while something holds it)."""
        with self._lock:
            self._offers.append(weakref.ref(framing))

    def frame(self, missing: dict[bytes, memoryview]) -> tuple[dict[bytes, bytes], Framing | None]:
        """Frame `missing` blocks once per process: those another writer compresses or
        compressed are awaited and taken from its offer, the others compressed here
        (`frame_blocks`: on two threads when large) and offered in turn.

        Returns:
            key -> framed block, and the offer of the blocks framed here (for the bodies
            prepared to hold: it is offered while they are held), or None.
        """
        if not missing:
            return {}, None
        theirs: dict[bytes, Framing] = {}
        with self._lock:
            alive = []
            for ref in self._offers:
                other = ref()
                if other is None:
                    continue
                alive.append(ref)
                for key in other.keys & missing.keys():
                    theirs.setdefault(key, other)
            mine = [key for key in missing if key not in theirs]
            offered = Framing(set(mine)) if mine else None
            if offered is not None:
                alive.append(weakref.ref(offered))
            self._offers = alive
        out: dict[bytes, bytes] = {}
        if offered is not None:
            try:
                framed = frame_blocks([missing[key] for key in mine])
                offered.framed.update(zip(mine, framed, strict=True))
            finally:
                offered.done.set()  # a failure leaves it empty: its waiters frame their own
            out.update(offered.framed)
        for other in set(theirs.values()):  # one wait per writer, not per block
            other.done.wait()
        for key, other in theirs.items():
            found = other.framed.get(key)
            out[key] = found if found is not None else frame_block(missing[key])
        return out, offered
