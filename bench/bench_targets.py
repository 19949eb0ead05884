"""The target table of issue 9 in one run: threadloom.Saver against SqliteSaver.

Run: `python bench/bench_targets.py` (about 3 minutes on 2 cores; `--quick` for a
smoke run of a few seconds).

Two tables, each measured in full in the same run: every saver at its own
durability settings (LangGraph's SqliteSaver at the connection's defaults, which
in WAL mode fsync every commit with synchronous=FULL; threadloom at its default,
NORMAL), then every SQLite saver at synchronous=NORMAL. PostgresSaver (its server
defaults, fsync on) is in the first table only: SQLite's setting does not touch
it. Ratios are threadloom ÷ SqliteSaver from the same table's run; each part
opens the savers on fresh stores at once and rotates measured steps among them,
so background load falls on all alike. The parts, by the scripts that own them:

- chat (`bench_chat.timed_pass`): 3 rounds of a 30-turn chat on fresh stores,
  samples pooled; put_writes as LangGraph calls it; then get_tuple of the latest
  checkpoint, list(limit=10) and the whole list called directly; the files at
  rest once the savers are closed.
- long (`bench_long.long_threads`): 3 rounds of threads seeded to 10 and 1000
  messages, 5 measured turns each (put as LangGraph calls it), then direct
  get_tuple calls.
- threads (`bench_threads.run_turns`, `bench_threads.peak_rss`): 200 threads x
  5 turns, turns per second of wall time in `invoke`; then each saver alone in a
  fresh interpreter for its peak RSS (VmHWM of the whole process).
- big (`bench_big.timed_rounds`): the turn whose tool returns 20 MiB, 5 rounds on
  fresh stores with fresh noise each; p50 of the turn's wall time.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _harness as h
import bench_big
import bench_chat
import bench_long
import bench_threads
from _workload import TOOL_RESULT_MEAN

MINE = "threadloom.Saver"
SAVERS = ("SqliteSaver", "PostgresSaver", MINE)


@dataclass(frozen=True)
class Sizes:
    """How much each part runs (the full run, or `--quick`)."""

    chat_rounds: int = 3  # fresh stores each round; samples pooled over rounds
    chat_turns: int = 30
    chat_repeat: int = 40  # direct get_tuple and list(limit=10) calls per saver and round
    chat_lists: int = 10  # whole listings per saver and round
    long_rounds: int = 3
    long_sizes: tuple[int, int] = (10, 1000)
    long_turns: int = 5
    long_repeat: int = 30
    threads: int = 200
    thread_turns: int = 5
    big_mib: float = 20
    big_rounds: int = 5


QUICK = Sizes(
    chat_rounds=1,
    chat_turns=5,
    chat_repeat=8,
    chat_lists=2,
    long_rounds=1,
    long_sizes=(10, 100),
    long_turns=2,
    long_repeat=5,
    threads=20,
    thread_turns=2,
    big_mib=2,
    big_rounds=2,
)


@dataclass
class Row:
    """One metric of a table: each saver's value and how threadloom's is judged.

    Attributes:
        judged: "ratio" compares threadloom ÷ SqliteSaver with `limit`; "own"
            compares threadloom's own value.
        higher: a larger value is better (throughput).
    """

    metric: str
    unit: str
    values: dict[str, float | None]
    limit: float
    before: str
    judged: str = "ratio"
    higher: bool = False
    samples: str = ""
    fmt: Callable[[float], str] = field(default=lambda v: f"{v:.2f}")

    def ratio(self, name: str) -> float | None:
        """`name`'s value ÷ SqliteSaver's; None for rows that are ratios already (growth)."""
        if self.unit == "x":
            return None
        mine, base = self.values.get(name), self.values.get(h.BASELINE)
        return mine / base if mine is not None and base else None

    def judged_value(self) -> float | None:
        """What the target is compared with: the ratio, or threadloom's own value."""
        return self.ratio(MINE) if self.judged == "ratio" else self.values.get(MINE)

    def target(self) -> str:
        op = ">=" if self.higher else "<="
        if self.judged == "ratio":
            return f"{op} {self.limit:g}x"
        return f"{op} {self.limit:g}{'x' if self.unit == 'x' else ' ' + self.unit}"

    def verdict(self) -> str:
        value = self.judged_value()
        if value is None:
            return "-"
        # Compare what is printed, so a verdict never contradicts its own figure.
        value = round(value, 2)
        return "met" if (value >= self.limit if self.higher else value <= self.limit) else "MISSED"

    def cell(self, name: str) -> str:
        value = self.values.get(name)
        if value is None:
            return "-"
        return self.fmt(value) + ("x" if self.unit == "x" else f" {self.unit}")


