"""`threadloom demo`: run the demo agent (`threadloom.langgraph.demo`), whose memory
survives a restart."""

from __future__ import annotations

import argparse

HELP = "run a small agent whose memory survives restarts (no network)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `threadloom demo`."""
    parser.add_argument(
        "--db", default="threadloom-demo.db", help="SQLite file (default: %(default)s)"
    )
    parser.add_argument(
        "--thread", default="demo", help="conversation thread id (default: %(default)s)"
    )
    parser.add_argument("--turns", type=int, default=3, help="turns to run (default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    """Run the demo agent; return its exit status."""
    from threadloom.langgraph.demo import run_demo

    return run_demo(args.db, args.thread, args.turns)
