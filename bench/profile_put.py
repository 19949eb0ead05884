"""Put path profile: threadloom.Saver.put as LangGraph calls it (bench/_workload.py chat
agent, bench_long's seeding), at 10, 100 and 1,000 messages; cProfile around each put.

Run from the repository root:
    .venv/bin/python bench/profile_put.py [--turns 8] [--top 8]
Prints a Markdown table per size: put p50 (unprofiled pass), profiled put CPU, and the
functions with the largest share of it (cumulative, own time in brackets).
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import pstats
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _workload import build_graph, config_of, seed_input, turn_input  # noqa: E402

import threadloom  # noqa: E402
import threadloom.core  # noqa: E402

WATCH = {
    "plan_checkpoint": "protocol: Planner.plan_checkpoint",
    "_extend": "protocol: Planner._extend (grown list)",
    "jsonplus.py:dumps_typed": "LangGraph JsonPlusSerializer.dumps_typed",
    "jsonplus.py:_msgpack_default": "LangGraph _msgpack_default (one per message)",
    "pydantic/main.py:model_dump": "pydantic model_dump",
    "holds": "protocol: Fingerprint.holds",
    "views": "protocol: fingerprint views",
    "_may_hold_secret": "protocol: redaction scan",
    "wanted": "protocol: _Buckets.wanted (per ref)",
    "wanted_many": "protocol: _Buckets.wanted_many",
    "known_refs": "protocol: CheckpointPlan.known_refs",
    "pack_many": "engine: content.pack_many",
    "file.py:write": "engine: write transaction (BEGIN..COMMIT)",
    "list_refs": "core: list_refs",
}


def run(n: int, turns: int, tmp: str, profile: bool) -> tuple[list[float], cProfile.Profile | None]:
    saver = threadloom.Saver(str(Path(tmp) / f"{n}-{uuid.uuid4().hex[:6]}.db"))
    graph = build_graph(saver)
    thread = f"long-{n}"
    cfg = config_of(thread)
    seed, nxt = seed_input(thread, n)
    graph.invoke(seed, cfg)
    prof = cProfile.Profile() if profile else None
    samples: list[float] = []
    fn = saver.put

    @functools.wraps(fn)
    def put(*a, **k):
        if prof:
            prof.enable()
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            samples.append(time.perf_counter() - t)
            if prof:
                prof.disable()

    saver.put = put
    for _ in range(turns):
        graph.invoke(turn_input(thread, nxt), cfg)
        nxt += 1
    return samples, prof


def key(entry: tuple[str, int, str]) -> str:
    path, _, name = entry
    return f"{Path(path).name}:{name}"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--turns", type=int, default=8)
    p.add_argument("--top", type=int, default=8)
    a = p.parse_args()
    where = Path(threadloom.__file__).parent
    print(f"backend `{threadloom.core.backend()}`, threadloom from `{where}`\n")
    with tempfile.TemporaryDirectory() as tmp:
        for n in (10, 100, 1000):
            plain = statistics.median(run(n, a.turns, tmp, False)[0]) * 1e3
            samples, prof = run(n, a.turns, tmp, True)
            st = pstats.Stats(prof)
            total = sum(v[2] for v in st.stats.values())  # own time of everything = put CPU
            count = len(samples)
            print(
                f"#### {n} messages: put p50 {plain:.2f} ms (unprofiled); profiled put "
                f"{total / count * 1e3:.2f} ms CPU per put over {count} puts\n"
            )
            print("| function | share of put (cumulative) | own time share |")
            print("|---|---|---|")
            rows = {}
            for entry, (_cc, _nc, tt, ct, _callers) in st.stats.items():
                k = key(entry)
                for pattern, label in WATCH.items():
                    if k.endswith(pattern) or k == pattern:
                        r = rows.setdefault(label, [0.0, 0.0])
                        r[0] += ct
                        r[1] += tt
            for label, (ct, tt) in sorted(rows.items(), key=lambda kv: -kv[1][0]):
                print(f"| {label} | {100 * ct / total:.0f}% | {100 * tt / total:.0f}% |")
            own = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[: a.top]
            print(
                "\nTop own time: "
                + "; ".join(f"`{key(e)}` {100 * v[2] / total:.0f}%" for e, v in own)
                + "\n"
            )


if __name__ == "__main__":
    main()
