"""The tail of a thread's messages: the last elements of a list channel, read from its chunks.

Engine layer. A messages channel of more than 1 KiB is a list blob (SPEC §2.3): the refs
of its chunks in order and its length; each chunk lists up to 32 element refs. The tail
of the list is therefore its last chunks' elements: a read of `limit` messages fetches
the checkpoint row, the list blob, `limit / 32 + 2` chunks and `limit` elements, whatever
the conversation's length (the list blob itself holds one ref per 32 messages).

`before` pages backwards: a position (the `start` of the page after it) costs the same;
a message id is found by reading chunks from the end back to it. The elements come back
as typed payloads; the adapter decodes them (`serde`), the viewer reads them class-free.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import apsw

from threadloom.core.msgpack import array_spans
from threadloom.engine.checkpoints.reader import Reader
from threadloom.engine.checkpoints.values import Values
from threadloom.engine.format import heads
from threadloom.engine.format.tables import CHECKPOINT_COLUMNS, CHECKPOINT_FROM, CheckpointRow
from threadloom.engine.sql import fetch
from threadloom.errors import InvalidArgumentError, MissingDocumentsError, ProtocolError
from threadloom.protocol import MAX_PAGE, raw_value
from threadloom.protocol.constants import CHUNK_SIZE
from threadloom.protocol.plain import message, plain

Typed = tuple[str, bytes]


@dataclass(frozen=True)
class Tail:
    """A page of a list channel of one checkpoint.

    Attributes:
        checkpoint_id: the checkpoint read (None: the thread has no root checkpoint).
        total: the list's length.
        start: the position of the first element returned.
        elements: the elements' typed payloads, oldest first; None when the list was
            stored as one value that could not be cut (`values` holds the page).
        values: the page's elements decoded (by the `decode` given to `tail`), when the
            list was a schema-1 checkpoint's or one value of a kind other than msgpack.
        whole: that value's typed payload, and `path` the keys down to the list in it.
    """

    checkpoint_id: str | None
    total: int
    start: int
    elements: list[Typed] | None
    values: list[Any] | None = None
    whole: Typed | None = None
    path: tuple[str, ...] = ()

    @property
    def count(self) -> int:
        """How many elements the page holds."""
        return len(self.elements if self.elements is not None else self.values or [])


def read_plain(typed: Typed) -> Any:
    """A typed value read class-free (`protocol.plain`), or None when it cannot be read."""
    try:
        return plain(*typed)
    except ProtocolError:
        return None


def plain_id(item: Any) -> str | None:
    """The id of a message in plain form (None for anything else)."""
    found = message(item)
    return found.get("id") if found else None


class Transcripts:
    """Reads the tails of the list channels of one scope's threads.

    Args:
        reader: the scope's checkpoint reader.
        values: the scope's value resolution (cache first).
    """

    def __init__(self, reader: Reader, values: Values) -> None:
        self.reader = reader
        self.values = values
        self.scope = reader.scope

    def tail(
        self,
        thread_id: str,
        *,
        limit: int = 20,
        before: int | str | None = None,
        checkpoint_id: str | None = None,
        channel: str | None = None,
        decode: Callable[[Typed], Any] = read_plain,
        identify: Callable[[Any], str | None] = plain_id,
    ) -> Tail:
        """The last `limit` elements of `channel` before `before` in the thread's newest
        root checkpoint (or `checkpoint_id`).

        Args:
            decode: reads an element (or a list stored whole) from its typed payload:
                class-free by default; the savers pass their serializer.
            identify: the message id of a decoded element (to find `before`).

        Raises:
            InvalidArgumentError: a bad limit or cursor, or a message id not in the list.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
            raise InvalidArgumentError(f"limit must be an int from 1 to {MAX_PAGE}, not {limit!r}")
        if before is not None and (
            isinstance(before, bool)
            or not isinstance(before, (int, str))
            or before == ""
            or (isinstance(before, int) and before < 0)
        ):
            raise InvalidArgumentError(
                "before must be a message id or a position (the `start` of the page after)"
            )
        name = channel or self.scope.messages_channel
        with self.scope.file.read() as conn:
            row = self._row(conn, thread_id, checkpoint_id)
            if row is None:
                return Tail(None, 0, 0, [])
            doc = self.reader.document(conn, row)
            page = _Page(self.values, conn, row.thread, limit, before, decode, identify)
            if doc["_schema"] != 2:
                whole = raw_value(doc["checkpoint"], {})
                return page.decoded(row.checkpoint_id, whole, ("channel_values", name))
            entry = doc["channels"].get(name)
            if entry is None:
                return page.cut(row.checkpoint_id, [])
            if "value" in entry:
                return page.value(row.checkpoint_id, entry["value"])
            blob = page.blob(entry["blob"])
            if "value" in blob:
                return page.value(row.checkpoint_id, blob["value"])
            return page.chunked(row.checkpoint_id, blob["chunks"], int(blob["length"]))

    def _row(
        self, conn: apsw.Connection, thread_id: str, checkpoint_id: str | None
    ) -> CheckpointRow | None:
        sql = (
            f"SELECT {CHECKPOINT_COLUMNS}{CHECKPOINT_FROM} WHERE t.scope = ? AND t.thread_id = ? "
            "AND c.checkpoint_ns = ''"
        )
        args: list[Any] = [self.scope.id, thread_id]
        if checkpoint_id is not None:
            sql += " AND c.checkpoint_id = ?"
            args.append(checkpoint_id)
        rows: list[CheckpointRow] = fetch(
            conn, CheckpointRow, sql + " ORDER BY c.checkpoint_id DESC LIMIT 1", args
        )
        if not rows:
            heads.check_absent(conn, self.scope.id, thread_id, "", checkpoint_id)
            self.scope.check_threads(conn)
            if checkpoint_id is not None:
                raise InvalidArgumentError(
                    f"thread {thread_id!r} has no root checkpoint {checkpoint_id!r}"
                )
            return None
        if checkpoint_id is None:
            found = conn.execute(
                "SELECT checkpoint_id FROM heads WHERE thread = ? AND checkpoint_ns = ''",
                (rows[0].thread,),
            ).fetchall()
            heads.check_latest(thread_id, "", rows[0].checkpoint_id, found[0][0] if found else None)
        return rows[0]


