"""The rows PostgresSaver would have written for a thread's checkpoints: its `checkpoints`
rows and `checkpoint_blobs` rows, built from a threadloom file's checkpoint tuples.

Adapter layer, no I/O. PostgresSaver's `put` keeps `None`, strings, numbers and booleans
in the checkpoint's JSON and every other channel value in a blob row keyed by
`(thread, namespace, channel, version)`, written for the channels the put says changed
(ON CONFLICT DO NOTHING); `list` joins a checkpoint's `channel_versions` with those rows.
The rows here follow the same rule, written with the saver's own statements and
serializer (`postgres_target.py`), one batch per thread.

Versions. threadloom numbers a new thread's channel versions 1, 2, 3 (integers), and a
fork (`update_state` on an older checkpoint) may give a channel the same number on two
branches with two different values. PostgresSaver's versions are strings,
`"<counter:032>.<random:016>"`: its random fraction keeps two branches' blobs apart, and
LangGraph compares a channel's versions with `>`, so a thread holding integers would fail
on its second step on PostgreSQL (an integer compared with the saver's next string). An
integer version is therefore written as a string: the counter, then a fraction derived
from the value's serialized bytes (a blob channel whose version changed) or inherited
from the parent (unchanged), or zero (a value kept in the JSON, or none). Within one
lineage every comparison keeps its outcome; `versions_seen` takes the string of the
channel's version in the same checkpoint when the counters are equal. String versions
(threads that came from PostgresSaver) are kept as they are.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from threadloom.protocol import Undecoded

if TYPE_CHECKING:
    from langgraph.checkpoint.base import CheckpointTuple
    from langgraph.checkpoint.serde.base import SerializerProtocol

#: The fraction of a version whose value has no blob (kept in the JSON, or absent).
ZERO_FRACTION = "0.00000000000000"
#: A blob row: thread, namespace, channel, version, type, bytes.
BlobRow = tuple[str, str, str, str, str, bytes | None]
#: A checkpoint row: thread, namespace, id, parent id, checkpoint JSON, metadata JSON
#: (the JSON values as Python objects; the target wraps them).
CheckpointRow = tuple[str, str, str, str | None, dict[str, Any], dict[str, Any]]


def is_integer(version: Any) -> bool:
    return isinstance(version, int) and not isinstance(version, bool)


def counter(version: Any) -> Any:
    """The counter of a PostgresSaver string version (`"0..07.0.123"` -> 7), else the
    version itself."""
    if isinstance(version, str) and "." in version and version.split(".", 1)[0].isdigit():
        return int(version.split(".", 1)[0])
    return version


def fraction(kind: str, blob: bytes | None) -> str:
    """A version's fraction derived from a serialized value: 16 characters as
    PostgresSaver's random ones (`0.` and 14 digits)."""
    digest = hashlib.blake2b(kind.encode() + b"\0" + (blob or b""), digest_size=8).digest()
    return f"0.{int.from_bytes(digest, 'big') % 10**14:014d}"


def stored_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata as PostgresSaver stores it: without the old `writes` key, and as JSON
    gives it back (tuples as lists)."""
    kept = {k: v for k, v in metadata.items() if k != "writes"}
    loaded: dict[str, Any] = json.loads(json.dumps(kept, default=str))
    return loaded


def _inline(value: Any) -> bool:
    """Whether PostgresSaver keeps the value in the checkpoint's JSON (no blob)."""
    return value is None or isinstance(value, (str, int, float, bool))


def _delta_snapshot(value: Any) -> bool:
    """A DeltaChannel snapshot: a blob, marked `true` in the JSON (LangGraph's own rule)."""
    try:
        from langgraph.checkpoint.serde.types import _DeltaSnapshot
    except ImportError:  # a LangGraph without DeltaChannel
        return False
    return isinstance(value, _DeltaSnapshot)


