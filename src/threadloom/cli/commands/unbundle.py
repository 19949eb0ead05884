"""`threadloom unbundle`: import the threads of a bundle into the file (a dry run unless
`--apply`; docs/moving.md)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from threadloom.cli._conversations import scope_arguments

HELP = "import the threads of a bundle into the file (a dry run unless --apply)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `threadloom unbundle`."""
    scope_arguments(parser, "*", "[FILE]", " --from-file IN")
    parser.add_argument(
        "--from-file", required=True, metavar="IN", help="the bundle `threadloom bundle` wrote"
    )
    parser.add_argument(
        "--apply", action="store_true", help="write (default: a dry run that only reads)"
    )
    parser.add_argument(
        "--include-diverged",
        action="store_true",
        help="also write threads whose history in the file has diverged from the bundle's",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    """Verify the bundle, import it (or say what an import would do); 1 on a conflict."""
    from threadloom.cli._conversations import plural
    from threadloom.documents import bundles
    from threadloom.engine import CheckpointStore, File

    given = list(args.operands)
    if (args.db is None) == (len(given) != 1):
        args.usage_error("give the threadloom file (--db FILE or the first argument) only")
    path: str = args.db if args.db is not None else given[0]
    bundle = bundles.read(args.from_file)
    if not args.apply and not Path(path).exists():
        entries = bundles.load(None, bundle)  # a new file holds none of it
    else:
        file = File.open(path)
        try:
            store = CheckpointStore(file, namespace=args.namespace, agent_id=args.agent_id)
            try:
                entries = bundles.load(
                    store, bundle, apply=args.apply, include_diverged=args.include_diverged
                )
            finally:
                store.close()
        finally:
            file.close()
    written = 0
    if args.apply and bundle.items:
        from threadloom.langgraph.store_bundles import import_items

        written = import_items(path, bundle.items)
    header = bundle.header
    found = {
        "mode": "applied" if args.apply else "dry-run",
        "source": {
            "bundle": args.from_file,
            **{k: header[k] for k in ("namespace", "agent_id", "schema")},
        },
        "target": {"namespace": args.namespace, "agent_id": args.agent_id, "file": path},
        **bundles.summary(entries),
        "store_items": len(bundle.items),
        "store_items_written": written,
    }
    if args.json:
        print(json.dumps(found, indent=2))
    else:
        print(
            f"{found['mode']}: {plural(found['threads'], 'thread')}, "
            f"{plural(found['checkpoints'], 'checkpoint')} "
            f"({found['present']} present, {found['missing']} missing, {found['copied']} "
            f"copied), {found['documents_copied']} documents written"
            + (f", {written} of {len(bundle.items)} Store items" if bundle.items else "")
        )
        for thread_id in found["diverged"]:
            skipped = " (skipped; --include-diverged writes it)" if args.apply else ""
            print(f"diverged: {thread_id}{skipped}")
        for conflict in found["conflicts"]:
            print(f"conflict: {conflict}")
    return 1 if found["conflicts"] else 0
