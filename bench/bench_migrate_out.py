"""`threadloom migrate FILE --to postgres`: the benchmark chat out to PostgresSaver's tables.

Run: `python bench/bench_migrate_out.py` (`--quick`: 40 threads; `--threads N`, `--turns T`,
`--keep` keeps the source file and reuses it when written with the same settings).

The source is the benchmark agent (`_workload.py`: a 4 KB system prompt, a tool call and a
~1 KB tool result per turn, five checkpoints per turn, a state that grows each step) run
by LangGraph on a threadloom file, 200 threads x 6 turns = 6,000 checkpoints by default.
The target is the tests' throwaway PostgreSQL server (`_postgres.py`: the machine's own,
on 127.0.0.1, a new database per run). Measured, each in a process of its own: the
applied migration of every thread into an empty database, then the rerun (which finds
every checkpoint present and writes nothing). Rates are checkpoints per second of wall
time, per second of the migrating process's CPU time (user + system), and per second of
that and the server's CPU time together (`server_cpu`: the postmaster's processes, read
from /proc): on a machine shared with other work the CPU figures are the ones the load
does not move, and the last bounds what an idle machine's wall rate can be when the two
run one after the other. Target (issue 26): >= 500 checkpoints/s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _harness as h
from _postgres import postgres_if
from _workload import build_graph, config_of, turn_input


def write_source(path: Path, threads: int, turns: int) -> float:
    """Run the agent for `threads` x `turns` on a threadloom file; return the seconds."""
    from threadloom import Saver

    started = time.monotonic()
    with Saver.from_conn_string(str(path)) as saver:
        graph = build_graph(saver)
        for t in range(threads):
            thread = f"thread-{t:05d}"
            for turn in range(1, turns + 1):
                graph.invoke(turn_input(thread, turn), config_of(thread))
            if t % 50 == 49:
                h.note(f"  source: {t + 1}/{threads} threads")
    return time.monotonic() - started


def child(source: str, url: str) -> dict[str, Any]:
    """Migrate every thread of `source` out to `url` (apply); the report's counts and times."""
    from threadloom import migrate

    wall, cpu = time.monotonic(), time.process_time()
    report = migrate(source, url, to="postgres", apply=True)
    wall, cpu = time.monotonic() - wall, time.process_time() - cpu
    return {
        "threads": report.threads,
        "checkpoints": report.checkpoints,
        "copied": report.copied,
        "writes_copied": report.writes_copied,
        "present": report.present,
        "wall": wall,
        "cpu": cpu,
    }


def server_cpu(data: Path) -> float:
    """CPU seconds the PostgreSQL server has used so far: the postmaster's own and its
    reaped children's (`cutime`, `cstime`), plus every live process of the server."""
    tick = os.sysconf("SC_CLK_TCK")
    postmaster = int((data / "postmaster.pid").read_text().split()[0])
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        pid, parent = int(entry.name), int(fields[1])
        if pid == postmaster:
            total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
        elif parent == postmaster:
            total += int(fields[11]) + int(fields[12])
    return total / tick


def run_child(source: Path, url: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(source), url],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"the migration failed:\n{done.stderr}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--threads", type=int, default=200)
    parser.add_argument("--turns", type=int, default=6, help="5 checkpoints per turn")
    parser.add_argument("--quick", action="store_true", help="40 threads")
    parser.add_argument("--keep", action="store_true", help="keep (and reuse) the source")
    parser.add_argument("--child", nargs=2, metavar=("SOURCE", "URL"))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1])))
        return
    threads = 40 if args.quick else args.threads
    with h.workdir(args.keep) as folder, postgres_if(["PostgresSaver"]) as server:
        if server.dsn is None:
            raise SystemExit(f"no PostgreSQL to migrate to: {server.reason}")
        source = folder / f"source-{threads}x{args.turns}.db"
        if not source.exists():
            h.note(f"writing the source: {threads} threads x {args.turns} turns on threadloom")
            h.note(f"  written in {write_source(source, threads, args.turns):.0f} s")
        url = server.new_database()
        rows = []
        results = {}
        for label in ("apply, into an empty database", "rerun, all present"):
            h.note(f"migrating out: {label}")
            assert server.tmp is not None
            before = server_cpu(server.tmp / "data")
            found = results[label] = run_child(source, url)
            found["server_cpu"] = server_cpu(server.tmp / "data") - before
            rows.append(
                [
                    label,
                    found["checkpoints"],
                    found["copied"],
                    found["writes_copied"],
                    f"{found['wall']:.1f}",
                    round(found["checkpoints"] / found["wall"]),
                    round(found["checkpoints"] / found["cpu"]),
                    f"{found['server_cpu']:.1f}",
                    round(found["checkpoints"] / (found["cpu"] + found["server_cpu"])),
                ]
            )
        print(h.describe_machine())
        print(f"PostgreSQL {server.version}; source {h.mib(source.stat().st_size)}")
        load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"load average after the runs (1/5/15 min): {load}")
        print()
        print(
            h.table(
                [
                    "run",
                    "checkpoints",
                    "copied",
                    "writes copied",
                    "wall s",
                    "ckpt/s (wall)",
                    "ckpt/s (CPU)",
                    "server CPU s",
                    "ckpt/s (both CPUs)",
                ],
                rows,
            )
        )
        whole = results["apply, into an empty database"]
        print()
        print(
            f"rate: {whole['checkpoints'] / whole['wall']:.0f} checkpoints/s wall, "
            f"{whole['checkpoints'] / whole['cpu']:.0f} per CPU second of the migration, "
            f"{whole['checkpoints'] / (whole['cpu'] + whole['server_cpu']):.0f} per CPU second "
            "of the migration and the server together (target >= 500)"
        )


if __name__ == "__main__":
    main()
