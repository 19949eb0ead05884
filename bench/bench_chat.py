"""The seed workload: a 30-turn chat through a ReAct-style agent, on every saver.

Run: `python bench/bench_chat.py` (or `--quick` for a 5-turn smoke run).

Three passes on fresh stores. The timed pass runs all savers at once, a turn
each in rotating order (so background load hits them alike): latency of put,
put_writes and get_tuple as LangGraph calls them, logical bytes per turn, then
get_tuple of the latest checkpoint, list of the whole thread and list(limit=10)
(the call behind `get_state_history(limit=10)`) called directly; once the savers
are closed, the timed pass's files at rest (file, -wal and -shm as they lie).
Then, one saver at a time, a tracemalloc pass (peak Python memory) and a pass
that reads the bytes on disk after every turn (its WAL checkpoints would disturb
the timed pass).
"""

from __future__ import annotations

import time
import tracemalloc
from typing import Any

import _harness as h
from _workload import build_graph, config_of, tool_results, turn_input

THREAD = "chat"
#: The page size of the short listing (`get_state_history(limit=10)` lists this many).
LIST_LIMIT = 10


class ChatRun:
    """The timed pass of one saver: a turn at a time, so savers can interleave."""

    def __init__(self, subject: h.Subject, tool_mean: int) -> None:
        self.subject = subject
        self.graph = build_graph(subject.saver, tool_results(tool_mean))
        self.timings = subject.instrument()
        self.config = config_of(THREAD)
        self.logical: list[int] = []
        self.before = subject.logical_bytes()
        self.elapsed = 0.0
        self.in_graph: dict[str, tuple[float, float, int] | None] = {}

    def turn(self, turn: int) -> None:
        start = time.perf_counter()
        self.subject.invoke(self.graph, turn_input(THREAD, turn), self.config)
        self.elapsed += time.perf_counter() - start
        now = self.subject.logical_bytes()
        self.logical.append(now - self.before)
        self.before = now

    def end_turns(self) -> None:
        """Keep the latencies LangGraph caused; the direct calls come next."""
        self.in_graph = {k: self.timings.stats(k) for k in ("put", "put_writes", "get_tuple")}
        self.raw = {k: list(self.timings.samples.get(k, ())) for k in self.in_graph}
        self.timings.clear()

    def result(self) -> dict[str, Any]:
        """Figures of the run; `raw` holds every latency sample (seconds) by name:
        put, put_writes, get_tuple (in the graph), latest, list, list_limit (direct)."""
        direct = {
            "latest": "get_tuple",
            "list": "list",
            "list_limit": h.list_key(LIST_LIMIT),
        }
        out = {k: self.timings.stats(name) for k, name in direct.items()}
        raw = {**self.raw, **{k: list(self.timings.samples.get(n, ())) for k, n in direct.items()}}
        latest = self.subject.get_tuple(self.config)
        return {
            **out,
            "logical": self.logical,
            "elapsed": self.elapsed,
            "turns": len(self.logical),
            "latency": self.in_graph,
            "raw": raw,
            "checkpoints": len(self.subject.list(self.config)),
            "listed_limit": len(self.subject.list(self.config, limit=LIST_LIMIT)),
            "messages": len(latest.checkpoint["channel_values"]["messages"]),
        }


