"""Metadata keys in SQL (format 3): what `list(filter=...)` and `delete_for_runs` decide on.

Engine layer, no I/O of its own. A checkpoint whose metadata is stored in plain text
gets one `checkpoint_keys` row per top-level key: the value itself when SQLite compares
it exactly as Python's `==` does (str, int of 64 bits, finite float, bool as 0/1, None),
an empty blob otherwise. A filter is decided in SQL when each of its values is such a
scalar; otherwise, and for rows without keys (`keyed = 0`: written before format 3 or
with encrypted metadata), by decoding the metadata as before.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

#: Kinds of stored values that are plain text (an encrypting serializer writes others).
PLAIN_KINDS = frozenset({"msgpack", "json"})
#: The value of a key whose value SQL cannot compare as Python does.
OPAQUE = b""
_INT64 = (-(2**63), 2**63 - 1)


def scalar(value: Any) -> tuple[bool, Any]:
    """`(True, bound)` when SQL compares `value` exactly as Python's `==`, else `(False, None)`."""
    if value is None or isinstance(value, bool):
        return True, value if value is None else int(value)
    if isinstance(value, int):
        return (_INT64[0] <= value <= _INT64[1]), value
    if isinstance(value, float):
        return math.isfinite(value), value
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False, None
        return True, value
    return False, None


def rows_of(metadata: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The `(key, value)` rows of a checkpoint's metadata."""
    out: list[tuple[str, Any]] = []
    for key, value in metadata.items():
        if not isinstance(key, str):
            continue
        ok, bound = scalar(value)
        out.append((key, bound if ok else OPAQUE))
    return out


def condition(wanted: Mapping[str, Any], alias: str = "c") -> tuple[str, list[Any]] | None:
    """SQL deciding `all(metadata.get(k) == v for k, v in wanted.items())` on keyed rows.

    Returns:
        `(sql, args)` true for the keyed rows that match, or None when some value of
        `wanted` cannot be compared in SQL (the caller then decodes every row).
    """
    parts: list[str] = []
    args: list[Any] = []
    for key, value in wanted.items():
        ok, bound = scalar(value)
        if not ok or not isinstance(key, str):
            return None
        if bound is None:
            parts.append(
                f"NOT EXISTS (SELECT 1 FROM checkpoint_keys k WHERE k.checkpoint = {alias}.id "
                "AND k.key = ? AND k.value IS NOT NULL)"
            )
            args.append(key)
        else:
            parts.append(
                f"EXISTS (SELECT 1 FROM checkpoint_keys k WHERE k.checkpoint = {alias}.id "
                "AND k.key = ? AND k.value = ?)"
            )
            args.extend((key, bound))
    return " AND ".join(parts) or "1", args
