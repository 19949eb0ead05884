"""Long threads: put and read latency at 10, 100 and 1000 messages, and list of a
thread with ~134 checkpoints, on every saver.

Run: `python bench/bench_long.py` (`--quick` for a smoke run; `--profile` adds a
cProfile of threadloom.Saver's put and get_tuple at 1000 messages).

A thread is brought to N messages by one turn whose input is a prefilled history
(what N/4 agent turns produce), then a few ordinary turns are measured: put as
LangGraph calls it (wrapped), and get_tuple of the latest checkpoint called directly;
then the other reads of the same thread (`READS`: a named get_tuple, get_state,
list(limit=10), the whole list, get_state_history), interleaved read by read.
The list thread is grown by ordinary turns (5 checkpoints each). All savers are
open at once and measured steps rotate among them, so background load hits them alike.
"""

from __future__ import annotations

import cProfile
import time
from typing import Any

import _harness as h
from _workload import build_graph, config_of, seed_input, turn_input

SIZES = (10, 100, 1000)
LIST_TURNS = 27  # 27 turns x 5 checkpoints = 135 checkpoints


class LongRun:
    """One saver's thread brought to about N messages, then stepped a turn at a time."""

    def __init__(
        self,
        subject: h.Subject,
        messages: int,
        profiles: dict[str, cProfile.Profile] | None = None,
    ) -> None:
        self.subject = subject
        self.config = config_of(f"long-{messages}")
        self.graph = build_graph(subject.saver)
        seed, self.next_turn = seed_input(f"long-{messages}", messages)
        subject.invoke(self.graph, seed, self.config)
        self.seeded = self.messages()
        self.timings = subject.instrument(profiles)

    def messages(self) -> int:
        return len(self.subject.get_tuple(self.config).checkpoint["channel_values"]["messages"])

    def turn(self) -> None:
        thread = self.config["configurable"]["thread_id"]
        self.subject.invoke(self.graph, turn_input(thread, self.next_turn), self.config)
        self.next_turn += 1

    def end_turns(self) -> None:
        self.put = self.timings.stats("put")
        self.put_raw = list(self.timings.samples.get("put", ()))
        self.timings.samples.pop("get_tuple", None)

    def result(self) -> dict[str, Any]:
        """put and get_tuple stats; `raw` holds their samples (seconds)."""
        get = self.timings.stats("get_tuple")
        raw = {"put": self.put_raw, "get": list(self.timings.samples.get("get_tuple", ()))}
        return {
            "put": self.put,
            "get": get,
            "raw": raw,
            "messages": f"{self.seeded}-{self.messages()}",
        }


def long_threads(panel: h.Panel, messages: int, turns: int, repeat: int) -> dict[str, Any]:
    """Seed every saver's thread, then interleave the measured turns and reads."""
    runs: dict[str, LongRun] = {}
    for name, subject in panel.each(0):
        with panel.guard(f"seed {messages} messages", name):
            runs[name] = LongRun(subject, messages)
    for step in range(turns):
        for name, _ in panel.each(step):
            with panel.guard(f"turn at {messages} messages", name):
                runs[name].turn()
    for run in runs.values():
        run.end_turns()
    for step in range(repeat):
        for name, subject in panel.each(step):
            with panel.guard(f"get_tuple at {messages} messages", name):
                subject.get_tuple(runs[name].config)
    out = {}
    for name, _ in panel.each(0):
        with panel.guard(f"get_tuple at {messages} messages", name):
            out[name] = runs[name].result()
    for name, found in read_pass(panel, runs, messages, repeat).items():
        if name in out:
            out[name]["reads"] = found
    return out


#: The other reads of a long thread, each timed around the whole call (a listing or a
#: history drained): a named checkpoint (the thread's middle one), LangGraph's
#: get_state, the 10 newest, the whole thread, and get_state_history.
READS = ("get_tuple named", "get_state", "list(limit=10)", "list", "history")


def _read(run: LongRun, what: str, named: dict[str, Any]) -> None:
    subject, graph, config = run.subject, run.graph, run.config
    if what == "get_tuple named":
        subject.get_tuple(named)
    elif what == "list(limit=10)":
        subject.list(config, limit=10)
    elif what == "list":
        subject.list(config)
    elif not subject.is_async:
        if what == "get_state":
            graph.get_state(config)
        else:
            list(graph.get_state_history(config))
    elif what == "get_state":
        subject.run(graph.aget_state(config))
    else:

        async def drain() -> list[Any]:
            return [state async for state in graph.aget_state_history(config)]

        subject.run(drain())


