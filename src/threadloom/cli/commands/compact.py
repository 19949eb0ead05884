"""`threadloom compact`: collect, retrain, re-encode and VACUUM a file; say what it reclaimed."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from threadloom.cli._files import file_arguments, file_of
from threadloom.errors import EngineError

HELP = "retrain the compression dictionary and vector lists, re-encode bodies, VACUUM a file"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `threadloom compact`."""
    file_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print what it did as JSON")


def run(args: argparse.Namespace) -> int:
    """Collect unreferenced values, sweep released blocks, retrain the file's dictionary
    and its Store vector lists, re-encode its bodies, rewrite mostly-dead extents and VACUUM
    it; print what it did."""
    from threadloom.engine import File
    from threadloom.engine.checks import compact, figures

    db = file_of(args)
    assert db is not None  # required: file_of exits without it
    if not Path(db).is_file():
        raise EngineError(f"{db!r} is not a file; give the path of a threadloom database")
    file = File.open(db, readonly=False)
    try:
        done = compact(file)
    finally:
        file.close()
    found = done.as_json()
    found["bytes_after"] = figures(db)["file_bytes"]  # after the last close folded the WAL
    found["reclaimed"] = found["bytes_before"] - found["bytes_after"]
    if args.json:
        print(json.dumps(found, indent=2))
    else:
        print(
            f"{db}: {found['bytes_before']} -> {found['bytes_after']} bytes (reclaimed "
            f"{found['reclaimed']}: {found['values']} values, {found['blocks']} blocks, "
            f"{found['extents_rewritten']} extents rewritten, "
            f"{found['vectors_retrained']} vectors retrained, {found['pages_freed']} pages freed)"
        )
    return 0
