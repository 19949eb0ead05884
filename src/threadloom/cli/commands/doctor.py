"""`threadloom doctor`: versions, SQLite build, the core backend and the on-disk format;
with `--db FILE`, what that file holds and how its content store shares and compresses."""

from __future__ import annotations

import argparse
import json
import platform

from threadloom import __version__
from threadloom.cli._files import file_arguments, file_of

HELP = "show versions and the file format in use"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `threadloom doctor`."""
    parser.add_argument("--json", action="store_true", help="print JSON")
    file_arguments(parser, required=False, help="also report what this threadloom file holds")


def report(db: str | None = None) -> dict[str, object]:
    """Return what `doctor` prints (with the file's figures when `db` is given)."""
    import apsw

    from threadloom import core
    from threadloom.engine.format import FORMAT_VERSION

    found: dict[str, object] = {
        "threadloom": __version__,
        "python": platform.python_version(),
        "sqlite": apsw.sqlite_lib_version(),
        "apsw": apsw.apsw_version(),
        "format_version": FORMAT_VERSION,
        "backend": core.backend(),
    }
    if db is not None:
        found.update(inspect(db))
    return found


def inspect(path: str) -> dict[str, object]:
    """Figures of one threadloom file, read without changing it (not even upgrading it)."""
    from threadloom.engine.checks import figures

    return figures(path)


def run(args: argparse.Namespace) -> int:
    """Print the report as a table or JSON; return 0."""
    found = report(file_of(args))
    if args.json:
        print(json.dumps(found, indent=2))
    else:
        width = max(map(len, found))
        for key, value in found.items():
            if isinstance(value, dict):
                print(key)
                inner = max(map(len, value), default=0)
                for name, item in value.items():
                    print(f"  {name:<{inner}}  {item}")
            elif isinstance(value, list) and all(isinstance(v, dict) for v in value):
                print(key)
                for item in value:
                    print("  " + "  ".join(f"{k}={v}" for k, v in item.items()))
            else:
                print(f"{key:<{width}}  {value}")
    return 0
