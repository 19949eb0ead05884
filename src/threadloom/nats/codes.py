"""The error replies of the document service (SPEC §7.9).

Outer layer (nats): the fixed texts of the refusals only `threadloom serve` makes. The
error itself is `threadloom.errors.DocumentServiceError`.
"""

from __future__ import annotations

#: The fixed text of UNAUTHENTICATED (SPEC §7.3).
UNAUTHENTICATED = "missing or invalid auth token"
#: The fixed text of the engine's `namespaces` refusal (SPEC §7.3).
NOT_PLATFORM = "namespaces needs a platform service identity"
#: The fixed text of a call outside the caller's grants (threadloom serve only).
NOT_GRANTED = "this identity is not granted this namespace (threadloom serve --grant)"


__all__ = ["NOT_GRANTED", "NOT_PLATFORM", "UNAUTHENTICATED"]