def timed_pass(
    panel: h.Panel, turns: int, tool_mean: int, repeat: int, lists: int | None = None
) -> dict[str, Any]:
    """Run every saver of `panel` turn by turn, interleaved; then the direct reads.

    Args:
        repeat: direct get_tuple calls and list(limit=10) calls per saver.
        lists: whole listings per saver (default: repeat / 8, at least 2).
    """
    runs: dict[str, ChatRun] = {}
    for name, subject in panel.each(0):
        with panel.guard("chat timed pass", name):
            runs[name] = ChatRun(subject, tool_mean)
    for turn in range(1, turns + 1):
        for name, _ in panel.each(turn):
            with panel.guard("chat timed pass", name):
                runs[name].turn(turn)
    for run in runs.values():
        run.end_turns()
    config = config_of(THREAD)
    for step in range(repeat):
        for name, subject in panel.each(step):
            with panel.guard("chat get_tuple", name):
                subject.get_tuple(config)
    for step in range(repeat):
        for name, subject in panel.each(step):
            with panel.guard("chat list(limit)", name):
                subject.list(config, limit=LIST_LIMIT)
    for step in range(lists if lists is not None else max(2, repeat // 8)):
        for name, subject in panel.each(step):
            with panel.guard("chat list", name):
                subject.list(config)
    out = {}
    for name, _ in panel.each(0):
        with panel.guard("chat timed pass", name):
            out[name] = runs[name].result()
    return out


def memory_pass(subject: h.Subject, turns: int, tool_mean: int) -> dict[str, Any]:
    graph = build_graph(subject.saver, tool_results(tool_mean))
    config = config_of(THREAD)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        for turn in range(1, turns + 1):
            subject.invoke(graph, turn_input(THREAD, turn), config)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return {"peak": peak}


def disk_per_turn(subject: h.Subject, turns: int, tool_mean: int) -> list[int | None]:
    graph = build_graph(subject.saver, tool_results(tool_mean))
    config = config_of(THREAD)
    out: list[int | None] = []
    for turn in range(1, turns + 1):
        subject.invoke(graph, turn_input(THREAD, turn), config)
        out.append(subject.disk_bytes())
    return out


def main() -> int:
    p = h.parser(__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, default=None, help="turns (default 30, quick 5)")
    p.add_argument("--tool-kb", type=float, default=1.0, help="mean tool result size in KB")
    args = p.parse_args()
    turns = args.turns or (5 if args.quick else 30)
    repeat = 8 if args.quick else 40
    tool_mean = int(args.tool_kb * 1000)
    names = h.selected(args)
    failures = h.Failures()
    print(
        f"# bench_chat: {turns}-turn ReAct chat, 4 KB system prompt, "
        f"tool results ~{tool_mean} B (0.6-1.4x)\n"
    )
    print(h.describe_machine())
    print(h.settings(args) + "\n")
    results: dict[str, dict[str, Any]] = {}
    with h.workdir(args.keep) as wd, h.postgres_if(names) as pg:
        h.note("chat: timed pass (all savers interleaved)")
        with h.Panel(names, wd, pg, failures, synchronous=args.synchronous) as panel:
            results = timed_pass(panel, turns, tool_mean, repeat)
        for name, subject in panel.subjects.items():  # closed now: the files at rest
            if name in results:
                results[name]["at_rest"] = subject.at_rest_bytes()
        for name in results:
            h.note(f"chat: memory and disk passes, {name}")
            with (
                failures.guard("chat memory pass", name),
                h.open_subject(name, wd, pg, tag="-mem", synchronous=args.synchronous) as s,
            ):
                results[name].update(memory_pass(s, turns, tool_mean))
            with (
                failures.guard("chat disk pass", name),
                h.open_subject(name, wd, pg, tag="-disk", synchronous=args.synchronous) as s,
            ):
                results[name]["disk_turns"] = disk_per_turn(s, turns, tool_mean)
                results[name]["disk"] = results[name]["disk_turns"][-1]
    report(results, turns)
    return failures.report()


def report(results: dict[str, dict[str, Any]], turns: int) -> None:
    if not results:
        return
    any_result = next(iter(results.values()))
    print(
        f"thread after the run: {any_result['messages']} messages, "
        f"{any_result['checkpoints']} checkpoints\n"
    )

    print("## Bytes per turn (logical: what the saver serialized and stores; KiB)\n")
    rows = []
    for turn in range(turns):
        rows.append([turn + 1, *[f"{r['logical'][turn] / 1024:.1f}" for r in results.values()]])
    print(h.table(["turn", *results], rows) + "\n")

    print(
        "## Bytes on disk after each turn (file + -wal after wal_checkpoint(TRUNCATE); "
        "Postgres: tables+indexes+TOAST)\n"
    )
    disk_names = [n for n, r in results.items() if r.get("disk_turns") and r["disk_turns"][0]]
    rows = [
        [t + 1, *[h.kib(results[n]["disk_turns"][t]) for n in disk_names]]
        for t in range(turns)
        if t in (0, 1, 4, 9, 19, turns - 1)
    ]
    print(h.table(["turn", *disk_names], rows) + "\n")

    base = results.get(h.BASELINE)
    print("## Summary\n")
    rows = []
    for name, r in results.items():
        first, last = r["logical"][0], r["logical"][-1]
        rows.append(
            [
                name,
                h.kib(first),
                h.kib(last),
                f"{last / first:.2f}",
                h.mib(sum(r["logical"])),
                h.mib(r.get("disk")),
                h.ratio(r.get("disk"), base.get("disk") if base else None),
                h.mib(r.get("at_rest")),
                f"{r['turns'] / r['elapsed']:.1f}",
                h.ratio(
                    r["turns"] / r["elapsed"], base["turns"] / base["elapsed"] if base else None
                ),
                h.mib(r.get("peak")),
            ]
        )
    print(
        h.table(
            [
                "saver",
                "turn 1",
                f"turn {turns}",
                f"{turns}/1",
                "logical total",
                "on disk",
                "disk vs Sqlite",
                "at rest (closed)",
                "turns/s",
                "vs Sqlite",
                "peak mem (tracemalloc)",
            ],
            rows,
        )
        + "\n"
    )

    print(
        "## Latency (ms; put/put_writes/get_tuple as called by LangGraph during the turns; "
        "'latest' and list called directly after the run)\n"
    )
    rows = []
    for name, r in results.items():
        lat = r["latency"]
        put, base_put = lat["put"], base["latency"]["put"] if base else None
        rows.append(
            [
                name,
                *h.ms(put),
                h.ratio(put and put[0], base_put and base_put[0]),
                *h.ms(lat["put_writes"]),
                *h.ms(lat["get_tuple"]),
                *h.ms(r["latest"]),
                h.ratio(
                    r["latest"] and r["latest"][0], base and base["latest"] and base["latest"][0]
                ),
                *h.ms(r["list"]),
                h.ratio(r["list"] and r["list"][0], base and base["list"] and base["list"][0]),
                *h.ms(r["list_limit"]),
                h.ratio(
                    r["list_limit"] and r["list_limit"][0],
                    base and base["list_limit"] and base["list_limit"][0],
                ),
            ]
        )
    print(
        h.table(
            [
                "saver",
                "put p50",
                "put p95",
                "put vs Sqlite",
                "writes p50",
                "writes p95",
                "get p50",
                "get p95",
                "latest p50",
                "latest p95",
                "latest vs Sqlite",
                f"list({any_result['checkpoints']}) p50",
                "list p95",
                "list vs Sqlite",
                f"list({LIST_LIMIT}) p50",
                f"list({LIST_LIMIT}) p95",
                f"list({LIST_LIMIT}) vs Sqlite",
            ],
            rows,
        )
        + "\n"
    )

    targets(results, turns)


def targets(results: dict[str, dict[str, Any]], turns: int) -> None:
    base = results.get(h.BASELINE)
    rows = []
    for name in ("threadloom.Saver", "threadloom.AsyncSaver"):
        r = results.get(name)
        if r is None:
            continue
        flat = r["logical"][-1] / r["logical"][0]
        rows.append(
            [
                name,
                f"bytes/turn flat: turn {turns} <= 1.2x turn 1",
                f"{flat:.2f}x",
                "met" if flat <= 1.2 else "MISSED",
            ]
        )
        disk = r.get("disk")
        if disk is not None:
            for limit in (0.6, 0.2):  # the engine's target, then the content store's
                rows.append(
                    [
                        name,
                        f"on disk <= {limit} MiB",
                        h.mib(disk),
                        "met" if disk <= limit * h.MiB else "MISSED",
                    ]
                )
        if base and r["latency"]["put"] and base["latency"]["put"]:
            mine, theirs = r["latency"]["put"][0], base["latency"]["put"][0]
            for share, label in ((1.0, "SqliteSaver's"), (0.5, "0.5x SqliteSaver's")):
                rows.append(
                    [
                        name,
                        f"put p50 <= {label}",
                        f"{mine:.2f} vs {theirs:.2f} ms ({mine / theirs:.2f}x)",
                        "met" if mine <= share * theirs else "MISSED",
                    ]
                )
    if rows:
        print("## Targets\n")
        print(h.table(["saver", "target", "measured", "verdict"], rows) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
