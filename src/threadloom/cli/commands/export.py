"""`threadloom export`: put threads of the file into the shared engine's document service
(a dry run unless `--apply`)."""

from __future__ import annotations

import argparse

from threadloom.cli._transfer import add_arguments as transfer_arguments
from threadloom.cli._transfer import run_transfer

HELP = "put threads of the file into the shared engine's document service"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `threadloom export` (`--to` names the service)."""
    transfer_arguments(parser, "to")


def run(args: argparse.Namespace) -> int:
    """Export; print the report; 1 on a conflict."""
    return run_transfer(args, "to")
