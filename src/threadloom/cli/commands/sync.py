"""`threadloom sync`: two-way incremental sync of the file with a document service (a
dry run unless `--apply`; docs/moving.md, "Sync")."""

from __future__ import annotations

import argparse
import json
from typing import Any

from threadloom.cli._files import file_arguments, file_of
from threadloom.cli._transfer import credentials, need_nats, service_arguments
from threadloom.cli.bar import shown

HELP = "push what a document service lacks and pull what the file lacks, both ways"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `threadloom sync` (those of `export` for the service)."""
    file_arguments(parser)
    parser.add_argument(
        "--nats",
        dest="url",
        required=True,
        metavar="nats://HOST:PORT",
        help="the NATS broker of the document service (threadloom serve, or the engine's)",
    )
    parser.add_argument(
        "--thread",
        action="append",
        dest="threads",
        metavar="T",
        help="a thread id (repeatable; default: every thread that changed on either side)",
    )
    service_arguments(parser)
    parser.add_argument(
        "--peer",
        metavar="NAME",
        help="the service's name in the sync state and in `THREAD@NAME` copies "
        "(default: the broker's HOST:PORT)",
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help="compare every thread, not only those changed since the last sync",
    )
    parser.add_argument(
        "--prefer",
        choices=("local", "remote"),
        help="resolve the diverged --thread: the file's history wins (local) or the "
        "service's (remote); the other is kept in the file as a named copy",
    )
    parser.add_argument(
        "--apply", action="store_true", help="write (default: a dry run that only reads)"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(usage_error=parser.error)


def run(args: argparse.Namespace) -> int:
    """Sync; print the report; 1 on a conflict."""
    if args.prefer and not args.threads:
        args.usage_error("--prefer resolves the threads named by --thread")
    need_nats()
    from threadloom.nats.sync import sync_file

    db = file_of(args)
    assert db is not None  # required: file_of exits with a usage error without one
    with shown("threads", quiet=args.json, label="syncing") as progress:
        report = sync_file(
            db,
            args.url,
            credentials(args),
            namespace=args.local_namespace,
            agent_id=args.local_agent_id,
            remote_namespace=args.namespace,
            remote_agent_id=args.agent_id,
            peer=args.peer,
            threads=args.threads,
            apply=args.apply,
            full=args.full,
            prefer=args.prefer,
            progress=progress,
        )
    found = report.as_dict()
    if args.json:
        print(json.dumps(found, indent=2))
    else:
        _print(found)
    return 1 if found["conflicts"] else 0


def _print(found: dict[str, Any]) -> None:
    from threadloom.cli._conversations import plural

    head = (
        f"{found['mode']}: {plural(found['threads'], 'thread')} changed "
        f"({found['unchanged']} unchanged), "
    )
    if found["mode"] == "dry-run":
        print(
            head + f"{plural(found['pushed'], 'checkpoint')} to push and {found['pulled']} to pull"
        )
    else:
        print(
            head + f"{plural(found['pushed'], 'checkpoint')} pushed "
            f"({plural(found['documents_pushed'], 'document')}), {found['pulled']} pulled "
            f"({plural(found['documents_pulled'], 'document')})"
        )
    for thread in found["per_thread"]:
        flags = [k for k in ("diverged", "skipped") if thread[k]]
        if thread["resolved"]:
            flags.append(f"resolved: {thread['resolved']}")
        if thread["copy"]:
            flags.append(f"copy: {thread['copy']}")
        print(
            f"  {thread['thread_id']}: {thread['pushed']} pushed, {thread['pulled']} pulled"
            + (f" [{', '.join(flags)}]" if flags else "")
        )
    if found["diverged"] and found["mode"] == "applied":
        print(
            "diverged threads are left as each side has them (the service's copy is "
            "THREAD@PEER in the file); resolve one with --prefer local|remote --thread T --apply"
        )
    for conflict in found["conflicts"]:
        print(f"conflict: {conflict}")
