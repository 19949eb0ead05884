"""The Agent Server's registry (assistants, versions, threads, runs, crons) kept in the
threadloom file, under LangGraph's in-memory runtime (docs/agent-server.md).

Adapter layer. The in-memory runtime (`langgraph_runtime_inmem`) keeps its registry as
five lists of dicts in one process-wide mapping and pickles it whole every 10 s. Its
operations mutate those dicts in place, always inside `database.connect()`, so this
module wraps `connect`: when a connection ends, the records that differ from what the
file holds are found (a dict comparison per record with a snapshot of what was last
written) and written in one transaction before the caller goes on, so a request is
answered only once its records are committed, as its checkpoints are. The writes go
through one worker thread, in the order the changes were found. A `delete` TTL
(`expire`) removes idle threads from both.

At start the file's records replace what the runtime loaded from its pickles (the
file's are the truth); a file without a registry yet adopts the pickles' once. A
thread's values are not stored (they are its newest checkpoint's) and are read back from
the checkpoints at start. What start-up does to the pickled lists (a run left running by
a crash goes back to pending; the graphs' system assistants are made again) is done to
the file's records too, and a thread with checkpoints but no record (written in the
instant between its run's first checkpoint and a crash) gets one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, MutableMapping
from datetime import datetime, timezone
from typing import Any, Final

import zstandard
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from threadloom.engine.conversations import ServerRecord, ServerRecords
from threadloom.langgraph.saver import AsyncSaver

__all__ = ["LISTS", "Registry", "attach", "available", "detach"]

log = logging.getLogger("threadloom.langgraph.server_registry")

#: The runtime's lists and the kind of record each holds, in the order they are restored.
LISTS: Final = (
    ("assistants", "assistant"),
    ("assistant_versions", "assistant_version"),
    ("threads", "thread"),
    ("runs", "run"),
    ("crons", "cron"),
)
#: Fields of a record that stay out of the file (a thread's values are its checkpoint's).
LEFT_OUT: Final = {"thread": frozenset({"values"})}


def record_key(kind: str, record: MutableMapping[str, Any]) -> str:
    """The id a record is stored under (a version: `assistant_id:version`)."""
    if kind == "assistant_version":
        return f"{record['assistant_id']}:{record['version']}"
    field = {"assistant": "assistant_id", "thread": "thread_id", "run": "run_id"}.get(
        kind, "cron_id"
    )
    return str(record[field])


def _thread_of(kind: str, record: MutableMapping[str, Any]) -> str | None:
    if kind in ("thread", "run", "cron") and record.get("thread_id") is not None:
        return str(record["thread_id"])
    return None


def _stored(kind: str, record: MutableMapping[str, Any]) -> Any:
    """The record as the file keeps it: a thread without its values; a run without the
    callables the server puts in its `configurable` at each attempt (a counter of
    finished nodes: process state, not the run's)."""
    left_out = LEFT_OUT.get(kind)
    if left_out:
        return {k: v for k, v in record.items() if k not in left_out}
    if kind == "run":
        config = (record.get("kwargs") or {}).get("config") or {}
        configurable = config.get("configurable") or {}
        if _NODE_COUNTER in configurable and any(callable(v) for v in configurable.values()):
            kept = {k: v for k, v in configurable.items() if not callable(v)}
            kwargs = {**record["kwargs"], "config": {**config, "configurable": kept}}
            return {**record, "kwargs": kwargs}
    return record


def _snapshot(value: Any) -> Any:
    """A copy of a record's dicts and lists sharing their other values (ids, times,
    strings: the runtime replaces those, never changes them in place), so comparing a
    record with its snapshot mostly meets the same objects, which compare at once."""
    if isinstance(value, dict):
        return {k: _snapshot(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_snapshot(v) for v in value]
    if type(value) is tuple:
        return tuple(_snapshot(v) for v in value)
    return value


def _values(saver: AsyncSaver, thread_id: str) -> dict[str, Any] | None:
    """A thread's values as its newest root checkpoint holds them (no internal channels)."""
    found = saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
    if found is None:
        return None
    channels = found.checkpoint.get("channel_values", {})
    return {
        k: v for k, v in channels.items() if not k.startswith("__") and not k.startswith("branch:")
    }


class Registry:
    """The registry of one runtime state (`state`: the runtime's lists by name) in one
    saver's file and scope.

    Args:
        saver: the server's checkpointer (its file, scope and checkpoints).
        state: the runtime's mapping of lists (`GLOBAL_STORE`).
    """

    def __init__(self, saver: AsyncSaver, state: MutableMapping[str, Any]) -> None:
        self.saver = saver
        self.state = state
        self.records = ServerRecords(saver.checkpoints.file, saver.checkpoints.scope)
        self.serde = JsonPlusSerializer(pickle_fallback=True)
        #: What the file holds, by (kind, id): the stored view of each record as written.
        self._written: dict[tuple[str, str], Any] = {}
        #: id(record) -> (record, its key), from the last look.
        self._keys: dict[int, tuple[Any, str]] = {}
        self._lock = threading.Lock()
        self._writer = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="threadloom-registry"
        )
        self.closed = False

    # -- start ---------------------------------------------------------------------

    def restore(self) -> int:
        """Replace the runtime's lists with the file's records (or adopt the runtime's
        when the file has never held a registry); return how many records were read."""
        if not self.records.started():
            found = sum(len(self.state.get(name) or ()) for name, _ in LISTS)
            self._adopt_missing_threads()
            self._write(self._changes(), start=True)
            log.info("%s: the server's registry now lives in the file", self.records.file.path)
            return found
        rows = self.records.load()
        lists: dict[str, list[Any]] = {name: [] for name, _ in LISTS}
        by_kind = {kind: name for name, kind in LISTS}
        written: dict[tuple[str, str], Any] = {}
        for row in rows:
            record = self._decode(row.codec, row.body)
            written[(row.kind, row.id)] = _snapshot(record)
            lists[by_kind[row.kind]].append(record)
        for items in lists.values():
            items.sort(key=_created)
        for thread in lists["threads"]:
            thread["values"] = _values(self.saver, str(thread["thread_id"]))
        now = datetime.now(timezone.utc)
        for run in lists["runs"]:
            # As the runtime does at start: no worker runs yet, so a run saved as
            # running was cut off; left running, it would block its thread.
            if run.get("status") == "running":
                run["status"] = "pending"
                run["updated_at"] = now
        lists["assistants"] = [
            a for a in lists["assistants"] if a["metadata"].get("created_by") != "system"
        ]
        for name, items in lists.items():
            self.state[name] = items
        self._written = written
        self._adopt_missing_threads()
        self._write(self._changes())
        return len(rows)

    def _adopt_missing_threads(self) -> None:
        """Give a record to each thread of the scope with checkpoints but none (only ids
        the server could have made: UUIDs)."""
        threads = self.state.setdefault("threads", [])
        known = {str(t["thread_id"]) for t in threads}
        before: str | None = None
        while True:
            page = self.saver.threads(limit=200, before=before)
            for info in page:
                if info.thread_id in known:
                    continue
                try:
                    thread_uuid = uuid.UUID(info.thread_id)
                except ValueError:
                    continue
                threads.append(
                    {
                        "thread_id": thread_uuid,
                        "created_at": info.created_at,
                        "updated_at": info.updated_at,
                        "state_updated_at": info.updated_at,
                        "metadata": {},
                        "status": "idle",
                        "config": {},
                        "values": _values(self.saver, info.thread_id),
                    }
                )
            if len(page) < 200:
                return
            before = page[-1].cursor

    # -- write-through -------------------------------------------------------------

    def _changes(self) -> tuple[list[ServerRecord], list[tuple[str, str]]]:
        """The records that differ from the file's, and the ids gone from the runtime;
        `_written` is updated to what they make the file hold. Caller holds the lock or
        runs alone. The runtime's other event loops may change a record meanwhile (a
        dict changing size while it is read): then it is all found again."""
        for attempt in range(_ATTEMPTS):
            try:
                found = self._found()
                break
            except RuntimeError:  # "dictionary changed size during iteration"
                if attempt == _ATTEMPTS - 1:
                    raise
        kept, upserts, deletes = found
        self._written.update(kept)
        for key in deletes:
            del self._written[key]
        return upserts, deletes

    def _found(
        self,
    ) -> tuple[dict[tuple[str, str], Any], list[ServerRecord], list[tuple[str, str]]]:
        current: dict[tuple[str, str], tuple[str, MutableMapping[str, Any]]] = {}
        keys: dict[int, tuple[Any, str]] = {}
        for name, kind in LISTS:
            for record in list(self.state.get(name) or ()):
                # A record's id fields never change: its key is remembered by identity.
                known = self._keys.get(id(record))
                rid = known[1] if known is not None and known[0] is record else None
                if rid is None:
                    rid = record_key(kind, record)
                keys[id(record)] = (record, rid)
                current[(kind, rid)] = (kind, record)
        self._keys = keys
        kept: dict[tuple[str, str], Any] = {}
        upserts: list[ServerRecord] = []
        for key, (kind, record) in current.items():
            view = _stored(kind, record)
            if self._written.get(key, _MISSING) == view:
                continue
            kept[key] = _snapshot(view)
            codec, body = self._encode(kept[key])
            upserts.append(ServerRecord(kind, key[1], _thread_of(kind, record), codec, body))
        deletes = [key for key in self._written if key not in current]
        return kept, upserts, deletes

    def _encode(self, record: Any) -> tuple[str, bytes]:
        """The serializer's bytes, compressed when that saves (a run's record halves)."""
        codec, body = self.serde.dumps_typed(record)
        if len(body) >= _COMPRESS_FROM:
            packed = zstandard.ZstdCompressor(level=3).compress(body)
            if len(packed) < len(body):
                return codec + _ZSTD, packed
        return codec, body

    def _decode(self, codec: str, body: bytes) -> Any:
        if codec.endswith(_ZSTD):
            codec, body = codec[: -len(_ZSTD)], zstandard.ZstdDecompressor().decompress(body)
        return self.serde.loads_typed((codec, body))

    def _write(
        self, changes: tuple[list[ServerRecord], list[tuple[str, str]]], start: bool = False
    ) -> None:
        upserts, deletes = changes
        self.records.apply(upserts, deletes, start=start)

    def flush_later(self) -> concurrent.futures.Future[None] | None:
        """Find what changed now and queue its write (writes keep the order of finding);
        None when nothing changed."""
        with self._lock:
            if self.closed:
                return None
            upserts, deletes = self._changes()
            if not upserts and not deletes:
                return None
            return self._writer.submit(self.records.apply, upserts, deletes)

    def flush(self) -> None:
        """Write what changed, now."""
        pending = self.flush_later()
        if pending is not None:
            pending.result()

    def expire(self, idle: float, now: float | None = None) -> list[str]:
        """Remove every thread idle for `idle` seconds (`checkpointer.ttl` with the
        `delete` strategy): its checkpoints, then its records (its runs and crons too)
        from the runtime and the file. A thread with a pending or running run, or
        written more recently than its record says, is kept. Returns the ids deleted."""
        cutoff = datetime.fromtimestamp((time.time() if now is None else now) - idle, timezone.utc)
        runs = list(self.state.get("runs") or ())
        busy = {str(r["thread_id"]) for r in runs if r.get("status") in ("pending", "running")}
        doomed: list[str] = []
        for thread in list(self.state.get("threads") or ()):
            thread_id = str(thread["thread_id"])
            updated = thread.get("updated_at")
            if thread_id in busy or updated is None or updated >= cutoff:
                continue
            info = self.saver.thread(thread_id)
            if info is None or info.updated_at < cutoff:
                doomed.append(thread_id)
        if not doomed:
            return []
        for thread_id in doomed:
            # Its rows, and (the trigger) its records, in one transaction each.
            self.saver.delete_thread(thread_id)
        gone = set(doomed)
        with self._lock:
            if self.closed:
                return doomed
            for name in ("threads", "runs", "crons"):
                # Replaced, not changed in place, as the runtime's own deletes do.
                self.state[name] = [
                    r for r in self.state.get(name) or () if str(r.get("thread_id")) not in gone
                ]
            upserts, deletes = self._changes()
            pending = self._writer.submit(self.records.apply, upserts, deletes)
        pending.result()
        return doomed

    def close(self) -> None:
        """Write what changed and stop writing."""
        try:
            self.flush()
        finally:
            with self._lock:
                self.closed = True
            self._writer.shutdown(wait=True)


_MISSING: Final = object()
#: The `configurable` key under which the server puts a callable per attempt.
_NODE_COUNTER: Final = "__pregel_node_finished"
#: Finding the changes again after a concurrent change, at most this many times.
_ATTEMPTS: Final = 5
#: Bodies from this size are compressed (zstd), marked by this suffix of their codec.
_COMPRESS_FROM: Final = 256
_ZSTD: Final = "+zstd"


def _created(record: MutableMapping[str, Any]) -> tuple[bool, Any]:
    created = record.get("created_at")
    return (created is not None, created if created is not None else 0)


#: The registry of this process (the runtime's state is process-wide), if attached.
_ATTACHED: list[Registry] = []
#: The server enters its checkpointer once per event-loop thread, maybe at once.
_ATTACHING = threading.Lock()


def _wrap_connect(original: Callable[..., Any]) -> Callable[..., Any]:
    @contextlib.asynccontextmanager
    async def connect(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        try:
            async with original(*args, **kwargs) as conn:
                yield conn
        finally:
            registry = next(iter(_ATTACHED), None)  # no IndexError if detached meanwhile
            pending = registry.flush_later() if registry is not None else None
            if pending is not None:
                await asyncio.wrap_future(pending)

    connect.__threadloom_original__ = original  # type: ignore[attr-defined]
    return connect


def _rebind(old: Any, new: Any) -> None:
    """Point every loaded module's `connect` that is `old` to `new` (modules bound the
    runtime's function by name when they were imported)."""
    for module in list(sys.modules.values()):
        names = getattr(module, "__dict__", None)
        if names is not None and names.get("connect") is old:
            setattr(module, "connect", new)  # noqa: B010 - any module, typed as ModuleType


def attach(saver: AsyncSaver) -> Registry | None:
    """Keep the in-memory runtime's registry in the saver's file from now on (once per
    process; later calls return the attached registry). None outside that runtime."""
    with _ATTACHING:
        if _ATTACHED:
            return _ATTACHED[0]
        return _attach(saver)


def _attach(saver: AsyncSaver) -> Registry | None:
    database = sys.modules.get("langgraph_runtime_inmem.database")
    if database is None:
        return None
    registry = Registry(saver, database.GLOBAL_STORE)
    registry.restore()
    # The file is the registry now: the runtime's pickle of it (rewritten whole every
    # 10 s, thread values included) would only cost time and disk. "r" makes its
    # `sync` a no-op (PersistentDict's read-only flag); the retry counters still flush.
    database.GLOBAL_STORE.flag = "r"
    original = getattr(database, "connect")  # noqa: B009 - the runtime's, untyped here
    wrapped = _wrap_connect(original)
    setattr(database, "connect", wrapped)  # noqa: B010
    _rebind(original, wrapped)
    _ATTACHED.append(registry)
    return registry


def available() -> bool:
    """Whether this process runs the in-memory runtime, whose registry `attach` keeps."""
    return "langgraph_runtime_inmem.database" in sys.modules


def detach() -> None:
    """Write what changed and stop keeping the registry (the server is stopping; its
    pickle stays off, so the shutdown writes no stale copy of the registry)."""
    with _ATTACHING:
        if not _ATTACHED:
            return
        registry = _ATTACHED.pop()
    database = sys.modules.get("langgraph_runtime_inmem.database")
    wrapped = getattr(database, "connect", None)
    original = getattr(wrapped, "__threadloom_original__", None)
    if database is not None and original is not None:
        setattr(database, "connect", original)  # noqa: B010
        _rebind(wrapped, original)
    registry.close()
