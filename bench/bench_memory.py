"""Memory over a long run: RSS after 1k, 10k, 20k, 40k and 60k puts, each saver alone.

Run: `python bench/bench_memory.py` (about 8 minutes on 2 cores; `--puts 5000` for a
quick run, `--quick` for a smoke run of 2,000 puts).

Each saver runs in a fresh interpreter of its own (importing only what it needs),
so every figure is what one process using that saver holds: threadloom's Saver on
the native core, the same Saver with `THREADLOOM_BACKEND=python`, and LangGraph's
SqliteSaver. The workload is the chat agent of `_workload.py` driven through
LangGraph (`invoke`: get_tuple, put_writes per task, five puts per turn): 8
conversations run side by side, turn by turn; each lasts 30 turns (its message
list grows to ~120 messages) and is then replaced by a new thread, so distinct
thread ids keep coming, as in a server. After every turn one direct `get_tuple`
reads the latest checkpoint of a thread drawn from all seen so far (a history
view). Puts are counted at the saver; a row is taken after the turn that crossed
each mark. `--agents N` opens N savers on the file in the one process (for
threadloom: N scopes, agent ids `agent-1`...; conversations are spread over them), and
`--tool-kb` sets the tool results' mean size: both load the caches harder.

Columns: RSS (VmRSS), Python's allocated blocks (`sys.getallocatedblocks()`, cheap;
`--tracemalloc` adds the traced heap, and slows the run about 2x), SQLite's own
memory in threadloom's process (`apsw.memory_used()`; LangGraph's saver uses the
stdlib sqlite3, which reports none), open fds and threads. Below the table: each
saver's RSS at the last mark ÷ at 10k, and the difference (the target is within
20 MiB). `--top N` (with `--tracemalloc`) prints to stderr the N source lines whose
traced memory grew most between 10k puts and the end: the tool that finds a leak.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sqlite3
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _harness as h
from _workload import TOOL_RESULT_MEAN, build_graph, config_of, tool_results, turn_input

NATIVE = "threadloom.Saver"
PYTHON = "threadloom.Saver (python)"
SAVERS = (NATIVE, PYTHON, "SqliteSaver")
MARKS = (1_000, 10_000, 20_000, 40_000, 60_000)
#: Conversations in flight at once, and turns each lasts before a new thread replaces it.
ACTIVE = 8
TURNS = 30
#: The target: RSS at the last mark within this much of RSS at 10k puts.
BUDGET = 20 * h.MiB


def _status() -> dict[str, int]:
    """VmRSS (bytes) and Threads of this process (Linux /proc)."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return {"rss": int(fields["VmRSS"].split()[0]) * 1024, "threads": int(fields["Threads"])}


def sample(puts: int, traced: bool) -> dict[str, Any]:
    """One row: what this process holds after `puts` puts."""
    row: dict[str, Any] = {"puts": puts, **_status()}
    row["blocks"] = sys.getallocatedblocks()
    row["fds"] = len(os.listdir("/proc/self/fd"))
    row["py_threads"] = threading.active_count()
    row["traced"] = tracemalloc.get_traced_memory()[0] if traced else None
    if "apsw" in sys.modules:
        row["sqlite"] = sys.modules["apsw"].memory_used()
    if "threadloom" in sys.modules:
        row["backend"] = sys.modules["threadloom.core"].backend()
    return row


@contextlib.contextmanager
def open_savers(name: str, wd: Path, agents: int) -> Iterator[list[Any]]:
    """`agents` savers of kind `name` on one fresh file (threadloom: one scope each)."""
    with h.open_subject(name, wd, None) as subject, contextlib.ExitStack() as stack:
        savers = [subject.saver]
        for i in range(1, agents):
            if name == NATIVE:
                import threadloom

                savers.append(
                    stack.enter_context(
                        threadloom.Saver.from_conn_string(subject.path, agent_id=f"agent-{i}")
                    )
                )
            else:
                from langgraph.checkpoint.sqlite import SqliteSaver

                other = sqlite3.connect(subject.path, check_same_thread=False)
                stack.callback(other.close)
                savers.append(SqliteSaver(other))
        yield savers


