"""threadloom under LangGraph's Agent Server (`langgraph dev`): the checkpointer and the
store that langgraph.json's `"checkpointer": {"path": ...}` and `"store": {"path": ...}`
load, public as `threadloom.langgraph_server` (docs/agent-server.md).

Adapter layer. The server enters each factory once per event-loop thread; every saver and
store of the process shares the one open file (`File.open`). What the server configures
for its own checkpointer and store is read from `langgraph_api.config` and honoured: the
serializer (`checkpointer.serde`), the store's `index` (embeddings resolved the server's
way) and `ttl` (its sweeper runs), and `checkpointer.ttl` where threadloom can keep the
server's thread list true (`keep_latest`; `delete` under the in-memory runtime, whose
registry threadloom keeps). Under that runtime, the server's own records (assistants,
threads, runs, crons) are kept in the file too (`server_registry`), attached by the first
checkpointer the process enters.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Mapping
from datetime import datetime, timezone
from importlib import metadata as package_metadata
from pathlib import Path
from typing import Any

from threadloom.engine import File
from threadloom.errors import ThreadloomError
from threadloom.langgraph import server_registry
from threadloom.langgraph.retention import RetentionPolicy
from threadloom.langgraph.saver import AsyncSaver
from threadloom.langgraph.store import AsyncStore, page_size_of

__all__ = [
    "DB_ENV",
    "PER_REQUEST_KEYS",
    "TESTED",
    "ServerConfigError",
    "ServerSaver",
    "check_versions",
    "checkpointer",
    "database_path",
    "store",
]

log = logging.getLogger("threadloom.langgraph.server")

#: The environment variable naming the file (relative paths: from the server's folder).
DB_ENV = "THREADLOOM_DB"
#: The file's name beside langgraph.json when `THREADLOOM_DB` is not set.
DEFAULT_NAME = "threadloom.db"
#: The `configurable` keys the server sets per request: never stored in a checkpoint's
#: metadata (the server's own list, `_TRANSIENT_CONFIGURABLE_KEYS`). A thread's owner is
#: still taken from `langgraph_auth_user_id` by the thread index (`Saver` `owner_keys`).
PER_REQUEST_KEYS = frozenset(
    {
        "langgraph_request_id",
        "langgraph_auth_user",
        "langgraph_auth_user_id",
        "langgraph_auth_permissions",
    }
)
#: The server packages this module was tested with: `(lowest, below)` release numbers.
#: It reads their internals (config, serde, embeddings), so another release is refused.
TESTED = {
    "langgraph-api": ((0, 16, 7), (0, 17)),
    "langgraph-runtime-inmem": ((0, 36, 7), (0, 37)),
}


class ServerConfigError(ThreadloomError):
    """The Agent Server's set-up is one threadloom cannot serve as configured."""


def _release(text: str) -> tuple[int, ...]:
    numbers = []
    for part in text.split("."):
        digits = "".join(c for c in part if c.isdigit()) if part[:1].isdigit() else ""
        if not digits:
            break
        numbers.append(int(digits))
    return tuple(numbers)


def check_versions(installed: Mapping[str, str | None] | None = None) -> None:
    """Refuse server packages outside the tested range (`TESTED`).

    Args:
        installed: package -> version (None: not installed); default: what this
            Python has.

    Raises:
        ServerConfigError: a package is missing or outside the range.
    """
    for package, (lowest, below) in TESTED.items():
        if installed is None:
            try:
                version: str | None = package_metadata.version(package)
            except package_metadata.PackageNotFoundError:
                version = None
        else:
            version = installed.get(package)
        wanted = f">={'.'.join(map(str, lowest))},<{'.'.join(map(str, below))}"
        if version is None:
            raise ServerConfigError(
                f"{package} is not installed; install the server extra: "
                "pip install '.[server]' (from threadloom's clone)"
            )
        if not lowest <= _release(version) < below:
            raise ServerConfigError(
                f"{package} {version} is outside the range threadloom.langgraph_server "
                f"was tested with ({package}{wanted}); install {package}{wanted}, as the "
                "server extra does (pip install '.[server]' from threadloom's clone)"
            )


def database_path(
    environ: Mapping[str, str] | None = None, cwd: str | os.PathLike[str] | None = None
) -> Path:
    """The threadloom file the server uses: `THREADLOOM_DB` (relative to the server's
    folder), else `threadloom.db` beside the langgraph.json of the folder the server runs
    in (the server tells no other way where its langgraph.json is).

    Raises:
        ServerConfigError: no `THREADLOOM_DB` and no langgraph.json in the folder.
    """
    env = os.environ if environ is None else environ
    here = Path(os.getcwd() if cwd is None else cwd)
    given = env.get(DB_ENV, "").strip()
    if given:
        return (here / Path(given).expanduser()).resolve()
    if (here / "langgraph.json").is_file():
        return (here / DEFAULT_NAME).resolve()
    raise ServerConfigError(
        f"no langgraph.json in {here} (the server's folder) and {DB_ENV} is not set, so "
        f"threadloom does not know which file to use; set {DB_ENV}=/path/to/memory.db, "
        "or start the server in the folder of its langgraph.json"
    )


