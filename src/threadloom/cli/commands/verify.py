"""`threadloom verify`: check everything a read depends on (docs/cli.md, `verify`).

Exit 0 when sound, 3 (`PROBLEMS_FOUND`) when a problem was found, 1 when the file could
not be checked at all.
"""

from __future__ import annotations

import argparse
import json

from threadloom.cli._files import file_arguments, file_of

#: Exit status of `verify` when it found problems (docs/cli.md).
PROBLEMS_FOUND = 3

HELP = (
    "check everything a read depends on: SQLite's structure, every row's seal and "
    "body, every reference, the block counts (exit 0 sound, 3 problems, 1 not checked)"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `threadloom verify`."""
    file_arguments(parser)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="SQLite's quick_check, owners and block counts only; decode no body",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    """Check a file; print the report.

    Returns:
        0 when sound (leaks, blocks kept longer than needed, are reported, not failed),
        3 (`PROBLEMS_FOUND`) when a problem was found.

    Raises:
        EngineError: the file could not be checked (missing, not an SQLite file, another
            application's, an older format); the CLI exits 1. An SQLite file too damaged
            to open is a problem found (3).
    """
    import apsw

    from threadloom.engine import File
    from threadloom.engine.checks import Problem, Report, verify
    from threadloom.errors import CorruptionError, DamagedDatabaseError

    db, quick = file_of(args), args.quick
    assert db is not None  # required: file_of exits without it
    try:
        file = File.open(db, readonly=True)
    except (DamagedDatabaseError, CorruptionError, apsw.Error, UnicodeDecodeError) as exc:
        # An SQLite file SQLite cannot even open: that is what verify found.
        report = Report(quick=quick, checks=["sqlite"])
        report.add(Problem("sqlite", f"the file cannot be opened: {exc}"))
    else:
        try:
            report = verify(file, quick=quick)
        finally:
            file.close()
    if args.json:
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
