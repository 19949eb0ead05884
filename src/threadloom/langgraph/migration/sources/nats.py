"""The `nats` source: the engine's document service over NATS, read by the command line.

Adapter layer. `threadloom migrate --from nats` (cli/migrate.py) reads it with
`threadloom.nats`, which sits above this wing, so the wing only recognizes its URL
(`nats://`) to name it in messages and to hand it back to the command line; opening it
here is refused with where to read it instead.
"""

from __future__ import annotations

from threadloom.errors import MigrationError
from threadloom.langgraph.migration.sources.base import Options, Source, SourceKind


def _refuse(url: str, options: Options) -> Source:
    """Say where a NATS source is read: the command line or `threadloom.nats`."""
    raise MigrationError(
        "a NATS source is read by the command line (`threadloom migrate --from nats`) or "
        "threadloom.nats.transfer.import_threads"
    )


KIND = SourceKind(name="nats", wanted="a NATS URL", opens=_refuse, schemes=("nats",), by_cli=True)
