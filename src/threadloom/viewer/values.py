"""How the viewer shows values: shortened plain values, raw documents in tagged JSON,
sizes, times, path segments.

Outer layer, pure (no I/O). Every value shown comes from `protocol.plain`, which never
imports a class and masks secrets (`{"$type": ..., "$masked": true}`); this module only
cuts what is big, so a page stays small whatever a conversation holds.

Forms added to plain's (docs/cli.md, `view`):

- `{"$cut": "<first characters>", "chars": n, "bytes": m}`: a string longer than shown;
- `{"$more": k}`, as a list's last element or under the key `"…"` of a map: k more;
- `{"$t": "bytes", "size": n, "$v": "<base64 prefix>"}`: bytes of a raw document (no
  `$v` for payloads, which are shown decoded, nor for parts);
- `{"$split": k, "bytes": m}`: a value stored in k parts (m bytes in all), not read
  (the pages that show one join its parts with `?whole=1`).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any, Final

from threadloom.errors import ThreadloomError
from threadloom.protocol import raw_value
from threadloom.protocol.plain import plain

#: Characters of a string shown before it is cut.
TEXT: Final = 2000
#: Elements of a list (keys of a map) shown before the rest is counted.
ITEMS: Final = 100
#: Deepest nesting shown (deeper levels are counted, not shown).
DEPTH: Final = 24
#: Bytes of a raw bytes field shown as base64.
PREFIX: Final = 48
MORE: Final = "…"


def shorten(value: Any, *, text: int = TEXT, items: int = ITEMS, depth: int = DEPTH) -> Any:
    """`value` (plain form) with long strings cut and long lists and maps counted."""
    if isinstance(value, str):
        if len(value) <= text:
            return value
        return {"$cut": value[:text], "chars": len(value), "bytes": len(value.encode("utf-8"))}
    if depth <= 0 and isinstance(value, (list, dict)) and value:
        return {"$more": len(value)}
    if isinstance(value, list):
        shown = [shorten(v, text=text, items=items, depth=depth - 1) for v in value[:items]]
        if len(value) > items:
            shown.append({"$more": len(value) - items})
        return shown
    if isinstance(value, dict):
        out = {
            k: shorten(v, text=text, items=items, depth=depth - 1)
            for k, v in list(value.items())[:items]
        }
        if len(value) > items:
            out[MORE] = {"$more": len(value) - items}
        return out
    return value


def cut(value: Any) -> bool:
    """True when `shorten` left something out of `value`."""
    if isinstance(value, dict):
        if "$cut" in value or "$more" in value:
            return True
        return any(cut(v) for v in value.values())
    if isinstance(value, list):
        return any(cut(v) for v in value)
    return False


def pretty(value: Any) -> str:
    """JSON text of a plain value, indented (what the pages show in `<pre>`)."""
    return json.dumps(value, indent=2, ensure_ascii=False, allow_nan=True, default=str)


def split(stored: Any) -> list[str]:
    """The parts of a stored value split into parts (over `PART_SIZE`); [] for another."""
    if isinstance(stored, Mapping) and "payload" not in stored:
        return [str(ref) for ref in stored.get("parts") or ()]
    return []


def stored_values(data: Any) -> list[Mapping[str, Any]]:
    """The stored values a document's data holds: its `checkpoint`, `metadata` and
    `value` fields and its inline channel values."""
    if not isinstance(data, Mapping):
        return []
    fields = ("checkpoint", "metadata", "value")
    found = [data[f] for f in fields if isinstance(data.get(f), Mapping)]
    channels = data.get("channels")
    if isinstance(channels, Mapping):
        found += [e["value"] for e in channels.values() if isinstance(e, Mapping) and "value" in e]
    return found


def split_summary(values: Iterable[Any], *more: dict[str, int] | None) -> dict[str, int] | None:
    """`{"values", "bytes"}` of the split values among `values`, plus the summaries
    `more` (None if there are none): what a page did not decode (`?whole=1` reads)."""
    sizes = [stored_size(v) for v in values if split(v)]
    count, total = len(sizes), sum(sizes)
    for other in more:
        if other:
            count, total = count + other["values"], total + other["bytes"]
    return {"values": count, "bytes": total} if count else None


def decoded(stored: Any, fetched: Mapping[str, Any] | None = None) -> Any:
    """A stored value (`{"kind", "payload"}` or split into parts found in `fetched`) in
    plain form; `{"$unreadable": reason}` when it cannot be read class-free.

    A split value whose parts were not fetched is `{"$split": parts, "bytes": size}`: a
    payload decodes only whole, so showing any of it means reading every part."""
    if not isinstance(stored, Mapping) or "kind" not in stored:
        return {"$unreadable": "not a stored value"}
    parts = split(stored)
    if parts and any(ref not in (fetched or {}) for ref in parts):
        return {"$split": len(parts), "bytes": stored_size(stored)}
    try:
        return plain(*raw_value(stored, fetched or {}))
    except ThreadloomError as exc:
        return {"$unreadable": type(exc).__name__, "detail": str(exc)}


def stored_size(stored: Any) -> int:
    """The payload length of a stored value (inline or split)."""
    if not isinstance(stored, Mapping):
        return 0
    if "payload" in stored:
        return len(stored["payload"])
    return int(stored.get("size") or 0)


def tagged(value: Any, *, decoded_bytes: bool = False) -> Any:
    """Raw document data in tagged JSON (SPEC §10): bytes as `{"$t": "bytes", "size"}`
    (with a base64 prefix unless `decoded_bytes`: the payload is shown decoded instead,
    never as bytes that could hold what plain masks); map keys starting with `$` get
    another `$`."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        out: dict[str, Any] = {"$t": "bytes", "size": len(data)}
        if not decoded_bytes:
            out["$v"] = base64.b64encode(data[:PREFIX]).decode("ascii")
            if len(data) > PREFIX:
                out["prefix"] = PREFIX
        return out
    if isinstance(value, Mapping):
        stored = "kind" in value and ("payload" in value or "parts" in value)
        return {
            ("$" + k if isinstance(k, str) and k.startswith("$") else str(k)): tagged(
                v, decoded_bytes=decoded_bytes or stored
            )
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [tagged(v, decoded_bytes=decoded_bytes) for v in value]
    return value


def human_bytes(size: int | float | None) -> str:
    """1536 -> '1.5 KiB'."""
    if size is None:
        return "-"
    amount = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if amount < 1024 or unit == "GiB":
            return f"{int(amount)} B" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    return f"{amount:.1f} TiB"  # pragma: no cover - the loop returns at GiB


def iso(moment: float | None) -> str | None:
    """Unix seconds as ISO-8601 UTC."""
    if moment is None:
        return None
    return datetime.fromtimestamp(moment, timezone.utc).isoformat()


def short_time(text: str | None) -> str:
    """An ISO-8601 time as 'YYYY-MM-DD HH:MM:SS' (UTC)."""
    if not text:
        return "-"
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return text
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


# -- path segments ------------------------------------------------------------------------

_SAFE: Final = re.compile(r"[A-Za-z0-9_-]")
_TILDE: Final = re.compile(r"~([0-9A-F]{2})")


def tilde(text: str) -> str:
    """Encode an id as one URL path segment: characters outside `A-Za-z0-9_-` become
    `~XX` (their UTF-8 bytes in hex), so `/`, `.` (the `.json` suffix) and `~` never
    appear raw, and the common ids (`t-1`, a uuid) read as they are."""
    return "".join(
        ch if _SAFE.fullmatch(ch) else "".join(f"~{b:02X}" for b in ch.encode("utf-8"))
        for ch in text
    )


def untilde(segment: str) -> str:
    """Decode `tilde`. Raises ValueError on bytes that are not UTF-8."""
    raw = bytearray()
    position = 0
    for match in _TILDE.finditer(segment):
        raw += segment[position : match.start()].encode("utf-8")
        raw.append(int(match.group(1), 16))
        position = match.end()
    raw += segment[position:].encode("utf-8")
    return raw.decode("utf-8")


# -- the history's lanes ----------------------------------------------------------------


def lanes(nodes: list[dict[str, Any]]) -> int:
    """Give each checkpoint of a page (newest first) a `lane` as git log's graph does:
    a checkpoint takes the lane that waits for it (else a new one) and hands it to its
    parent; where two lanes wait for one parent, the lower lane goes on and the other
    ends. Returns how many lanes."""
    waiting: list[str | None] = []
    width = 0
    for node in nodes:
        me = node["checkpoint_id"]
        lane = waiting.index(me) if me in waiting else None
        if lane is None:
            lane = waiting.index(None) if None in waiting else len(waiting)
            if lane == len(waiting):
                waiting.append(None)
        active = {i for i, wanted in enumerate(waiting) if wanted is not None}
        for i, wanted in enumerate(waiting):  # other lanes that waited for it merge here
            if wanted == me and i != lane:
                waiting[i] = None
        parent = node.get("parent_id")
        waiting[lane] = parent or None
        if parent and waiting.count(parent) > 1:  # two lanes meet: the lower one goes on
            keep = waiting.index(parent)
            for i, wanted in enumerate(waiting):
                if wanted == parent and i != keep:
                    waiting[i] = None
        active |= {i for i, wanted in enumerate(waiting) if wanted is not None}
        node["lane"] = lane
        node["active"] = sorted(active)
        width = max(width, len(waiting))
    return max(width, 1)
