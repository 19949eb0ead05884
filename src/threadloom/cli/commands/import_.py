"""`threadloom import`: copy threads of the shared engine's document service into the file
(a dry run unless `--apply`). The module is `import_` because `import` is a keyword."""

from __future__ import annotations

import argparse

from threadloom.cli._transfer import add_arguments as transfer_arguments
from threadloom.cli._transfer import run_transfer

HELP = "copy threads of the shared engine's document service into the file"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `threadloom import` (`--from` names the service)."""
    transfer_arguments(parser, "from")


def run(args: argparse.Namespace) -> int:
    """Import; print the report; 1 on a conflict."""
    return run_transfer(args, "from")
