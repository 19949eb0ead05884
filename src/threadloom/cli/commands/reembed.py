"""`threadloom reembed`: embed the Store's items that have no vector, or every item with
another embedder (a dry run unless `--apply`).

The embedder is the application's: `--embed MODULE:NAME` names an object importable from
the current folder (an `Embeddings`, an `Embeddings` class made with no arguments, or a
function from a list of texts to a list of vectors, as LangGraph's `IndexConfig.embed`),
`--dims` its size. The work is `threadloom.langgraph.reembed.reembed_file` (docs/store.md,
"Re-embedding"); the dry run opens the file read-only and calls no embedder.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path
from typing import Any, cast

from threadloom.cli._conversations import plural, print_json
from threadloom.errors import EngineError, InvalidArgumentError

HELP = "embed the Store's items that have no vector, or all of them (a dry run unless --apply)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `threadloom reembed`."""
    parser.usage = "%(prog)s [--db FILE | FILE] --embed MODULE:NAME --dims N [options]"
    parser.add_argument("path", nargs="?", metavar="FILE", help="the threadloom file (or --db)")
    parser.add_argument("--db", metavar="FILE", help="the threadloom file")
    parser.add_argument(
        "--embed",
        required=True,
        metavar="MODULE:NAME",
        help="the embedder, importable from the current folder: an Embeddings object, an "
        "Embeddings class (made with no arguments) or a function from texts to vectors",
    )
    parser.add_argument(
        "--dims", required=True, type=int, metavar="N", help="the size of its vectors"
    )
    parser.add_argument(
        "--distance",
        choices=("cosine", "l2", "inner_product"),
        default="cosine",
        help="the Store's distance_type (default: %(default)s)",
    )
    parser.add_argument(
        "--field",
        action="append",
        metavar="PATH",
        help="a field to embed, as IndexConfig's fields (repeatable; default: $, the whole value)",
    )
    parser.add_argument(
        "--prefix",
        metavar="LABEL.LABEL...",
        help="only the items under this namespace prefix, labels joined by '.'",
    )
    parser.add_argument(
        "--all",
        action="store_true",
        help="every item, not only those without a vector (another embedder); when its dims "
        "or distance differ from the file's vectors, those are replaced (no --prefix then)",
    )
    parser.add_argument(
        "--apply", action="store_true", help="embed and write (default: a dry run that only reads)"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    """Print what re-embedding would do (a dry run), or do it (`--apply`)."""
    path = args.db or args.path
    if not path:
        raise InvalidArgumentError(
            "give the threadloom file; as the first argument or with --db FILE"
        )
    if args.db and args.path:
        raise InvalidArgumentError(
            f"two files given ({args.path!r} and --db {args.db!r}); give one of them"
        )
    if not Path(path).is_file():
        raise EngineError(
            f"{path!r} does not exist or is not a file; give the path of a threadloom file"
        )
    if args.dims < 1:
        raise InvalidArgumentError(f"--dims must be at least 1, not {args.dims}; give the size")
    prefix = tuple(args.prefix.split(".")) if args.prefix else ()
    if any(not label for label in prefix):
        raise InvalidArgumentError(
            f"--prefix {args.prefix!r} holds an empty label; give labels joined by '.', "
            "e.g. --prefix acme.user"
        )
    index: dict[str, Any] = {
        "dims": args.dims,
        "embed": _embedder(args.embed),  # imported in a dry run too (checked), never called
        "distance_type": args.distance,
    }
    if args.field:
        index["fields"] = list(args.field)

    from threadloom.langgraph.reembed import reembed_file

    report = reembed_file(path, cast(Any, index), prefix=prefix, every=args.all, apply=args.apply)
    if args.json:
        print_json(report.as_json())
        return 0
    where = f"under {args.prefix}" if args.prefix else "in the Store"
    line = f"{plural(report.items, 'item')} {where}, {report.unembedded} without a vector; "
    line += "embedded " if report.applied else "would embed "
    line += f"{plural(report.embedded, 'item')}"
    if report.applied:
        line += f" ({plural(report.vectors, 'vector')})"
    if report.dropped:
        line += f", replacing {plural(report.dropped, 'vector')} of another embedder"
    print(line)
    if not report.applied and report.embedded:
        print("run again with --apply to embed them")
    return 0


def _split(spec: str) -> tuple[str, str]:
    module, sep, name = spec.partition(":")
    if not sep or not module or not name:
        raise InvalidArgumentError(
            f"--embed {spec!r} is not MODULE:NAME; give e.g. --embed myapp.embeddings:embedder"
        )
    return module, name


def _embedder(spec: str) -> Any:
    """The object `spec` (MODULE:NAME) names, imported with the current folder on the path;
    a class is made with no arguments."""
    module_name, name = _split(spec)
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise InvalidArgumentError(
            f"--embed {spec!r}: no module {exc.name!r}; give a module importable from the "
            "current folder (or install it)"
        ) from None
    except Exception as exc:  # the application's module: any error its import raises
        raise InvalidArgumentError(
            f"--embed {spec!r}: importing {module_name} failed ({type(exc).__name__}: "
            f"{exc}); fix the module, or name another"
        ) from None
    found: Any = module
    for part in name.split("."):
        if not hasattr(found, part):
            raise InvalidArgumentError(
                f"--embed {spec!r}: {module_name} has no {name!r}; give the name of an "
                "Embeddings object, class or function in it"
            )
        found = getattr(found, part)
    if isinstance(found, type):
        try:
            found = found()
        except TypeError as exc:
            raise InvalidArgumentError(
                f"--embed {spec!r}: the class cannot be made with no arguments ({exc}); name "
                "an object made with its arguments instead"
            ) from None
    if not callable(found) and not hasattr(found, "embed_documents"):
        raise InvalidArgumentError(
            f"--embed {spec!r} is a {type(found).__name__}; give an Embeddings object, class "
            "or a function from texts to vectors"
        )
    return found
