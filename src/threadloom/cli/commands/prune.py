"""`threadloom prune`: naas's `prune-memory` on a threadloom file, plus idle-thread expiry.

A dry run unless `--apply`: the same decisions, read-only (the file is opened
read-only, so not a byte of it changes). The report is the engine's
(`engine/conversations/retention.py`, docs/cli.md); progress goes to stderr on a TTY only.

The CLI has no serializer: on a file written with an encrypted one it cannot read the
checkpoints' metadata, keeps those threads whole, lists them under `unreadable` and
says (on stderr) to run retention from Python with the saver that has the key.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from threadloom.cli.bar import Bar
from threadloom.errors import EngineError, InvalidArgumentError, InvalidValueError
from threadloom.protocol import DEFAULT_AGENT_ID, DEFAULT_NAMESPACE

HELP = (
    "keep the last N checkpoints of each thread and delete idle threads (a dry run unless --apply)"
)

#: Threads from which a TTY shows a progress line.
PROGRESS_FROM = 50


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `threadloom prune`."""
    parser.add_argument("path", nargs="?", metavar="DB", help="the threadloom file (or --db)")
    parser.add_argument("--db", metavar="FILE", help="the threadloom file")
    parser.add_argument(
        "--keep-last",
        default="20",
        metavar="N",
        help="checkpoints kept per thread, at least 1 (default: %(default)s); 'all' keeps "
        "every checkpoint (with --older-than: only delete idle threads)",
    )
    parser.add_argument(
        "--min-age",
        default="60",
        metavar="AGE",
        help="collect unreferenced values only once this old: seconds or 90s, 10m, 12h, 30d "
        "(default: %(default)s; the file's 60 s grace is a floor)",
    )
    parser.add_argument(
        "--older-than",
        metavar="AGE",
        help="also delete whole every thread idle (no write) for longer than this, e.g. 30d",
    )
    parser.add_argument(
        "--thread", action="append", metavar="T", help="a thread id, repeatable (default: all)"
    )
    parser.add_argument(
        "--namespace",
        default=DEFAULT_NAMESPACE,
        help="the scope's namespace (default: %(default)s)",
    )
    parser.add_argument(
        "--agent-id", default=DEFAULT_AGENT_ID, help="the scope's agent id (default: %(default)s)"
    )
    parser.add_argument("--apply", action="store_true", help="delete; without it, a dry run")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    """Run `threadloom prune`; return the exit code."""
    from threadloom.engine import CheckpointStore, File
    from threadloom.engine.checkpoints import agent_ids
    from threadloom.langgraph.retention import RetentionPolicy, RetentionReport

    path = _path(args)
    keep: int | None = None if args.keep_last == "all" else _int(args.keep_last, "--keep-last")
    if keep is not None and keep < 1:
        raise InvalidValueError(
            f"--keep-last must be at least 1 (the head is always kept), got {keep}; pass "
            "--keep-last all with --older-than to delete only idle threads"
        )
    min_age = _age(args.min_age, "--min-age")
    max_age = None if args.older_than is None else _age(args.older_than, "--older-than")
    if keep is None and max_age is None:
        raise InvalidValueError(
            "--keep-last all without --older-than deletes nothing; give --older-than 30d, "
            "or a number to --keep-last"
        )
    try:
        policy = RetentionPolicy(keep_last=keep, min_age=min_age, max_age=max_age)
    except InvalidValueError as exc:  # named as the options are
        text = str(exc).replace("max_age", "--older-than").replace("min_age", "--min-age")
        raise InvalidValueError(text.replace("pass None", "leave it out")) from None
    file = File.open(path, readonly=not args.apply)
    try:
        if args.agent_id not in agent_ids(file, args.namespace):
            # No such scope: nothing to prune, and opening one would add it to the file.
            empty = RetentionReport(
                args.apply, args.namespace, args.agent_id, keep, min_age, policy.max_age
            )
            _print(empty.as_json(), args.json)
            return 0
        store = CheckpointStore(file, namespace=args.namespace, agent_id=args.agent_id)
        try:
            progress = Bar("threads", "pruning", enabled=not args.json, minimum=PROGRESS_FROM)
            report = store.retention.run(
                keep_last=policy.keep_last,
                max_age=policy.max_age,
                min_age=policy.min_age,
                threads=args.thread,
                apply=args.apply,
                progress=progress,
            )
            progress.end()
        finally:
            store.close()
    finally:
        file.close()
    _print(report.as_json(), args.json)
    if report.unreadable:
        _unreadable_hint(len(report.unreadable), policy)
    return 0


