"""`threadloom backup`: an online, consistent, verified copy of a file while its writers
run (docs/moving.md; the JSON report in docs/cli.md)."""

from __future__ import annotations

import argparse
import json

HELP = "copy the file while its writers run, verify the copy, then rename it into place"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `threadloom backup`."""
    parser.add_argument(
        "operands",
        nargs="+",
        metavar="[FILE] DEST",
        help="the threadloom file (or --db) and where to write: a file, or a folder for "
        "timestamped backups",
    )
    parser.add_argument("--db", help="the threadloom file (instead of the first argument)")
    parser.add_argument(
        "--keep",
        type=int,
        metavar="N",
        help="DEST is a folder: keep only the newest N backups of this file in it",
    )
    parser.add_argument(
        "--vacuum",
        action="store_true",
        help="write with VACUUM INTO (no free pages; slower) instead of SQLite's backup API",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(usage_error=parser.error)


def run(args: argparse.Namespace) -> int:
    """Back the file up; print the report; 0 once the copy verified and is in place."""
    from threadloom.cli._conversations import plural
    from threadloom.engine.checks import backup

    given = list(args.operands)
    if args.db is not None:
        given.insert(0, args.db)
    if len(given) != 2:
        args.usage_error("give the threadloom file and the destination: [FILE] DEST")
    source, dest = given
    report = backup(source, dest, keep=args.keep, method="vacuum" if args.vacuum else "pages")
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
        return 0
    print(
        f"{report.path}: {plural(report.threads, 'thread')}, "
        f"{plural(report.checkpoints, 'checkpoint')}, "
        f"{report.bytes:,} bytes, verified in {report.seconds:.2f} s"
    )
    for old in report.removed:
        print(f"removed {old}")
    return 0
