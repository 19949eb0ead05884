"""`threadloom demo`: run the demo agent (`threadloom.langgraph.demo`), whose memory
survives a restart."""

from __future__ import annotations

import argparse

from threadloom.cli._files import file_arguments, file_of

#: The file the demo writes when none is given.
DEFAULT_FILE = "threadloom-demo.db"

HELP = "run a small agent whose memory survives restarts (no network)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `threadloom demo`."""
    file_arguments(parser, default=DEFAULT_FILE, help=f"the SQLite file (default: {DEFAULT_FILE})")
    parser.add_argument(
        "--thread", default="demo", help="conversation thread id (default: %(default)s)"
    )
    parser.add_argument("--turns", type=int, default=3, help="turns to run (default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    """Run the demo agent; return its exit status."""
    from threadloom.langgraph.demo import run_demo

    path = file_of(args)
    assert path is not None  # it has a default
    return run_demo(path, args.thread, args.turns)
