"""An agent's working file: a 2 MiB text channel edited a little at every step, on every saver.

Run: `python bench/bench_store.py` (`--quick`: 5 steps; `--noise`: base64 noise instead of
prose, so compression cannot hide anything; `--mib`: the size of the file).

The graph's state has a `file: str` channel (deterministic prose) and a `step: int` input;
its one node edits a few hundred bytes of the file at a deterministic pseudo-random
position: it replaces them, and on every third step inserts them instead, so the offsets
after the edit shift. Each step is one `invoke` (LangGraph's default durability; three
checkpoints and one pending write per step). A full-snapshot saver writes the whole file
again in every checkpoint and write that carries it; a content-defined block store writes
only the blocks the edit touched.

All savers are open at once and step in rotating order. After every step the script reads
the bytes on disk (file + -wal after wal_checkpoint(TRUNCATE); Postgres: tables, indexes
and TOAST), the logical bytes (`Subject.logical_bytes`) and, for threadloom, the physical
store (`content.stats()`: compressed blocks + inline bodies). Per-step figures are growths;
the median and max are over steps 2..N (step 1 writes the whole file once at least).
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Sequence
from typing import Any, TypedDict

import _harness as h
import zstandard
from _workload import config_of, noise, prose
from langgraph.graph import END, START, StateGraph

THREAD = "store"
#: The issue's target: on-disk growth per step (median over steps 2..N), threadloom savers.
TARGET_PER_STEP = 64 * 1024


class FileState(TypedDict):
    """The agent's working file and the number of the step that edits it."""

    file: str
    step: int


def initial_file(size: int, noisy: bool) -> str:
    """The file before step 1: `size` characters of prose (or base64 noise)."""
    return (noise if noisy else prose)("file", size)


def edit(text: str, step: int, noisy: bool) -> str:
    """Step `step`'s edit of `text`: 200-600 new characters at a pseudo-random position.

    Every third step inserts them (the file grows and later offsets shift); the other
    steps replace as many characters.
    """
    rng = random.Random(f"edit:{step}")
    size = rng.randint(200, 600)
    at = rng.randrange(len(text) - size)
    new = (noise if noisy else prose)(f"edit:{step}", size)
    end = at if step % 3 == 0 else at + size
    return text[:at] + new + text[end:]


def build_graph(checkpointer: Any, noisy: bool) -> Any:
    """START -> edit -> END on `FileState`, compiled with `checkpointer`."""

    def editor(state: FileState) -> dict[str, Any]:
        return {"file": edit(state["file"], state["step"], noisy)}

    builder = StateGraph(FileState)
    builder.add_node("edit", editor)
    builder.add_edge(START, "edit")
    builder.add_edge("edit", END)
    return builder.compile(checkpointer=checkpointer)


def step_input(step: int, first: str) -> dict[str, Any]:
    """The `invoke` input of `step` (1-based): the file itself on step 1, then the step."""
    return {"file": first, "step": step} if step == 1 else {"step": step}


def physical(subject: h.Subject) -> int | None:
    """threadloom only: compressed bytes of the physical store (blocks + inline bodies)."""
    if subject.kind != "threadloom":
        return None
    stats = subject.saver.file.content.stats()
    return int(stats.block_stored + stats.inline_stored)


class StoreRun:
    """One saver's steps, one at a time, so savers can interleave."""

    def __init__(self, subject: h.Subject, noisy: bool, first: str) -> None:
        self.subject = subject
        self.graph = build_graph(subject.saver, noisy)
        self.first = first
        self.config = config_of(THREAD)
        self.disk: list[int | None] = []
        self.logical: list[int] = []
        self.stored: list[int | None] = []
        self.seconds: list[float] = []
        self.before = (subject.disk_bytes(), subject.logical_bytes(), physical(subject))

    def step(self, step: int) -> None:
        start = time.perf_counter()
        self.subject.invoke(self.graph, step_input(step, self.first), self.config)
        self.seconds.append(time.perf_counter() - start)
        now = (self.subject.disk_bytes(), self.subject.logical_bytes(), physical(self.subject))
        self.disk.append(_growth(now[0], self.before[0]))
        self.logical.append(now[1] - self.before[1])
        self.stored.append(_growth(now[2], self.before[2]))
        self.before = now

    def result(self, expected: str) -> dict[str, Any]:
        latest = self.subject.get_tuple(self.config)
        text = latest.checkpoint["channel_values"].get("file") if latest else None
        return {
            "disk": self.disk,
            "logical": self.logical,
            "stored": self.stored,
            "seconds": self.seconds,
            "disk_total": self.before[0],
            "logical_total": self.before[1],
            "stored_total": self.before[2],
            "checkpoints": len(self.subject.list(self.config)),
            "intact": text == expected,
        }


def _growth(now: int | None, before: int | None) -> int | None:
    return None if now is None or before is None else now - before


