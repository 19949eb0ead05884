"""The errors of the document operations: a naas error code and its message (SPEC §7.9).

Both front ends turn them into what their callers expect: `threadloom serve` into a
reply's CallError, the naas adapter into naas's exceptions (`VersionConflict`,
`DocumentNotFound`, `CollectionNotFound`, `ValueError`). The message is the exception
text only for INVALID_ARGUMENT, the code itself or a fixed text otherwise.
"""

from __future__ import annotations


class ServiceError(Exception):
    """A refused operation: `code` (SPEC §7.9) and `message`."""

    def __init__(self, code: str, message: str | None = None) -> None:
        super().__init__(message or code)
        self.code = code
        self.message = message or code
