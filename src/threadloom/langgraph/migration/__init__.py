"""`threadloom.migrate`: copy threads (and Store items) from another saver into a threadloom file.

Adapter layer. The sources (`sources/`) read LangGraph's PostgresSaver through its
public API, and SqliteSaver files and the naas document service's SQLite file through
their documented formats; the copier (`copier.py`) writes through a threadloom `Saver`; the
Store copier (`stores.py`) through a threadloom `Store`. A source is identified, and
refused when it is missing, unreadable or of another kind, before the target is opened,
so a refused migration changes nothing. A dry run (the default) writes nothing: a target
that does not exist stays absent, one that exists is opened read-only.

The kinds come from the registry in `sources/__init__.py`: `KINDS`, what a path or URL
is recognized as (`detect_kind`) and how it opens (`open_source`), with the Store source
of each kind that has one. To add a source:

1. write `sources/<kind>.py`: a `Source` (`describe`, `thread_ids`, `histories`, `close`;
   a LangGraph saver subclasses `SaverSource`) and the module's `KIND = SourceKind(...)`:
   its name, what messages call it, how it opens, and the `Found` of
   `engine.format.identify` that recognizes its files or the schemes of its URLs (and its
   `store` opener, if it holds a LangGraph Store);
2. register it: add its `KIND` to `REGISTERED` in `sources/__init__.py`.

The `--from` choices of `threadloom migrate` follow (`KINDS` plus the CLI's "nats"). A
refusal that lists the sources in prose (`detect_kind`'s "give the source: ...") names
today's kinds and is worth a look. Importing this package loads no LangGraph (the
command line reads `KINDS` for every command); `migrate` loads it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from threadloom.engine.format import Found, identify
from threadloom.errors import EngineError, InvalidArgumentError, MigrationError, NotOurFileError
from threadloom.langgraph.migration import sources
from threadloom.langgraph.migration.report import MigrationReport, StoreReport, ThreadReport
from threadloom.langgraph.migration.sources import KINDS, Options, Source, ThreadHistory
from threadloom.langgraph.migration.sources.postgres import ENV as POSTGRES_ENV
from threadloom.langgraph.migration.urls import redact
from threadloom.protocol import DEFAULT_AGENT_ID, DEFAULT_NAMESPACE

if TYPE_CHECKING:
    from langgraph.checkpoint.serde.base import SerializerProtocol

    from threadloom.langgraph.saver import Saver

__all__ = [
    "KINDS",
    "POSTGRES_ENV",
    "MigrationReport",
    "Source",
    "StoreReport",
    "ThreadHistory",
    "ThreadReport",
    "TARGETS",
    "detect_kind",
    "migrate",
    "open_source",
]

Progress = Callable[[int, int], None]

log = logging.getLogger("threadloom.migrate")


def _is_url(source: str) -> bool:
    return "://" in source and not Path(source).exists()


def detect_kind(source: str | None, kind: str | None = None) -> str:
    """The kind of `source` (a path or a URL), checked against `kind` when given.

    Raises:
        MigrationError: the source is missing, unreadable, of no kind threadloom migrates
            from, or of another kind than `kind` (the message names what it looks like).
    """
    chosen = sources.by_name(kind)
    if kind is not None and chosen is None:
        names = ", ".join(known.name for known in sources.REGISTERED)
        raise MigrationError(f"unknown source kind {kind!r}; give one of {names}")
    if source is None or source == "":
        if chosen is not None and chosen.env:
            return chosen.name
        raise MigrationError(
            "give the source: a SqliteSaver or naas document file, or --source-url "
            f"postgresql://... (or set {POSTGRES_ENV}) with --from postgres"
        )
    if _is_url(source):
        found = sources.by_scheme(source.split("://", 1)[0])
        if found is None:
            schemes = " or ".join(
                f"{known.schemes[0]}://" for known in sources.REGISTERED if known.schemes
            )
            raise MigrationError(
                f"{redact(source)} is a URL threadloom cannot read from; give a {schemes} "
                "URL, or the path of a file"
            )
        if chosen is not None and chosen is not found:
            raise MigrationError(
                f"{redact(source)} is {found.wanted}, not {chosen.wanted}; use --from {found.name}"
            )
        return found.name
    path = source
    if not os.path.exists(path):
        raise MigrationError(
            f"no such file: {path!r}; give the SqliteSaver or naas document file to migrate from"
        )
    try:
        identity = identify(path)
    except NotOurFileError as exc:  # not SQLite, or damaged
        raise MigrationError(str(exc).replace("nor a threadloom file", "nor a source")) from None
    except Exception as exc:  # a directory, permissions
        raise MigrationError(str(exc)) from None
    found_kind = sources.by_found(identity.found)
    if found_kind is None:
        raise MigrationError(_refusal(path, identity.found, identity.description))
    if chosen is not None and chosen is not found_kind:
        raise MigrationError(
            f"{path!r} looks like {identity.description}, not {chosen.wanted}; it was left "
            f"untouched: use --from {found_kind.name}"
        )
    return found_kind.name


def _refusal(path: str, found: Found, description: str) -> str:
    if found is Found.THREADLOOM:
        return (
            f"{path!r} is a threadloom file already, so there is nothing to migrate; open it "
            "with threadloom.Saver"
        )
    if found is Found.SQLITE_STORE:
        return (
            f"{path!r} is {description}: it holds Store items, no checkpoints; copy them "
            f"with --store --store-source {path}"
        )
    if found is Found.NEW:
        return f"{path!r} is empty (no tables), so it holds nothing to migrate"
    return (
        f"{path!r} is {description}, not a SqliteSaver or naas document file; it was left untouched"
    )


def open_source(
    source: str | None,
    kind: str | None = None,
    *,
    namespace: str = DEFAULT_NAMESPACE,
    agent_id: str = DEFAULT_AGENT_ID,
    serde: SerializerProtocol | None = None,
) -> Source:
    """Open a source for reading (see `detect_kind` for what it accepts and refuses)."""
    chosen = sources.by_name(kind)
    if chosen is not None and chosen.env and not source:
        source = os.environ.get(chosen.env)
        if not source:
            raise MigrationError(chosen.unset)
    found = sources.by_name(detect_kind(source, kind))
    assert source is not None and found is not None
    return found.opens(source, Options(namespace, agent_id, serde))


def migrate(
    source: str | None,
    target: str | os.PathLike[str] | Saver | None,
    *,
    kind: str | None = None,
    threads: Sequence[str] | None = None,
    apply: bool = False,
    namespace: str = DEFAULT_NAMESPACE,
    agent_id: str = DEFAULT_AGENT_ID,
    include_diverged: bool = False,
    serde: SerializerProtocol | None = None,
    store: bool = False,
    store_source: str | None = None,
    store_index: Any = None,
    progress: Progress | None = None,
    refuse_unknown: bool = False,
    to: str | None = None,
    vacuum: bool = True,
) -> MigrationReport:
    """Copy threads from a LangGraph saver or a naas document file into a threadloom file,
    or (`to="postgres"`) from a threadloom file into LangGraph's PostgresSaver tables.

    Oldest first, only what the target lacks, dry run unless `apply`; rerunning copies
    nothing; an interrupted run resumes where it stopped (docs/cli.md, `migrate`). With
    `to="postgres"` the direction is reversed (docs/moving.md, "To PostgreSQL"): `source`
    is the threadloom file, `target` the database's URL (None: `$POSTGRES_URL`), `store`
    copies the file's Store into the database's PostgresStore, and `kind`,
    `store_source` and `store_index` do not apply (`outbound.migrate_out`).

    Args:
        source: a SqliteSaver file, a naas document service SQLite file, or a PostgreSQL
            URL (None with `kind="postgres"`: `$POSTGRES_URL`).
        target: the threadloom file (created when applying), or an open `Saver`.
        kind: "sqlite", "postgres" or "naas-sqlite" (default: what the source looks like;
            given, a source of another kind is refused).
        threads: the thread ids (default: every thread of the source).
        apply: write; otherwise a dry run that reads the target too.
        namespace, agent_id: the target's scope (and the naas file's scope to read).
        include_diverged: also write threads whose target diverged.
        serde: the serializer of the source's values and of the target (default
            LangGraph's JsonPlusSerializer).
        store: also copy the LangGraph Store items (SqliteStore / PostgresStore).
        store_source: where the Store is (default: the source, a file or URL).
        store_index: the target Store's IndexConfig, to embed the copied items.
        progress: called with (threads done, threads to do) after each thread.
        refuse_unknown: a thread of `threads` that the source lacks is an error, raised
            before anything is written (the command line's `--thread`); otherwise it is
            listed in the report's `not_found`.
        to: None (into a threadloom file) or "postgres" (out of one, see above).
        vacuum: when this run created the target file, end by rewriting it without free
            pages, its b-trees dense (VACUUM, which needs free disk space about the file's
            size; the report's `vacuumed`). A VACUUM that fails (a full disk, another
            process on the file) leaves the migrated file as written and says why in the
            report's `vacuum_error`. A file that existed before is never rewritten:
            `threadloom compact` does that when its users are stopped.

    Raises:
        MigrationError: the source is missing, unreadable, of another kind, or failed
            mid-run; with `refuse_unknown`, a thread asked for is not in the source.
    """
    if to is not None:
        return _out(source, target, to, kind, threads, apply, namespace, agent_id,
                    include_diverged, serde, store, store_source, store_index, progress,
                    refuse_unknown)  # fmt: skip
    # Loaded here, not with the package: they import LangGraph (see the module docstring).
    from threadloom.langgraph.migration.copier import Copier
    from threadloom.langgraph.migration.stores import StoreSource, copy_store
    from threadloom.langgraph.saver import Saver

    if isinstance(threads, (str, bytes)):
        raise InvalidArgumentError(f"threads must be a list of ids, not one string: [{threads!r}]")
    opened = open_source(source, kind, namespace=namespace, agent_id=agent_id, serde=serde)
    saver: Saver | None
    owned = False
    items: StoreSource | None = None
    try:
        if store:  # opened first too: a Store that cannot be read changes nothing either
            items = StoreSource(store_source if store_source is not None else source)
        names = list(threads) if threads is not None else opened.thread_ids()
        if refuse_unknown and threads is not None:
            _refuse_unknown(opened, names)
        if target is None:
            raise InvalidArgumentError("give the target: the threadloom file to migrate into")
        created = False
        if isinstance(target, Saver):
            saver, path = target, target.file.path
        else:
            path = os.fspath(target)
            _not_the_source(path, source)
            created = apply and not os.path.exists(path)
            if apply:
                saver = Saver(path, namespace=namespace, agent_id=agent_id, serde=serde)
                owned = True
            elif os.path.exists(path):
                saver = Saver(
                    path, namespace=namespace, agent_id=agent_id, serde=serde, readonly=True
                )
                owned = True
            else:
                saver = None
        report = MigrationReport(
            "applied" if apply else "dry-run",
            opened.describe(),
            {
                "path": str(path),
                "namespace": saver.namespace if saver is not None else namespace,
                "agent_id": saver.agent_id if saver is not None else agent_id,
                "schema": 2,
            },
        )
        try:
            copier = Copier(saver, apply=apply, include_diverged=include_diverged)
            wanted = set(threads) if threads is not None else None
            for done, history in enumerate(opened.histories(names), start=1):
                report.add(copier.copy(history))
                if wanted is not None:
                    wanted.discard(history.thread_id)
                if progress is not None:
                    progress(done, len(names))
            for missing in sorted(wanted or ()):
                report.not_found.add(missing)
            if items is not None:
                if owned and saver is not None:
                    saver.close()  # the Store opens the same file (shares it) next
                    owned = False
                report.store = copy_store(items, str(path), apply=apply, index=store_index)
        finally:
            if owned and saver is not None:
                saver.close()
        if created and vacuum:
            try:
                report.vacuumed = _vacuum(str(path))
            except EngineError as exc:  # every thread is in: the migration stands
                report.vacuum_error = str(exc)
                log.warning("%s: the migration is complete, the VACUUM after it is not: %s",
                            path, exc)  # fmt: skip
    finally:
        if items is not None:
            items.close()
        opened.close()
    return report


def _vacuum(path: str) -> tuple[int, int]:
    """VACUUM the file this migration created; its bytes before and after."""
    from threadloom.engine import File
    from threadloom.engine.checks import vacuum

    file = File.open(path)
    try:
        return vacuum(file)
    finally:
        file.close()


#: Thread ids a refusal of unknown threads lists of what the source holds.
LISTED = 10
#: The kinds of target `to=` names (`threadloom migrate --to`).
TARGETS = ("postgres",)


def _out(
    source: str | None,
    target: str | os.PathLike[str] | Saver | None,
    to: str,
    kind: str | None,
    threads: Sequence[str] | None,
    apply: bool,
    namespace: str,
    agent_id: str,
    include_diverged: bool,
    serde: SerializerProtocol | None,
    store: bool,
    store_source: str | None,
    store_index: Any,
    progress: Progress | None,
    refuse_unknown: bool,
) -> MigrationReport:
    """`migrate(..., to="postgres")`: the way out (`outbound.migrate_out`)."""
    from threadloom.langgraph.migration.outbound import migrate_out

    if to not in TARGETS:
        raise MigrationError(f'unknown target kind {to!r}; give to="postgres"')
    if kind is not None or store_source is not None or store_index is not None:
        raise MigrationError(
            "kind, store_source and store_index name a source to migrate in; leave them "
            'out with to="postgres", which reads the threadloom file given as source'
        )
    if source is None:
        raise MigrationError("give the threadloom file to migrate out of as the source")
    if isinstance(target, os.PathLike):
        target = os.fspath(target)
    if target is not None and not isinstance(target, str):
        raise MigrationError("give the PostgreSQL URL as the target (a string), or None")
    return migrate_out(
        source,
        target,
        threads=threads,
        apply=apply,
        namespace=namespace,
        agent_id=agent_id,
        include_diverged=include_diverged,
        serde=serde,
        store=store,
        progress=progress,
        refuse_unknown=refuse_unknown,
    )


def _refuse_unknown(opened: Source, names: Sequence[str]) -> None:
    """Refuse threads the source lacks, naming some it holds and how to see them all."""
    held = opened.thread_ids()
    unknown = sorted(set(names) - set(held))
    if not unknown:
        return
    described = opened.describe()
    where = described.get("path") or described.get("url") or described["kind"]
    asked = ", ".join(repr(t) for t in unknown[:LISTED]) + (
        ", ..." if len(unknown) > LISTED else ""
    )
    if not held:
        holds = "which holds no threads"
    else:
        listed = ", ".join(held[:LISTED]) + (", ..." if len(held) > LISTED else "")
        holds = f"which holds {len(held)} thread{'s' if len(held) != 1 else ''}: {listed}"
    verb = "are" if len(unknown) > 1 else "is"
    raise MigrationError(
        f"thread{'s' if len(unknown) > 1 else ''} {asked} {verb} not in {where}, {holds}; "
        "give --thread one of the source's threads, or leave --thread out to migrate every "
        "thread (a dry run without --thread changes nothing)"
    )


def _not_the_source(target: str, source: str | None) -> None:
    if (
        source
        and os.path.exists(source)
        and os.path.exists(target)
        and os.path.samefile(source, target)
    ):
        raise MigrationError(
            f"the target {target!r} is the source itself; give a new path for the threadloom file"
        )
