"""What the viewer reads from: one threadloom file opened read-only, one scope of it.

Outer layer. The file is opened with `readonly=True`: no migration, no journal-mode
change, every connection `query_only`, so no page of the viewer can write (the routes
are GET only as well). The Store's items are read through the engine's `Items` and
`Recall` without embeddings: text search only.
"""

from __future__ import annotations

import os
from typing import Any

from threadloom.engine import CheckpointStore, File
from threadloom.engine.items import Items, Recall
from threadloom.protocol import DEFAULT_AGENT_ID, DEFAULT_NAMESPACE


class NotFound(Exception):
    """A page names something the file does not hold (HTTP 404)."""


class BadRequest(Exception):
    """A page's parameters are not valid (HTTP 400)."""


class Source:
    """The file and scope the viewer shows.

    Args:
        path: the threadloom file.
        namespace: the document namespace of the scope shown.
        agent_id: the agent id of the scope shown.

    Raises:
        ThreadloomError: the path is not a threadloom file of the current format, or
            cannot be read (the CLI reports it as `error:` / `hint:`).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        namespace: str = DEFAULT_NAMESPACE,
        agent_id: str = DEFAULT_AGENT_ID,
    ) -> None:
        self.path = str(path)
        self.closed = False
        self.file = File.open(self.path, readonly=True)
        try:
            self.store = CheckpointStore(self.file, namespace=namespace, agent_id=agent_id)
            self.items = Items(self.file)
            self.recall = Recall(self.items)
        except BaseException:
            self.file.close()
            raise

    @property
    def scope(self) -> dict[str, Any]:
        """The scope shown, as JSON."""
        return {"namespace": self.store.namespace, "agent_id": self.store.agent_id}

    def close(self) -> None:
        """Let go of the file (the last close of its connections removes the `-wal`);
        idempotent."""
        if self.closed:
            return
        self.closed = True
        self.store.close()
        self.file.close()