def _print(found: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(found, indent=2))
    else:
        _human(found)


def _unreadable_hint(count: int, policy: Any) -> None:
    """Say, on stderr (stdout may be JSON), why those threads were kept and what to do."""
    options = [f"keep_last={policy.keep_last}"]
    if policy.max_age is not None:
        options.append(f"max_age={policy.max_age:g}")
    print(
        f"hint: the checkpoint metadata of {count} thread(s) cannot be read without the "
        "application's serializer (an EncryptedSerializer's key?), so their whole history "
        "was kept; run retention from Python with the saver that has the key: "
        f"saver.apply_retention(RetentionPolicy({', '.join(options)}))",
        file=sys.stderr,
    )


def _path(args: argparse.Namespace) -> str:
    if args.path and args.db and args.path != args.db:
        raise InvalidArgumentError(
            f"two files given ({args.path!r} and --db {args.db!r}); give the file once"
        )
    path = args.db or args.path
    if not path:
        raise InvalidArgumentError("no file given; pass the threadloom file as DB or --db PATH")
    if not Path(path).is_file():
        raise EngineError(f"{path!r} is not a file; give the path of a threadloom database")
    return str(path)


def _age(text: str, option: str) -> float:
    from threadloom.langgraph.retention import parse_duration

    try:
        return parse_duration(text)
    except InvalidValueError:
        raise InvalidValueError(
            f"{option} {text!r} is not an age; give seconds (>= 0), or a number with s, m, h, "
            f"d or w, e.g. {option} 30d"
        ) from None


def _int(text: str, option: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise InvalidArgumentError(
            f"{option} must be a whole number of checkpoints, not {text!r}; pass e.g. {option} 20"
        ) from None


def _human(found: dict[str, Any]) -> None:
    dry = found["mode"] == "dry-run"
    verb = "would delete" if dry else "deleted"
    target = found["target"]
    default = (target["namespace"], target["agent_id"]) == (DEFAULT_NAMESPACE, DEFAULT_AGENT_ID)
    scope = "" if default else f" of {target['namespace']}/{target['agent_id']}"
    print(
        f"{found['mode']}: {found['threads']} threads{scope}, "
        f"keep last {found['keep_last'] or 'all'}, {found['kept']} checkpoints kept"
    )
    print(
        f"{verb} {found['checkpoints']} checkpoints, {found['writes']} pending writes, "
        f"{found['values']} values ({found['bytes']} bytes, {found['blocks']} blocks), "
        f"{len(found['expired_threads']) + found['expired_omitted']} idle threads"
    )
    for item in found["expired_threads"]:
        print(f"  idle since {item['updated_at']}: {item['thread_id']}")
    for item in found["pruned"][:20]:
        print(
            f"  {item['thread_id']}: kept {item['kept']}, {item['checkpoints']} checkpoints, "
            f"{item['writes']} writes, {item['values']} values"
        )
    more = len(found["pruned"]) - 20 + found["pruned_omitted"]
    if more > 0:
        print(f"  ... and {more} more threads (--json lists {len(found['pruned'])})")
    if found["waiting"]:
        # With --min-age 0 only the grace kept them (values written moments ago).
        young = "--min-age or the grace (60 s)" if found["min_age"] else "the grace (60 s)"
        print(
            f"{found['waiting']} unreferenced values are younger than {young}; a later run "
            "collects them"
        )
    if found["damaged"]:
        print(f"left alone (damaged, run verify): {', '.join(found['damaged'])}")
    if found["unreadable"]:
        print(f"kept whole (metadata unreadable here): {', '.join(found['unreadable'])}")
    if dry:
        print("dry run: nothing changed; pass --apply to delete")
