"""Retention: prune 1,000 chat threads to their last 20 checkpoints, then compact.

Run: `python bench/bench_retention.py` (`--quick`: 50 threads; `--threads`, `--steps`,
`--keep-last`; `--keep` keeps the files).

Workload: each thread is a chat of `--steps` checkpoints (default 40); every step adds
one message to the `messages` list (a user message of ~300 bytes, an answer of ~1 KB,
every fourth step a tool result of ~2.5 KB) and writes it as the step's pending write,
as LangGraph's loop does. The same checkpoints go into threadloom.Saver and into
LangGraph's SqliteSaver (whole-state snapshots), through their `put`/`put_writes`.

Measured, in one run:

- threadloom: `apply_retention(RetentionPolicy(keep_last=20))` on a freshly opened saver,
  the file's values and threads first made an hour older (as a daily job sees values
  written yesterday; `now=` would not do: the grace is measured on the real clock):
  deleted checkpoints per second (target >= 5,000/s); the dry run's time; then
  `threadloom compact` (engine `reclaim.compact`) and the file's size against a fresh
  file holding only what was kept, built by importing the pruned threads' documents
  into a new file (target: within 10%), also shown after compacting that fresh file;
- both: deleted/s is checkpoints deleted per second of wall time, deleted/CPU-s per
  second of this process's CPU time (on a shared machine the two differ by how much of
  a core the run got; SQLite works in the calling thread, so its CPU time counts);
- SqliteSaver, by hand, as its users do it (it has no prune): per thread one
  transaction deleting all but the 20 newest checkpoints and their writes, then
  VACUUM; its fresh file is the same rows copied into a new SqliteSaver file.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import _harness as h
from _workload import prose
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.sqlite import SqliteSaver

from threadloom import Saver
from threadloom.engine.checks.reclaim import compact
from threadloom.langgraph.retention import RetentionPolicy


def message(thread: int, step: int) -> BaseMessage:
    """The message step `step` of thread `thread` adds (deterministic text and id)."""
    seed = f"{thread}:{step}"
    if step % 4 == 3:
        return ToolMessage(prose("tool" + seed, 2500), tool_call_id=f"call-{seed}", id=f"t{seed}")
    if step % 2 == 0:
        return HumanMessage(prose("user" + seed, 300), id=f"h{seed}")
    return AIMessage(prose("ai" + seed, 1000), id=f"a{seed}")


def fill(saver: Any, threads: int, steps: int) -> None:
    """Write the workload through a saver's put and put_writes."""
    for t in range(threads):
        messages: list[BaseMessage] = []
        parent: dict[str, Any] = {"thread_id": f"thread-{t:05d}", "checkpoint_ns": ""}
        for step in range(steps):
            new = message(t, step)
            messages = [*messages, new]
            checkpoint = empty_checkpoint()
            checkpoint["id"] = str(uuid6(clock_seq=step))
            checkpoint["channel_values"] = {"messages": messages}
            checkpoint["channel_versions"] = {"messages": step + 1}
            checkpoint["versions_seen"] = {"agent": {"messages": step}}
            metadata = {"source": "loop", "step": step, "parents": {}}
            config = saver.put(
                {"configurable": parent}, checkpoint, metadata, {"messages": step + 1}
            )
            saver.put_writes(config, [("messages", [new])], f"task-{t}-{step}")
            parent = dict(config["configurable"])


def size(path: Path) -> int:
    return sum(os.path.getsize(p) for p in (path, Path(f"{path}-wal")) if p.exists())


def threadloom_run(wd: Path, threads: int, steps: int, keep: int) -> dict[str, Any]:
    path = wd / "threadloom.db"
    out: dict[str, Any] = {}
    start = time.perf_counter()
    with Saver.from_conn_string(str(path)) as saver:
        fill(saver, threads, steps)
    out["fill"] = time.perf_counter() - start
    out["before"] = size(path)
    policy = RetentionPolicy(keep_last=keep)
    with Saver.from_conn_string(str(path)) as saver, saver.file.write() as conn:  # an hour ago
        conn.execute("UPDATE vals SET created_at = created_at - 3600")
        conn.execute("UPDATE threads SET updated_at = updated_at - 3600")
    with Saver.from_conn_string(str(path)) as saver:
        start = time.perf_counter()
        dry = saver.apply_retention(policy, apply=False)
        out["dry"] = time.perf_counter() - start
    with Saver.from_conn_string(str(path)) as saver:
        start, cpu = time.perf_counter(), time.process_time()
        report = saver.apply_retention(policy)
        out["prune"] = time.perf_counter() - start
        out["prune_cpu"] = time.process_time() - cpu
        assert dry.checkpoints == report.checkpoints
        out["report"] = report
        saver.file.checkpoint_wal()
        out["pruned"] = size(path)
        start = time.perf_counter()
        compacted = compact(saver.file)
        out["compact"] = time.perf_counter() - start
        out["compacted"] = compacted
        thread_ids = saver.checkpoints.scope.thread_ids()
        fresh = wd / "threadloom-fresh.db"
        with Saver.from_conn_string(str(fresh)) as copy:
            for thread_id in thread_ids:
                copy.checkpoints.view.import_documents(
                    (c, d) for c, _, d in saver.documents(thread_id)
                )
        out["kept"] = sum(1 for _ in saver.list(None))
    out["after"] = size(path)
    out["fresh"] = size(fresh)
    with Saver.from_conn_string(str(fresh)) as copy:
        compact(copy.db)
    out["fresh_compacted"] = size(fresh)
    return out