def p50_ms(samples: list[float] | None) -> float | None:
    """The median of latency samples (seconds) in milliseconds; None without samples."""
    return statistics.median(samples) * 1e3 if samples else None


def count(samples: Any) -> str:
    """Sample counts, one list per saver: "120", or "119/120" when they differ."""
    found = {len(x) for x in samples if x}
    return "/".join(str(n) for n in sorted(found)) or "-"


def quartiles(samples: list[float]) -> str:
    """p25 / p50 / p75 of latency samples (seconds), in milliseconds."""
    q = statistics.quantiles(samples, n=4) if len(samples) > 1 else samples * 3
    return " / ".join(f"{x * 1e3:.2f}" for x in q)


def pool(into: dict[str, list[float]], raw: dict[str, list[float]]) -> None:
    for key, values in raw.items():
        into.setdefault(key, []).extend(values)


# -- the parts -----------------------------------------------------------------------------


def chat_part(
    names: list[str], wd: Path, pg: h.PostgresServer, failures: h.Failures, sync: str, s: Sizes
) -> dict[str, dict[str, Any]]:
    """`bench_chat.timed_pass` per round on fresh stores; samples pooled, files at rest."""
    out: dict[str, dict[str, Any]] = {}
    for r in range(s.chat_rounds):
        tag = f"-chat{r}-{sync}"
        with h.Panel(names, wd, pg, failures, tag=tag, synchronous=sync) as panel:
            results = bench_chat.timed_pass(
                panel, s.chat_turns, TOOL_RESULT_MEAN, s.chat_repeat, s.chat_lists
            )
        for name, found in results.items():
            mine = out.setdefault(name, {"raw": {}, "at_rest": []})
            pool(mine["raw"], found["raw"])
            for key in ("messages", "checkpoints", "listed_limit"):
                mine[key] = found[key]
            # Every connection is closed now: the files as they lie at rest.
            path = panel.subjects[name].path
            mine["at_rest"].append(panel.subjects[name].at_rest_bytes())
            if path:
                left = [x for x in ("-wal", "-shm") if Path(path + x).exists()]
                mine.setdefault("left", set()).update(left)
    return out


def long_part(
    names: list[str], wd: Path, pg: h.PostgresServer, failures: h.Failures, sync: str, s: Sizes
) -> dict[int, dict[str, dict[str, Any]]]:
    """`bench_long.long_threads` per size and round on fresh stores; samples pooled."""
    out: dict[int, dict[str, dict[str, Any]]] = {n: {} for n in s.long_sizes}
    for r in range(s.long_rounds):
        for n in s.long_sizes:
            tag = f"-long{n}-{r}-{sync}"
            with h.Panel(names, wd, pg, failures, tag=tag, synchronous=sync) as panel:
                results = bench_long.long_threads(panel, n, s.long_turns, s.long_repeat)
            for name, found in results.items():
                mine = out[n].setdefault(name, {"raw": {}, "messages": set()})
                pool(mine["raw"], found["raw"])
                mine["messages"].add(found["messages"])
    return out


