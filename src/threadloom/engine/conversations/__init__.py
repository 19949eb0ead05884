"""Conversations as records over a scope's checkpoints: transcript tails, checkpoint
history and pending interrupts, run leases, erasure of an owner, retention, and the
Agent Server's registry records.

The thread index they page lives one room down (`engine.threads`), since every
checkpoint write keeps it. Outer layers use the names below; each loads its module on
first use (PEP 562): a Saver's put and get never need this room, and a process that only
checkpoints does not hold its code (peak RSS, bench/README.md).
"""

from typing import TYPE_CHECKING

from threadloom.core.lazy import lazy_exports

if TYPE_CHECKING:
    from threadloom.engine.conversations.erasure import Erased
    from threadloom.engine.conversations.leases import Held, Leases
    from threadloom.engine.conversations.retention import (
        Progress,
        RetentionReport,
        ThreadExpired,
        ThreadPruned,
    )
    from threadloom.engine.conversations.server_records import KINDS as SERVER_KINDS
    from threadloom.engine.conversations.server_records import ServerRecord, ServerRecords
    from threadloom.engine.conversations.transcript import Tail, plain_elements, transcript_json

__all__ = [
    "Erased",
    "Held",
    "Leases",
    "Progress",
    "SERVER_KINDS",
    "RetentionReport",
    "ServerRecord",
    "ServerRecords",
    "Tail",
    "ThreadExpired",
    "ThreadPruned",
    "plain_elements",
    "transcript_json",
]

#: Each name loaded on first use: (the module of this room that holds it, its name there).
_LAZY = {
    "Erased": ("erasure", "Erased"),
    "Held": ("leases", "Held"),
    "Leases": ("leases", "Leases"),
    "Progress": ("retention", "Progress"),
    "RetentionReport": ("retention", "RetentionReport"),
    "ThreadExpired": ("retention", "ThreadExpired"),
    "ThreadPruned": ("retention", "ThreadPruned"),
    "SERVER_KINDS": ("server_records", "KINDS"),
    "ServerRecord": ("server_records", "ServerRecord"),
    "ServerRecords": ("server_records", "ServerRecords"),
    "Tail": ("transcript", "Tail"),
    "plain_elements": ("transcript", "plain_elements"),
    "transcript_json": ("transcript", "transcript_json"),
}


__getattr__ = lazy_exports(__name__, {k: (f"{__name__}.{m}", a) for k, (m, a) in _LAZY.items()})
