"""What proving integrity costs: this checkout against an earlier commit, same run.

The issue "Integrity you can prove" allows the row seals (and the head and pending
checks that come with them, format 4) at most 5% on `get_tuple` and `list`. This script
checks out `--baseline` in a temporary worktree (default: f8e6bf7, format 3 with the
byte-bounded caches: the code the integrity work was merged onto, so the ratio is the
cost of the checks alone), runs the same workload with both versions in alternating
subprocesses (so machine noise hits both alike), and prints the median of each
version's per-round medians, the ratio, and LangGraph's SqliteSaver in the same run.

Workload: one thread of `--turns` chat turns (a growing message list, about 300 bytes
per message, one pending write per turn; the time per turn of `put` + `put_writes` is
reported too), on disk, then per round `--reads` calls of each read: `get_tuple` of the
latest checkpoint, `get_tuple` of a named older one, `list(limit=10)` and `list()` of
the whole thread.

    python bench/bench_integrity.py [--baseline REV] [--turns 30] [--rounds 7] [--reads 200]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
READS = ("put + put_writes", "get_tuple latest", "get_tuple named", "list(limit=10)", "list()")


def _workload(saver: Any, turns: int) -> dict[str, Any]:
    """Write the chat thread; return the configs the reads use."""
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.base import empty_checkpoint

    config: dict[str, Any] = {"configurable": {"thread_id": "chat", "checkpoint_ns": ""}}
    messages: list[Any] = []
    named = None
    for turn in range(turns):
        messages = [
            *messages,
            HumanMessage(content=f"question {turn} " + "q" * 280, id=f"h{turn}"),
            AIMessage(content=f"answer {turn} " + "a" * 300, id=f"a{turn}"),
        ]
        made = empty_checkpoint()
        made["id"] = f"1f0d0000-0000-6000-8000-{turn:012d}"
        made["channel_values"] = {"messages": list(messages), "turn": turn}
        made["channel_versions"] = {"messages": turn + 1, "turn": turn + 1}
        config = saver.put(config, made, {"source": "loop", "step": turn}, made["channel_versions"])
        saver.put_writes(config, [("messages", [messages[-1]])], f"task-{turn}")
        if turn == turns // 2:
            named = config
    return {"latest": {"configurable": {"thread_id": "chat"}}, "named": named}


def _time(fn: Any, reads: int) -> float:
    fn()  # warm
    samples = []
    for _ in range(reads):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def worker(kind: str, folder: str, turns: int, reads: int) -> None:
    """One round in this process: build the file, time each read, print JSON."""
    path = os.path.join(folder, f"{kind}-{os.getpid()}.db")
    if kind == "SqliteSaver":
        from langgraph.checkpoint.sqlite import SqliteSaver

        context: Any = SqliteSaver.from_conn_string(path)
    else:
        from threadloom import Saver

        context = Saver.from_conn_string(path)
    with context as saver:
        start = time.perf_counter()
        configs = _workload(saver, turns)
        found = {
            "put + put_writes": (time.perf_counter() - start) / turns,
            "get_tuple latest": _time(lambda: saver.get_tuple(configs["latest"]), reads),
            "get_tuple named": _time(lambda: saver.get_tuple(configs["named"]), reads),
            "list(limit=10)": _time(lambda: list(saver.list(configs["latest"], limit=10)), reads),
            "list()": _time(lambda: list(saver.list(configs["latest"])), max(reads // 10, 5)),
        }
    print(json.dumps(found))


def _baseline(rev: str, into: Path) -> Path:
    """A worktree of `rev` whose `src` imports (the native module copied when the C core
    is unchanged, else built)."""
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(into), rev], check=True
    )
    built = next((ROOT / "src" / "threadloom").glob("_native*.so"), None)
    same = (
        subprocess.run(["git", "-C", str(ROOT), "diff", "--quiet", rev, "--", "native"]).returncode
        == 0
    )
    if built is not None and same:
        shutil.copy(built, into / "src" / "threadloom" / built.name)
    else:
        subprocess.run([sys.executable, "native/build.py"], cwd=into, check=True)
    return into / "src"


def _round(kind: str, src: Path, folder: str, args: argparse.Namespace) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run(
        [sys.executable, __file__, "--worker", kind, folder, str(args.turns), str(args.reads)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="f8e6bf7")
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--reads", type=int, default=200)
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        kind, folder, turns, reads = args.worker
        worker(kind, folder, int(turns), int(reads))
        return 0
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="threadloom-integrity-") as folder:
        old = _baseline(args.baseline, Path(folder) / "baseline")
        try:
            versions = {f"threadloom {head}": ROOT / "src", f"threadloom {args.baseline}": old}
            runs: dict[str, list[dict[str, float]]] = {name: [] for name in versions}
            runs["SqliteSaver"] = []
            for _ in range(args.rounds):
                for name, src in versions.items():
                    runs[name].append(_round("threadloom", src, folder, args))
                runs["SqliteSaver"].append(_round("SqliteSaver", ROOT / "src", folder, args))
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old.parent)],
                check=False,
            )
    median = {
        name: {r: statistics.median(x[r] for x in rows) for r in READS}
        for name, rows in runs.items()
    }
    new, base = f"threadloom {head}", f"threadloom {args.baseline}"
    print(
        f"# read cost of format 4's checks: {args.turns} turns, "
        f"{args.rounds} rounds x {args.reads} reads, "
        f"backend {os.environ.get('THREADLOOM_BACKEND', 'native')}"
    )
    print()
    print(f"| read | {new} | {base} | ratio | SqliteSaver | {new} / SqliteSaver |")
    print("|---|---|---|---|---|---|")
    for read in READS:
        a, b, c = median[new][read], median[base][read], median["SqliteSaver"][read]
        print(
            f"| {read} | {a * 1e3:.3f} ms | {b * 1e3:.3f} ms | {a / b:.3f} "
            f"| {c * 1e3:.3f} ms | {a / c:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
