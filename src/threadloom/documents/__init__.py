"""The LangGraph collections of a threadloom file as document operations.

One implementation of the naas document service's operations over the file
(`service.FileDocuments`), its query language (`query`, pure) and its id index (`ids`),
behind two front ends: `threadloom serve` (`threadloom.nats.serve`, over NATS) and the
naas document adapter (`threadloom.naas`, in a naas engine's process). Refusals are
`threadloom.errors.DocumentServiceError`s with the service's codes. Thread bundles
(`bundles`: `pack`, `write`, `read`, `load`) hold a scope's documents in one file for
`threadloom bundle` / `unbundle`. Needs no extra.
"""

from __future__ import annotations

from threadloom.documents import bundles
from threadloom.documents.bundles import ThreadReport
from threadloom.documents.service import FileDocuments, Limits

__all__ = ["FileDocuments", "Limits", "ThreadReport", "bundles"]
