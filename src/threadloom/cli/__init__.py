"""The `threadloom` command line: `main(argv) -> int`.

One module per command in `cli/commands/`, each with the same interface (`Command`):
`HELP`, `add_arguments(parser)` and `run(args) -> int`. `COMMANDS` registers them in
the order `--help` lists them, so a new command is one module and one line there.
Command modules import only the standard library, `threadloom.errors`, the protocol and
the helpers of `cli/` at their top level (building the parser imports every one of them);
the engine, LangGraph, NATS and the web stack are imported inside `run`.

Exit codes: 0 ok, 1 error, 2 usage, 3 `verify` found problems. Errors go to stderr as
`error: what went wrong` and `hint: what to do`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Protocol, cast

from threadloom import __version__
from threadloom.errors import ThreadloomError

#: Every command, in the order `threadloom --help` lists them: its name, then its module
#: in `threadloom.cli.commands` (`import_`: `import` is a keyword).
COMMANDS: tuple[tuple[str, str], ...] = (
    ("demo", "demo"),
    ("doctor", "doctor"),
    ("compact", "compact"),
    ("verify", "verify"),
    ("backup", "backup"),
    ("export", "export"),
    ("import", "import_"),
    ("bundle", "bundle"),
    ("unbundle", "unbundle"),
    ("migrate", "migrate"),
    ("reembed", "reembed"),
    ("serve", "serve"),
    ("threads", "threads"),
    ("show", "show"),
    ("history", "history"),
    ("delete", "delete"),
    ("erase", "erase"),
    ("prune", "prune"),
    ("view", "view"),
)


class Command(Protocol):
    """What a module of `cli/commands/` provides."""

    #: The one line `threadloom --help` shows for the command.
    HELP: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add the command's arguments to its parser."""

    def run(self, args: argparse.Namespace) -> int:
        """Run the command with its parsed arguments; return the exit code.

        Raises:
            ThreadloomError: printed by `main` as `error:` and `hint:`; exit 1.
        """


def command(name: str) -> Command:
    """The module of the command `name` (imported on first use)."""
    module = dict(COMMANDS)[name]
    return cast(Command, importlib.import_module(f"{__name__}.commands.{module}"))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="threadloom", description="LangGraph agent memory in one SQLite file."
    )
    parser.add_argument("--version", action="version", version=f"threadloom {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, _ in COMMANDS:
        found = command(name)
        found.add_arguments(commands.add_parser(name, help=found.HELP))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    args = _parser().parse_args(argv)
    try:
        return command(args.command).run(args)
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