class _Page:
    """Where a page starts and ends in a list, and the elements it holds."""

    def __init__(
        self,
        values: Values,
        conn: apsw.Connection,
        thread: int,
        limit: int,
        before: int | str | None,
        decode: Callable[[Typed], Any],
        identify: Callable[[Any], str | None],
    ) -> None:
        self.values = values
        self.conn = conn
        self.thread = thread
        self.limit = limit
        self.before = before
        self.decode = decode
        self.identify = identify

    def _id(self, element: Typed) -> str | None:
        return self.identify(self.decode(element))

    def _end(self, total: int, ids: Sequence[str | None] | None = None) -> int:
        """The position the page ends before."""
        if self.before is None:
            return total
        if isinstance(self.before, int):
            return min(self.before, total)
        assert ids is not None
        for position in range(len(ids) - 1, -1, -1):
            if ids[position] == self.before:
                return position
        raise _unknown(self.before)

    def cut(self, checkpoint_id: str, elements: list[Typed]) -> Tail:
        """A page of a list held whole in memory."""
        ids = [self._id(e) for e in elements] if isinstance(self.before, str) else None
        end = self._end(len(elements), ids)
        start = max(0, end - self.limit)
        return Tail(checkpoint_id, len(elements), start, elements[start:end])

    def decoded(self, checkpoint_id: str, typed: Typed, path: tuple[str, ...]) -> Tail:
        """A list inside one value that cannot be cut (a schema-1 checkpoint, a list
        serialized whole in a kind other than msgpack): decoded whole, then paged."""
        value = self.decode(typed)
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        items = list(value) if isinstance(value, (list, tuple)) else []
        ids = [self.identify(item) for item in items] if isinstance(self.before, str) else None
        end = self._end(len(items), ids)
        start = max(0, end - self.limit)
        return Tail(checkpoint_id, len(items), start, None, items[start:end], typed, path)

    def blob(self, ref: str) -> Mapping[str, Any]:
        """The list blob (or value blob) a channel entry names."""
        found: Mapping[str, Any] = self._fetch([ref])[ref]
        return found

    def value(self, checkpoint_id: str, stored: Mapping[str, Any]) -> Tail:
        """A list stored as one value (small, or serialized whole): cut into elements."""
        fetched = self._fetch(stored.get("parts") or [])
        kind, payload = raw_value(stored, fetched)
        spans = array_spans(payload) if kind == "msgpack" else None
        if spans is None:
            return self.decoded(checkpoint_id, (kind, payload), ())
        return self.cut(checkpoint_id, [(kind, payload[a:b]) for a, b in spans])

    def chunked(self, checkpoint_id: str, chunks: Sequence[str], total: int) -> Tail:
        """A list blob: read only the chunks and elements the page needs."""
        if isinstance(self.before, str):
            end = self._find(chunks, total, self.before)
        else:
            end = self._end(total)
        start = max(0, end - self.limit)
        if end == start:
            return Tail(checkpoint_id, total, start, [])
        first, last = start // CHUNK_SIZE, (end - 1) // CHUNK_SIZE
        wanted = list(range(first, last + 1))
        if wanted[-1] != len(chunks) - 1:
            wanted.append(len(chunks) - 1)
        read = dict(zip(wanted, self._chunks([chunks[i] for i in wanted]), strict=True))
        # Chunks are cuts of 32 elements (SPEC §4.2), so positions are arithmetic when
        # the last chunk holds the rest: no chunk holds more than 32, so every earlier
        # one is then full. Lists cut otherwise (imported) are placed by counting.
        if len(read[len(chunks) - 1]) == total - CHUNK_SIZE * (len(chunks) - 1) and all(
            len(read[i]) == CHUNK_SIZE for i in wanted if i != len(chunks) - 1
        ):
            entries = [entry for i in range(first, last + 1) for entry in read[i]]
            offset = first * CHUNK_SIZE
        else:
            entries = [entry for chunk in self._chunks(chunks) for entry in chunk]
            offset = 0
        refs = [ref for ref, _ in entries[start - offset : end - offset]]
        return Tail(checkpoint_id, total, start, self._elements(refs))

    def _find(self, chunks: Sequence[str], total: int, wanted: str) -> int:
        """The position of message `wanted`, reading chunks from the end."""
        position = total
        for index in range(len(chunks) - 1, -1, -1):
            entries = self._chunks([chunks[index]])[0]
            position -= len(entries)
            elements = self._elements([ref for ref, _ in entries])
            for offset in range(len(elements) - 1, -1, -1):
                if self._id(elements[offset]) == wanted:
                    return position + offset
        raise _unknown(wanted)

    def _fetch(self, refs: Sequence[str]) -> dict[str, Any]:
        """Value documents by ref, one level (cache first); a missing one raises."""
        found = self.values.values(self.conn, self.thread, list(dict.fromkeys(refs)))
        missing = [ref for ref in refs if ref not in found]
        if missing:
            raise MissingDocumentsError(sorted(set(missing)))
        return found

    def _chunks(self, refs: Sequence[str]) -> list[list[Any]]:
        found = self._fetch(refs)
        return [list(found[ref]["elements"]) for ref in refs]

    def _elements(self, refs: Sequence[str]) -> list[Typed]:
        found = self._fetch(refs)
        parts = [part for ref in refs for part in found[ref]["value"].get("parts") or ()]
        if parts:
            found = {**found, **self._fetch(parts)}
        return [raw_value(found[ref]["value"], found) for ref in refs]


