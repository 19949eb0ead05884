"""`threadloom view` on a big file: server time of the pages the issue sets targets for.

Run: `python bench/bench_view.py` (about 1 minute on 2 cores; `--quick` for a smoke run).

One file holds 10,000 threads (two messages each, an owner, a title), a conversation of
10,000 messages (its last checkpoint; 250 checkpoints before it as it grew) and a thread
of 1,000 checkpoints. The viewer runs in process (Starlette's TestClient) on a read-only
open of that file, as `threadloom view` serves it. "server" is the time the page's
handler took to build and render it (its `Server-Timing` header); "request" adds the
ASGI round trip of the test client. Every page is requested once to warm it, then
`--rounds` times; p50 and p95 are printed as a Markdown table against the targets:

| page | target (server p50) |
| --- | --- |
| thread list of a 10,000-thread file | 50 ms |
| transcript first page of a 10,000-message conversation | 50 ms |
| history page of a 1,000-checkpoint thread | 100 ms |

It also times the other pages, among them `/file` (the header, counters and thread
index: what it reads grows with the number of threads only) and `/file?detail=1` (which
reads the whole file: `dbstat`, the row counts, the content store's statistics).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from threadloom import Saver, core  # noqa: E402

TARGETS = {"threads": 50.0, "transcript": 50.0, "history": 100.0}


def _put(saver: Saver, thread_id: str, parent: Any, messages: list[Any], n: int, conf: dict) -> Any:
    made = empty_checkpoint()
    made["id"] = f"1f0d0000-0000-6000-8000-{n:012d}"
    made["channel_values"] = {"messages": messages, "step": n}
    made["channel_versions"] = {"messages": n, "step": n}
    config = parent or {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", **conf}}
    return saver.put(config, made, {"source": "loop", "step": n, "parents": {}}, {})


def build(path: Path, threads: int, messages: int, checkpoints: int) -> None:
    """Write the file (see the module docstring)."""
    with Saver.from_conn_string(str(path)) as saver:
        for i in range(threads):
            pair = [
                HumanMessage(content=f"question {i} about the weather", id=f"h{i}"),
                AIMessage(content=f"answer {i}", id=f"a{i}"),
            ]
            _put(saver, f"t-{i:05d}", None, pair, 1, {"user_id": f"user-{i % 100}"})
        long: list[Any] = []
        parent = None
        step = max(messages // 250, 1)
        for n in range(0, messages, 2):
            long += [
                HumanMessage(content=f"turn {n // 2}: " + "words " * 12, id=f"lh{n}"),
                AIMessage(content=f"reply {n // 2}: " + "more words " * 20, id=f"la{n}"),
            ]
            if (n + 2) % step == 0 or n + 2 >= messages:
                parent = _put(saver, "long", parent, list(long), n + 2, {"user_id": "ada"})
        parent = None
        deep: list[Any] = []
        for n in range(checkpoints):
            if n % 10 == 0:
                deep.append(HumanMessage(content=f"step {n}", id=f"d{n}"))
            parent = _put(saver, "deep", parent, list(deep), n + 1, {"user_id": "bob"})


def grow(path: Path, mib: int) -> None:
    """Add `mib` MiB of incompressible values to the file: a thread of `mib` checkpoints,
    each with a new 1 MiB channel value (random bytes: no dedup, no compression)."""
    with Saver.from_conn_string(str(path)) as saver:
        parent = None
        for n in range(mib):
            made = empty_checkpoint()
            made["id"] = f"1f0d0000-0000-6000-9000-{n:012d}"
            made["channel_values"] = {"blob": os.urandom(2**20), "step": n}
            made["channel_versions"] = {"blob": n + 1, "step": n + 1}
            config = parent or {"configurable": {"thread_id": "bulk", "checkpoint_ns": ""}}
            parent = saver.put(config, made, {"source": "loop", "step": n}, {})


def measure(path: Path, rounds: int) -> dict[str, dict[str, float]]:
    """p50/p95 of server and request time per page."""
    from starlette.testclient import TestClient

    from threadloom.viewer.app import create_app
    from threadloom.viewer.source import Source

    pages = {
        "threads": "/threads",
        "threads (search)": "/threads?q=weather",
        "transcript": "/threads/long",
        "transcript (older page)": "/threads/long?before=5000",
        "history": "/threads/deep/history",
        "history (JSON twin)": "/threads/deep/history.json",
    }
    out: dict[str, dict[str, float]] = {}
    with TestClient(create_app(Source(path), allowed_hosts=["testserver"])) as client:
        head = client.get("/threads/long.json").json()["thread"]["head"]
        pages.update(
            {
                "threads (search, no match)": "/threads?q=nowhere",
                "checkpoint (10,000-message head)": f"/threads/long/checkpoints/{head}",
                "raw documents (same)": f"/threads/long/checkpoints/{head}/raw",
                "file": "/file",
                "file (detail=1: reads the whole file)": "/file?detail=1",
            }
        )
        for name, url in pages.items():
            assert client.get(url).status_code == 200, url
            server, request = [], []
            for _ in range(rounds):
                started = time.perf_counter()
                response = client.get(url)
                request.append((time.perf_counter() - started) * 1000)
                timing = response.headers["server-timing"]
                server.append(float(timing.split("dur=")[1]))
            out[name] = {
                "server_p50": statistics.median(server),
                "server_p95": statistics.quantiles(server, n=20)[-1],
                "request_p50": statistics.median(request),
                "bytes": len(response.content),
            }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run (small file)")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--keep", help="build the file here and keep it (reused if present)")
    parser.add_argument(
        "--grow",
        type=int,
        default=0,
        metavar="MIB",
        help="when building, add MIB MiB of incompressible values (a bigger file, as many threads)",
    )
    args = parser.parse_args()
    threads, messages, checkpoints = (200, 400, 50) if args.quick else (10_000, 10_000, 1_000)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(args.keep) if args.keep else Path(folder) / "view.db"
        if not path.exists():
            started = time.perf_counter()
            build(path, threads, messages, checkpoints)
            grow(path, args.grow)
            print(f"built {path} in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        results = measure(path, 10 if args.quick else args.rounds)
        size = path.stat().st_size
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    print(
        f"threadloom view, {threads:,} threads + a {messages:,}-message conversation + a "
        f"{checkpoints:,}-checkpoint thread"
        + (f" + {args.grow:,} MiB of incompressible values" if args.grow else "")
        + f" ({size / 2**20:.1f} MiB), backend "
        f"{core.backend()}, {commit}, {args.rounds if not args.quick else 10} rounds\n"
    )
    print("| page | server p50 | server p95 | request p50 | page size | target (server p50) |")
    print("|---|---|---|---|---|---|")
    failed = False
    for name, found in results.items():
        target = TARGETS.get(name)
        mark = ""
        if target is not None:
            ok = found["server_p50"] <= target
            failed |= not ok
            mark = f"{target:.0f} ms {'met' if ok else 'MISSED'}"
        print(
            f"| {name} | {found['server_p50']:.1f} ms | {found['server_p95']:.1f} ms | "
            f"{found['request_p50']:.1f} ms | {found['bytes'] / 1024:.0f} KiB | {mark} |"
        )
    return 1 if failed and not args.quick else 0


if __name__ == "__main__":
    sys.exit(main())
