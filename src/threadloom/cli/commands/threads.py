"""`threadloom threads`: a page of the file's threads, most recent first (docs/cli.md)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from threadloom.cli._conversations import (
    elsewhere,
    opened,
    operands,
    page_arguments,
    print_json,
    scope_arguments,
    scope_text,
    size,
    table,
)
from threadloom.cli._transcript import cut

if TYPE_CHECKING:
    from threadloom.engine.threads import ThreadInfo

HELP = "list the threads of the file, most recent first"
#: Characters of a title in the `threads` table.
TITLE = 40
#: The statuses `--status` takes: `engine.threads.STATUSES`, named here so that building
#: the parser does not load the engine.
STATUSES = ("idle", "interrupted", "running", "error")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `threadloom threads`."""
    scope_arguments(parser, "*", "[FILE]", "")
    parser.add_argument("--owner", help="only this owner's threads")
    page_arguments(parser, "the `next` cursor of the previous page")
    parser.add_argument(
        "--order",
        choices=("updated", "created"),
        default="updated",
        help="by last write or by creation (default: %(default)s)",
    )
    parser.add_argument(
        "--status",
        choices=STATUSES,
        help="only threads that are idle, waiting on an interrupt, running (a live lease) "
        "or stopped by an error",
    )


def run(args: argparse.Namespace) -> int:
    """Print a page of the index, or `{"threads": [...], "next": cursor-or-null}`."""
    path, _ = operands(args, 0)
    options = {"owner": args.owner, "order": args.order, "status": args.status}
    with opened(args, path) as store:
        page = store.threads(limit=args.limit, before=args.before, **options)
        following = None
        if len(page) == args.limit and store.threads(limit=1, before=page[-1].cursor, **options):
            following = page[-1].cursor
    if args.json:
        print_json({"threads": [info.as_json() for info in page], "next": following})
        return 0
    if not page:
        which = f" {args.status}" if args.status else ""
        other = "" if args.owner or args.before or args.status else elsewhere(args, path)
        owner = f" of {args.owner!r}" if args.owner else ""
        print(other or f"no{which} threads{owner}{scope_text(args)}")
        return 0
    column = "CREATED" if args.order == "created" else "UPDATED"
    table(
        [
            *("THREAD", "STATUS", "OWNER", "TITLE", "MESSAGES", "CHECKPOINTS", "SIZE"),
            f"{column} (UTC)",
        ],
        [_row(info, args.order) for info in page],
        right={4, 5, 6},
    )
    if following is not None:
        print(f"more: --before {following}")
    return 0


def _row(info: ThreadInfo, order: str) -> list[str]:
    moment = info.created_at if order == "created" else info.updated_at
    return [
        info.thread_id,
        info.status,
        info.owner or "-",
        cut(info.title or "-", TITLE),
        str(info.messages),
        str(info.checkpoints),
        size(info.bytes),
        moment.strftime("%Y-%m-%d %H:%M:%S"),
    ]
