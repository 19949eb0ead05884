"""The `threadloom` command line: `main(argv) -> int`.

One module per command in `cli/commands/`, each with the same interface (`Command`):
`HELP`, `add_arguments(parser)` and `run(args) -> int`. `COMMANDS` registers them in
the order `--help` lists them, so a new command is one module and one line there.
Command modules import only the standard library, `threadloom.errors`, the protocol and
the helpers of `cli/` at their top level (building the parser imports every one of them);
the engine, LangGraph, NATS and the web stack are imported inside `run`.

Exit codes: 0 ok, 1 error, 2 usage, 3 `verify` found problems, 130 interrupted (Ctrl-C),
141 the reader of the output went away (a closed pipe). Errors go to stderr as
`error: what went wrong` and `hint: what to do`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Protocol, cast

from threadloom import __version__
from threadloom.cli import bar
from threadloom.cli._signals import interrupted, pipe_closed, watch_waits
from threadloom.errors import InvalidArgumentError, ThreadloomError

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
    ("sync", "sync"),
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
    ("agent-server", "agent_server"),
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
    """Run the command line; return the exit code.

    A reader that closed the pipe (`threadloom threads F | head -1`) ends the command
    quietly (`PIPE_CLOSED`); Ctrl-C ends it with what was done and how to resume
    (`INTERRUPTED`), never a traceback.
    """
    try:
        # Building the parser imports the protocol, which selects the core backend
        # (THREADLOOM_BACKEND): a bad value is a one-line error too.
        parser = _parser()
    except ThreadloomError as exc:
        report(exc)
        return 1
    args = parser.parse_args(argv)
    unreadable = next(
        (arg for arg in (sys.argv[1:] if argv is None else argv) if not utf8(arg)), None
    )
    if unreadable is not None:
        report(
            InvalidArgumentError(
                f"the argument {unreadable!r} is not UTF-8 text (bytes the terminal or a "
                "script passed as they were); give thread ids, paths and names as UTF-8 text"
            )
        )
        return 2
    watch_waits()
    bar.last = None  # progress of an earlier command of this process says nothing here
    try:
        return command(args.command).run(args)
    except ThreadloomError as exc:
        report(exc)
        return 1
    except BrokenPipeError:
        return pipe_closed()
    except KeyboardInterrupt:
        return interrupted(args.command)


def utf8(text: str) -> bool:
    """True when `text` is UTF-8 text (not bytes smuggled in as lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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
    code = main()
    try:
        sys.stdout.flush()  # what is still buffered, while a closed pipe can be caught
    except BrokenPipeError:
        code = pipe_closed()
    sys.exit(code)
