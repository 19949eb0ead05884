"""The file a command works on: the first positional argument or `--db FILE`, alike.

CLI layer. Every command names its file the same two ways; given both, they must name
one file (else a usage error, exit 2), so `threadloom verify my.db` and `threadloom
verify --db my.db` are one command.
"""

from __future__ import annotations

import argparse
import os


def file_arguments(
    parser: argparse.ArgumentParser,
    *,
    required: bool = True,
    default: str | None = None,
    help: str = "the threadloom file",
) -> None:
    """Add the positional `FILE` and `--db FILE` to a command that takes only options after."""
    parser.add_argument("file", nargs="?", metavar="FILE", help=f"{help} (or --db FILE)")
    parser.add_argument("--db", metavar="FILE", help=f"{help} (or as the first argument)")
    parser.set_defaults(
        usage_error=parser.error, file_required=required, file_default=default, file_dest="file"
    )


def file_of(args: argparse.Namespace) -> str | None:
    """The file the options name (None when it is optional and not given).

    Exits with a usage error (2) when the positional file and `--db` name two files, or
    when a required file is missing.
    """
    given = getattr(args, args.file_dest, None)
    chosen = one_file(args, given)
    if chosen is None:
        chosen = args.file_default
    if chosen is None and args.file_required:
        args.usage_error("give the threadloom file: FILE or --db FILE")
    return chosen


def one_file(args: argparse.Namespace, positional: str | None) -> str | None:
    """`--db` or the positional file, refusing two different ones (usage error)."""
    if positional is not None and args.db is not None and not same_file(positional, args.db):
        args.usage_error(
            f"two files given ({positional!r} and --db {args.db!r}); give the file once"
        )
    return args.db if args.db is not None else positional


def same_file(first: str, second: str) -> bool:
    """True when two paths name one file (the same path, or links to one file)."""
    if os.path.realpath(first) == os.path.realpath(second):
        return True
    try:
        return os.path.samefile(first, second)
    except OSError:
        return False
