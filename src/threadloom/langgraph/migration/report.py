"""The report of a migration: naas's `migrate-memory` shape, with what threadloom adds.

Adapter layer, no I/O. Totals are counters and the lists are capped, so a report holds
the same memory for ten threads or a million (`LISTED` entries per list, the rest
counted in `<list>_omitted`, as naas's job caps `diverged` at 200).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: The most entries a report's lists (diverged, skipped, conflicts, not_found) hold.
LISTED = 200


@dataclass
class ThreadReport:
    """What a migration found, and did, for one thread."""

    thread_id: str
    checkpoints: int = 0
    writes: int = 0
    present: int = 0
    missing: int = 0
    copied: int = 0
    writes_copied: int = 0
    diverged: bool = False
    skipped: bool = False
    conflict: str | None = None


@dataclass
class Capped:
    """A list that keeps its first `LISTED` entries and counts the others."""

    items: list[str] = field(default_factory=list)
    omitted: int = 0

    def add(self, item: str) -> None:
        if len(self.items) < LISTED:
            self.items.append(item)
        else:
            self.omitted += 1


@dataclass
class StoreReport:
    """What the Store copy found and did (`--store`)."""

    source: dict[str, Any]
    namespaces: int = 0
    items: int = 0
    present: int = 0
    missing: int = 0
    copied: int = 0
    embedded: bool = False
    #: Items copied (a dry run: to copy) without embeddings: vector search cannot find
    #: them until `threadloom reembed` gives them vectors.
    unembedded: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "namespaces": self.namespaces,
            "items": self.items,
            "present": self.present,
            "missing": self.missing,
            "copied": self.copied,
            "embedded": self.embedded,
            "unembedded": self.unembedded,
        }


@dataclass
class MigrationReport:
    """The report of `threadloom.migrate` and `threadloom migrate --json`.

    `as_dict()` gives naas's shape (`mode, source, target, threads, checkpoints, writes,
    copied, present, missing, diverged`, `diverged_omitted` when more than 200 diverged)
    plus `writes_copied`, `skipped` (diverged threads left alone), `conflicts` (a
    checkpoint id the target holds with other content), `not_found` (threads asked for
    that the source lacks), with the Store `store`, and `vacuumed` (the bytes before and
    after the VACUUM that ends a migration into a new file) or `vacuum_error`.
    """

    mode: str
    source: dict[str, Any]
    target: dict[str, Any]
    threads: int = 0
    checkpoints: int = 0
    writes: int = 0
    copied: int = 0
    present: int = 0
    missing: int = 0
    writes_copied: int = 0
    diverged: Capped = field(default_factory=Capped)
    skipped: Capped = field(default_factory=Capped)
    conflicts: Capped = field(default_factory=Capped)
    not_found: Capped = field(default_factory=Capped)
    store: StoreReport | None = None
    #: The target's bytes before and after the closing VACUUM (`migrate(vacuum=True)`).
    vacuumed: tuple[int, int] | None = None
    #: Why the closing VACUUM failed (the migration itself is complete).
    vacuum_error: str | None = None

    @property
    def applied(self) -> bool:
        """True when the migration wrote (`mode` "applied")."""
        return self.mode == "applied"

    def add(self, thread: ThreadReport) -> None:
        """Count one thread's report in."""
        self.threads += 1
        self.checkpoints += thread.checkpoints
        self.writes += thread.writes
        self.copied += thread.copied
        self.present += thread.present
        self.missing += thread.missing
        self.writes_copied += thread.writes_copied
        if thread.diverged:
            self.diverged.add(thread.thread_id)
        if thread.skipped:
            self.skipped.add(thread.thread_id)
        if thread.conflict is not None:
            self.conflicts.add(thread.conflict)

    def as_dict(self) -> dict[str, Any]:
        """The JSON report (docs/cli.md, `migrate`)."""
        out: dict[str, Any] = {
            "mode": self.mode,
            "source": self.source,
            "target": self.target,
            "threads": self.threads,
            "checkpoints": self.checkpoints,
            "writes": self.writes,
            "copied": self.copied,
            "present": self.present,
            "missing": self.missing,
            "diverged": list(self.diverged.items),
        }
        if self.diverged.omitted:
            out["diverged_omitted"] = self.diverged.omitted
        out["writes_copied"] = self.writes_copied
        for name in ("skipped", "conflicts", "not_found"):
            capped: Capped = getattr(self, name)
            out[name] = list(capped.items)
            if capped.omitted:
                out[f"{name}_omitted"] = capped.omitted
        if self.store is not None:
            out["store"] = self.store.as_dict()
        if self.vacuumed is not None:
            out["vacuumed"] = {"bytes_before": self.vacuumed[0], "bytes_after": self.vacuumed[1]}
        if self.vacuum_error is not None:
            out["vacuum_error"] = self.vacuum_error
        return out
