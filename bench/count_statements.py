"""Short threads: the SQL statements threadloom runs per turn, counted and timed.

Run from the repository root:
    .venv/bin/python bench/count_statements.py [--threads 40] [--turns 5] [--top 20]

The saver calls of bench_threads' workload (recorded as `profile_threads.py` does) are
replayed on a fresh threadloom.Saver: the first 10 threads warm it up, then every
connection's statements are counted through apsw's `exec_trace` and timed by SQLite's
profile hook (millisecond clock: the per-statement times are averages of many).
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import apsw

sys.path.insert(0, str(Path(__file__).resolve().parent))
from profile_threads import record  # noqa: E402

import threadloom  # noqa: E402

WARM = 10


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=40)
    p.add_argument("--turns", type=int, default=5)
    p.add_argument("--top", type=int, default=20)
    a = p.parse_args()
    recorded = list(record(a.threads + WARM, a.turns).values())
    count: Counter[str] = Counter()
    nanos: Counter[str] = Counter()
    on = [False]

    def trace(_cursor: Any, sql: str, _bindings: Any) -> bool:
        if on[0]:
            count[sql.strip()[:100]] += 1
        return True

    def profile(sql: str, ns: int) -> None:
        if on[0]:
            nanos[sql.strip()[:100]] += ns

    def hook(conn: apsw.Connection) -> None:
        conn.exec_trace = trace
        conn.set_profile(profile)

    apsw.connection_hooks.append(hook)
    with tempfile.TemporaryDirectory() as tmp:
        saver = threadloom.Saver(str(Path(tmp) / "threadloom.db"))
        for i, calls in enumerate(recorded):
            on[0] = i >= WARM
            for method, args in copy.deepcopy(calls):
                getattr(saver, method)(*args)
        on[0] = False
        saver.close()
    turns = a.threads * a.turns
    print(
        f"threadloom from `{Path(threadloom.__file__).parent}`, {a.threads} threads x "
        f"{a.turns} turns after {WARM}: {sum(count.values()) / turns:.1f} statements per "
        f"turn, {sum(nanos.values()) / turns / 1e3:.0f} us in SQLite per turn\n"
    )
    print("| per turn | us each | statement |")
    print("|---|---|---|")
    for sql, n in count.most_common(a.top):
        print(f"| {n / turns:.2f} | {nanos[sql] / n / 1e3:.1f} | `{sql}` |")


if __name__ == "__main__":
    main()
