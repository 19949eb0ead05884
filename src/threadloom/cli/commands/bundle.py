"""`threadloom bundle`: threads of the file as one verifiable, compressed file
(docs/moving.md; its format in `threadloom.documents.bundles`)."""

from __future__ import annotations

import argparse
import json

from threadloom.cli._conversations import scope_arguments

HELP = "write threads (their schema-2 documents) to one compressed, verifiable bundle file"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `threadloom bundle`."""
    scope_arguments(parser, "*", "[FILE] [THREAD ...]", " [THREAD ...] --to-file OUT")
    parser.add_argument(
        "--to-file", required=True, metavar="OUT", help="the bundle to write (replaced if a bundle)"
    )
    parser.add_argument(
        "--store-prefix",
        action="append",
        default=[],
        metavar="LABEL.LABEL...",
        help="also carry the Store items under this namespace prefix, labels as stored "
        "joined by '.' (repeatable; an empty one: every item)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    """Write the bundle; print what it holds."""
    from threadloom.cli._conversations import opened, plural
    from threadloom.documents import bundles

    given = list(args.operands)
    path = args.db
    if path is None:
        if not given:
            args.usage_error("give the threadloom file: --db FILE or the first argument")
        path = given.pop(0)
    prefixes = [tuple(p.split(".")) if p else () for p in args.store_prefix]
    items = None
    if prefixes:
        from threadloom.langgraph.store_bundles import items_under

        items = items_under(path, prefixes)
    with opened(args, path) as store:
        data = bundles.pack(store, given or None, items=items, prefixes=prefixes)
    bundles.write(args.to_file, data)
    header = json.loads(data.partition(b"\n")[0])
    found = {
        "path": args.to_file,
        "bytes": len(data),
        **{k: header[k] for k in ("threads", "documents", "content_bytes", "content_blake3")},
        "store_items": header.get("store_items", 0),
    }
    if args.json:
        print(json.dumps(found, indent=2))
    else:
        print(
            f"{args.to_file}: {plural(len(found['threads']), 'thread')}, "
            f"{plural(found['documents'], 'document')}, "
            f"{plural(found['store_items'], 'Store item')}, "
            f"{found['bytes']:,} bytes ({found['content_bytes']:,} uncompressed)"
        )
    return 0
