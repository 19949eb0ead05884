"""Many threads: 200 threads x 5 turns sharing one 4 KB system prompt, on every saver.

Run: `python bench/bench_threads.py` (`--quick`: 20 threads x 2 turns).

Threads run one after another, each on every saver in turn (all savers open at
once, so background load hits them alike); throughput is turns per second of
wall time spent in `invoke`. Bytes are read once at the end. The async twins
(AsyncSqliteSaver, threadloom.AsyncSaver) store the same bytes as their sync
savers and are left out by default to keep the run under 3 minutes on 2 cores;
`--savers all` adds them.

Copies of the system prompt on disk, read with the bytes: for threadloom, the
physical payloads (`content.payloads()`: inline bodies and blocks, decompressed)
that contain a 256-byte window of the prompt; for LangGraph's SQLite savers (they
store msgpack uncompressed), the occurrences of the window in the bytes of the
file and -wal after wal_checkpoint(TRUNCATE). The figure is the largest count over
three windows (the prompt's start, middle and end): a copy that a SQLite page
boundary or a block cut splits inside a window is not counted in that window.
PostgresSaver (pglz-compressed TOAST) and InMemorySaver show "-".
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _harness as h
from _workload import SYSTEM_PROMPT, build_graph, config_of, turn_input

SYNC_SAVERS = ("InMemorySaver", "SqliteSaver", "PostgresSaver", "threadloom.Saver")
#: Length of the windows of the system prompt searched for its copies.
WINDOW = 256


def prompt_windows() -> list[bytes]:
    """Three 256-byte windows of the system prompt's UTF-8: its start, middle and end."""
    raw = SYSTEM_PROMPT.encode()
    middle = (len(raw) - WINDOW) // 2
    return [raw[:WINDOW], raw[middle : middle + WINDOW], raw[-WINDOW:]]


def prompt_copies(subject: h.Subject) -> list[int] | None:
    """Copies of each prompt window the saver keeps on disk (None where not counted).

    threadloom: physical payloads containing the window. LangGraph's SQLite savers:
    occurrences in the file + -wal (call after `disk_bytes()`, which checkpoints the WAL).
    """
    windows = prompt_windows()
    if subject.kind == "threadloom":
        counts = [0] * len(windows)
        for payload in subject.saver.file.content.payloads():
            for i, window in enumerate(windows):
                if window in payload:
                    counts[i] += 1
        return counts
    if subject.kind == "sqlite":
        assert subject.path is not None
        data = b""
        for path in (Path(subject.path), Path(subject.path + "-wal")):
            if path.exists():
                data += path.read_bytes()
        return [data.count(window) for window in windows]
    return None


def run_turns(panel: h.Panel, threads: int, turns: int) -> dict[str, dict[str, Any]]:
    """Each thread's turns on every saver in turn (rotating which saver goes first).

    Returns, per saver, the seconds spent in `invoke`, the turn count and the put
    and get_tuple latencies LangGraph caused.
    """
    graphs: dict[str, Any] = {}
    elapsed: dict[str, float] = {}
    for name, subject in panel.each(0):
        with panel.guard("threads", name):
            graphs[name] = build_graph(subject.saver)
            subject.instrument()
            elapsed[name] = 0.0
    for t in range(threads):
        thread = f"user-{t:04d}"
        config = config_of(thread)
        for name, subject in panel.each(t):
            with panel.guard("threads", name):
                for turn in range(1, turns + 1):
                    start = time.perf_counter()
                    subject.invoke(graphs[name], turn_input(thread, turn), config)
                    elapsed[name] += time.perf_counter() - start
    return {
        name: {
            "elapsed": elapsed[name],
            "turns": threads * turns,
            "put": subject.timings.stats("put"),
            "get": subject.timings.stats("get_tuple"),
        }
        for name, subject in panel.each(0)
        if name in elapsed
    }


def run(panel: h.Panel, threads: int, turns: int) -> dict[str, dict[str, Any]]:
    """`run_turns`, then each saver's bytes and prompt copies."""
    out = run_turns(panel, threads, turns)
    for name, subject in panel.each(0):
        if name not in out:
            continue
        with panel.guard("threads: bytes", name):
            out[name]["logical"] = subject.logical_bytes()
            out[name]["disk"] = subject.disk_bytes()
            out[name]["prompt"] = prompt_copies(subject)
    return {name: r for name, r in out.items() if "prompt" in r}


# -- peak RSS: each saver alone in a fresh process -----------------------------------------


