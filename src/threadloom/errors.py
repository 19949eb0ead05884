"""Error hierarchy: one root, one subclass per layer.

Messages say what went wrong and what to do about it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from datetime import datetime


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


class InvalidValueError(ThreadloomError, ValueError):
    """An argument has the right type but a value threadloom cannot take as it is (a
    filter with an unknown operator, a vector of the wrong size, text UTF-8 cannot hold)."""


class OutOfMemoryError(ThreadloomError, MemoryError):
    """A value too large for the memory the process can allocate to encode it; nothing
    was written."""


class NoEventLoopError(ThreadloomError, RuntimeError):
    """An async object was created outside a running event loop."""


class EngineError(ThreadloomError):
    """The SQLite engine could not do what was asked."""


class CorruptionError(EngineError):
    """A stored payload failed its integrity check; the named document is damaged."""


class CheckpointConflictError(EngineError):
    """A checkpoint id is already stored with different content (create-only, SPEC §4.5)."""


class FormatError(EngineError):
    """The file's on-disk format is newer than this version of threadloom understands."""


class DocumentServiceError(ThreadloomError):
    """A document service refused or failed a request, with its code (SPEC §7.9).

    Both sides of the service raise it. The NATS client (`threadloom.nats.client`) raises
    the subclass of the code a service answered with. The document operations over a file
    (`threadloom.documents`) raise it for their refusals, and their two front ends turn it
    into what their callers expect: `threadloom serve` into a reply's error (`code` and
    `detail`), the naas adapter into naas's exceptions (`VersionConflict`,
    `DocumentNotFound`, `CollectionNotFound`, `ValueError`, `DocumentStorageError` for
    the other codes) carrying `detail`.

    Attributes:
        code: the service's error code (`VERSION_CONFLICT`, `UNAUTHENTICATED`, ...).
        detail: the service's message: the exception text for INVALID_ARGUMENT, the code
            itself or a fixed text otherwise (the code when none is given).
    """

    def __init__(self, code: str, detail: str | None = None) -> None:
        self.code = code
        self.detail = detail = detail or code
        super().__init__(detail if detail.startswith(code) else f"{code}: {detail}")


class DocumentNotFoundError(DocumentServiceError):
    """No document has the requested id (`DOCUMENT_NOT_FOUND`)."""


class CollectionNotFoundError(DocumentServiceError):
    """The collection does not exist in the namespace (`COLLECTION_NOT_FOUND`)."""


class VersionConflictError(DocumentServiceError):
    """A create-only or compare-and-swap put met another version (`VERSION_CONFLICT`)."""


class UnauthenticatedError(DocumentServiceError):
    """The token is missing, invalid or expired (`UNAUTHENTICATED`): check the secret."""


class PermissionDeniedError(DocumentServiceError):
    """The identity may not do this (`PERMISSION_DENIED`)."""


class InvalidRequestError(DocumentServiceError):
    """The service found the request malformed (`INVALID_ARGUMENT`)."""


class PayloadTooLargeError(DocumentServiceError):
    """A message would exceed the broker's max_payload (`PAYLOAD_TOO_LARGE`)."""


class ServiceUnavailableError(DocumentServiceError):
    """The broker or the service does not answer (`UNAVAILABLE`, `DEADLINE_EXCEEDED`)."""


class VectorConfigError(EngineError):
    """The file's vector index holds vectors of other dimensions than the Store's index config."""


class ReadOnlyError(EngineError):
    """A write was asked of a file opened read-only (or one this process may not write)."""


class BusyError(EngineError):
    """Another connection held the file's write lock longer than the busy timeout."""


class NotOurFileError(EngineError):
    """The path holds something threadloom did not write; it was left untouched."""


class NotSQLiteError(NotOurFileError):
    """The path holds a file that is not an SQLite database."""


class DamagedDatabaseError(NotSQLiteError):
    """The path starts like an SQLite database but SQLite cannot read its schema."""


class LangGraphFileError(NotOurFileError):
    """The path holds a LangGraph SqliteSaver database, not a threadloom file."""


class ForeignDatabaseError(NotOurFileError):
    """The path holds another application's SQLite database."""


class LangGraphStoreFileError(ForeignDatabaseError):
    """The path holds a LangGraph SqliteStore database (`threadloom migrate --store` reads it)."""


class NaasDocumentsFileError(ForeignDatabaseError):
    """The path holds the naas document service's SQLite file (`threadloom migrate` reads it)."""


class MigrationError(ThreadloomError):
    """A migration source is missing, unreadable or of another kind, or a copy failed."""


class ThreadBusyError(EngineError):
    """Another run holds the thread's lease (`Saver.lease`): refused at once, never queued.

    Attributes:
        thread_id: the thread asked for.
        host, pid: where the holder runs.
        expires_at: when the holder's lease runs out unless it is renewed (a UTC datetime).
    """

    def __init__(
        self, message: str, *, thread_id: str, host: str, pid: int, expires_at: datetime
    ) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.host = host
        self.pid = pid
        self.expires_at = expires_at


class LeaseLostError(EngineError):
    """A lease ran out before its holder renewed it, and another run took the thread."""


class NaasMemoryWarning(UserWarning):
    """A naas project's agent memory is in two places (threadloom.naas): memory left in
    the fallback document store, or a bound saver beside the engine's own."""


class EmbedderError(ThreadloomError):
    """The embedder a re-embedding runs failed (`Store.reembed`, `threadloom reembed`);
    the pages embedded before it stay, and running again goes on from there."""


class UnembeddedItemsWarning(UserWarning):
    """A vector search ran beside items that have no vector (written without embeddings,
    e.g. by `threadloom migrate --store`): it cannot return them until they are embedded
    (`Store.reembed`, `threadloom reembed`)."""
