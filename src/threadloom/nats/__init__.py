"""threadloom over NATS: the naas document service client, export and import of threads,
two-way sync with a document service (`sync_file`).

Needs the `nats` extra (`pip install '.[nats]'` in threadloom's clone: nats-py,
naas-abi-proto, PyJWT).
"""

from __future__ import annotations

from threadloom.nats.auth import Credentials, issue_token
from threadloom.nats.client import Document, DocumentClient
from threadloom.nats.sync import SyncReport, sync_file

__all__ = ["Credentials", "Document", "DocumentClient", "SyncReport", "issue_token", "sync_file"]
