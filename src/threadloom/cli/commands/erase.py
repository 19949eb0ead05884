"""`threadloom erase`: every thread of an owner and their Store items (dry run unless
`--apply`)."""

from __future__ import annotations

import argparse
import sys

from threadloom.cli._conversations import (
    Progress,
    opened,
    operands,
    plural,
    print_json,
    scope_arguments,
)
from threadloom.errors import InvalidArgumentError
from threadloom.protocol.labels import encode_label

HELP = "erase every thread of an owner and their Store items (dry run unless --apply)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `threadloom erase`."""
    scope_arguments(parser, "*", "[FILE]", " --owner OWNER")
    parser.add_argument("--owner", required=True, help="the owner the thread index records")
    parser.add_argument(
        "--apply", action="store_true", help="erase (default: a dry run that only reads)"
    )
    store = parser.add_mutually_exclusive_group()
    store.add_argument(
        "--store-prefix",
        action="append",
        metavar="LABEL.LABEL...",
        help="a Store namespace prefix of the owner's, labels as stored joined by '.', "
        "with {owner} standing for the owner's label as OwnerStore encodes it, e.g. "
        "acme.user.{owner} (repeatable; default: {owner}, the owner's OwnerStore root)",
    )
    store.add_argument("--no-store", action="store_true", help="leave the Store alone")
    parser.add_argument(
        "--force",
        action="store_true",
        help="also erase threads a live run holds the lease of (the run loses it)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    """Print what erasing the owner removes (a dry run), or remove it (`--apply`)."""
    path, _ = operands(args, 0)
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
    with opened(args, path) as store:
        report = store.erase(args.owner, prefixes, apply=False, force=args.force)
    if args.apply and (report.threads or report.items):
        progress = Progress(not args.json)
        progress.show(
            f"erasing {plural(len(report.threads), 'thread')} and "
            f"{plural(report.items, 'Store item')} of {args.owner!r}..."
        )
        try:
            with opened(args, path, write=True) as store:
                report = store.erase(args.owner, prefixes, apply=True, force=args.force)
        finally:
            progress.done()
    elif args.apply:
        report.applied = True  # nothing to erase: the file is left as it is
    if report.kept:
        _warn_kept(args.owner, report.kept, report.applied)
    if args.json:
        print_json(report.as_json())
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
        print(f"receipt: {report.digest} (blake3 of what was removed; `--json` has it too)")
    else:
        print(f"dry run: erasing {args.owner!r} would remove {counts}")
        print("run again with --apply to erase")
    return 0


#: How many kept namespaces the warning names (the JSON report lists them all).
_NAMED = 10


def _warn_kept(owner: str, kept: list[list[str]], applied: bool) -> None:
    """Say on stderr which namespaces hold the owner's label but are not erased."""
    names = [".".join(ns) for ns in kept]
    shown = ", ".join(names[:_NAMED]) + (
        f" and {len(names) - _NAMED} more" if len(names) > _NAMED else ""
    )
    verb = "were kept" if applied else "will be kept"
    print(
        f"warning: {plural(len(names), 'Store namespace')} holding the label of {owner!r} "
        f"{verb}: {shown}",
        file=sys.stderr,
    )
    print(
        "hint: erasure matches namespace prefixes only; name them with --store-prefix "
        f"(e.g. --store-prefix {_example(kept[0], owner)}) to erase their items too",
        file=sys.stderr,
    )


def _example(namespace: list[str], owner: str) -> str:
    """The prefix up to and including the owner's label, with `{owner}` in its place."""
    label = encode_label(owner)
    for at, part in enumerate(namespace):
        if part in (label, owner):
            return ".".join([*namespace[:at], "{owner}"])
    return ".".join(namespace)