def _server_config() -> Any:
    """`langgraph_api.config`, imported only inside the server."""
    from langgraph_api import config

    return config


def _server_serde() -> Any:
    """The serializer the server gives its own checkpointer (`checkpointer.serde`:
    `allowed_json_modules`, `pickle_fallback`), or None outside the server."""
    try:
        from langgraph_api.serde import Serializer
    except ImportError:
        return None
    return Serializer()


def _ttl_policy(ttl: Mapping[str, Any] | None) -> tuple[str, float, float] | None:
    """`(strategy, idle seconds, sweep seconds)` of the server's `checkpointer.ttl`, None
    for none.

    Raises:
        ServerConfigError: a strategy threadloom does not know, or times not above 0.
    """
    if not ttl or ttl.get("default_ttl") is None:
        return None
    strategy = ttl.get("strategy", "delete")
    if strategy not in ("delete", "keep_latest"):
        raise ServerConfigError(
            f'checkpointer.ttl strategy "{strategy}" is not one threadloom knows; use '
            '"delete" (threads idle past default_ttl are deleted) or "keep_latest" (they '
            "keep their latest checkpoint)"
        )
    idle = float(ttl["default_ttl"]) * 60
    every = float(ttl.get("sweep_interval_minutes") or 5) * 60
    if idle <= 0 or every <= 0:
        raise ServerConfigError(
            "checkpointer.ttl default_ttl and sweep_interval_minutes must be more than 0 "
            "minutes; remove ttl to keep every checkpoint"
        )
    return strategy, idle, every


def _refuse_delete_outside_the_runtime() -> None:
    """A `delete` TTL needs the registry kept here (the in-memory runtime's)."""
    if not server_registry.available():
        raise ServerConfigError(
            'checkpointer.ttl strategy "delete" needs LangGraph\'s in-memory runtime '
            "(langgraph dev, threadloom agent-server), whose thread list threadloom keeps: "
            "elsewhere deleting an expired thread's checkpoints would leave the server's "
            'thread list naming a thread with no state; use "strategy": "keep_latest", or '
            "delete threads through the API (DELETE /threads/{thread_id})"
        )