def threads_part(
    names: list[str], wd: Path, pg: h.PostgresServer, failures: h.Failures, sync: str, s: Sizes
) -> dict[str, dict[str, Any]]:
    with h.Panel(names, wd, pg, failures, tag=f"-threads-{sync}", synchronous=sync) as panel:
        out = bench_threads.run_turns(panel, s.threads, s.thread_turns)
    for name in names:
        h.note(f"targets: peak RSS of {name} alone in a fresh process")
        with failures.guard("peak RSS", name):
            out.setdefault(name, {})["rss"] = bench_threads.peak_rss(
                name, s.threads, s.thread_turns, sync, pg
            )
    return out


def big_part(
    names: list[str], wd: Path, pg: h.PostgresServer, failures: h.Failures, sync: str, s: Sizes
) -> dict[str, dict[str, Any]]:
    size = int(s.big_mib * h.MiB)
    return bench_big.timed_rounds(names, wd, pg, failures, size, s.big_rounds, sync)


def measure(
    names: list[str], wd: Path, pg: h.PostgresServer, failures: h.Failures, sync: str, s: Sizes
) -> tuple[list[Row], list[str]]:
    """Run every part on `names` at `sync`; return the table's rows and notes."""
    parts: dict[str, Any] = {}
    timing: list[str] = []
    for label, fn in (
        ("chat", chat_part),
        ("long", long_part),
        ("threads", threads_part),
        ("big", big_part),
    ):
        h.note(f"targets ({sync}): {label}")
        start = time.perf_counter()
        parts[label] = fn(names, wd, pg, failures, sync, s)
        timing.append(f"{label} {time.perf_counter() - start:.0f} s")
    return rows(parts, names, s), [f"parts: {', '.join(timing)}", *checks(parts, s)]


def rows(parts: dict[str, Any], names: list[str], s: Sizes) -> list[Row]:
    chat, long, threads, big = parts["chat"], parts["long"], parts["threads"], parts["big"]
    small, large = s.long_sizes

    def each(fn: Callable[[str], float | None]) -> dict[str, float | None]:
        out = {}
        for name in names:
            try:
                out[name] = fn(name)
            except (KeyError, TypeError, ZeroDivisionError):  # a saver that failed a part
                out[name] = None
        return out

    def growth(name: str) -> float | None:
        at_small = p50_ms(long[small][name]["raw"]["put"])
        at_large = p50_ms(long[large][name]["raw"]["put"])
        return at_large / at_small if at_small and at_large else None

    def chat_row(metric: str, key: str, limit: float, before: str) -> Row:
        return Row(
            metric,
            "ms",
            each(lambda n: p50_ms(chat[n]["raw"][key])),
            limit,
            before,
            samples=count(r["raw"].get(key) for r in chat.values()),
        )

    return [
        chat_row(f"chat `list(limit={bench_chat.LIST_LIMIT})` p50", "list_limit", 0.5, "4.65x"),
        chat_row("chat `list()` whole thread p50", "list", 0.8, "2.07x"),
        chat_row("chat `get_tuple` latest p50", "latest", 0.8, "1.05x"),
        Row(
            f"`get_tuple` latest at {large:,} messages p50",
            "ms",
            each(lambda n: p50_ms(long[large][n]["raw"]["get"])),
            0.8,
            "1.06x",
            samples=count(r["raw"]["get"] for r in long[large].values()),
        ),
        chat_row("chat `put_writes` p50", "put_writes", 0.7, "1.34x"),
        Row(
            f"put p50 at {large:,} / put p50 at {small} messages (own growth)",
            "x",
            each(growth),
            2.0,
            "5.9x",
            judged="own",
            samples=count(r["raw"]["put"] for r in long[large].values()),
        ),
        Row(
            f"threads: {s.threads} x {s.thread_turns} turns, turns/s",
            "turns/s",
            each(lambda n: threads[n]["turns"] / threads[n]["elapsed"]),
            1.3,
            "0.77x",
            higher=True,
            samples=str(s.threads * s.thread_turns),
            fmt=lambda v: f"{v:.1f}",
        ),
        Row(
            f"peak RSS on {s.threads} threads (whole process, each saver alone)",
            "MiB",
            each(lambda n: threads[n]["rss"]["peak"] / h.MiB),
            1.2,
            "1.84x",
            samples="1 process",
            fmt=lambda v: f"{v:.1f}",
        ),
        Row(
            f"one {s.big_mib:g} MiB tool-result turn, p50 wall time",
            "s",
            each(lambda n: statistics.median(big[n]["seconds"])),
            1.0,
            "1.23x",
            samples=count(r["seconds"] for r in big.values()),
        ),
        Row(
            "chat on disk at rest (file + -wal + -shm after close)",
            "MiB",
            each(lambda n: statistics.median(chat[n]["at_rest"]) / h.MiB),
            0.20,
            "0.23 MiB",
            judged="own",
            samples=count(r["at_rest"] for r in chat.values() if None not in r["at_rest"]),
        ),
    ]


