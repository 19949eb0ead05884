"""threadloom over NATS: the naas document service client, export and import of threads.

Needs the `nats` extra (`pip install '.[nats]'` in threadloom's clone: nats-py,
naas-abi-proto, PyJWT).
"""

from __future__ import annotations

from threadloom.nats.auth import Credentials, issue_token
from threadloom.nats.client import Document, DocumentClient

__all__ = ["Credentials", "Document", "DocumentClient", "issue_token"]
