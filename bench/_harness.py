"""Benchmark harness: every saver side by side in one run, with their bytes and latencies.

Savers under test (`SAVERS`): LangGraph's InMemorySaver, SqliteSaver and
AsyncSqliteSaver (on a file), PostgresSaver (on a throwaway local server that
`PostgresServer` starts and removes), and threadloom's Saver and AsyncSaver.
Each `Subject` gives a sync facade over one saver (async savers run on a private
event loop), its logical bytes (what the saver serialized and stores) and its
bytes on disk. Nothing here is asserted by the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import functools
import hashlib
import importlib.metadata
import math
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from _postgres import PostgresServer as PostgresServer  # re-exported for the scripts
from _postgres import postgres_if as postgres_if
from _tables import MiB as MiB  # re-exported: the scripts format through `h.`
from _tables import kib as kib
from _tables import mib as mib
from _tables import ms as ms
from _tables import profile_report as profile_report
from _tables import ratio as ratio
from _tables import table as table

SAVERS = (
    "InMemorySaver",
    "SqliteSaver",
    "AsyncSqliteSaver",
    "PostgresSaver",
    "threadloom.Saver",
    "threadloom.AsyncSaver",
)
BASELINE = "SqliteSaver"


def note(message: str) -> None:
    """Progress and diagnostics go to stderr; tables go to stdout."""
    print(message, file=sys.stderr, flush=True)


# -- environment ---------------------------------------------------------------------------


def threadloom_backend() -> str:
    """Return the backend `threadloom.core` reports, or "python" when it reports none."""
    import threadloom.core as core

    for name in ("backend", "BACKEND", "backend_name"):
        value = getattr(core, name, None)
        if callable(value):
            value = value()
        if isinstance(value, str) and value:
            return value
    return "python"


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "-"


def _source_state() -> str:
    """The commit of the threadloom tree measured, and whether src/ had local changes.

    The tree is the one `import threadloom` found (a worktree on PYTHONPATH counts),
    not necessarily the one holding these scripts.
    """
    import threadloom

    package = Path(threadloom.__file__).resolve().parent
    root = package.parent.parent if package.parent.name == "src" else package
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "src"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return "source: unknown"
    return f"source: {root} at {head}{' + uncommitted changes in src/' if dirty.strip() else ''}"


def describe_machine() -> str:
    """One paragraph naming the machine and the versions measured."""
    import apsw

    import threadloom

    return (
        f"machine: {os.cpu_count()} cores, {platform.machine()}, Linux {platform.release()}; "
        f"Python {platform.python_version()}; threadloom {threadloom.__version__} "
        f"(backend: {threadloom_backend()}, SQLite {apsw.sqlite_lib_version()} via apsw); "
        f"langgraph {_version('langgraph')}, "
        f"langgraph-checkpoint {_version('langgraph-checkpoint')}, "
        f"-sqlite {_version('langgraph-checkpoint-sqlite')} (SQLite {sqlite3.sqlite_version}), "
        f"-postgres {_version('langgraph-checkpoint-postgres')}; {_source_state()}"
    )


def parser(description: str, savers: Sequence[str] = SAVERS) -> argparse.ArgumentParser:
    """An argument parser with the options every script shares.

    Args:
        savers: the savers run when `--savers` is not given.
    """
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="a short smoke run")
    p.add_argument(
        "--savers",
        default=",".join(savers),
        help=f"comma-separated subset of: {', '.join(SAVERS)}; or 'all'",
    )
    p.add_argument("--no-postgres", action="store_true", help="skip PostgresSaver")
    p.add_argument("--keep", action="store_true", help="keep the temporary files (path on stderr)")
    p.add_argument(
        "--synchronous",
        choices=["default", "NORMAL", "FULL"],
        default="default",
        help="SQLite synchronous level for every SQLite saver (default: each saver's own, "
        "FULL for LangGraph's SQLite savers, NORMAL for threadloom)",
    )
    return p


def settings(args: argparse.Namespace) -> str:
    """The line naming the durability settings in force."""
    sync = (
        "each saver's own (LangGraph SQLite savers: FULL; threadloom: NORMAL)"
        if args.synchronous == "default"
        else args.synchronous
    )
    return (
        f"SQLite synchronous: {sync}; Postgres: server defaults (fsync on); "
        "LangGraph durability: default ('async')"
    )


def selected(args: argparse.Namespace) -> list[str]:
    """The saver names chosen on the command line, in SAVERS order."""
    wanted = {s.strip() for s in args.savers.split(",") if s.strip()}
    if "all" in wanted:
        wanted = set(SAVERS)
    unknown = wanted - set(SAVERS)
    if unknown:
        raise SystemExit(f"error: unknown saver(s) {sorted(unknown)}; choose from {SAVERS}")
    names = [s for s in SAVERS if s in wanted]
    if args.no_postgres and "PostgresSaver" in names:
        names.remove("PostgresSaver")
    return names


# -- timing --------------------------------------------------------------------------------


class Timings:
    """Latency samples (seconds) per method name."""

    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = {}

    def add(self, name: str, seconds: float) -> None:
        self.samples.setdefault(name, []).append(seconds)

    def clear(self) -> None:
        self.samples.clear()

    def stats(self, name: str) -> tuple[float, float, int] | None:
        """(median, p95, count) in milliseconds, or None without samples."""
        values = self.samples.get(name)
        if not values:
            return None
        return statistics.median(values) * 1e3, p95(values) * 1e3, len(values)


def p95(values: Sequence[float]) -> float:
    """Nearest-rank 95th percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def list_key(limit: int | None) -> str:
    """The timing name of a `list` call: "list" for a whole listing, "list(limit=N)" otherwise."""
    return "list" if limit is None else f"list(limit={limit})"


