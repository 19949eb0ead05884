"""Error hierarchy: one root, one subclass per layer.

Messages say what went wrong and what to do about it.
"""

from __future__ import annotations


class ThreadloomError(Exception):
    """Root of every error threadloom raises on purpose."""


class ProtocolError(ThreadloomError):
    """A document or an input does not follow the schema-2 protocol."""


class MissingDocumentsError(ProtocolError):
    """Documents a checkpoint references are not in the store.

    Attributes:
        refs: every missing reference, sorted.
    """

    def __init__(self, refs: list[str]) -> None:
        self.refs = sorted(refs)
        super().__init__(f"Checkpoint documents are missing: {self.refs[:5]}")