def checks(parts: dict[str, Any], s: Sizes) -> list[str]:
    """Lines that say what was measured on: thread sizes, RSS split, read-back checks."""
    chat, long, threads, big = parts["chat"], parts["long"], parts["threads"], parts["big"]
    out = []
    if chat:
        r = next(iter(chat.values()))
        out.append(
            f"chat ({s.chat_rounds} round(s) on fresh stores, samples pooled): "
            f"{r['messages']} messages, {r['checkpoints']} checkpoints; list(limit="
            f"{bench_chat.LIST_LIMIT}) returned "
            + ", ".join(f"{n} {c['listed_limit']}" for n, c in chat.items())
            + "; at rest per round: "
            + "; ".join(
                f"{n} " + " ".join(h.mib(x) for x in c["at_rest"] if x is not None)
                for n, c in chat.items()
                if any(x is not None for x in c["at_rest"])
            )
            + "; left beside the file after close: "
            + "; ".join(
                f"{n} {', '.join(sorted(c['left'])) or 'nothing'}"
                for n, c in chat.items()
                if "left" in c
            )
        )
    out.append(
        f"long threads ({s.long_rounds} round(s), {s.long_turns} measured turns each; "
        "messages over the measured turns): "
        + "; ".join(
            f"{n}: {', '.join(sorted(set().union(*(r['messages'] for r in found.values()))))}"
            for n, found in long.items()
        )
    )
    spreads = [
        ("chat list(limit)", {n: r["raw"].get("list_limit") for n, r in chat.items()}),
        ("chat list()", {n: r["raw"].get("list") for n, r in chat.items()}),
        ("chat latest", {n: r["raw"].get("latest") for n, r in chat.items()}),
        ("chat put_writes", {n: r["raw"].get("put_writes") for n, r in chat.items()}),
        *[
            (f"{op} at {size}", {n: r["raw"].get(op) for n, r in long[size].items()})
            for size in s.long_sizes
            for op in ("put", "get")
        ],
    ]
    out.append("latency p25 / p50 / p75 (ms), pooled samples:")
    out.extend(
        f"  - {label}: " + "; ".join(f"{n} {quartiles(x)}" for n, x in by_saver.items() if x)
        for label, by_saver in spreads
    )
    rss = [
        f"{name} {h.mib(r['rss']['base'])} + {h.mib(r['rss']['peak'] - r['rss']['base'])}"
        for name, r in threads.items()
        if "rss" in r
    ]
    if rss:
        out.append(
            "peak RSS = base (after imports, opening, one warm-up turn) + growth: " + "; ".join(rss)
        )
        alone = {
            name: r["rss"]["turns"] / r["rss"]["elapsed"]
            for name, r in threads.items()
            if "rss" in r
        }
        base = alone.get(h.BASELINE)
        out.append(
            "turns/s of the same threads, each saver alone in its fresh process (one after "
            "another, not interleaved; no other saver's heap for the GC to walk): "
            + "; ".join(
                f"{name} {rate:.1f} ({h.ratio(rate, base)})" for name, rate in alone.items()
            )
        )
    out.append(
        "big turn read back intact: "
        + ", ".join(f"{n} {'yes' if r['intact'] else 'NO'}" for n, r in big.items())
        + "; seconds per round: "
        + "; ".join(f"{n} " + " ".join(f"{x:.2f}" for x in r["seconds"]) for n, r in big.items())
    )
    return out