def run(panel: h.Panel, steps: int, noisy: bool, first: str) -> dict[str, dict[str, Any]]:
    """Every saver of `panel`, step by step, interleaved."""
    runs: dict[str, StoreRun] = {}
    for name, subject in panel.each(0):
        with panel.guard("store", name):
            runs[name] = StoreRun(subject, noisy, first)
    expected = first
    for step in range(1, steps + 1):
        expected = edit(expected, step, noisy)
        for name, _ in panel.each(step):
            with panel.guard("store", name):
                runs[name].step(step)
    out = {}
    for name, _ in panel.each(0):
        with panel.guard("store: read back", name):
            out[name] = runs[name].result(expected)
    return out


def main() -> int:
    p = h.parser(__doc__.splitlines()[0])
    p.add_argument("--mib", type=float, default=2.0, help="size of the file in MiB (default 2)")
    p.add_argument("--steps", type=int, default=None, help="steps (default 20, quick 5)")
    p.add_argument(
        "--noise", action="store_true", help="base64 noise instead of prose (incompressible)"
    )
    args = p.parse_args()
    steps = args.steps or (5 if args.quick else 20)
    size = int(args.mib * h.MiB)
    names = h.selected(args)
    failures = h.Failures()
    kind = "base64 noise" if args.noise else "prose"
    print(
        f"# bench_store: a {size / h.MiB:g} MiB text channel ({kind}) edited a little "
        f"at each of {steps} steps\n"
    )
    print(h.describe_machine())
    print(h.settings(args) + "\n")
    first = initial_file(size, args.noise)
    compressed = len(zstandard.ZstdCompressor(level=3).compress(first.encode()))
    results: dict[str, dict[str, Any]] = {}
    with h.workdir(args.keep) as wd, h.postgres_if(names) as pg:
        h.note("store: all savers interleaved, one step at a time")
        with h.Panel(names, wd, pg, failures, synchronous=args.synchronous) as panel:
            results = run(panel, steps, args.noise, first)
    report(results, steps, size, compressed, kind)
    return failures.report()


def _median(values: Sequence[int | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _max(values: Sequence[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _kib(n: float | None) -> str:
    return h.kib(None if n is None else int(n))


def report(
    results: dict[str, dict[str, Any]], steps: int, size: int, compressed: int, kind: str
) -> None:
    if not results:
        return
    any_result = next(iter(results.values()))
    print(
        f"file: {h.mib(size)} of {kind}, one zstd-3 copy is {h.mib(compressed)}; edits of "
        f"200-600 characters (an insert every third step); thread after the run: "
        f"{any_result['checkpoints']} checkpoints\n"
    )

    print(
        "## Bytes on disk written per step (growth of file + -wal after "
        "wal_checkpoint(TRUNCATE); Postgres: tables+indexes+TOAST)\n"
    )
    disk_names = [n for n, r in results.items() if r["disk_total"] is not None]
    shown = sorted({1, 2, steps, *range(5, steps + 1, 5)})
    rows = [[s, *[h.kib(results[n]["disk"][s - 1]) for n in disk_names]] for s in shown]
    print(h.table(["step", *disk_names], rows) + "\n")

    base = results.get(h.BASELINE)
    print(
        f"## Summary (per step: growth; median and max over steps 2..{steps}; "
        "stored: threadloom's blocks + inline bodies, compressed)\n"
    )
    rows = []
    for name, r in results.items():
        first = True
        for measure, key in (("on disk", "disk"), ("logical", "logical"), ("stored", "stored")):
            total = r[f"{key}_total"]
            if total is None:
                continue
            later = r[key][1:]
            median = _median(later)
            theirs = base[key] if base and key != "stored" else None
            rows.append(
                [
                    name,
                    measure,
                    h.kib(r[key][0]),
                    _kib(median),
                    h.kib(_max(later)),
                    h.ratio(median, theirs and _median(theirs[1:])),
                    h.mib(total),
                    h.ratio(total, base[f"{key}_total"] if theirs else None),
                    f"{statistics.median(r['seconds']):.2f}" if first else "",
                    ("yes" if r["intact"] else "NO") if first else "",
                ]
            )
            first = False
    print(
        h.table(
            [
                "saver",
                "bytes",
                "step 1",
                "median/step",
                "max/step",
                "median vs Sqlite",
                "total",
                "total vs Sqlite",
                "step s p50",
                "read back intact",
            ],
            rows,
        )
        + "\n"
    )

    rows = []
    for name in ("threadloom.Saver", "threadloom.AsyncSaver"):
        r = results.get(name)
        if r is None:
            continue
        median = _median(r["disk"][1:])
        if median is not None:
            rows.append(
                [
                    name,
                    f"<= 64 KiB written per step (on disk, median of steps 2..{steps})",
                    _kib(median),
                    "met" if median <= TARGET_PER_STEP else "MISSED",
                ]
            )
        stored = _median(r["stored"][1:])
        if stored is not None:
            rows.append(
                [
                    name,
                    "(of which: blocks + inline bodies, compressed; median per step)",
                    _kib(stored),
                    "",
                ]
            )
    if rows:
        print("## Targets\n")
        print(h.table(["saver", "target", "measured", "verdict"], rows) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
