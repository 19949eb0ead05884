"""Short threads: the saver calls of bench_threads' workload replayed alone, timed and profiled.

Run from the repository root:
    .venv/bin/python bench/profile_threads.py [--threads 200] [--turns 5] [--top 12]

The chat agent of bench/_workload.py runs once on an InMemorySaver whose calls are
recorded (put, put_writes, get_tuple, with deep copies of their arguments); the
recording is then replayed on a fresh SqliteSaver and a fresh threadloom.Saver,
thread by thread and alternating which saver goes first, so the machine's load hits
both alike. Only the saver calls run, so the figures are each saver's own CPU per
turn, without LangGraph's graph around them. A second threadloom replay runs under
cProfile and prints the functions with the largest own time and the watched ones.
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import pstats
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _workload import build_graph, config_of, turn_input  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402

import threadloom  # noqa: E402
import threadloom.core  # noqa: E402

Call = tuple[str, tuple[Any, ...]]

WATCH = {
    "writer.py:put": "Writer.put (a checkpoint)",
    "writer.py:put_writes": "Writer.put_writes",
    "reader.py:get": "Reader.get (get_tuple)",
    "plan.py:plan_checkpoint": "protocol: plan_checkpoint",
    "plan.py:plan_writes": "protocol: plan_writes",
    "content_store.py:pack_many": "content: pack_many (encode, compress)",
    "file.py:write": "File.write (lock, BEGIN..COMMIT)",
    "scope.py:reserve": "Scope.reserve",
    "training.py:train": "dictionary trainings",
    "jsonplus.py:dumps_typed": "LangGraph serializer: dumps_typed",
    "jsonplus.py:loads_typed": "LangGraph serializer: loads_typed",
}


class Recorder(InMemorySaver):
    """An InMemorySaver that keeps a copy of every put, put_writes and get_tuple."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[str, list[Call]] = defaultdict(list)

    def _note(self, name: str, *args: Any) -> None:
        thread = args[0]["configurable"]["thread_id"]
        self.calls[thread].append((name, copy.deepcopy(args)))

    def get_tuple(self, config: Any) -> Any:
        self._note("get_tuple", config)
        return super().get_tuple(config)

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        self._note("put", config, checkpoint, metadata, new_versions)
        return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        self._note("put_writes", config, writes, task_id, task_path)
        super().put_writes(config, writes, task_id, task_path)


def record(threads: int, turns: int) -> dict[str, list[Call]]:
    """The saver calls of `threads` x `turns` of the chat agent, per thread in call order."""
    recorder = Recorder()
    graph = build_graph(recorder)
    for t in range(threads):
        thread = f"user-{t:04d}"
        for turn in range(1, turns + 1):
            graph.invoke(turn_input(thread, turn), config_of(thread))
    return dict(recorder.calls)


def key(entry: tuple[str, int, str]) -> str:
    path, _, name = entry
    return f"{Path(path).name}:{name}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=200)
    p.add_argument("--turns", type=int, default=5)
    p.add_argument("--top", type=int, default=14)
    p.add_argument("--no-profile", action="store_true")
    a = p.parse_args()
    where = Path(threadloom.__file__).parent
    recorded = record(a.threads, a.turns)
    first = [name for name, _ in recorded["user-0000"]]
    print(
        f"backend `{threadloom.core.backend()}`, threadloom from `{where}`; "
        f"{a.threads} threads x {a.turns} turns; calls per thread: {first.count('put')} put, "
        f"{first.count('put_writes')} put_writes, {first.count('get_tuple')} get_tuple\n"
    )
    turns = a.threads * a.turns
    with tempfile.TemporaryDirectory() as tmp:
        sqlite_cm = SqliteSaver.from_conn_string(str(Path(tmp) / "sqlite.db"))
        sqlite = sqlite_cm.__enter__()
        sqlite.setup()
        tl = threadloom.Saver(str(Path(tmp) / "threadloom.db"))
        savers = {"SqliteSaver": sqlite, "threadloom.Saver": tl}
        wall = dict.fromkeys(savers, 0.0)
        cpu = dict.fromkeys(savers, 0.0)
        for i, calls in enumerate(recorded.values()):
            order = list(savers.items()) if i % 2 == 0 else list(savers.items())[::-1]
            for name, saver in order:
                mine = copy.deepcopy(calls)
                c0, w0 = time.process_time(), time.perf_counter()
                for method, args in mine:
                    getattr(saver, method)(*args)
                cpu[name] += time.process_time() - c0
                wall[name] += time.perf_counter() - w0
        tl.close()
        sqlite_cm.__exit__(None, None, None)
        print("| saver | wall ms per turn | CPU ms per turn | turns/s (saver calls alone) |")
        print("|---|---|---|---|")
        for name in savers:
            print(
                f"| {name} | {wall[name] / turns * 1e3:.3f} | {cpu[name] / turns * 1e3:.3f} | "
                f"{turns / wall[name]:.0f} |"
            )
        ratio = wall["SqliteSaver"] / wall["threadloom.Saver"]
        print(f"\nthreadloom ÷ SqliteSaver turns/s (saver calls alone, interleaved): {ratio:.2f}x")
        if a.no_profile:
            return
        tl = threadloom.Saver(str(Path(tmp) / "threadloom-profiled.db"))
        prof = cProfile.Profile()
        for calls in recorded.values():
            mine = copy.deepcopy(calls)
            prof.enable()
            for method, args in mine:
                getattr(tl, method)(*args)
            prof.disable()
        tl.close()
    st = pstats.Stats(prof)
    total = sum(v[2] for v in st.stats.values())
    print(f"profiled threadloom: {total / turns * 1e3:.3f} ms CPU per turn\n")
    print("| function | share (cumulative) | own time share |")
    print("|---|---|---|")
    rows: dict[str, list[float]] = {}
    for entry, (_cc, _nc, tt, ct, _callers) in st.stats.items():
        k = key(entry)
        for pattern, label in WATCH.items():
            if k == pattern:
                r = rows.setdefault(label, [0.0, 0.0])
                r[0] += ct
                r[1] += tt
    for label, (ct, tt) in sorted(rows.items(), key=lambda kv: -kv[1][0]):
        print(f"| {label} | {100 * ct / total:.1f}% | {100 * tt / total:.1f}% |")
    print("\nTop own time:\n")
    for e, v in sorted(st.stats.items(), key=lambda kv: -kv[1][2])[: a.top]:
        print(f"- `{key(e)}` {100 * v[2] / total:.1f}% ({v[1]} calls)")
    print("\nTop cumulative:\n")
    for e, v in sorted(st.stats.items(), key=lambda kv: -kv[1][3])[: a.top * 3]:
        print(f"- `{key(e)}` {100 * v[3] / total:.1f}% ({v[1]} calls)")


if __name__ == "__main__":
    main()
