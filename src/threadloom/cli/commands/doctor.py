"""`threadloom doctor`: versions, SQLite build, the core backend and the on-disk format;
with `--db FILE`, what that file holds and how its content store shares and compresses."""

from __future__ import annotations

import json
import platform
from pathlib import Path

import apsw

from threadloom import __version__, core
from threadloom.engine.checks import figures
from threadloom.engine.format import FORMAT_VERSION
from threadloom.errors import CorruptionError, DamagedDatabaseError, EngineError

#: Exit status of `verify` when it found problems (docs/cli.md).
PROBLEMS_FOUND = 3


def report(db: str | None = None) -> dict[str, object]:
    """Return what `doctor` prints (with the file's figures when `db` is given)."""
    found: dict[str, object] = {
        "threadloom": __version__,
        "python": platform.python_version(),
        "sqlite": apsw.sqlite_lib_version(),
        "apsw": apsw.apsw_version(),
        "format_version": FORMAT_VERSION,
        "backend": core.backend(),
    }
    if db is not None:
        found.update(inspect(db))
    return found


def inspect(path: str) -> dict[str, object]:
    """Figures of one threadloom file, read without changing it (not even upgrading it)."""
    return figures(path)


def run_doctor(*, as_json: bool, db: str | None = None) -> int:
    """Print the report as a table or JSON; return 0."""
    found = report(db)
    if as_json:
        print(json.dumps(found, indent=2))
    else:
        width = max(map(len, found))
        for key, value in found.items():
            if isinstance(value, dict):
                print(key)
                inner = max(map(len, value), default=0)
                for name, item in value.items():
                    print(f"  {name:<{inner}}  {item}")
            elif isinstance(value, list) and all(isinstance(v, dict) for v in value):
                print(key)
                for item in value:
                    print("  " + "  ".join(f"{k}={v}" for k, v in item.items()))
            else:
                print(f"{key:<{width}}  {value}")
    return 0


def run_compact(db: str, *, as_json: bool = False) -> int:
    """Collect unreferenced values, sweep released blocks, retrain the file's dictionary,
    re-encode its bodies, rewrite mostly-dead extents and VACUUM it; print what it did."""
    from threadloom.engine import File
    from threadloom.engine.checks import compact

    if not Path(db).is_file():
        raise EngineError(f"{db!r} is not a file; give the path of a threadloom database")
    database = File.open(db, readonly=False)
    try:
        done = compact(database)
    finally:
        database.close()
    found = done.as_json()
    found["bytes_after"] = inspect(db)["file_bytes"]  # after the last close folded the WAL
    found["reclaimed"] = found["bytes_before"] - found["bytes_after"]
    if as_json:
        print(json.dumps(found, indent=2))
    else:
        print(
            f"{db}: {found['bytes_before']} -> {found['bytes_after']} bytes (reclaimed "
            f"{found['reclaimed']}: {found['values']} values, {found['blocks']} blocks, "
            f"{found['extents_rewritten']} extents rewritten, {found['pages_freed']} pages freed)"
        )
    return 0


def run_verify(db: str, *, quick: bool, as_json: bool) -> int:
    """Check a file (docs/cli.md, `verify`); print the report.

    Returns:
        0 when sound (leaks, blocks kept longer than needed, are reported, not failed),
        3 (`PROBLEMS_FOUND`) when a problem was found.

    Raises:
        EngineError: the file could not be checked (missing, not an SQLite file, another
            application's, an older format); the CLI exits 1. An SQLite file too damaged
            to open is a problem found (3).
    """
    from threadloom.engine import File
    from threadloom.engine.checks import Problem, Report, verify

    try:
        database = File.open(db, readonly=True)
    except (DamagedDatabaseError, CorruptionError, apsw.Error, UnicodeDecodeError) as exc:
        # An SQLite file SQLite cannot even open: that is what verify found.
        report = Report(quick=quick, checks=["sqlite"])
        report.add(Problem("sqlite", f"the file cannot be opened: {exc}"))
    else:
        try:
            report = verify(database, quick=quick)
        finally:
            database.close()
    if as_json:
        print(json.dumps({"file": db, **report.as_dict()}, indent=2))
    else:
        state = "sound" if report.sound else f"{len(report.problems) + report.omitted} problems"
        print(
            f"{db}: {report.threads} threads, {report.rows} rows, {report.blocks} blocks, "
            f"{report.extents} extents ({', '.join(report.checks)}): {state}"
        )
        for problem in report.problems:
            print(f"problem: {problem}")
        if report.omitted:
            print(f"problem: ... and {report.omitted} more")
        for line in report.leaks:
            print(f"leak: {line}")
    return 0 if report.sound else PROBLEMS_FOUND