def child(name: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """In this (fresh) process: run the workload on saver `name` alone; return the rows."""
    puts, traced, top = args.puts, args.tracemalloc, args.top
    subject_name = NATIVE if name == PYTHON else name
    marks = sorted({m for m in MARKS if m < puts} | {puts})
    rows: list[dict[str, Any]] = []
    snapshots: dict[int, tracemalloc.Snapshot] = {}
    if traced:
        tracemalloc.start()
    with h.workdir(keep=False) as wd, open_savers(subject_name, wd, args.agents) as savers:
        count = [0]

        def counting(saver: Any) -> Any:
            put = saver.put

            def counted(*a: Any, **kw: Any) -> Any:
                count[0] += 1
                return put(*a, **kw)

            saver.put = counted
            return saver

        tool = tool_results(args.tool_kb * 1000)
        graphs = [build_graph(counting(saver), tool) for saver in savers]
        rng = random.Random(7)
        seen: list[str] = []
        active: list[tuple[str, int]] = []  # (thread id, next turn)
        started = 0
        start = time.perf_counter()
        while marks:
            while len(active) < ACTIVE:
                active.append((f"user-{started:05d}", 1))
                seen.append(active[-1][0])
                started += 1
            for slot, (thread, turn) in enumerate(active):
                agent = int(thread[5:]) % len(savers)
                graphs[agent].invoke(turn_input(thread, turn), config_of(thread))
                active[slot] = (thread, turn + 1)
                other = rng.choice(seen)
                savers[int(other[5:]) % len(savers)].get_tuple(config_of(other))
                while marks and count[0] >= marks[0]:
                    row = sample(count[0], traced)
                    row["seconds"] = time.perf_counter() - start
                    rows.append(row)
                    if traced and top and marks[0] in (10_000, puts):
                        snapshots[marks[0]] = tracemalloc.take_snapshot()
                    h.note(f"{name}: {count[0]} puts, RSS {row['rss'] / h.MiB:.1f} MiB")
                    marks.pop(0)
                if not marks:
                    break
            active = [(t, n) for t, n in active if n <= TURNS]
    if len(snapshots) == 2:
        first, last = (snapshots[k] for k in sorted(snapshots))
        h.note(f"{name}: traced growth by line, 10k puts -> end")
        for stat in last.compare_to(first, "lineno")[:top]:
            h.note(f"  {stat}")
    return rows


def run_child(name: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Run `child` for saver `name` in a fresh interpreter; return its rows.

    Raises:
        RuntimeError: the child failed (its stderr tail in the message).
    """
    argv = [sys.executable, str(Path(__file__).resolve()), "--child", name, "--puts"]
    argv += [str(args.puts), "--top", str(args.top), "--agents", str(args.agents)]
    argv += ["--tool-kb", str(args.tool_kb)]
    if args.tracemalloc:
        argv.append("--tracemalloc")
    env = dict(os.environ)
    if name == PYTHON:
        env["THREADLOOM_BACKEND"] = "python"
    elif name == NATIVE:
        env.setdefault("THREADLOOM_BACKEND", "native")
    done = subprocess.run(
        argv, stdout=subprocess.PIPE, stderr=None, text=True, env=env, timeout=3600, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"child for {name} exited {done.returncode} (its stderr is above)")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def report(results: dict[str, list[dict[str, Any]]], puts: int) -> None:
    def m(n: int | None) -> str:
        return "-" if n is None else f"{n / h.MiB:.1f}"

    rows = []
    for name, found in results.items():
        for r in found:
            backend = f" [{r['backend']}]" if r.get("backend") else ""
            rows.append(
                [
                    name + backend,
                    f"{r['puts']:,}",
                    m(r["rss"]),
                    m(r["traced"]),
                    f"{r['blocks']:,}",
                    m(r.get("sqlite")),
                    r["fds"],
                    r["threads"],
                    f"{r['seconds']:.0f}",
                ]
            )
    print(f"## RSS over {puts:,} puts, each saver alone in a fresh process\n")
    headers = ["saver", "puts", "RSS MiB", "traced MiB", "Python blocks", "SQLite MiB"]
    print(h.table([*headers, "fds", "threads", "s"], rows))
    print()
    summary = []
    for name, found in results.items():
        by = {r["puts"]: r for r in found}
        last = found[-1]
        base = by.get(10_000)
        if base is None or base is last:
            summary.append([name, "-", m(last["rss"]), "-", "-", "-"])
            continue
        diff = last["rss"] - base["rss"]
        summary.append(
            [
                name,
                m(base["rss"]),
                m(last["rss"]),
                f"{last['rss'] / base['rss']:.2f}x",
                f"{diff / h.MiB:+.1f} MiB",
                "met" if diff <= BUDGET else "MISSED",
            ]
        )
    mark = f"{found[-1]['puts'] / 1000:g}k" if results else "end"
    print(
        h.table(
            ["saver", "RSS at 10k", f"RSS at {mark}", f"{mark} ÷ 10k", f"{mark} − 10k", "≤ 20 MiB"],
            summary,
        )
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--puts", type=int, default=None, help="puts per saver (default 60,000)")
    p.add_argument("--quick", action="store_true", help="a smoke run of 2,000 puts")
    p.add_argument(
        "--savers", default=",".join(SAVERS), help=f"comma-separated subset of: {', '.join(SAVERS)}"
    )
    p.add_argument(
        "--agents", type=int, default=1, help="savers (scopes) on the file in one process"
    )
    p.add_argument(
        "--tool-kb", type=float, default=TOOL_RESULT_MEAN / 1000, help="mean tool result, KB"
    )
    p.add_argument("--tracemalloc", action="store_true", help="also trace the Python heap")
    p.add_argument("--top", type=int, default=0, help="with --tracemalloc: lines that grew most")
    p.add_argument("--child", metavar="SAVER", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.puts = args.puts or (2_000 if args.quick else MARKS[-1])
    if args.child:
        print(json.dumps(child(args.child, args)))
        return 0
    names = [s.strip() for s in args.savers.split(",") if s.strip()]
    unknown = set(names) - set(SAVERS)
    if unknown:
        raise SystemExit(f"error: unknown saver(s) {sorted(unknown)}; choose from {SAVERS}")
    print(
        f"# bench_memory: {args.puts:,} puts, {ACTIVE} conversations at once, {TURNS} turns "
        f"each, {args.agents} saver(s) on the file, tool results ~{args.tool_kb:g} KB\n"
    )
    print(h.describe_machine() + "\n")
    failures = h.Failures()
    results: dict[str, list[dict[str, Any]]] = {}
    for name in names:
        h.note(f"memory: {name} alone in a fresh process")
        with failures.guard("memory", name):
            results[name] = run_child(name, args)
    report(results, args.puts)
    return failures.report()


if __name__ == "__main__":
    sys.exit(main())
