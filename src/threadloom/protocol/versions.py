"""Channel version arithmetic (SPEC §5.5)."""

from __future__ import annotations

from typing import Any


def next_version(current: Any) -> Any:
    """Return the channel version after `current`, as the shared engine computes it.

    `None` gives 1 (new threads use integers); a string `"<n>.<anything>"` (threads
    migrated from PostgresSaver or InMemorySaver) gives `n+1` zero-padded to 32
    digits followed by `.00000000000000.0`; anything else gives `current + 1`.
    """
    if current is None:
        return 1
    if isinstance(current, str):
        counter = int(current.split(".")[0])
        return f"{counter + 1:032}.{0.0:016}"
    return current + 1
