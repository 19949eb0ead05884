"""Error hierarchy: one root, one subclass per layer.

Messages say what went wrong and what to do about it.
"""

from __future__ import annotations


class ThreadloomError(Exception):
    """Root of every error threadloom raises on purpose."""


class InvalidArgumentError(ThreadloomError, TypeError):
    """An argument has the wrong type (for example one string where a list of ids is due)."""


class ProtocolError(ThreadloomError):
    """A document or an input does not follow the schema-2 protocol."""


class SerializationError(ProtocolError, TypeError):
    """A value could not be serialized by the checkpoint serializer."""


class MissingDocumentsError(ProtocolError):
    """Documents a checkpoint references are not in the store.

    Attributes:
        refs: every missing reference, sorted.
    """

    def __init__(self, refs: list[str]) -> None:
        self.refs = sorted(refs)
        super().__init__(f"Checkpoint documents are missing: {self.refs[:5]}")


class EngineError(ThreadloomError):
    """The SQLite engine could not do what was asked."""


class CorruptionError(EngineError):
    """A stored payload failed its integrity check; the named document is damaged."""


class CheckpointConflictError(EngineError):
    """A checkpoint id is already stored with different content (create-only, SPEC §4.5)."""


class FormatError(EngineError):
    """The file's on-disk format is newer than this version of threadloom understands."""
