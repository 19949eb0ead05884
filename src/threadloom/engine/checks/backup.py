"""`threadloom backup`: an online, consistent copy of a file while writers run.

Engine layer. The copy is taken from one read snapshot of the source: SQLite's backup
API (`pages`, the default) steps through the pages of a connection that holds a read
transaction for the whole copy, so the backup never restarts when writers commit and
sees exactly one committed state; `VACUUM INTO` (`compact`) writes the same state
rebuilt without free pages. In WAL mode a reader never blocks a writer either way;
what a long copy costs the writers is a WAL that cannot be checkpointed past the
snapshot until the copy ends (`bench/bench_backup.py` measures both).

Invariants:
- the copy is written to a temporary name beside the destination, synced, and renamed
  only after `verify` reports it sound: a destination is either the old backup or a
  whole, verified new one;
- a destination that exists and is not a threadloom file, or that is the source, is
  refused and left untouched;
- rotation (`keep`) removes only files of the backup naming in the destination folder
  that are threadloom files.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import apsw

from threadloom.engine.checks.verify import verify
from threadloom.engine.file import File
from threadloom.engine.format.recognize import Kind, has_content, recognize
from threadloom.engine.sql import fetchall
from threadloom.errors import CorruptionError, EngineError, InvalidArgumentError, ThreadloomError

#: Pages one step of the backup API copies (16 MiB at 4 KiB pages): between steps the
#: GIL and the source connection's mutex are released.
STEP_PAGES = 4096
#: How a backup in a folder is named: `<stem>-<UTC time to the millisecond>Z<suffix>`,
#: so names sort by time (`memory.db` -> `memory-20261202T035012.345Z.db`).
STAMP = "%Y%m%dT%H%M%S"
METHODS = ("pages", "vacuum")


@dataclass
class BackupReport:
    """What `backup` wrote (the JSON report of `threadloom backup`)."""

    source: str
    path: str
    method: str
    bytes: int = 0
    pages: int = 0
    page_size: int = 0
    steps: int = 0
    seconds: float = 0.0
    copy_seconds: float = 0.0
    verify_seconds: float = 0.0
    verified: bool = False
    threads: int = 0
    checkpoints: int = 0
    store_items: int = 0
    removed: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def backup(
    path: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    keep: int | None = None,
    *,
    method: str = "pages",
) -> BackupReport:
    """Copy the threadloom file `path` to `dest` while its writers run, and verify it.

    Args:
        path: the threadloom file (opened as every threadloom process opens it).
        dest: a file path (an earlier backup there is replaced), or a folder (an existing
            one, or one named with a trailing `/`, made if missing):
            the copy is then named `<stem>-<UTC time>Z<suffix>` after the source.
        keep: with a folder, keep only the newest `keep` backups of this naming.
        method: "pages" (SQLite's backup API, page by page from one snapshot) or
            "vacuum" (`VACUUM INTO`: the same snapshot without free pages).

    Raises:
        InvalidArgumentError: an unknown method, or `keep` without a folder or below 1.
        EngineError: the source is not a file, the destination is the source, is in use,
            or exists and is not a threadloom file (each left untouched).
        CorruptionError: the copy did not verify sound (it is removed; the source is
            damaged: see `threadloom verify`).
    """
    if method not in METHODS:
        raise InvalidArgumentError(f"unknown backup method {method!r}; use one of {METHODS}")
    source = str(path)
    if not Path(source).is_file():
        raise EngineError(f"{source!r} is not a file; give the threadloom file to back up")
    if recognize(source) is not Kind.OURS:
        raise EngineError(f"{source!r} holds no threadloom data yet; there is nothing to back up")
    target, folder = _destination(source, str(dest), keep)
    report = BackupReport(source=source, path=target, method=method)
    partial = str(Path(target).with_name(f".{Path(target).name}.{os.getpid()}.partial"))
    started = time.perf_counter()
    file = File.open(source)
    try:
        try:
            _copy(file, partial, method, report)
        finally:
            file.close()
        report.copy_seconds = round(time.perf_counter() - started, 3)
        checked = time.perf_counter()
        _check(partial, report)
        report.verify_seconds = round(time.perf_counter() - checked, 3)
        os.replace(partial, target)
        _sync_folder(target)
    finally:
        _remove(partial)
    report.bytes = os.path.getsize(target)
    if folder and keep is not None:
        report.removed = rotate(Path(target).parent, source, keep)
    report.seconds = round(time.perf_counter() - started, 3)
    return report


def backup_name(source: str, when: datetime.datetime | None = None) -> str:
    """The file name of a backup of `source` taken at `when` (UTC; default now)."""
    when = when or datetime.datetime.now(datetime.timezone.utc)
    name = Path(source)
    stamp = f"{when.strftime(STAMP)}.{when.microsecond // 1000:03d}Z"
    return f"{name.stem}-{stamp}{name.suffix}"


def backups(folder: str | os.PathLike[str], source: str) -> list[Path]:
    """The backups of `source` in `folder` by their naming, oldest first."""
    name = Path(source)
    pattern = re.compile(
        re.escape(name.stem) + r"-\d{8}T\d{6}\.\d{3}Z" + re.escape(name.suffix) + "$"
    )
    return sorted(p for p in Path(folder).iterdir() if pattern.match(p.name) and p.is_file())


def rotate(folder: str | os.PathLike[str], source: str, keep: int) -> list[str]:
    """Remove all but the newest `keep` backups of `source` in `folder`; return those
    removed. A file of the naming that is not a threadloom file is left alone."""
    removed = []
    found = backups(folder, source)
    for old in found[: max(len(found) - keep, 0)]:
        try:
            ours = recognize(str(old)) is Kind.OURS
        except ThreadloomError:
            ours = False
        if ours and not os.path.exists(f"{old}-wal"):
            old.unlink()
            removed.append(str(old))
    return removed


def _destination(source: str, dest: str, keep: int | None) -> tuple[str, bool]:
    """The path to write and whether `dest` is a folder; refuse what must not be written."""
    if keep is not None and keep < 1:
        raise InvalidArgumentError(f"keep must be 1 or more, not {keep}; or leave it out")
    if dest.endswith(("/", os.sep)) and not os.path.lexists(dest):
        Path(dest).mkdir()  # a trailing separator names a folder: made if missing
    folder = Path(dest).is_dir()
    if keep is not None and not folder:
        raise InvalidArgumentError(
            f"keep needs a folder to rotate in, and {dest!r} is not one; create the folder "
            "and give it as the destination"
        )
    target = str(Path(dest) / backup_name(source)) if folder else dest
    parent = Path(target).parent
    if not parent.is_dir():
        raise EngineError(
            f"the folder of {target!r} does not exist; create it or give another destination"
        )
    if _same(source, target) or any(_same(f"{source}{s}", target) for s in ("-wal", "-shm")):
        raise EngineError(f"{target!r} is the file being backed up; give another path or a folder")
    if os.path.lexists(target):
        _replaceable(target)
    return target, folder


def _same(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _replaceable(target: str) -> None:
    """Refuse an existing destination unless it is a threadloom file nobody has open."""
    if not Path(target).is_file():
        raise EngineError(
            f"{target!r} exists and is not a file; give a new path, an existing backup, or a folder"
        )
    try:
        ours = recognize(target) is Kind.OURS
    except ThreadloomError:
        ours = False
    if not ours and os.path.getsize(target) > 0:
        raise EngineError(
            f"{target!r} exists and is not a threadloom backup; it was left untouched: "
            "give a new path, a folder, or move that file away first"
        )
    if has_content(f"{target}-wal"):
        raise EngineError(
            f"{target!r} is in use (it has a -wal with content); close what has it open, "
            "or back up to another path"
        )


def _copy(file: File, partial: str, method: str, report: BackupReport) -> None:
    """Write one snapshot of `file` to `partial`, synced to disk."""
    _remove(partial)
    if method == "vacuum":
        with file.connection() as conn:
            conn.execute("VACUUM INTO ?", (partial,))
    else:
        with file.read() as conn:
            # The first read fixes the snapshot the whole copy is taken from; the backup
            # then steps inside this read transaction and never restarts.
            fetchall(conn, "SELECT count(*) FROM sqlite_schema")
            target = apsw.Connection(partial)
            try:
                with target.backup("main", conn, "main") as copying:
                    copying.step(STEP_PAGES)
                    report.steps += 1
                    # Each step's pages go to disk before the next: the copy never piles
                    # up a gigabyte of dirty pages for a writer's next fsync to wait on.
                    synced = os.open(partial, os.O_RDONLY)
                    try:
                        while not copying.done:
                            os.fsync(synced)
                            copying.step(STEP_PAGES)
                            report.steps += 1
                    finally:
                        os.close(synced)
            finally:
                target.close()
    if not file.readonly:
        # What writers appended during the copy waited behind its snapshot; fold it in
        # here, so no writer's commit pays for it (a passive checkpoint never waits, and a
        # writer's own automatic one gives way while this one runs).
        with file.connection() as conn, contextlib.suppress(apsw.BusyError):
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    with open(partial, "rb+") as handle:
        os.fsync(handle.fileno())


def _check(partial: str, report: BackupReport) -> None:
    """Verify the copy; fill the report's figures from it; raise when it is not sound."""
    copy = File(partial, readonly=True)
    try:
        found = verify(copy)
        with copy.read() as conn:
            report.page_size = int(fetchall(conn, "PRAGMA page_size")[0][0])
            report.pages = int(fetchall(conn, "PRAGMA page_count")[0][0])
            report.threads = int(fetchall(conn, "SELECT count(*) FROM threads")[0][0])
            report.checkpoints = int(fetchall(conn, "SELECT count(*) FROM checkpoints")[0][0])
            report.store_items = int(fetchall(conn, "SELECT count(*) FROM store_items")[0][0])
    finally:
        copy.close()
    if not found.sound:
        problems = "; ".join(str(p) for p in found.problems[:3])
        raise CorruptionError(
            f"the copy of {report.source!r} did not verify ({problems}) and was removed; "
            f"run `threadloom verify --db {report.source}` and restore the source from "
            "an earlier backup"
        )
    report.verified = True


def _remove(partial: str) -> None:
    for suffix in ("", "-journal", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial + suffix)


def _sync_folder(target: str) -> None:
    """Make the rename durable (POSIX: sync the folder's entry)."""
    with contextlib.suppress(OSError):
        fd = os.open(str(Path(target).parent), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
