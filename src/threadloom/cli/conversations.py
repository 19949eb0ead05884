"""`threadloom threads | show | history | delete | erase`: conversations from a shell.

CLI layer. Everything is read class-free: the scope is opened without a serializer and
values are shown in their plain form (`protocol.plain`), so no LangGraph, LangChain or
application class is imported and no pickle is loaded. Read commands open the file
read-only and never change it; `delete` and `erase --apply` open it writable. The JSON
of every read command (`--json`) is the contract docs/cli.md gives.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from threadloom.cli._transcript import cut, markdown, transcript
from threadloom.errors import EngineError, InvalidArgumentError
from threadloom.protocol import DEFAULT_AGENT_ID, DEFAULT_NAMESPACE, MAX_PAGE
from threadloom.protocol.labels import encode_label

if TYPE_CHECKING:
    from threadloom.engine import CheckpointStore
    from threadloom.engine.threads import ThreadInfo

#: The commands of this module.
COMMANDS = ("threads", "show", "history", "delete", "erase")
#: Characters of a title in the `threads` table.
TITLE = 40


def add_parsers(commands: Any) -> None:
    """Add the conversation commands to the `threadloom` subparsers."""
    threads = _command(commands, "threads", "list the threads of the file, most recent first")
    threads.add_argument("--owner", help="only this owner's threads")
    _paging(threads, "the `next` cursor of the previous page")
    threads.add_argument(
        "--order",
        choices=("updated", "created"),
        default="updated",
        help="by last write or by creation (default: %(default)s)",
    )
    show = _command(commands, "show", "print the last messages of a thread")
    show.add_argument(
        "--tail", type=_count, default=20, metavar="N", help="messages (default: %(default)s)"
    )
    show.add_argument("--before", help="end the page before this position (a number) or message id")
    show.add_argument("--checkpoint", metavar="ID", help="a root checkpoint (default: the newest)")
    show.add_argument("--channel", help="the messages channel (default: messages)", default=None)
    shown = show.add_mutually_exclusive_group()
    shown.add_argument("--markdown", action="store_true", help="print a markdown transcript")
    shown.add_argument("--json", action="store_true", help="print JSON")
    history = _command(commands, "history", "list a thread's checkpoints, newest first")
    history.add_argument("--ns", help='only this checkpoint namespace ("" is the root)')
    _paging(history, "a checkpoint id, or the `next` of the previous page")
    delete = _command(commands, "delete", "delete threads (every checkpoint, write and value)")
    delete.add_argument("--json", action="store_true", help="print JSON")
    erase = _command(
        commands,
        "erase",
        "erase every thread of an owner and their Store items (dry run unless --apply)",
    )
    erase.add_argument("--owner", required=True, help="the owner the thread index records")
    erase.add_argument(
        "--apply", action="store_true", help="erase (default: a dry run that only reads)"
    )
    store = erase.add_mutually_exclusive_group()
    store.add_argument(
        "--store-prefix",
        action="append",
        metavar="LABEL.LABEL...",
        help="a Store namespace prefix of the owner's, labels as stored joined by '.', "
        "with {owner} standing for the owner's label as OwnerStore encodes it, e.g. "
        "acme.user.{owner} (repeatable; default: {owner}, the owner's OwnerStore root)",
    )
    store.add_argument("--no-store", action="store_true", help="leave the Store alone")
    erase.add_argument(
        "--force",
        action="store_true",
        help="also erase threads a live run holds the lease of (the run loses it)",
    )
    erase.add_argument("--json", action="store_true", help="print the report as JSON")


#: What each command takes besides the file: its positional arguments' count and name,
#: and the rest of its usage line.
_TAKES = {
    "threads": ("*", "[FILE]", ""),
    "show": ("+", "[FILE] THREAD", " THREAD"),
    "history": ("+", "[FILE] THREAD", " THREAD"),
    "delete": ("+", "[FILE] THREAD...", " THREAD [THREAD ...]"),
    "erase": ("*", "[FILE]", " --owner OWNER"),
}


def _command(commands: Any, name: str, help: str) -> Any:
    nargs, metavar, usage = _TAKES[name]
    parser = commands.add_parser(
        name, help=help, usage=f"%(prog)s [--db FILE | FILE]{usage} [options]"
    )
    parser.add_argument(
        "operands",
        nargs=nargs,
        metavar=metavar,
        help="the file (when --db is not given)" + (", then the thread" if nargs == "+" else ""),
    )
    parser.add_argument("--db", metavar="FILE", help="the threadloom file")
    parser.add_argument(
        "--namespace",
        default=DEFAULT_NAMESPACE,
        help="the scope's namespace (default: %(default)s)",
    )
    parser.add_argument(
        "--agent-id", default=DEFAULT_AGENT_ID, help="the scope's agent id (default: %(default)s)"
    )
    parser.set_defaults(usage_error=parser.error)
    return parser


def _paging(parser: Any, before: str) -> None:
    parser.add_argument(
        "--limit", type=_count, default=20, metavar="N", help="rows (default: %(default)s)"
    )
    parser.add_argument("--before", metavar="CURSOR", help=before)
    parser.add_argument("--json", action="store_true", help="print JSON")


def _count(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if not 1 <= number <= MAX_PAGE:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number from 1 to {MAX_PAGE}")
    return number


def run(args: argparse.Namespace) -> int:
    """Run one conversation command; return its exit status."""
    path, rest = _operands(args)
    if args.command == "threads":
        return run_threads(args, path)
    if args.command == "show":
        return run_show(args, path, rest[0])
    if args.command == "history":
        return run_history(args, path, rest[0])
    if args.command == "delete":
        return run_delete(args, path, rest)
    return run_erase(args, path)


def _operands(args: argparse.Namespace) -> tuple[str, list[str]]:
    """The file (`--db`, else the first positional argument) and the other arguments."""
    operands = list(args.operands)
    path = args.db
    if path is None:
        if not operands:
            args.usage_error("give the threadloom file: --db FILE or the first argument")
        path = operands.pop(0)
    wanted = {"show": 1, "history": 1, "delete": None}.get(args.command, 0)
    if wanted is None and not operands:
        args.usage_error("give at least one thread id")
    elif wanted == 1 and len(operands) != 1:
        args.usage_error("give one thread id" + (f", not {len(operands)}" if operands else ""))
    elif wanted == 0 and operands:
        args.usage_error(f"unexpected arguments: {' '.join(operands)}")
    return path, operands


@contextlib.contextmanager
def _opened(
    args: argparse.Namespace, path: str, *, write: bool = False
) -> Iterator[CheckpointStore]:
    """The scope of the file, read-only unless `write`; a missing file is an error."""
    from threadloom.engine import CheckpointStore, File

    if not Path(path).is_file():
        raise EngineError(
            f"{path!r} does not exist or is not a file; give the path of a threadloom file "
            "(--db FILE or the first argument)"
        )
    file = File.open(path, readonly=not write)
    try:
        store = CheckpointStore(file, namespace=args.namespace, agent_id=args.agent_id)
        try:
            yield store
        finally:
            store.close()
    finally:
        file.close()


def _missing(thread_id: str, args: argparse.Namespace, path: str) -> EngineError:
    return EngineError(
        f"no thread {thread_id!r} in {path} (scope {args.namespace} / {args.agent_id}); "
        f"`threadloom threads {path}` lists its threads (another scope: --namespace, --agent-id)"
    )


def plural(count: int, word: str) -> str:
    """`1 thread`, `2 threads`."""
    return f"{count} {word}" + ("" if count == 1 else "s")


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


# -- threads -------------------------------------------------------------------------------


def run_threads(args: argparse.Namespace, path: str) -> int:
    """`threads`: a page of the index, `{"threads": [...], "next": cursor-or-null}`."""
    options = {"owner": args.owner, "order": args.order}
    with _opened(args, path) as store:
        page = store.threads(limit=args.limit, before=args.before, **options)
        following = None
        if len(page) == args.limit and store.threads(limit=1, before=page[-1].cursor, **options):
            following = page[-1].cursor
    if args.json:
        _print_json({"threads": [info.as_json() for info in page], "next": following})
        return 0
    if not page:
        print("no threads" + (f" of {args.owner!r}" if args.owner else ""))
        return 0
    column = "CREATED" if args.order == "created" else "UPDATED"
    _table(
        ["THREAD", "OWNER", "TITLE", "MESSAGES", "CHECKPOINTS", "SIZE", f"{column} (UTC)"],
        [_thread_row(info, args.order) for info in page],
        right={3, 4, 5},
    )
    if following is not None:
        print(f"more: --before {following}")
    return 0


def _thread_row(info: ThreadInfo, order: str) -> list[str]:
    moment = info.created_at if order == "created" else info.updated_at
    return [
        info.thread_id,
        info.owner or "-",
        cut(info.title or "-", TITLE),
        str(info.messages),
        str(info.checkpoints),
        size(info.bytes),
        datetime.fromtimestamp(moment, timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
    ]


def size(count: int) -> str:
    """Bytes as people read them: 512 B, 1.5 KiB, 20.0 MiB."""
    if count < 1024:
        return f"{count} B"
    value = float(count)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> None:
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        out = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(cells)
        ]
        return "  ".join(out).rstrip()

    print(line(headers))
    for row in rows:
        print(line(row))


# -- show ----------------------------------------------------------------------------------


def run_show(args: argparse.Namespace, path: str, thread_id: str) -> int:
    """`show`: the transcript page (`Transcript.as_json()` plus `interrupts`)."""
    from threadloom.engine.conversations import plain_elements, transcript_json

    before: int | str | None = args.before
    if isinstance(before, str) and before.isdigit():
        before = int(before)
    with _opened(args, path) as store:
        info = store.thread(thread_id)
        if info is None:
            raise _missing(thread_id, args, path)
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
        waiting = store.interrupts(thread_id, tail.checkpoint_id) if tail.checkpoint_id else []
    page["interrupts"] = [found.as_json() for found in waiting]
    if args.json:
        _print_json(page)
    elif args.markdown:
        print("\n".join(markdown(page, info.title)))
    else:
        print("\n".join(transcript(page)))
    return 0


# -- history -------------------------------------------------------------------------------


def run_history(args: argparse.Namespace, path: str, thread_id: str) -> int:
    """`history`: a page of the thread's checkpoints, newest first."""
    with _opened(args, path) as store:
        page = store.history(thread_id, ns=args.ns, limit=args.limit, before=args.before)
    if not page.found:
        raise _missing(thread_id, args, path)
    if args.json:
        _print_json(page.as_json())
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
    _table(
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


# -- delete and erase ----------------------------------------------------------------------


class Progress:
    """One line of progress on stderr, only when stderr is a terminal (and not --json)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self.shown = False

    def show(self, line: str) -> None:
        if self.enabled:
            sys.stderr.write(f"\r\x1b[K{line}")
            sys.stderr.flush()
            self.shown = True

    def done(self) -> None:
        if self.shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
            self.shown = False


def run_delete(args: argparse.Namespace, path: str, thread_ids: Sequence[str]) -> int:
    """`delete`: delete the threads found; 1 (after deleting those) when any is missing."""
    wanted = list(dict.fromkeys(thread_ids))
    with _opened(args, path) as store:
        infos = {tid: store.thread(tid) for tid in wanted}
    found = [info for info in infos.values() if info is not None]
    missing = [tid for tid, info in infos.items() if info is None]
    progress = Progress(not args.json)
    if found:
        # Opened writable only when there is something to delete: a scope the file
        # never held is not created.
        with _opened(args, path, write=True) as store:
            try:
                for number, info in enumerate(found, 1):
                    progress.show(f"deleting {number}/{len(found)}: {info.thread_id}")
                    store.delete_thread(info.thread_id)
            finally:
                progress.done()
    if args.json:
        _print_json(
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
            f"no {noun} {names} in {path} (scope {args.namespace} / {args.agent_id}); "
            f"{deleted}`threadloom threads {path}` lists its threads"
        )
    return 0


def run_erase(args: argparse.Namespace, path: str) -> int:
    """`erase`: what erasing the owner removes (a dry run), or removes it (`--apply`)."""
    if not args.owner:
        raise InvalidArgumentError("--owner must not be empty; give the owner to erase")
    if args.no_store:
        prefixes: list[tuple[str, ...]] = []
    elif args.store_prefix:
        label = encode_label(args.owner)
        prefixes = [
            tuple(label if part == "{owner}" else part for part in given.split("."))
            if given
            else ()
            for given in args.store_prefix
        ]
    else:
        prefixes = [(encode_label(args.owner),)]
    with _opened(args, path) as store:
        report = store.erase(args.owner, prefixes, apply=False, force=args.force)
    if args.apply and (report.threads or report.items):
        progress = Progress(not args.json)
        progress.show(
            f"erasing {plural(len(report.threads), 'thread')} and "
            f"{plural(report.items, 'Store item')} of {args.owner!r}..."
        )
        try:
            with _opened(args, path, write=True) as store:
                report = store.erase(args.owner, prefixes, apply=True, force=args.force)
        finally:
            progress.done()
    elif args.apply:
        report.applied = True  # nothing to erase: the file is left as it is
    if args.json:
        _print_json(report.as_json())
        return 0
    where = ", ".join(".".join(prefix) for prefix in report.namespaces)
    items = f"{plural(report.items, 'Store item')} under {where}" if where else "no Store item"
    threads = plural(len(report.threads), "thread") + (
        f" ({', '.join(report.threads)})" if report.threads else ""
    )
    counts = (
        f"{threads}: {plural(report.checkpoints, 'checkpoint')}, "
        f"{plural(report.writes, 'pending write')}, {plural(report.values, 'value')}; {items}"
    )
    if report.applied:
        print(f"erased {args.owner!r}: {counts}")
    else:
        print(f"dry run: erasing {args.owner!r} would remove {counts}")
        print("run again with --apply to erase")
    return 0