_DELETE_CHECKPOINTS = (
    "DELETE FROM checkpoints WHERE thread_id = ?1 AND checkpoint_ns = '' AND checkpoint_id "
    "NOT IN (SELECT checkpoint_id FROM checkpoints WHERE thread_id = ?1 AND checkpoint_ns = '' "
    "ORDER BY checkpoint_id DESC LIMIT ?2)"
)
_DELETE_WRITES = (
    "DELETE FROM writes WHERE thread_id = ?1 AND NOT EXISTS (SELECT 1 FROM checkpoints c "
    "WHERE c.thread_id = ?1 AND c.checkpoint_ns = writes.checkpoint_ns "
    "AND c.checkpoint_id = writes.checkpoint_id)"
)


def sqlite_run(wd: Path, threads: int, steps: int, keep: int) -> dict[str, Any]:
    path = wd / "sqlite.db"
    out: dict[str, Any] = {}
    conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
    start = time.perf_counter()
    saver = SqliteSaver(conn)
    saver.setup()
    fill(saver, threads, steps)
    out["fill"] = time.perf_counter() - start
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    out["before"] = size(path)
    ids = [r[0] for r in conn.execute("SELECT DISTINCT thread_id FROM checkpoints")]
    deleted = 0
    start, cpu = time.perf_counter(), time.process_time()
    for thread_id in ids:
        conn.execute("BEGIN IMMEDIATE")
        deleted += conn.execute(_DELETE_CHECKPOINTS, (thread_id, keep)).rowcount
        conn.execute(_DELETE_WRITES, (thread_id,))
        conn.execute("COMMIT")
    out["prune"] = time.perf_counter() - start
    out["prune_cpu"] = time.process_time() - cpu
    out["deleted"] = deleted
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    out["pruned"] = size(path)
    start = time.perf_counter()
    conn.execute("VACUUM")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    out["compact"] = time.perf_counter() - start
    out["after"] = size(path)
    out["kept"] = conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
    fresh = wd / "sqlite-fresh.db"
    copy = sqlite3.connect(str(fresh), isolation_level=None)
    SqliteSaver(copy).setup()
    copy.execute("ATTACH ? AS pruned", (str(path),))
    copy.execute("INSERT INTO checkpoints SELECT * FROM pruned.checkpoints")
    copy.execute("INSERT INTO writes SELECT * FROM pruned.writes")
    copy.execute("DETACH pruned")
    copy.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    copy.close()
    conn.close()
    out["fresh"] = size(fresh)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a short smoke run (50 threads)")
    p.add_argument("--threads", type=int, default=None, help="threads (default 1000)")
    p.add_argument("--steps", type=int, default=40, help="checkpoints per thread (default 40)")
    p.add_argument("--keep-last", type=int, default=20, help="checkpoints kept (default 20)")
    p.add_argument("--keep", action="store_true", help="keep the files (path on stderr)")
    args = p.parse_args()
    threads = args.threads or (50 if args.quick else 1000)
    print(
        f"# bench_retention: {threads} threads x {args.steps} checkpoints, "
        f"keep-last {args.keep_last}\n"
    )
    print(h.describe_machine() + "\n")
    with h.workdir(args.keep) as wd:
        h.note(f"retention: threadloom.Saver, {threads} threads")
        ours = threadloom_run(wd, threads, args.steps, args.keep_last)
        h.note(f"retention: SqliteSaver, {threads} threads")
        theirs = sqlite_run(wd, threads, args.steps, args.keep_last)
    report = ours["report"]
    rows = [
        [
            "threadloom.Saver",
            h.mib(ours["before"]),
            report.checkpoints,
            f"{ours['prune']:.2f}",
            f"{report.checkpoints / ours['prune']:.0f}",
            f"{report.checkpoints / ours['prune_cpu']:.0f}",
            h.mib(ours["pruned"]),
            f"{ours['compact']:.2f}",
            h.mib(ours["after"]),
            h.mib(ours["fresh"]),
            f"{ours['after'] / ours['fresh']:.3f}",
        ],
        [
            "SqliteSaver (SQL + VACUUM)",
            h.mib(theirs["before"]),
            theirs["deleted"],
            f"{theirs['prune']:.2f}",
            f"{theirs['deleted'] / theirs['prune']:.0f}",
            f"{theirs['deleted'] / theirs['prune_cpu']:.0f}",
            h.mib(theirs["pruned"]),
            f"{theirs['compact']:.2f}",
            h.mib(theirs["after"]),
            h.mib(theirs["fresh"]),
            f"{theirs['after'] / theirs['fresh']:.3f}",
        ],
    ]
    print(
        h.table(
            [
                "saver",
                "file before",
                "checkpoints deleted",
                "prune s",
                "deleted/s",
                "deleted/CPU-s",
                "after prune",
                "compact s",
                "after compact",
                "fresh file of what was kept",
                "after / fresh",
            ],
            rows,
        )
    )
    done = ours["compacted"]
    print(
        f"\nthreadloom: {report.writes} writes and {report.values} values deleted with the "
        f"checkpoints ({h.mib(report.bytes)} by the thread index, {report.blocks} blocks); "
        f"dry run {ours['dry']:.2f} s; {ours['kept']} checkpoints kept "
        f"(SqliteSaver {theirs['kept']}); compact: {done.values} more values, "
        f"{done.blocks} blocks, {done.extents_rewritten} extents rewritten, "
        f"{done.pages_before - done.pages_after} pages freed; the fresh file compacted: "
        f"{h.mib(ours['fresh_compacted'])} (after / that: "
        f"{ours['after'] / ours['fresh_compacted']:.3f}). Fill: threadloom "
        f"{ours['fill']:.0f} s, SqliteSaver {theirs['fill']:.0f} s."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
