"""What the conversation commands (`threads`, `show`, `history`, `delete`, `erase`) share.

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
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from threadloom.cli._files import one_file, same_file
from threadloom.errors import EngineError
from threadloom.protocol import DEFAULT_AGENT_ID, DEFAULT_NAMESPACE, MAX_PAGE

if TYPE_CHECKING:
    from threadloom.engine import CheckpointStore


def scope_arguments(
    parser: argparse.ArgumentParser, nargs: Literal["*", "+"], metavar: str, usage: str
) -> None:
    """The file (`--db FILE` or the first positional argument) and the scope's options.

    Args:
        parser: the command's parser.
        nargs: "*" for a command that takes only the file, "+" for one that takes threads.
        metavar: the positional arguments as `--help` names them, e.g. "[FILE] THREAD".
        usage: the rest of the usage line after the file, e.g. " THREAD".
    """
    parser.usage = f"%(prog)s [--db FILE | FILE]{usage} [options]"
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


def page_arguments(parser: argparse.ArgumentParser, before: str) -> None:
    """`--limit`, `--before` (described by `before`) and `--json` of a paged command."""
    parser.add_argument(
        "--limit", type=count, default=20, metavar="N", help="rows (default: %(default)s)"
    )
    parser.add_argument("--before", metavar="CURSOR", help=before)
    parser.add_argument("--json", action="store_true", help="print JSON")


def count(value: str) -> int:
    """A number of rows from 1 to `MAX_PAGE` (an argparse `type`)."""
    try:
        number = int(value)
    except ValueError:
        number = 0
    if not 1 <= number <= MAX_PAGE:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number from 1 to {MAX_PAGE}")
    return number


def operands(args: argparse.Namespace, threads: Literal[0, 1, "+"]) -> tuple[str, list[str]]:
    """The file (`--db`, else the first positional argument) and the thread ids after it.

    Args:
        args: the parsed options of a command set up by `scope_arguments`.
        threads: how many thread ids the command takes: none, one, or at least one ("+");
            any other count is a usage error (exit 2).
    """
    given = list(args.operands)
    path = args.db
    if path is not None and given:
        # `--db F F THREAD` names the file twice; `--db F G` (G another file) is refused.
        if same_file(given[0], path):
            given.pop(0)
        elif threads != "+" and len(given) > (threads or 0) and os.path.isfile(given[0]):
            one_file(args, given[0])
    if path is None:
        if not given:
            args.usage_error("give the threadloom file: --db FILE or the first argument")
        path = given.pop(0)
    if threads == "+" and not given:
        args.usage_error("give at least one thread id")
    elif threads == 1 and len(given) != 1:
        args.usage_error("give one thread id" + (f", not {len(given)}" if given else ""))
    elif threads == 0 and given:
        args.usage_error(f"unexpected arguments: {' '.join(given)}")
    return path, given


@contextlib.contextmanager
def opened(
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


def missing_thread(thread_id: str, args: argparse.Namespace, path: str) -> EngineError:
    """The error for a thread the scope does not hold, naming how to list its threads."""
    return EngineError(
        f"no thread {thread_id!r} in {path}{scope_text(args)}; {listing(args, path)}"
    )


def listing(args: argparse.Namespace, path: str, deleted: str = "") -> str:
    """What to do about a thread not found: the scope that holds threads when the one
    asked for holds none, else how to list the threads."""
    other = elsewhere(args, path)
    if other:
        return deleted + other
    flags = ""
    if args.namespace != DEFAULT_NAMESPACE:
        flags += f" --namespace {args.namespace}"
    if args.agent_id != DEFAULT_AGENT_ID:
        flags += f" --agent-id {args.agent_id}"
    return f"{deleted}`threadloom threads {path}{flags}` lists its threads" + (
        " (another scope: --namespace, --agent-id)" if not flags else ""
    )


def scope_text(args: argparse.Namespace) -> str:
    """` (scope NAMESPACE / AGENT)` when the scope asked for is not the default, else ""."""
    if (args.namespace, args.agent_id) == (DEFAULT_NAMESPACE, DEFAULT_AGENT_ID):
        return ""
    return f" (scope {args.namespace} / {args.agent_id})"


def elsewhere(args: argparse.Namespace, path: str) -> str:
    """When the scope asked for holds no thread and another scope does: a sentence naming
    the fullest such scope and the options that choose it (else "")."""
    from threadloom.engine import File
    from threadloom.engine.checks import viewer_reads

    file = File.open(path, readonly=True)
    try:
        with file.read() as conn:
            found = viewer_reads.scopes(conn)
    finally:
        file.close()
    mine = (args.namespace, args.agent_id)
    if any((s["namespace"], s["agent_id"]) == mine and s["threads"] for s in found):
        return ""
    others = sorted(
        (s for s in found if s["threads"] and (s["namespace"], s["agent_id"]) != mine),
        key=lambda s: -s["threads"],
    )
    if not others:
        return ""
    best = others[0]
    flags = []
    if best["namespace"] != args.namespace:
        flags.append(f"--namespace {best['namespace']}")
    if best["agent_id"] != args.agent_id:
        flags.append(f"--agent-id {best['agent_id']}")
    which = "the default scope" if not scope_text(args) else f"scope {mine[0]} / {mine[1]}"
    name = (
        best["namespace"]
        if best["agent_id"] == args.agent_id
        else (f"{best['namespace']} / {best['agent_id']}")
    )
    more = f" ({len(others) - 1} more scopes hold threads)" if len(others) > 1 else ""
    return (
        f"no threads in {which}, scope {name!r} holds {plural(best['threads'], 'thread')}"
        f"{more}: use {' '.join(flags)}"
    )


def plural(count: int, word: str) -> str:
    """`1 thread`, `2 threads`."""
    return f"{count} {word}" + ("" if count == 1 else "s")


def print_json(value: Any) -> None:
    """Print `value` as indented JSON, non-ASCII characters as they are."""
    print(json.dumps(value, indent=2, ensure_ascii=False))


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


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> None:
    """Print aligned columns, those whose index is in `right` aligned right."""
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