# -- output --------------------------------------------------------------------------------


def render(rows: list[Row], names: list[str]) -> str:
    others = [n for n in names if n not in (h.BASELINE, MINE)]
    headers = [
        "metric",
        h.BASELINE,
        *others,
        MINE,
        f"{MINE} ÷ {h.BASELINE}",
        *[f"{n} ÷ {h.BASELINE}" for n in others],
        "issue 9 before",
        "target",
        "verdict",
        "n",
    ]
    body = []
    for row in rows:
        ratios = [row.ratio(n) for n in (MINE, *others)]
        body.append(
            [
                row.metric,
                row.cell(h.BASELINE),
                *[row.cell(n) for n in others],
                row.cell(MINE),
                *[f"{x:.2f}x" if x is not None else "-" for x in ratios],
                row.before,
                row.target() + ("" if row.judged == "ratio" else f" ({MINE})"),
                row.verdict(),
                row.samples,
            ]
        )
    return h.table(headers, body)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a short smoke run")
    p.add_argument("--no-postgres", action="store_true", help="skip PostgresSaver")
    p.add_argument("--keep", action="store_true", help="keep the temporary files (path on stderr)")
    p.add_argument(
        "--tables",
        choices=["both", "default", "NORMAL"],
        default="both",
        help="which table(s): each saver's own settings, every SQLite saver at NORMAL, or both",
    )
    args = p.parse_args()
    sizes = QUICK if args.quick else Sizes()
    names = [n for n in SAVERS if not (args.no_postgres and n == "PostgresSaver")]
    failures = h.Failures()
    started = time.perf_counter()
    print("# bench_targets: the targets of issue 9\n")
    print(f"command: `{shlex.join(['python', 'bench/bench_targets.py', *sys.argv[1:]])}`\n")
    print(h.describe_machine() + "\n")
    print(
        f"ratios: threadloom.Saver ÷ SqliteSaver measured in the same table's run; "
        f"n: samples behind each p50 (per saver). Mean tool result {TOOL_RESULT_MEAN} B.\n"
    )
    tables = [
        (
            "default",
            "Each saver's own settings",
            "SqliteSaver: the connection's defaults (WAL, synchronous=FULL: an fsync per "
            "commit); threadloom: synchronous=NORMAL (its default); PostgresSaver: server "
            "defaults (fsync on); LangGraph durability 'async'",
        ),
        (
            "NORMAL",
            "Every SQLite saver at synchronous=NORMAL",
            "SqliteSaver: `PRAGMA synchronous=NORMAL` on its connection; threadloom: "
            '`Saver(path, synchronous="NORMAL")`; PostgresSaver not re-run (SQLite\'s '
            "setting does not touch it); LangGraph durability 'async'",
        ),
    ]
    with h.workdir(args.keep) as wd, h.postgres_if(names) as pg:
        for sync, title, setting in tables:
            if args.tables not in ("both", sync):
                continue
            run = names if sync == "default" else [n for n in names if n != "PostgresSaver"]
            start = time.perf_counter()
            found, notes = measure(run, wd, pg, failures, sync, sizes)
            print(f"## {title}\n")
            print(setting + "\n")
            print(render(found, run) + "\n")
            for line in notes:
                print(line if line.startswith("  ") else f"- {line}")
            print(f"- table run time: {time.perf_counter() - start:.0f} s\n")
    print(f"total run time: {time.perf_counter() - started:.0f} s")
    return failures.report()


if __name__ == "__main__":
    raise SystemExit(main())
