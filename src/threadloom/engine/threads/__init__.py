"""The thread index: one row per thread (title, owner, tags, counts, bytes, status), kept
in the transaction of every write to the thread (`threadindex`), its facts read again
from a thread's rows where a write did not come through the saver (`threadfacts`), and
which threads a live run holds (`running`, the leases' liveness).

It sits below `checkpoints` (whose writes keep it) and `conversations` (which page it).
Outer layers use the names below.
"""

from threadloom.engine.threads import threadindex
from threadloom.engine.threads.threadindex import (
    MESSAGES,
    OWNER_KEYS,
    STATUSES,
    UNSET,
    ThreadInfo,
    utc,
)

__all__ = ["MESSAGES", "OWNER_KEYS", "STATUSES", "UNSET", "ThreadInfo", "threadindex", "utc"]
