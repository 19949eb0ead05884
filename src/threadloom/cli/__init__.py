"""The `threadloom` command line: `main(argv) -> int`.

Exit codes: 0 ok, 1 error, 2 usage, 3 `verify` found problems. Errors go to stderr as
`error: what went wrong` and `hint: what to do`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from threadloom import __version__
from threadloom.cli._conversations import COMMANDS, add_parsers
from threadloom.errors import ThreadloomError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="threadloom", description="LangGraph agent memory in one SQLite file."
    )
    parser.add_argument("--version", action="version", version=f"threadloom {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    from threadloom.cli.commands import demo

    demo.add_arguments(
        commands.add_parser(
            "demo", help="run a small agent whose memory survives restarts (no network)"
        )
    )
    doctor = commands.add_parser("doctor", help="show versions and the file format in use")
    doctor.add_argument("--json", action="store_true", help="print JSON")
    doctor.add_argument("--db", help="also report what this threadloom file holds")
    compact = commands.add_parser(
        "compact",
        help="retrain the compression dictionary, re-encode every body and VACUUM a file",
    )
    compact.add_argument("--db", required=True, help="the threadloom file")
    compact.add_argument("--json", action="store_true", help="print what it did as JSON")
    verify = commands.add_parser(
        "verify",
        help="check everything a read depends on: SQLite's structure, every row's seal and "
        "body, every reference, the block counts (exit 0 sound, 3 problems, 1 not checked)",
    )
    verify.add_argument("--db", required=True, help="the threadloom file")
    verify.add_argument(
        "--quick",
        action="store_true",
        help="SQLite's quick_check, owners and block counts only; decode no body",
    )
    verify.add_argument("--json", action="store_true", help="print JSON")
    from threadloom.cli._transfer import add_arguments, add_serve_arguments

    add_arguments(
        commands.add_parser(
            "export", help="put threads of the file into the shared engine's document service"
        ),
        "to",
    )
    add_arguments(
        commands.add_parser(
            "import", help="copy threads of the shared engine's document service into the file"
        ),
        "from",
    )
    from threadloom.cli.commands.migrate import add_arguments as add_migrate_arguments

    add_migrate_arguments(
        commands.add_parser(
            "migrate",
            help="copy threads from a SqliteSaver file, a PostgresSaver database or naas "
            "into the file (dry run unless --apply)",
        )
    )
    add_serve_arguments(
        commands.add_parser(
            "serve",
            help="answer as the document service over NATS for the file (the naas SDK saver "
            "can use it as its memory)",
        )
    )
    add_parsers(commands)
    from threadloom.cli.commands import prune as prune_command

    prune_command.add_arguments(
        commands.add_parser(
            "prune",
            help="keep the last N checkpoints of each thread and delete idle threads "
            "(a dry run unless --apply)",
        )
    )
    from threadloom.cli.commands.view import add_arguments as add_view_arguments

    add_view_arguments(
        commands.add_parser(
            "view", help="serve a read-only web viewer of a file on 127.0.0.1 (the view extra)"
        )
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "demo":
            from threadloom.cli.commands import demo

            return demo.run(args)
        if args.command == "serve":
            from threadloom.cli._transfer import run_serve

            return run_serve(args)
        if args.command in COMMANDS:
            from threadloom.cli._conversations import run

            return run(args)
        if args.command == "prune":
            from threadloom.cli.commands.prune import run_prune

            return run_prune(args)
        if args.command == "view":
            from threadloom.cli.commands.view import run_view

            return run_view(args)
        if args.command == "migrate":
            from threadloom.cli.commands.migrate import run_migrate

            return run_migrate(args)
        if args.command in ("export", "import"):
            from threadloom.cli._transfer import run_transfer

            return run_transfer(args, "to" if args.command == "export" else "from")
        from threadloom.cli.commands.doctor import run_compact, run_doctor, run_verify

        if args.command == "compact":
            return run_compact(args.db, as_json=args.json)
        if args.command == "verify":
            return run_verify(args.db, quick=args.quick, as_json=args.json)
        return run_doctor(as_json=args.json, db=args.db)
    except ThreadloomError as exc:
        report(exc)
        return 1


def report(exc: BaseException) -> None:
    """Print an error as `error: ...` and, when its message says what to do, `hint: ...`.

    threadloom's messages say what went wrong, then (after "; ") what to do.
    """
    message = str(exc)
    what, _, hint = message.partition("; ")
    print(f"error: {what}", file=sys.stderr)
    if hint:
        print(f"hint: {hint}", file=sys.stderr)


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