class ServerSaver(AsyncSaver):
    """`AsyncSaver` as the Agent Server needs it: per-request keys are not stored in
    checkpoint metadata, and a copied thread's checkpoints name the copy's thread."""

    dropped_metadata = PER_REQUEST_KEYS

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread checkpoint by checkpoint (oldest first), each with the copy's
        `thread_id` in its metadata; the values are shared, not stored twice. A copy that
        fails part-way is deleted again."""
        everything: Any = {"configurable": {"thread_id": source_thread_id}}
        found = list(self.list(everything))
        found.sort(key=lambda t: t.config["configurable"]["checkpoint_id"])
        try:
            for item in found:
                self._copy_one(item, target_thread_id)
        except BaseException:
            self.delete_thread(target_thread_id)
            raise

    def _copy_one(self, item: Any, target: str) -> None:
        ns = item.config["configurable"].get("checkpoint_ns", "")
        configurable: dict[str, Any] = {"thread_id": target, "checkpoint_ns": ns}
        parent = (item.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        if parent is not None:
            configurable["checkpoint_id"] = parent
        meta = dict(item.metadata)
        if "thread_id" in meta:
            meta["thread_id"] = target
        stored = self.put(
            {"configurable": configurable},
            item.checkpoint,
            meta,  # type: ignore[arg-type]
            item.checkpoint.get("channel_versions", {}),
        )
        by_task: dict[str, list[tuple[str, Any]]] = {}
        for task_id, channel, value in item.pending_writes or ():
            by_task.setdefault(task_id, []).append((channel, value))
        for task_id, writes in by_task.items():
            self.put_writes(stored, writes, task_id)

    def idle_threads(self, idle: float, now: float | None = None) -> list[str]:
        """The threads of this scope not written for `idle` seconds."""
        cutoff = datetime.fromtimestamp((time.time() if now is None else now) - idle, timezone.utc)
        stale: list[str] = []
        before: str | None = None
        while True:
            page = self.threads(limit=200, before=before)
            stale.extend(t.thread_id for t in page if t.updated_at < cutoff)
            if len(page) < 200:
                return stale
            before = page[-1].cursor

    def keep_latest(self, idle: float, now: float | None = None) -> int:
        """Prune every thread idle for `idle` seconds to its latest checkpoint (what it
        needs stays); return how many threads were looked at."""
        stale = self.idle_threads(idle, now)
        if stale:
            self.apply_retention(RetentionPolicy(keep_last=1), threads=stale, now=now)
        return len(stale)


async def _expire_loop(registry: server_registry.Registry, idle: float, every: float) -> None:
    """Remove the threads idle past the TTL at start (a server that was down expires what
    aged meanwhile) and every `every` seconds."""
    while True:
        try:
            gone = await asyncio.to_thread(registry.expire, idle)
            if gone:
                log.info("%s: deleted %d threads idle past the TTL", registry.saver.file, len(gone))
        except Exception:  # a busy or failing sweep is not the last one
            log.exception("%s: the checkpointer.ttl sweep failed", registry.saver.file)
        await asyncio.sleep(every)


async def _keep_latest_loop(saver: ServerSaver, idle: float, every: float) -> None:
    while True:
        await asyncio.sleep(every)
        try:
            pruned = await asyncio.to_thread(saver.keep_latest, idle)
            if pruned:
                log.info("%s: kept the latest checkpoint of %d idle threads", saver.file, pruned)
        except Exception:  # a busy or failing sweep is not the last one
            log.exception("%s: the checkpointer.ttl sweep failed", saver.file)


#: Files whose `checkpointer.ttl` sweeper runs in this process (one per file).
_SWEEPING: set[Path] = set()
#: Files whose store TTL sweeper runs in this process (one per file).
_STORE_SWEEPING: set[Path] = set()


@contextlib.asynccontextmanager
async def checkpointer() -> AsyncIterator[ServerSaver]:
    """The Agent Server's checkpointer: langgraph.json
    `"checkpointer": {"path": "threadloom.langgraph_server.checkpointer"}`.

    Raises:
        ServerConfigError: untested server packages, no file to use, or a
            `checkpointer.ttl` threadloom refuses.
    """
    check_versions()
    path = database_path()
    ttl = _ttl_policy(_server_config().THREAD_TTL)
    if ttl is not None and ttl[0] == "delete":
        _refuse_delete_outside_the_runtime()
    serde = _server_serde()
    # The file is made with the pages the store's vectors want, whichever opens first.
    index = (_server_config().STORE_CONFIG or {}).get("index")
    made = await asyncio.to_thread(File.open, path, page_size=page_size_of(index))
    try:
        saver = await asyncio.to_thread(lambda: ServerSaver(path, serde=serde))
    finally:
        made.close()
    registry = await asyncio.to_thread(server_registry.attach, saver)
    keeps_registry = registry is not None and registry.saver is saver
    sweeper: asyncio.Task[None] | None = None
    if ttl is not None and path not in _SWEEPING:
        strategy, idle, every = ttl
        if strategy == "keep_latest":
            _SWEEPING.add(path)
            sweeper = asyncio.create_task(_keep_latest_loop(saver, idle, every))
        elif keeps_registry and registry is not None:
            _SWEEPING.add(path)
            sweeper = asyncio.create_task(_expire_loop(registry, idle, every))
    log.info("threadloom checkpointer on %s", path)
    try:
        yield saver
    finally:
        if sweeper is not None:
            sweeper.cancel()
            _SWEEPING.discard(path)
        if keeps_registry:
            await asyncio.to_thread(server_registry.detach)
        await asyncio.to_thread(saver.close)


def _store_settings(config: Mapping[str, Any] | None) -> tuple[Any, Any]:
    """`(index, ttl)` of the server's store config, the embeddings resolved as the
    server resolves them ("openai:...", "./file.py:function")."""
    index = dict((config or {}).get("index") or {}) or None
    ttl = dict((config or {}).get("ttl") or {}) or None
    if index is not None and index.get("embed") is not None:
        from langgraph_api.graph import resolve_embeddings

        index["embed"] = resolve_embeddings(index)
    return index, ttl


@contextlib.asynccontextmanager
async def store() -> AsyncIterator[AsyncStore]:
    """The Agent Server's store: langgraph.json
    `"store": {"path": "threadloom.langgraph_server.store", "index": ..., "ttl": ...}`.

    Raises:
        ServerConfigError: untested server packages or no file to use.
    """
    check_versions()
    path = database_path()
    index, ttl = _store_settings(_server_config().STORE_CONFIG)
    async with AsyncStore.from_conn_string(path, index=index, ttl=ttl) as opened:
        # The server enters the store once per event-loop thread; one sweeper per file.
        sweeps = bool(ttl and ttl.get("sweep_interval_minutes")) and path not in _STORE_SWEEPING
        if sweeps:
            _STORE_SWEEPING.add(path)
            await opened.start_ttl_sweeper()
        log.info("threadloom store on %s", path)
        try:
            yield opened
        finally:
            if sweeps:
                _STORE_SWEEPING.discard(path)
