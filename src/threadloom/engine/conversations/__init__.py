"""Conversations as records over a scope's checkpoints: transcript tails, checkpoint
history and pending interrupts, run leases, erasure of an owner, retention, and the
Agent Server's registry records.

The thread index they page lives one room down (`engine.threads`), since every
checkpoint write keeps it. Outer layers use the names below.
"""

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