class ThreadRows:
    """Builds one thread's rows, oldest checkpoint first.

    Args:
        thread_id: the thread.
        serde: the serializer of the blobs (the target saver's).
        loads: how the file's undecoded values are decoded (its saver's serializer).
        held: the target's checkpoints' `channel_versions`, by `(namespace, id)`: the
            strings a present checkpoint was written with, which its children inherit.
    """

    def __init__(
        self,
        thread_id: str,
        serde: SerializerProtocol,
        loads: Callable[[tuple[str, bytes]], Any],
        held: Mapping[tuple[str, str], Mapping[str, Any]],
    ) -> None:
        self.thread_id = thread_id
        self.serde = serde
        self.loads = loads
        self.held = held
        #: Per (namespace, id): channel -> (the file's version, the version written).
        self.versions: dict[tuple[str, str], dict[str, tuple[Any, Any]]] = {}
        self.blobs: list[BlobRow] = []
        self.checkpoints: list[CheckpointRow] = []

    def add(self, item: CheckpointTuple, parent: str | None, *, write: bool) -> None:
        """Take the next checkpoint: remember its versions, and with `write` add its rows."""
        conf = item.config["configurable"]
        ns, checkpoint_id = conf["checkpoint_ns"], conf["checkpoint_id"]
        checkpoint = item.checkpoint
        ours = dict(checkpoint.get("channel_versions", {}))
        there = self.held.get((ns, checkpoint_id))
        if there is not None:
            self.versions[(ns, checkpoint_id)] = {k: (v, there.get(k, v)) for k, v in ours.items()}
            return
        before = self.versions.get((ns, parent), {}) if parent is not None else {}
        values, payloads = self._values(checkpoint.get("channel_values", {}))
        inline: dict[str, Any] = {}
        for k, v in values.items():
            if _delta_snapshot(v):
                inline[k] = True  # PostgresSaver's marker; the snapshot is a blob
            elif _inline(v):
                inline[k] = v
        blobs = {k for k in (*values, *payloads) if k not in inline or _delta_snapshot(values[k])}
        written: dict[str, tuple[Any, Any]] = {}
        dumped: dict[str, tuple[str, bytes | None]] = {}
        for k, v in ours.items():
            kept = before.get(k)
            if kept is not None and kept[0] == v:
                written[k] = kept  # unchanged: the parent's version, and its blob row
            elif not is_integer(v):
                written[k] = (v, v)
            elif k in blobs:
                dumped[k] = payloads.get(k) or self.serde.dumps_typed(values[k])
                written[k] = (v, f"{v:032}.{fraction(*dumped[k])}")
            else:
                written[k] = (v, f"{v:032}.{ZERO_FRACTION}")
        self.versions[(ns, checkpoint_id)] = written
        if not write:
            return
        for k in sorted(blobs & set(ours)):
            kept = before.get(k)
            if kept is not None and kept[0] == ours[k]:
                continue
            kind, blob = dumped.get(k) or payloads.get(k) or self.serde.dumps_typed(values[k])
            self.blobs.append((self.thread_id, ns, k, str(written[k][1]), kind, blob))
        stored = dict(checkpoint)
        stored["channel_values"] = inline
        stored["channel_versions"] = {k: w for k, (_, w) in written.items()}
        stored["versions_seen"] = {
            node: {k: _seen(v, ours.get(k), written.get(k)) for k, v in seen.items()}
            for node, seen in checkpoint.get("versions_seen", {}).items()
        }
        self.checkpoints.append(
            (self.thread_id, ns, checkpoint_id, parent, stored, stored_metadata(item.metadata))
        )

    def _values(
        self, channel_values: Mapping[str, Any]
    ) -> tuple[dict[str, Any], dict[str, tuple[str, bytes]]]:
        """The channel values to decide on (inline or blob), and the stored payloads a blob
        can reuse as they are. A list of plain msgpack elements (`Undecoded`, as the file
        keeps a list channel) is never decoded: its blob is the array they make (what
        the serializer writes for the list); other undecoded values are decoded."""
        values: dict[str, Any] = {}
        payloads: dict[str, tuple[str, bytes]] = {}
        for k, v in channel_values.items():
            if isinstance(v, Undecoded):
                values[k] = self.loads((v.kind, v.payload))
                if not _delta_snapshot(values[k]):
                    payloads[k] = (v.kind, v.payload)
            elif isinstance(v, list) and v and all(isinstance(e, Undecoded) for e in v):
                if all(e.kind == "msgpack" for e in v):
                    payloads[k] = ("msgpack", _array(len(v)) + b"".join(e.payload for e in v))
                else:
                    values[k] = [self.loads((e.kind, e.payload)) for e in v]
            else:
                values[k] = v
        return values, payloads


def _array(count: int) -> bytes:
    """The msgpack header of an array of `count` elements, in its shortest form (as the
    serializer writes it)."""
    if count < 16:
        return bytes((0x90 | count,))
    if count < 0x10000:
        return b"\xdc" + count.to_bytes(2, "big")
    return b"\xdd" + count.to_bytes(4, "big")


def _seen(version: Any, current: Any, written: tuple[Any, Any] | None) -> Any:
    """A `versions_seen` entry as written: the channel's own string when it is the
    checkpoint's version of the channel, else the counter with a zero fraction."""
    if not is_integer(version):
        return version
    if written is not None and current == version:
        return written[1]
    return f"{version:032}.{ZERO_FRACTION}"


def same_versions(ours: Mapping[str, Any], theirs: Mapping[str, Any] | None) -> bool:
    """Whether the target's `channel_versions` are the file's as written (integers as
    strings with their counter; other versions equal)."""
    if theirs is None or set(ours) != set(theirs):
        return False
    return all(
        (counter(theirs[k]) == v) if is_integer(v) else theirs[k] == v for k, v in ours.items()
    )


def parent_of(item: CheckpointTuple) -> str | None:
    """The checkpoint's parent id (None for a first checkpoint)."""
    if item.parent_config is None:
        return None
    return str(item.parent_config["configurable"]["checkpoint_id"])


def conflict(item: CheckpointTuple, there: Any) -> str:
    """Why the target's checkpoint of the same id is another one ("" when it is the same):
    its parent, time, channel versions or metadata differ. `there` is a `HeldCheckpoint`."""
    checkpoint = item.checkpoint
    differs = [
        name
        for name, same in (
            ("parent", parent_of(item) == there.parent_id),
            ("ts", checkpoint.get("ts") == there.checkpoint.get("ts")),
            (
                "channel_versions",
                same_versions(
                    checkpoint.get("channel_versions", {}),
                    there.checkpoint.get("channel_versions"),
                ),
            ),
            ("metadata", stored_metadata(item.metadata) == there.metadata),
        )
        if not same
    ]
    return ", ".join(differs)


def rows_of(
    thread_id: str,
    items: Sequence[CheckpointTuple],
    held: Mapping[tuple[str, str], Any],
    serde: SerializerProtocol,
    loads: Callable[[tuple[str, bytes]], Any],
) -> ThreadRows:
    """The rows of the checkpoints of `items` (oldest first) the target lacks."""
    rows = ThreadRows(
        thread_id,
        serde,
        loads,
        {key: h.checkpoint.get("channel_versions", {}) for key, h in held.items()},
    )
    for item in items:
        conf = item.config["configurable"]
        rows.add(
            item, parent_of(item), write=(conf["checkpoint_ns"], conf["checkpoint_id"]) not in held
        )
    return rows
