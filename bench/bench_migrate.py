"""`threadloom migrate` from SqliteSaver: 1,000 threads x 30 checkpoints of the benchmark chat.

Run: `python bench/bench_migrate.py` (`--quick`: 40 threads; `--threads N`, `--turns T`,
`--keep` keeps the files and reuses a source already written with the same settings).

The source is the benchmark agent (`_workload.py`: a 4 KB system prompt, a tool call and a
~1 KB tool result per turn, five checkpoints per turn, so 6 turns = 30 checkpoints and a
state that grows each step) run by LangGraph on a SqliteSaver file (written with
`synchronous=OFF`: the writing is not what is measured). Each measured migration runs in
a process of its own (`--child`), so its peak RSS (`ru_maxrss`) is its own: the first
100 threads, then all of them, each `--apply` into a new file, then the rerun of the
whole (which finds every checkpoint present and copies none). Rates are checkpoints per
second of wall time and per second of the process's CPU time (user + system): on a
machine shared with other work the CPU figure is the one that does not move with the load.

Targets (the issue's): >= 500 checkpoints/s; peak RSS flat in the number of threads
(the 1,000-thread run within 15% of the 100-thread one); the file <= 0.1x the source.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _harness as h
from _workload import build_graph, config_of, turn_input

HERE = Path(__file__).resolve().parent


def write_source(path: Path, threads: int, turns: int) -> float:
    """Run the agent for `threads` x `turns` on a SqliteSaver file; return the seconds."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    started = time.monotonic()
    conn = sqlite3.connect(str(path), check_same_thread=False)
    conn.execute("PRAGMA synchronous = OFF")
    try:
        graph = build_graph(SqliteSaver(conn))
        for t in range(threads):
            thread = f"thread-{t:05d}"
            for turn in range(1, turns + 1):
                graph.invoke(turn_input(thread, turn), config_of(thread))
            if t % 100 == 99:
                h.note(f"  source: {t + 1}/{threads} threads")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return time.monotonic() - started


def child(source: str, target: str, threads: int) -> dict[str, Any]:
    """Migrate the first `threads` threads of `source` into `target` (apply)."""
    from threadloom import migrate

    names = [f"thread-{t:05d}" for t in range(threads)]
    wall, cpu = time.monotonic(), time.process_time()
    report = migrate(source, target, threads=names, apply=True)
    wall, cpu = time.monotonic() - wall, time.process_time() - cpu
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "threads": report.threads,
        "checkpoints": report.checkpoints,
        "copied": report.copied,
        "present": report.present,
        "wall": wall,
        "cpu": cpu,
        "rss_mib": usage.ru_maxrss / 1024,
        "target_bytes": bytes_at_rest(target),
    }


def bytes_at_rest(path: str) -> int:
    """The file's bytes once closed (a closed threadloom file has folded its WAL in)."""
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


def run_child(source: Path, target: Path, threads: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(source), str(target), str(threads)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"the migration of {threads} threads failed:\n{done.stderr}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=6, help="5 checkpoints per turn")
    parser.add_argument("--quick", action="store_true", help="40 threads")
    parser.add_argument("--keep", action="store_true", help="keep (and reuse) the files")
    parser.add_argument("--child", nargs=3, metavar=("SOURCE", "TARGET", "THREADS"))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], int(args.child[2]))))
        return
    threads = 40 if args.quick else args.threads
    small = min(100, threads // 10 if args.quick else 100)
    with h.workdir(args.keep) as folder:
        source = folder / f"source-{threads}x{args.turns}.sqlite"
        if not source.exists():
            h.note(f"writing the source: {threads} threads x {args.turns} turns on SqliteSaver")
            seconds = write_source(source, threads, args.turns)
            h.note(f"  written in {seconds:.0f} s")
        source_bytes = source.stat().st_size
        rows = []
        results = {}
        for label, count, target in (
            (f"apply, first {small} threads", small, folder / "small.db"),
            (f"apply, all {threads} threads", threads, folder / "all.db"),
            (f"rerun, all {threads} threads", threads, folder / "all.db"),
        ):
            if not label.startswith("rerun") and target.exists():
                target.unlink()
            h.note(f"migrating {label}")
            found = results[label] = run_child(source, target, count)
            rows.append(
                [
                    label,
                    found["checkpoints"],
                    found["copied"],
                    f"{found['wall']:.1f}",
                    round(found["checkpoints"] / found["wall"]),
                    round(found["checkpoints"] / found["cpu"]),
                    f"{found['rss_mib']:.0f}",
                    h.mib(found["target_bytes"]),
                ]
            )
        load = os.getloadavg()
        print(h.describe_machine())
        shown = " / ".join(f"{x:.1f}" for x in load)
        print(f"load average after the runs (1/5/15 min): {shown}")
        print()
        print(
            h.table(
                [
                    "run",
                    "checkpoints",
                    "copied",
                    "wall s",
                    "ckpt/s (wall)",
                    "ckpt/s (CPU)",
                    "peak RSS MiB",
                    "file",
                ],
                rows,
            )
        )
        whole = results[f"apply, all {threads} threads"]
        part = results[f"apply, first {small} threads"]
        ratio = whole["target_bytes"] / source_bytes
        print()
        print(
            f"source (SqliteSaver): {h.mib(source_bytes)}; threadloom file: "
            f"{h.mib(whole['target_bytes'])} = {ratio:.3f}x (target <= 0.1)"
        )
        print(
            f"rate: {whole['checkpoints'] / whole['wall']:.0f} checkpoints/s wall, "
            f"{whole['checkpoints'] / whole['cpu']:.0f} per CPU second (target >= 500)"
        )
        print(
            f"peak RSS: {part['rss_mib']:.0f} MiB at {small} threads, {whole['rss_mib']:.0f} MiB "
            f"at {threads} ({whole['rss_mib'] / part['rss_mib']:.2f}x; target: flat)"
        )


if __name__ == "__main__":
    main()