def _rss_kib() -> tuple[int, int]:
    """(current, peak) resident set size of this process in KiB (Linux /proc)."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def rss_child(
    name: str, threads: int, turns: int, synchronous: str, dsn: str | None
) -> dict[str, Any]:
    """In this (fresh) process: run `threads` x `turns` on saver `name` alone; return RSS.

    The process imports only what that saver needs (threadloom is not imported for
    LangGraph's savers), so each figure is what a process using that saver holds.
    PostgresSaver's figure is the client process only (the server's memory is not
    counted).
    """
    server = h.PostgresServer()
    server.dsn = dsn  # a running server owned by the parent: databases only
    with (
        h.workdir(keep=False) as wd,
        h.open_subject(name, wd, server, synchronous=synchronous) as subject,
    ):
        graph = build_graph(subject.saver)
        # One turn first, so lazy imports and first-use caches count in the base.
        config = config_of("warm-up")
        subject.invoke(graph, turn_input("warm-up", 1), config)
        base, _ = _rss_kib()
        start = time.perf_counter()
        for t in range(threads):
            thread = f"user-{t:04d}"
            config = config_of(thread)
            for turn in range(1, turns + 1):
                subject.invoke(graph, turn_input(thread, turn), config)
        elapsed = time.perf_counter() - start
        _, peak = _rss_kib()
    return {"base": base * 1024, "peak": peak * 1024, "elapsed": elapsed, "turns": threads * turns}


def peak_rss(
    name: str,
    threads: int,
    turns: int,
    synchronous: str = "default",
    postgres: h.PostgresServer | None = None,
) -> dict[str, Any]:
    """Run `rss_child` for saver `name` in a fresh interpreter; return what it measured.

    Raises:
        h.Skipped: PostgresSaver without a running server.
        RuntimeError: the child failed (its stderr tail in the message).
    """
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--rss-child",
        name,
        "--threads",
        str(threads),
        "--turns",
        str(turns),
        "--synchronous",
        synchronous,
    ]
    if name == "PostgresSaver":
        if postgres is None or postgres.dsn is None:
            raise h.Skipped(postgres.reason if postgres else "no server")
        argv += ["--dsn", postgres.dsn]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"RSS child for {name} exited {done.returncode}: {tail}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> int:
    p = h.parser(__doc__.splitlines()[0], savers=SYNC_SAVERS)
    p.add_argument("--threads", type=int, default=None, help="threads (default 200, quick 20)")
    p.add_argument("--turns", type=int, default=None, help="turns per thread (default 5, quick 2)")
    p.add_argument(
        "--rss",
        action="store_true",
        help="also measure peak RSS, each saver alone in a fresh process (one more run each)",
    )
    p.add_argument("--rss-child", metavar="SAVER", help=argparse.SUPPRESS)
    p.add_argument("--dsn", help=argparse.SUPPRESS)  # the parent's server, for --rss-child
    args = p.parse_args()
    threads = args.threads or (20 if args.quick else 200)
    turns = args.turns or (2 if args.quick else 5)
    if args.rss_child:
        print(json.dumps(rss_child(args.rss_child, threads, turns, args.synchronous, args.dsn)))
        return 0
    names = h.selected(args)
    failures = h.Failures()
    print(f"# bench_threads: {threads} threads x {turns} turns, one shared 4 KB system prompt\n")
    print(h.describe_machine())
    print(h.settings(args) + "\n")
    rss: dict[str, dict[str, Any]] = {}
    with h.workdir(args.keep) as wd, h.postgres_if(names) as pg:
        h.note("threads: all savers interleaved, one thread at a time")
        with h.Panel(names, wd, pg, failures, synchronous=args.synchronous) as panel:
            results = run(panel, threads, turns)
        for name in names if args.rss else ():
            h.note(f"threads: peak RSS of {name} alone in a fresh process")
            with failures.guard("peak RSS", name):
                rss[name] = peak_rss(name, threads, turns, args.synchronous, pg)
    report(results, threads)
    if rss:
        report_rss(rss, threads, turns)
    return failures.report()


def report_rss(rss: dict[str, dict[str, Any]], threads: int, turns: int) -> None:
    print(
        f"## Peak RSS, each saver alone in a fresh process ({threads} threads x {turns} turns; "
        "base: after imports, the saver's opening and one warm-up turn; PostgresSaver: "
        "the client process only)\n"
    )
    base = rss.get(h.BASELINE)
    rows = [
        [
            name,
            h.mib(r["peak"]),
            h.ratio(r["peak"], base and base["peak"]),
            h.mib(r["base"]),
            h.mib(r["peak"] - r["base"]),
            h.ratio(r["peak"] - r["base"], base and base["peak"] - base["base"]),
            f"{r['turns'] / r['elapsed']:.1f}",
        ]
        for name, r in rss.items()
    ]
    headers = ["saver", "peak RSS", "vs Sqlite", "base", "growth", "vs Sqlite", "turns/s alone"]
    print(h.table(headers, rows) + "\n")


def report(results: dict[str, dict[str, Any]], threads: int) -> None:
    base = results.get(h.BASELINE)
    rows = []
    for name, r in results.items():
        rate = r["turns"] / r["elapsed"]
        rows.append(
            [
                name,
                h.mib(r["logical"]),
                h.mib(r["disk"]),
                h.ratio(r["disk"], base and base["disk"]),
                f"{(r['disk'] or r['logical']) / threads / 1024:.1f} KiB",
                f"{rate:.1f}",
                h.ratio(rate, base and base["turns"] / base["elapsed"]),
                *h.ms(r["put"]),
                *h.ms(r["get"]),
            ]
        )
    print(
        h.table(
            [
                "saver",
                "logical",
                "on disk",
                "disk vs Sqlite",
                "per thread",
                "turns/s",
                "vs Sqlite",
                "put p50",
                "put p95",
                "get p50",
                "get p95",
            ],
            rows,
        )
        + "\n"
    )

    print(
        f"## System prompt copies on disk (largest count over {WINDOW}-byte windows at the "
        "prompt's start, middle and end)\n"
    )
    rows = []
    for name, r in results.items():
        counts = r.get("prompt")
        rows.append(
            [
                name,
                max(counts) if counts else None,
                " / ".join(str(c) for c in counts) if counts else None,
                f"{max(counts) / threads:.2f}" if counts else None,
            ]
        )
    print(h.table(["saver", "prompt copies", "start / middle / end", "per thread"], rows) + "\n")

    rows = []
    for name in ("threadloom.Saver", "threadloom.AsyncSaver"):
        counts = results.get(name, {}).get("prompt")
        if counts:
            rows.append(
                [
                    name,
                    "the prompt's bytes on disk once (copies == 1)",
                    max(counts),
                    "met" if max(counts) == 1 else "MISSED",
                ]
            )
    if rows:
        print("## Targets\n")
        print(h.table(["saver", "target", "measured", "verdict"], rows) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
