"""`threadloom history`: a page of a thread's checkpoints, newest first (docs/cli.md)."""

from __future__ import annotations

import argparse
from datetime import datetime, timezone

from threadloom.cli._conversations import (
    missing_thread,
    opened,
    operands,
    page_arguments,
    print_json,
    scope_arguments,
    table,
)

HELP = "list a thread's checkpoints, newest first"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `threadloom history`."""
    scope_arguments(parser, "+", "[FILE] THREAD", " THREAD")
    parser.add_argument("--ns", help='only this checkpoint namespace ("" is the root)')
    page_arguments(parser, "a checkpoint id, or the `next` of the previous page")


def run(args: argparse.Namespace) -> int:
    """Print a page of the thread's checkpoints, newest first."""
    path, (thread_id,) = operands(args, 1)
    with opened(args, path) as store:
        page = store.histories.history(thread_id, ns=args.ns, limit=args.limit, before=args.before)
    if not page.found:
        raise missing_thread(thread_id, args, path)
    if args.json:
        print_json(page.as_json())
        return 0
    if not page.steps:
        print(f"thread {thread_id}: no checkpoints")
        return 0
    rows = []
    for step in page.steps:
        rows.append(
            [
                "-" if step.step is None else str(step.step),
                step.source or "-",
                ",".join(step.nodes) or "-",
                _utc(step.time),
                step.checkpoint_id,
                step.parent_id or "-",
                str(step.forks) if step.forks > 1 else "-",
                str(step.writes),
                step.checkpoint_ns or "-",
            ]
        )
    table(
        ["STEP", "SOURCE", "NODES", "TIME (UTC)", "CHECKPOINT", "PARENT", "FORKS", "WRITES", "NS"],
        rows,
        right={0, 6, 7},
    )
    if page.next is not None:
        print(f"more: --before {page.next}")
    return 0


def _utc(moment: str) -> str:
    try:
        found = datetime.fromisoformat(moment)
    except ValueError:
        return moment
    if found.tzinfo is not None:
        found = found.astimezone(timezone.utc)
    return found.strftime("%Y-%m-%d %H:%M:%S")