def read_pass(
    panel: h.Panel, runs: dict[str, LongRun], messages: int, repeat: int
) -> dict[str, dict[str, tuple[float, float, int] | None]]:
    """Time `READS` on every saver's thread, interleaved read by read (p50, p95, count)."""
    named: dict[str, dict[str, Any]] = {}
    for name, subject in panel.each(0):
        with panel.guard(f"reads at {messages} messages", name):
            listed = subject.list(runs[name].config)
            named[name] = listed[len(listed) // 2].config
    samples: dict[str, h.Timings] = {name: h.Timings() for name in runs}
    for what in READS:
        count = repeat if what in ("get_tuple named", "get_state", "list(limit=10)") else 5
        for step in range(count):
            for name, _ in panel.each(step):
                if name not in named:
                    continue
                with panel.guard(f"{what} at {messages} messages", name):
                    start = time.perf_counter()
                    _read(runs[name], what, named[name])
                    samples[name].add(what, time.perf_counter() - start)
    return {name: {what: t.stats(what) for what in READS} for name, t in samples.items()}


def list_threads(panel: h.Panel, turns: int, repeat: int) -> dict[str, Any]:
    """Grow one thread per saver by ordinary turns, then interleave full listings."""
    config = config_of("list")
    for name, subject in panel.each(0):
        with panel.guard("list thread", name):
            graph = build_graph(subject.saver)
            for turn in range(1, turns + 1):
                subject.invoke(graph, turn_input("list", turn), config)
            subject.instrument()
    counts: dict[str, int] = {}
    for step in range(repeat):
        for name, subject in panel.each(step):
            with panel.guard("list", name):
                counts[name] = len(subject.list(config))
    return {
        name: {"list": subject.timings.stats("list"), "checkpoints": counts.get(name, 0)}
        for name, subject in panel.each(0)
    }


def profile_put_get(subject: h.Subject, messages: int, turns: int, repeat: int) -> dict[str, Any]:
    """Profile threadloom.Saver's put and get_tuple on a thread of about `messages`."""
    profiles = {"put": cProfile.Profile(), "get_tuple": cProfile.Profile()}
    run = LongRun(subject, messages, profiles)
    for _ in range(turns):
        run.turn()
    for _ in range(repeat):
        subject.get_tuple(run.config)
    return profiles


def main() -> int:
    p = h.parser(__doc__.splitlines()[0])
    p.add_argument(
        "--profile",
        action="store_true",
        help="also profile threadloom.Saver put/get_tuple at the largest size",
    )
    args = p.parse_args()
    sizes = SIZES[:2] if args.quick else SIZES
    turns, repeat = (2, 5) if args.quick else (5, 30)
    list_turns, list_repeat = (6, 3) if args.quick else (LIST_TURNS, 10)
    names = h.selected(args)
    failures = h.Failures()
    print("# bench_long: latency on long threads\n")
    print(h.describe_machine())
    print(h.settings(args) + "\n")
    long: dict[int, dict[str, dict[str, Any]]] = {}
    lists: dict[str, dict[str, Any]] = {}
    profiles: dict[str, cProfile.Profile] = {}
    sync = args.synchronous
    with h.workdir(args.keep) as wd, h.postgres_if(names) as pg:
        for n in sizes:
            h.note(f"long: {n} messages (all savers interleaved)")
            with h.Panel(names, wd, pg, failures, tag=f"-{n}", synchronous=sync) as panel:
                long[n] = long_threads(panel, n, turns, repeat)
        h.note(f"long: list of {list_turns * 5} checkpoints (all savers interleaved)")
        with h.Panel(names, wd, pg, failures, tag="-list", synchronous=sync) as panel:
            lists = list_threads(panel, list_turns, list_repeat)
        if args.profile:
            h.note(f"long: profiling threadloom.Saver at {sizes[-1]} messages")
            with (
                failures.guard("profile", "threadloom.Saver"),
                h.open_subject("threadloom.Saver", wd, None, tag="-profile", synchronous=sync) as s,
            ):
                profiles = profile_put_get(s, sizes[-1], turns, repeat)
    report(long, lists, turns, repeat)
    for method, profile in profiles.items():
        print(h.profile_report(profile, f"threadloom.Saver.{method} at {sizes[-1]} messages"))
    return failures.report()


def report(
    long: dict[int, dict[str, dict[str, Any]]],
    lists: dict[str, dict[str, Any]],
    turns: int,
    repeat: int,
) -> None:
    print(
        f"## put and get_tuple of the latest checkpoint (ms; put: {turns} turns x 5 puts "
        f"as LangGraph calls it; get_tuple: {repeat} direct calls)\n"
    )
    rows = []
    for n, results in long.items():
        base = results.get(h.BASELINE)
        for name, r in results.items():
            rows.append(
                [
                    n,
                    r["messages"],
                    name,
                    *h.ms(r["put"]),
                    h.ratio(r["put"] and r["put"][0], base and base["put"] and base["put"][0]),
                    *h.ms(r["get"]),
                    h.ratio(r["get"] and r["get"][0], base and base["get"] and base["get"][0]),
                ]
            )
    print(
        h.table(
            [
                "size",
                "messages",
                "saver",
                "put p50",
                "put p95",
                "put vs Sqlite",
                "get p50",
                "get p95",
                "get vs Sqlite",
            ],
            rows,
        )
        + "\n"
    )

    rows = []
    for n, results in long.items():
        base = results.get(h.BASELINE, {}).get("reads") or {}
        for name, r in results.items():
            found = r.get("reads") or {}
            cells: list[Any] = [n, name]
            for what in READS:
                mine, theirs = found.get(what), base.get(what)
                cells += [h.ms(mine)[0], h.ratio(mine and mine[0], theirs and theirs[0])]
            rows.append(cells)
    if rows:
        print(
            f"## the other reads of the same threads (ms p50 and ratio to SqliteSaver; "
            f"{repeat} calls each, 5 whole listings and histories)\n"
        )
        headers = ["size", "saver"]
        for what in READS:
            headers += [what, "vs Sqlite"]
        print(h.table(headers, rows) + "\n")

    if lists:
        count = next(iter(lists.values()))["checkpoints"]
        print(f"## list of a thread with {count} checkpoints (ms, whole listing)\n")
        base = lists.get(h.BASELINE)
        rows = [
            [
                name,
                r["checkpoints"],
                *h.ms(r["list"]),
                h.ratio(r["list"] and r["list"][0], base and base["list"] and base["list"][0]),
            ]
            for name, r in lists.items()
        ]
        print(h.table(["saver", "checkpoints", "list p50", "list p95", "vs Sqlite"], rows) + "\n")

    rows = []
    for name in ("threadloom.Saver", "threadloom.AsyncSaver"):
        for n in (100, 1000):
            mine, base = long.get(n, {}).get(name), long.get(n, {}).get(h.BASELINE)
            if mine and base and mine["get"] and base["get"]:
                x = mine["get"][0] / base["get"][0]
                rows.append(
                    [
                        name,
                        f"get_tuple(latest) at {n} messages <= 1.2x SqliteSaver",
                        f"{x:.2f}x",
                        "met" if x <= 1.2 else "MISSED",
                    ]
                )
        mine, base = long.get(1000, {}).get(name), long.get(1000, {}).get(h.BASELINE)
        if mine and base and mine["put"] and base["put"]:
            x = mine["put"][0] / base["put"][0]
            rows.append(
                [
                    name,
                    "put at 1000 messages <= SqliteSaver",
                    f"{x:.2f}x",
                    "met" if x <= 1.0 else "MISSED",
                ]
            )
        listed, base = lists.get(name), lists.get(h.BASELINE)
        if listed and base and listed["list"] and base["list"]:
            x = listed["list"][0] / base["list"][0]
            rows.append(
                [
                    name,
                    f"list of {listed['checkpoints']} checkpoints <= SqliteSaver",
                    f"{x:.2f}x",
                    "met" if x <= 1.0 else "MISSED",
                ]
            )
    if rows:
        print("## Targets\n")
        print(h.table(["saver", "target", "measured", "verdict"], rows) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
