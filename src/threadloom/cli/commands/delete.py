"""`threadloom delete`: delete threads whole (every checkpoint, write and value)."""

from __future__ import annotations

import argparse

from threadloom.cli._conversations import (
    listing,
    opened,
    operands,
    plural,
    print_json,
    scope_arguments,
    scope_text,
    size,
)
from threadloom.cli.bar import Bar
from threadloom.errors import EngineError

HELP = "delete threads (every checkpoint, write and value)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `threadloom delete`."""
    scope_arguments(parser, "+", "[FILE] THREAD...", " THREAD [THREAD ...]")
    parser.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    """Delete the threads found; 1 (after deleting those) when any is missing."""
    path, thread_ids = operands(args, "+")
    wanted = list(dict.fromkeys(thread_ids))
    with opened(args, path) as store:
        infos = {tid: store.thread(tid) for tid in wanted}
    found = [info for info in infos.values() if info is not None]
    missing = [tid for tid, info in infos.items() if info is None]
    progress = Bar("threads", "deleting", enabled=not args.json)
    if found:
        # Opened writable only when there is something to delete: a scope the file
        # never held is not created.
        with opened(args, path, write=True) as store:
            try:
                for number, info in enumerate(found, 1):
                    progress(number - 1, len(found), info.thread_id)
                    store.maintenance.delete_thread(info.thread_id)
            finally:
                progress.end()
    if args.json:
        print_json(
            {
                "deleted": [
                    {
                        "thread_id": info.thread_id,
                        "checkpoints": info.checkpoints,
                        "messages": info.messages,
                        "bytes": info.bytes,
                    }
                    for info in found
                ],
                "missing": missing,
            }
        )
    else:
        for info in found:
            print(
                f"deleted {info.thread_id} ({plural(info.checkpoints, 'checkpoint')}, "
                f"{plural(info.messages, 'message')}, {size(info.bytes)})"
            )
    if missing:
        names = ", ".join(repr(tid) for tid in missing)
        deleted = "the others were deleted; " if found else ""
        noun = "threads" if len(missing) > 1 else "thread"
        raise EngineError(
            f"no {noun} {names} in {path}{scope_text(args)}; {listing(args, path, deleted)}"
        )
    return 0
