"""Online backup of a large file while a writer runs: how long the writer's puts wait.

Run: `python bench/bench_backup.py --mib 1024` (a 1 GiB file; about 2 minutes here),
`--mib 300` for a few hundred MiB, `--quick` for a 32 MiB smoke run.

1. A file of `--mib` MiB is made quickly: one thread per 64 MiB, each checkpoint holding
   a fresh 1 MiB value of random bytes (stored as CDC blocks, incompressible).
2. A writer process (this script with `--writer`) puts small checkpoints (a 2 KiB
   fresh value) on 4 threads in a loop, as an agent does, and records the start and the
   duration of every put.
3. After 3 s of writing alone, `threadloom.backup` copies the file with each method
   (`pages`: SQLite's backup API inside one read snapshot; `vacuum`: `VACUUM INTO`), a
   second apart, each verified before its rename (the time includes `verify`).
4. Per method: the backup's time (copy, verify), the copy's size, and the writer's
   puts that started during the whole backup (the copy, the fold of what the writer
   appended meanwhile, the verify of the copy), their longest and p99 latency, against the
   longest put of the 3 s of writing alone before (the baseline); then the three
   slowest puts near each backup, timed from its start.

The target (issue 26): writers never blocked longer than 100 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _tables import table
from langgraph.checkpoint.base import empty_checkpoint

import threadloom
from threadloom import Saver

MiB = 1024 * 1024
#: Seconds the writer runs alone before the first backup: the baseline of its latencies.
ALONE = 3.0


def make(path: Path, mib: int) -> None:
    """A threadloom file of about `mib` MiB of incompressible values."""
    with Saver.from_conn_string(str(path)) as saver:
        for n in range(mib):
            thread = f"big-{n // 64}"
            config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
            latest = saver.get_tuple(config)
            if latest is not None:
                config = latest.config
            made = empty_checkpoint()
            made["channel_values"] = {"blob": os.urandom(MiB)}
            made["channel_versions"] = {"blob": n + 1}
            saver.put(config, made, {"step": n}, made["channel_versions"])


def writer(path: str, stop: str, out: str) -> None:
    """Put small checkpoints until `stop` exists; write [(start, seconds), ...] to `out`."""
    configs: dict[str, Any] = {
        f"w{n}": {"configurable": {"thread_id": f"w{n}", "checkpoint_ns": ""}} for n in range(4)
    }
    timings: list[tuple[float, float]] = []
    with Saver.from_conn_string(path) as saver:
        step = 0
        while not Path(stop).exists():
            step += 1
            for name, config in configs.items():
                made = empty_checkpoint()
                made["channel_values"] = {"step": step, "blob": os.urandom(1024).hex()}
                made["channel_versions"] = {"step": step, "blob": step}
                began = time.time()
                configs[name] = saver.put(
                    config, made, {"source": "loop", "step": step}, made["channel_versions"]
                )
                timings.append((began, time.time() - began))
            if step == 1:
                print("ready", flush=True)
    Path(out).write_text(json.dumps(timings))


def window(timings: list[tuple[float, float]], start: float, end: float) -> list[float]:
    """Latencies (ms) of the puts that started in [start, end) or were running at start."""
    return sorted(
        took * 1000
        for began, took in timings
        if start <= began < end or began < start < began + took
    )


def p99(values: list[float]) -> float:
    return values[min(len(values) - 1, int(len(values) * 0.99))] if values else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=300, help="size of the file (MiB)")
    parser.add_argument("--quick", action="store_true", help="a 32 MiB smoke run")
    parser.add_argument("--keep", action="store_true", help="keep the files")
    parser.add_argument(
        "--writer", nargs=3, metavar=("FILE", "STOP", "OUT"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.writer:
        writer(*args.writer)
        return
    mib = 32 if args.quick else args.mib
    folder = Path(tempfile.mkdtemp(prefix="bench-backup-"))
    source = folder / "big.db"
    began = time.perf_counter()
    make(source, mib)
    made = time.perf_counter() - began
    size = os.path.getsize(source)
    print(f"made {source} ({size / MiB:,.0f} MiB) in {made:.1f} s", file=sys.stderr)
    stop, out = folder / "stop", folder / "timings.json"
    proc = subprocess.Popen(
        [sys.executable, __file__, "--writer", str(source), str(stop), str(out)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    time.sleep(0.5)  # the writer's first puts warm its caches
    alone = time.time()
    time.sleep(ALONE)
    runs: list[tuple[str, float, float, Any]] = []
    for method in ("pages", "vacuum"):
        start = time.time()
        report = threadloom.backup(source, folder / f"copy-{method}.db", method=method)
        runs.append((method, start, time.time(), report))
        time.sleep(1.0)
    stop.touch()
    proc.wait(timeout=120)
    timings = [tuple(t) for t in json.loads(out.read_text())]
    baseline = window(timings, alone, alone + ALONE)  # type: ignore[arg-type]
    rows = []
    for method, start, end, report in runs:
        during = window(timings, start, end)  # type: ignore[arg-type]
        rows.append(
            [
                method,
                f"{size / MiB:,.0f}",
                f"{report.bytes / MiB:,.0f}",
                f"{report.copy_seconds:.2f}",
                f"{report.verify_seconds:.2f}",
                f"{size / MiB / report.copy_seconds:,.0f}",
                len(during),
                f"{max(during, default=0):.1f}",
                f"{p99(during):.1f}",
                f"{max(baseline, default=0):.1f}",
            ]
        )
    print(
        table(
            [
                "method",
                "file MiB",
                "copy MiB",
                "copy s",
                "verify s",
                "MiB/s",
                "puts during backup",
                "longest put ms",
                "p99 put ms",
                "longest put alone ms",
            ],
            rows,
        )
    )
    for method, start, _, report in runs:
        slow = sorted(timings, key=lambda t: -t[1])
        near = [
            f"{(began - start) * 1000:+.0f} ms: {took * 1000:.0f} ms"
            for began, took in slow
            if start - 1 <= began <= start + report.seconds + 1
        ][:3]
        print(f"{method}: slowest puts from the copy's start: {', '.join(near)}")
    print(f"\nthreadloom backend {threadloom.core.backend()}, file made in {made:.0f} s")
    if not args.keep:
        for path in folder.iterdir():
            path.unlink()
        folder.rmdir()


if __name__ == "__main__":
    main()