def plain_elements(tail: Tail) -> list[Any]:
    """The page's elements in plain form (`protocol.plain`, class-free), oldest first;
    None for an element the class-free reader cannot read."""
    if tail.elements is not None:
        return [read_plain(element) for element in tail.elements]
    if tail.whole is None:
        return []
    shown = read_plain(tail.whole)
    for key in tail.path:
        shown = shown.get(key) if isinstance(shown, dict) else None
    if not isinstance(shown, list):
        return [None] * tail.count
    return shown[tail.start : tail.start + tail.count]


def transcript_json(
    thread_id: str, checkpoint_id: str | None, total: int, start: int, items: Sequence[Any]
) -> dict[str, Any]:
    """A page of messages in plain form as JSON-ready data (`Transcript.as_json()`, the
    CLI's `show --json`): each element as `protocol.plain.message` gives it, with its
    `index` in the list; an element that is not a message as `{"type": "value", "value"}`.
    """
    messages = []
    for offset, item in enumerate(items):
        found = message(item) if item is not None else None
        shown = found if found is not None else {"type": "value", "value": item}
        messages.append({"index": start + offset, **shown})
    return {
        "thread_id": thread_id,
        "checkpoint_id": checkpoint_id,
        "total": total,
        "start": start,
        "older": start if start > 0 else None,
        "messages": messages,
    }


def _unknown(wanted: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"before={wanted!r} names no message of this list; pass the id of a message "
        "the list holds, or a position"
    )
