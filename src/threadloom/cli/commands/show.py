"""`threadloom show`: the last messages of a thread, as text, markdown or JSON (docs/cli.md)."""

from __future__ import annotations

import argparse

from threadloom.cli._conversations import (
    count,
    missing_thread,
    opened,
    operands,
    print_json,
    scope_arguments,
)
from threadloom.cli._transcript import markdown, transcript

HELP = "print the last messages of a thread"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `threadloom show`."""
    scope_arguments(parser, "+", "[FILE] THREAD", " THREAD")
    parser.add_argument(
        "--tail", type=count, default=20, metavar="N", help="messages (default: %(default)s)"
    )
    parser.add_argument(
        "--before", help="end the page before this position (a number) or message id"
    )
    parser.add_argument(
        "--checkpoint", metavar="ID", help="a root checkpoint (default: the newest)"
    )
    parser.add_argument("--channel", help="the messages channel (default: messages)", default=None)
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--markdown", action="store_true", help="print a markdown transcript")
    shown.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    """Print the transcript page (`Transcript.as_json()` plus `interrupts`, `errors`, the
    thread's `status`, its stored `bytes` and its Agent Server `server_records`)."""
    from threadloom.engine.conversations import ServerRecords, plain_elements, transcript_json

    path, (thread_id,) = operands(args, 1)
    before: int | str | None = args.before
    if isinstance(before, str) and before.isdigit():
        before = int(before)
    with opened(args, path) as store:
        info = store.thread(thread_id)
        if info is None:
            raise missing_thread(thread_id, args, path)
        tail = store.tail(
            thread_id,
            limit=args.tail,
            before=before,
            checkpoint_id=args.checkpoint,
            channel=args.channel,
        )
        page = transcript_json(
            thread_id, tail.checkpoint_id, tail.total, tail.start, plain_elements(tail)
        )
        head = tail.checkpoint_id
        waiting = store.histories.interrupts(thread_id, head) if head else []
        failed = store.histories.failures(thread_id, head) if head else []
        records = ServerRecords(store.file, store.scope).sizes([thread_id])
    page["interrupts"] = [found.as_json() for found in waiting]
    page["errors"] = [found.as_json() for found in failed]
    page["status"] = info.status
    page["bytes"] = info.bytes
    count_, size = records.get(thread_id, (0, 0))
    page["server_records"] = {"records": count_, "bytes": size}
    if args.json:
        print_json(page)
    elif args.markdown:
        print("\n".join(markdown(page, info.title)))
    else:
        print("\n".join(transcript(page)))
    return 0
