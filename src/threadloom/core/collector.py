"""The cyclic garbage collector held off while a batch is written or a read decodes (core layer).

A Store batch allocates many small containers that live until it ends (its writes,
rows, index keys, the embedders' vectors as lists of floats): the collector's young
generations fill and are traversed again and again, and a full collection walks every
object of the process (its imported modules too). A 10,000-item load spent 12-15% of
its time there (bench/README.md, "Bulk loads"). Reference counting still frees what the
batch drops; only cycles wait, until the collector is enabled again and its next
collection runs.

A checkpoint read decoding lists of `PAUSE_FROM` elements or more pauses it the same
way (the decoded messages all stay alive: half of a long listing went to collections).

Only a batch of `PAUSE_FROM` items or more pauses it (`paused(size)`): the collector's
work grows with what a batch allocates, so an agent's single put or search gains
nothing from a pause.

One thread at a time owns a pause: the first to enter `paused()` disables the collector
(if it was enabled) and enables it again when it leaves, whether or not other threads'
batches are still inside; those do not pause it again, they run on with it off until
the owner leaves, then with it on. So the collector is never off for longer than one
batch, however many threads run batches back to back, and an application that
disabled it itself keeps it disabled. Re-entry on one thread (a batch inside a batch)
leaves the pause to the outermost. Changing the collector's state from another thread
while a batch runs is not tracked: the owner enables it again when it leaves.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator
from typing import Final

#: The fewest items (ops or writes) a batch holds for `paused(size)` to pause.
PAUSE_FROM: Final = 64

_lock = threading.Lock()
#: The thread that disabled the collector (None: no pause is running).
_owner: int | None = None


@contextlib.contextmanager
def paused(size: int | None = None) -> Iterator[None]:
    """Disable the cyclic garbage collector for the duration (enabled again after, by
    the thread that disabled it); with `size`, only when it is `PAUSE_FROM` or more."""
    global _owner
    if size is not None and size < PAUSE_FROM:
        yield
        return
    took = False
    with _lock:
        if _owner is None and gc.isenabled():
            gc.disable()
            _owner, took = threading.get_ident(), True
    try:
        yield
    finally:
        if took:
            with _lock:
                _owner = None
                gc.enable()
