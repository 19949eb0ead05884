"""Run latency and disk through LangGraph's Agent Server: the default in-memory runtime
(`langgraph dev`, its checkpointer, store and registry pickled in `.langgraph_api/`)
against `threadloom agent-server` (checkpoints, store and registry in one file).

Run: `python bench/bench_agent_server.py` (`--turns N`, default 80; `--quick`: 8 turns;
`--keep` keeps the folders). Needs the server extra.

Both servers run at once on copies of the tests' project (tests/server/project: an echo
chat model, no network; a store write per turn), one thread each, and the turns are
interleaved (the order of the two alternates every turn) so both see the same machine.
A turn is one `runs.wait` through langgraph-sdk, timed at the client, then one
`threads.update` of the thread's metadata (a request whose only work is a registry
write: it shows the write-through's cost). A `runs.wait` is mostly the runtime's queue:
its worker looks for pending runs every 0.5 s, so the client's time varies by that much
whatever the storage; the server logs each run's own execution time (`run_exec_ms`:
the graph, its checkpoint and store writes, the worker's registry writes), read from
the servers' logs. Disk is measured
after a graceful stop (each side writes what it holds): for the default runtime the
`.langgraph_api/` folder, for threadloom the file (its WAL folded at close) plus what is
left in `.langgraph_api/` (the runtime's retry counters); the registry's share of the
file is the bytes of its records.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import _harness as h  # noqa: E402
from _tables import kib, table  # noqa: E402

from tests.server._agent_server import AgentServer  # noqa: E402


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.exists() else 0


def _default_project(server: AgentServer) -> None:
    """The project's langgraph.json without threadloom: the runtime's own checkpointer
    and store (the same embedding index)."""
    path = server.folder / "langgraph.json"
    config = json.loads(path.read_text())
    del config["checkpointer"]
    config["store"].pop("path")
    path.write_text(json.dumps(config))


def _exec_ms(log: Path) -> list[float]:
    """The server's own `run_exec_ms` of each run (from start to end of its execution:
    the graph, its checkpoints and store writes; not the wait in the queue)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", log.read_text(errors="replace"))
    return [float(n) for n in re.findall(r"run_exec_ms=(\d+)", text)]


def _registry_bytes(db: Path) -> tuple[int, int]:
    from threadloom import Saver
    from threadloom.engine.conversations import ServerRecords

    with Saver.from_conn_string(str(db)) as saver:
        rows = ServerRecords(saver.checkpoints.file, saver.checkpoints.scope).load()
    return len(rows), sum(len(r.body) for r in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=80)
    parser.add_argument("--quick", action="store_true", help="8 turns")
    parser.add_argument("--keep", action="store_true", help="keep the servers' folders")
    args = parser.parse_args()
    turns = 8 if args.quick else args.turns
    from langgraph_sdk import get_sync_client

    work = Path(tempfile.mkdtemp(prefix="bench-agent-server-"))
    default = AgentServer(work / "default")
    _default_project(default)
    ours = AgentServer(work / "threadloom", agent_server=True)
    servers = {"default (inmem)": default, "threadloom": ours}
    times: dict[str, list[float]] = {name: [] for name in servers}
    updates: dict[str, list[float]] = {name: [] for name in servers}
    try:
        for server in servers.values():
            server.start()
        clients = {name: get_sync_client(url=s.url, api_key=None) for name, s in servers.items()}
        threads = {name: c.threads.create()["thread_id"] for name, c in clients.items()}
        names = list(servers)
        for turn in range(turns):
            for name in names if turn % 2 else names[::-1]:
                said = {"messages": [{"role": "user", "content": f"turn {turn}: " + "x" * 200}]}
                started = time.perf_counter()
                clients[name].runs.wait(threads[name], "agent", input=said)
                times[name].append(time.perf_counter() - started)
                started = time.perf_counter()
                clients[name].threads.update(threads[name], metadata={"turn": turn})
                updates[name].append(time.perf_counter() - started)
        for server in servers.values():
            server.stop()
        default_disk = _folder_bytes(default.folder / ".langgraph_api")
        file_disk = ours.db.stat().st_size
        left = _folder_bytes(ours.folder / ".langgraph_api")
        records, registry = _registry_bytes(ours.db)
        executed = {name: _exec_ms(server.log) for name, server in servers.items()}
    finally:
        for server in servers.values():
            server.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\n{h.describe_machine()}\n")
    print(f"1 thread x {turns} turns through the Agent Server (runs.wait, interleaved)\n")
    rows = []
    for name, taken in times.items():
        ms = sorted(t * 1000 for t in taken)
        upd = sorted(t * 1000 for t in updates[name])
        ran = sorted(executed[name]) or [float("nan")]
        rows.append(
            [
                name,
                f"{statistics.median(ms):.1f}",
                f"{h.p95(ms):.1f}",
                f"{statistics.median(ran):.1f}",
                f"{h.p95(ran):.1f}",
                f"{statistics.median(upd):.2f}",
                f"{h.p95(upd):.2f}",
            ]
        )
    headers = [
        "server",
        "runs.wait p50 ms",
        "p95",
        "run exec p50 ms",
        "p95",
        "thread update p50 ms",
        "p95",
    ]
    print(table(headers, rows))
    print()
    print(
        table(
            ["server", "on disk", "of which the registry", "left in .langgraph_api"],
            [
                ["default (inmem)", kib(default_disk), "(in the pickles)", kib(default_disk)],
                [
                    "threadloom",
                    kib(file_disk + left),
                    f"{kib(registry)} ({records} records)",
                    kib(left),
                ],
            ],
        )
    )
    if args.keep:
        print(f"\nkept: {work}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
