"""The cyclic garbage collector held off while a batch is written (core layer).

A Store batch allocates many small containers that live until it ends (its writes,
rows, index keys, the embedders' vectors as lists of floats): the collector's young
generations fill and are traversed again and again, and a full collection walks every
object of the process (its imported modules too). A 10,000-item load spent 12-15% of
its time there (bench/README.md, "Bulk loads"). Reference counting still frees what the
batch drops; only cycles wait, until the batch ends and the collector runs once.

Only a batch of `PAUSE_FROM` items or more pauses it (`paused(size)`): the collector's
work grows with what a batch allocates, so an agent's single put or search gains
nothing from a pause, and a server whose threads run small batches back to back must
not find its collector off for good.

`paused()` is re-entrant and shared by threads: the first to enter disables the
collector (if it was enabled), the last to leave enables it again, so an application
that disabled it itself keeps it disabled. Changing the collector's state from another
thread while a batch runs is not tracked: the last batch to leave restores what it found.
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
_inside = 0
_resume = False


@contextlib.contextmanager
def paused(size: int | None = None) -> Iterator[None]:
    """Disable the cyclic garbage collector for the duration (enabled again after);
    with `size`, only when it is `PAUSE_FROM` or more (a smaller batch leaves it be)."""
    global _inside, _resume
    if size is not None and size < PAUSE_FROM:
        yield
        return
    with _lock:
        if _inside == 0:
            _resume = gc.isenabled()
            gc.disable()
        _inside += 1
    try:
        yield
    finally:
        with _lock:
            _inside -= 1
            if _inside == 0 and _resume:
                gc.enable()
