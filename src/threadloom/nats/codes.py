"""The error replies of the document service (SPEC §7.9).

Outer layer (nats). `ServiceError` carries a reply's `code` and `message`; the message is
the exception text only for INVALID_ARGUMENT, the code itself or a fixed text otherwise.
"""

from __future__ import annotations

#: The fixed text of UNAUTHENTICATED (SPEC §7.3).
UNAUTHENTICATED = "missing or invalid auth token"
#: The fixed text of the engine's `namespaces` refusal (SPEC §7.3).
NOT_PLATFORM = "namespaces needs a platform service identity"
#: The fixed text of a call outside the caller's grants (threadloom serve only).
NOT_GRANTED = "this identity is not granted this namespace (threadloom serve --grant)"


class ServiceError(Exception):
    """An error reply: `code` and `message` go into the response's CallError."""

    def __init__(self, code: str, message: str | None = None) -> None:
        super().__init__(message or code)
        self.code = code
        self.message = message or code