def _timed(
    fn: Callable[..., Any], name: str, timings: Timings, profile: cProfile.Profile | None
) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if profile is not None:
            profile.enable()
        start = time.perf_counter()
        try:
            result = fn(*args, **kwargs)
            if name == "list":  # drain so the time covers the whole listing
                result = iter(list(result))
            return result
        finally:
            key = list_key(kwargs.get("limit")) if name == "list" else name
            timings.add(key, time.perf_counter() - start)
            if profile is not None:
                profile.disable()

    return wrapper


def _atimed(fn: Callable[..., Any], name: str, timings: Timings) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return await fn(*args, **kwargs)
        finally:
            timings.add(name, time.perf_counter() - start)

    return wrapper


def _alist_timed(fn: Callable[..., Any], timings: Timings) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        items = [item async for item in fn(*args, **kwargs)]
        timings.add(list_key(kwargs.get("limit")), time.perf_counter() - start)
        for item in items:
            yield item

    return wrapper


# -- subjects ------------------------------------------------------------------------------


class Subject:
    """One saver under test, with a sync facade and byte accounting.

    Attributes:
        name: one of SAVERS.
        saver: the checkpoint saver (pass it to `build_graph`).
        timings: latencies of put, put_writes, get_tuple and list once `instrument()` ran.
    """

    def __init__(
        self,
        name: str,
        saver: Any,
        *,
        path: str | None = None,
        dsn: str | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.name = name
        self.saver = saver
        self.path = path
        self.dsn = dsn
        self.loop = loop
        self.timings = Timings()
        self._reader: Any = None

    @property
    def is_async(self) -> bool:
        return self.loop is not None

    def run(self, awaitable: Any) -> Any:
        assert self.loop is not None
        return self.loop.run_until_complete(awaitable)

    def instrument(self, profiles: dict[str, cProfile.Profile] | None = None) -> Timings:
        """Wrap the saver's methods (a-prefixed for async savers) to record latencies.

        Args:
            profiles: method name (put, get_tuple, ...) -> a profiler enabled around
                each call; sync savers only.
        """
        profiles = profiles or {}
        for name in ("put", "put_writes", "get_tuple", "list"):
            if self.is_async:
                fn = getattr(self.saver, "a" + name)
                wrapped = (
                    _alist_timed(fn, self.timings)
                    if name == "list"
                    else _atimed(fn, name, self.timings)
                )
                setattr(self.saver, "a" + name, wrapped)
            else:
                fn = getattr(self.saver, name)
                setattr(self.saver, name, _timed(fn, name, self.timings, profiles.get(name)))
        return self.timings

    def invoke(self, graph: Any, value: Any, config: dict[str, Any]) -> Any:
        """Run one graph turn on this saver (`ainvoke` for async savers)."""
        if self.is_async:
            return self.run(graph.ainvoke(value, config))
        return graph.invoke(value, config)

    def get_tuple(self, config: dict[str, Any]) -> Any:
        if self.is_async:
            return self.run(self.saver.aget_tuple(config))
        return self.saver.get_tuple(config)

    def list(self, config: dict[str, Any], limit: int | None = None) -> list[Any]:
        """The thread's checkpoints, newest first (the `limit` newest when given)."""
        if self.is_async:

            async def drain() -> list[Any]:
                return [item async for item in self.saver.alist(config, limit=limit)]

            return self.run(drain())  # type: ignore[no-any-return]
        return list(self.saver.list(config, limit=limit))

    # -- bytes -----------------------------------------------------------------------------

    def logical_bytes(self) -> int:
        """Bytes of serialized data the saver currently holds (its own encoding, uncompressed).

        InMemorySaver: serialized checkpoints, metadata, blobs and writes. SqliteSaver:
        checkpoint + metadata + write blobs. PostgresSaver: checkpoint and metadata JSON
        text, channel blobs and write blobs. threadloom: the msgpack size of every
        logical document `documents()` returns (before zstd).
        """
        kind = self.kind
        if kind == "memory":
            s = self.saver
            total = sum(
                len(c[1]) + len(m[1])
                for ns in s.storage.values()
                for cps in ns.values()
                for c, m, _ in cps.values()
            )
            total += sum(len(v[1]) for v in s.blobs.values())
            total += sum(len(w[2][1]) for ws in s.writes.values() for w in ws.values())
            return total
        if kind == "sqlite":
            return int(
                self._sqlite_reader()
                .execute(
                    "SELECT (SELECT coalesce(sum(length(checkpoint) + length(metadata)), 0) "
                    "FROM checkpoints) + (SELECT coalesce(sum(length(value)), 0) FROM writes)"
                )
                .fetchall()[0][0]
            )
        if kind == "postgres":
            return int(
                self._pg_scalar(
                    "SELECT (SELECT coalesce(sum(octet_length(checkpoint::text) + "
                    "octet_length(metadata::text)), 0) FROM checkpoints) + "
                    "(SELECT coalesce(sum(octet_length(blob)), 0) FROM checkpoint_blobs) + "
                    "(SELECT coalesce(sum(octet_length(blob)), 0) FROM checkpoint_writes)"
                )
            )
        return sum(size for size, _ in self.document_sizes().values())

    def document_sizes(self) -> dict[str, tuple[int, bytes]]:
        """threadloom only: document key -> (msgpack size, digest of the msgpack)."""
        import ormsgpack

        out: dict[str, tuple[int, bytes]] = {}
        for _, key, data in self.saver.documents():
            packed = ormsgpack.packb(data)
            out[key] = (len(packed), hashlib.blake2b(packed, digest_size=16).digest())
        return out

    def disk_bytes(self) -> int | None:
        """Bytes on disk: the file plus -wal after a TRUNCATE checkpoint (SQLite); the
        tables with indexes and TOAST (Postgres); None in memory."""
        kind = self.kind
        if kind == "memory":
            return None
        if kind == "postgres":
            return int(
                self._pg_scalar(
                    "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n "
                    "ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind = 'r'"
                )
            )
        assert self.path is not None
        # Checkpoint with the same SQLite library the saver links (stdlib sqlite3 for
        # LangGraph's savers, apsw for threadloom): a second library copy in one process
        # does not see the first one's connections, and closing its last connection
        # would delete the WAL under them (and lose their writes).
        if kind == "sqlite":
            reader = self._sqlite_reader()
            busy = reader.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()[0][0]
        else:
            import apsw

            conn = apsw.Connection(self.path)
            try:
                conn.set_busy_timeout(10_000)
                busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()[0][0]
            finally:
                conn.close()
        if busy:
            note(f"{self.name}: wal_checkpoint(TRUNCATE) was blocked by a reader")
        wal = Path(self.path + "-wal")
        return os.path.getsize(self.path) + (wal.stat().st_size if wal.exists() else 0)

    def at_rest_bytes(self) -> int | None:
        """Bytes the file takes once every connection to it is closed: the file plus any
        -wal and -shm left beside it (call after the saver closed); None off SQLite."""
        if self.path is None:
            return None
        return at_rest_bytes(self.path)

    @property
    def kind(self) -> str:
        if self.name == "InMemorySaver":
            return "memory"
        if self.name in ("SqliteSaver", "AsyncSqliteSaver"):
            return "sqlite"
        if self.name == "PostgresSaver":
            return "postgres"
        return "threadloom"

    def _sqlite_reader(self) -> sqlite3.Connection:
        assert self.path is not None
        if self._reader is None:
            self._reader = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        return self._reader  # type: ignore[no-any-return]

    def _pg_scalar(self, sql: str) -> Any:
        import psycopg

        assert self.dsn is not None
        if self._reader is None:
            self._reader = psycopg.connect(self.dsn, autocommit=True)
        return self._reader.execute(sql).fetchall()[0][0]

    def close_reader(self) -> None:
        if self._reader is not None:
            with contextlib.suppress(Exception):
                self._reader.close()
            self._reader = None


def at_rest_bytes(path: str) -> int:
    """The SQLite file `path` plus its -wal and -shm, as they lie on disk (no checkpoint)."""
    return sum(
        os.path.getsize(f"{path}{suffix}")
        for suffix in ("", "-wal", "-shm")
        if os.path.exists(f"{path}{suffix}")
    )


@contextlib.contextmanager
def open_subject(
    name: str,
    workdir: Path,
    postgres: PostgresServer | None,
    tag: str = "",
    synchronous: str = "default",
) -> Iterator[Subject]:
    """Open a fresh, empty store for saver `name`; close and remove it afterwards.

    Args:
        synchronous: "default" leaves each SQLite saver at its own level; NORMAL or
            FULL sets it on all of them.
    """
    sync = None if synchronous == "default" else synchronous
    stem = workdir / f"{name.replace('.', '-')}{tag}.db"
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{stem}{suffix}")
    path = str(stem)
    if name == "InMemorySaver":
        from langgraph.checkpoint.memory import InMemorySaver

        yield Subject(name, InMemorySaver())
    elif name == "SqliteSaver":
        from langgraph.checkpoint.sqlite import SqliteSaver

        with SqliteSaver.from_conn_string(path) as saver:
            saver.setup()
            if sync:
                saver.conn.execute(f"PRAGMA synchronous={sync}")
            subject = Subject(name, saver, path=path)
            try:
                yield subject
            finally:
                subject.close_reader()
    elif name == "PostgresSaver":
        if postgres is None or postgres.dsn is None:
            raise Skipped(postgres.reason if postgres else "no server")
        from langgraph.checkpoint.postgres import PostgresSaver

        dsn = postgres.new_database()
        try:
            with PostgresSaver.from_conn_string(dsn) as pg_saver:
                pg_saver.setup()
                subject = Subject(name, pg_saver, dsn=dsn)
                try:
                    yield subject
                finally:
                    subject.close_reader()
        finally:
            postgres.drop_database(dsn)
    elif name == "threadloom.Saver":
        import threadloom

        with threadloom.Saver.from_conn_string(
            path, **({"synchronous": sync} if sync else {})
        ) as saver:
            yield Subject(name, saver, path=path)
    elif name in ("AsyncSqliteSaver", "threadloom.AsyncSaver"):
        loop = asyncio.new_event_loop()
        try:
            if name == "AsyncSqliteSaver":
                from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

                manager: Any = AsyncSqliteSaver.from_conn_string(path)
            else:
                import threadloom

                manager = threadloom.AsyncSaver.from_conn_string(
                    path, **({"synchronous": sync} if sync else {})
                )
            saver = loop.run_until_complete(manager.__aenter__())
            subject = Subject(name, saver, path=path, loop=loop)
            try:
                if name == "AsyncSqliteSaver":
                    loop.run_until_complete(saver.setup())
                    if sync:
                        loop.run_until_complete(saver.conn.execute(f"PRAGMA synchronous={sync}"))
                yield subject
            finally:
                subject.close_reader()
                loop.run_until_complete(manager.__aexit__(None, None, None))
        finally:
            loop.close()
    else:
        raise ValueError(name)


class Skipped(Exception):
    """A saver that cannot run on this machine (the message says why)."""


class Failures:
    """Tracebacks of saver calls that failed, reported at the end of a script."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []
        self.skipped: dict[str, str] = {}

    @contextlib.contextmanager
    def guard(self, label: str, name: str) -> Iterator[None]:
        """Record (not raise) a failure or skip of saver `name`."""
        try:
            yield
        except Skipped as exc:
            self.skipped[name] = str(exc)
        except Exception:
            text = traceback.format_exc()
            self.items.append((f"{label} / {name}", text))
            note(f"error: {label} / {name} failed: {text.strip().splitlines()[-1]}")

    def report(self) -> int:
        """Print skips and tracebacks; return the exit status (1 if anything failed)."""
        for name, reason in self.skipped.items():
            print(f"\n{name} skipped: {reason}")
        labels: dict[str, list[str]] = {}  # one traceback, every step that raised it
        for label, text in self.items:
            labels.setdefault(text, []).append(label)
        for text, where in labels.items():
            print(f"\n### failure: {'; '.join(where)}\n```\n{text.rstrip()}\n```")
        return 1 if self.items else 0


class Panel:
    """Several savers open at once, stepped in a rotating order.

    Timed steps of all savers interleave, so load from anything else on the
    machine falls on every saver alike instead of on whichever ran at the time.

    Args:
        names: savers to open (each on a fresh store).
        failures: where open and step failures go; a failed saver drops out.
    """

    def __init__(
        self,
        names: Sequence[str],
        workdir: Path,
        postgres: PostgresServer | None,
        failures: Failures,
        *,
        tag: str = "",
        synchronous: str = "default",
    ) -> None:
        self.failures = failures
        self.failed: set[str] = set()
        self.subjects: dict[str, Subject] = {}
        self._stack = contextlib.ExitStack()
        for name in names:
            with self.guard("open", name):
                self.subjects[name] = self._stack.enter_context(
                    open_subject(name, workdir, postgres, tag=tag, synchronous=synchronous)
                )

    def __enter__(self) -> Panel:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    @contextlib.contextmanager
    def guard(self, label: str, name: str) -> Iterator[None]:
        """`Failures.guard`, and a saver that failed drops out of this panel."""
        ok = False
        with self.failures.guard(label, name):
            yield
            ok = True
        if not ok:
            self.failed.add(name)

    def each(self, step: int) -> Iterator[tuple[str, Subject]]:
        """The live savers, starting at a different one on every step."""
        names = [n for n in self.subjects if n not in self.failed]
        if not names:
            return
        k = step % len(names)
        for name in names[k:] + names[:k]:
            if name not in self.failed:
                yield name, self.subjects[name]


@contextlib.contextmanager
def workdir(keep: bool) -> Iterator[Path]:
    """A temporary directory for the SQLite files (removed unless `keep`)."""
    path = Path(tempfile.mkdtemp(prefix="threadloom-bench-"))
    try:
        yield path
    finally:
        if keep:
            note(f"files kept in {path}")
        else:
            shutil.rmtree(path, ignore_errors=True)
