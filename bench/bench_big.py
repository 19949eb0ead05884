"""One 20 MiB tool result in one turn: bytes written and on disk, on every saver.

Run: `python bench/bench_big.py` (`--quick`: a 2 MiB result).

Turn 1 of a thread returns a 20 MiB tool result (base64 noise, so compression
cannot hide a second copy); turn 2 is an ordinary turn. A saver that stores the
result once holds about 20 MiB of logical bytes (or one compressed copy on disk);
a full-snapshot saver holds one copy per checkpoint and pending write that carries it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import _harness as h
import zstandard
from _workload import build_graph, config_of, default_tool_result, noise, turn_input

THREAD = "big"


def run(subject: h.Subject, size: int) -> dict[str, Any]:
    big = noise("big", size)

    def tool_result(thread: str, turn: int) -> str:
        return big if turn == 1 else default_tool_result(thread, turn)

    graph = build_graph(subject.saver, tool_result)
    config = config_of(THREAD)
    out: dict[str, Any] = {}
    for turn in (1, 2):
        start = time.perf_counter()
        subject.invoke(graph, turn_input(THREAD, turn), config)
        out[f"time{turn}"] = time.perf_counter() - start
        out[f"logical{turn}"] = subject.logical_bytes()
        out[f"disk{turn}"] = subject.disk_bytes()
    start = time.perf_counter()
    latest = subject.get_tuple(config)
    out["get"] = time.perf_counter() - start
    tool = [
        m for m in latest.checkpoint["channel_values"]["messages"] if m.id == f"{THREAD}-1-tool"
    ]
    out["intact"] = bool(tool) and tool[0].content == big
    if subject.kind == "threadloom":
        out.update(attribute(subject))
    return out


def timed_rounds(
    names: list[str],
    wd: Path,
    pg: h.PostgresServer | None,
    failures: h.Failures,
    size: int,
    rounds: int,
    synchronous: str = "default",
) -> dict[str, dict[str, Any]]:
    """The wall time of the big turn, `rounds` times per saver, interleaved.

    Each round opens every saver on a fresh store and runs turn 1 of a new thread
    whose tool returns `size` characters of noise drawn for that round (so no store
    or per-process cache has seen them), in a rotating order; then reads the
    latest checkpoint back (untimed) to check the result is intact, and removes the
    files. Returns per saver the seconds of each round and whether every read was
    intact.
    """
    out: dict[str, dict[str, Any]] = {}
    for r in range(rounds):
        big = noise(f"big-round-{r}", size)

        def tool_result(thread: str, turn: int, big: str = big) -> str:
            return big if turn == 1 else default_tool_result(thread, turn)

        with h.Panel(names, wd, pg, failures, tag=f"-big{r}", synchronous=synchronous) as panel:
            for name, subject in panel.each(r):
                with panel.guard("big turn", name):
                    graph = build_graph(subject.saver, tool_result)
                    config = config_of(f"{THREAD}-{r}")
                    start = time.perf_counter()
                    subject.invoke(graph, turn_input(f"{THREAD}-{r}", 1), config)
                    seconds = time.perf_counter() - start
                    latest = subject.get_tuple(config)
                    intact = any(
                        m.content == big for m in latest.checkpoint["channel_values"]["messages"]
                    )
                    found = out.setdefault(name, {"seconds": [], "intact": True})
                    found["seconds"].append(seconds)
                    found["intact"] = found["intact"] and intact
        for subject in panel.subjects.values():
            if subject.path:
                for suffix in ("", "-wal", "-shm"):
                    Path(subject.path + suffix).unlink(missing_ok=True)
    return out


def attribute(subject: h.Subject) -> dict[str, int]:
    """threadloom only: logical bytes reachable from checkpoints vs only from pending writes."""
    import ormsgpack

    from threadloom.protocol import CHECKPOINTS, WRITES, references

    values: dict[str, dict[str, Any]] = {}
    roots: dict[str, list[dict[str, Any]]] = {"checkpoints": [], "writes": []}
    for collection, _, data in subject.saver.documents():
        if "ref" in data:
            values[data["ref"]] = data
        elif collection == CHECKPOINTS:
            roots["checkpoints"].append(data)
        elif collection == WRITES:
            roots["writes"].append(data)

    def closure(docs: list[dict[str, Any]]) -> set[str]:
        seen: set[str] = set()
        todo = [ref for d in docs for ref, _ in references(d)]
        while todo:
            ref = todo.pop()
            if ref in seen or ref not in values:
                continue
            seen.add(ref)
            todo.extend(r for r, _ in references(values[ref]))
        return seen

    in_checkpoints = closure(roots["checkpoints"])
    only_writes = closure(roots["writes"]) - in_checkpoints
    size = {ref: len(ormsgpack.packb(data)) for ref, data in values.items()}
    return {
        "from_checkpoints": sum(size[r] for r in in_checkpoints),
        "only_writes": sum(size[r] for r in only_writes),
    }


def main() -> int:
    p = h.parser(__doc__.splitlines()[0])
    p.add_argument("--mib", type=float, default=None, help="size of the result (default 20)")
    args = p.parse_args()
    size = int((args.mib or (2 if args.quick else 20)) * h.MiB)
    names = h.selected(args)
    failures = h.Failures()
    print(f"# bench_big: one {size / h.MiB:.0f} MiB tool result in one turn\n")
    print(h.describe_machine())
    print(h.settings(args) + "\n")
    compressed = len(zstandard.ZstdCompressor(level=3).compress(noise("big", size).encode()))
    results: dict[str, dict[str, Any]] = {}
    with h.workdir(args.keep) as wd, h.postgres_if(names) as pg:
        for name in names:
            h.note(f"big: {name}")
            with (
                failures.guard("big result", name),
                h.open_subject(name, wd, pg, synchronous=args.synchronous) as s,
            ):
                results[name] = run(s, size)
    report(results, size, compressed)
    return failures.report()


def report(results: dict[str, dict[str, Any]], size: int, compressed: int) -> None:
    print(f"result: {h.mib(size)} of base64 noise; one zstd-3 copy is {h.mib(compressed)}\n")
    rows = []
    for name, r in results.items():
        rows.append(
            [
                name,
                h.mib(r["logical1"]),
                f"{r['logical1'] / size:.2f}",
                h.mib(r["disk1"]),
                f"{r['disk1'] / size:.2f}" if r["disk1"] is not None else "-",
                h.mib(r["logical2"]),
                h.mib(r["disk2"]),
                f"{r['time1']:.2f}",
                f"{r['time2']:.2f}",
                f"{r['get'] * 1e3:.0f}",
                "yes" if r["intact"] else "NO",
            ]
        )
    print(
        h.table(
            [
                "saver",
                "logical after turn 1",
                "copies (logical)",
                "on disk after turn 1",
                "copies (disk)",
                "logical after turn 2",
                "on disk after turn 2",
                "turn 1 s",
                "turn 2 s",
                "get_tuple ms",
                "read back intact",
            ],
            rows,
        )
        + "\n"
    )
    rows = []
    for name in ("threadloom.Saver", "threadloom.AsyncSaver"):
        found = results.get(name)
        if found is None:
            continue
        r = found
        copies = r["from_checkpoints"] / size
        rows.append(
            [
                name,
                "stored once in the messages (values reachable from the checkpoints / result)",
                f"{copies:.2f}",
                "met" if copies < 1.5 else "MISSED",
            ]
        )
        rows.append(
            [
                name,
                "(logical documents after 2 turns / result: the protocol keeps the write's copy)",
                f"{r['logical2'] / size:.2f}",
                "",
            ]
        )
        rows.append(
            [
                name,
                "(of which: values only pending writes reach / result)",
                f"{r['only_writes'] / size:.2f}",
                "",
            ]
        )
        if r["disk1"] is not None:
            rows.append(
                [
                    name,
                    "on disk for the whole turn (message + pending write) <= result size",
                    f"{h.mib(r['disk1'])} ({r['disk1'] / size:.2f})",
                    "met" if r["disk1"] <= size else "MISSED",
                ]
            )
        if r["disk2"] is not None:
            copies = r["disk2"] / compressed
            rows.append(
                [
                    name,
                    "on disk after 2 turns / one compressed copy",
                    f"{copies:.2f}",
                    "met" if copies < 1.5 else "MISSED",
                ]
            )
    if rows:
        print("## Targets\n")
        print(h.table(["saver", "target", "measured", "verdict"], rows) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
