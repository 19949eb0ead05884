"""Conversations as records: the thread list, transcript tails and what the index costs a put.

Run: `python bench/bench_conversations.py` (1,000 / 10,000 / 100,000 threads, transcripts
of 10 / 20 / 1,000 / 10,000 messages, 5 put rounds; about 6 minutes on 2 cores). `--quick`
is a smoke run of about 15 s (200 / 2,000 threads of 10 owners, 10 / 20 / 300 / 1,000
messages, 2 small rounds). `--keep DIR` builds the listing files in DIR and reuses them on
the next run with the same parameters; `--parts listing,transcript,put` runs some of the
three; `--profile` adds cProfile reports of threadloom's calls at the largest sizes (run
after the timed calls, apart from them), the two halves of "without" in the put rounds
and a per-step timing of the index work inside the puts.

The issue's targets, measured in the same run:

- listing: `saver.threads(limit=20)`, page 2 (`before=` the first page's last cursor)
  and `threads(owner=..., limit=20)`: p50 <= 5 ms on 10,000 threads and flat (<= 1.5x)
  from 1,000 to 100,000 threads. LangGraph's SqliteSaver has no thread API; its file,
  holding the same checkpoints (written by `SqliteSaver.put` in the same loop), is
  listed with hand-built queries (named in the output) and with `list(None)` read until
  20 distinct threads are seen.
- transcript: `saver.messages(tid, limit=20)` at 10 / 1,000 / 10,000 messages: p50 flat
  (<= 1.5x from 10 to 10,000; also shown from 20, the first full page) and <= 0.1x
  `saver.get_tuple(config)` of the same thread at 10,000 messages; each cold (the scope's
  value and closure caches cleared before the call) and warm (right after the same call).
  SqliteSaver's only way, `get_tuple` then the last 20 messages, for scale.
- put: the same chat workload on a normal file and on one without index maintenance
  (its three `threads_by_*` indexes dropped and the index functions of
  `threadloom.engine.threads.threadindex` stubbed for that run only), in alternating rounds;
  the target is put with / without <= 1.05x (median of the rounds).

The files are built with `saver.put` directly (no graph): a graph run per checkpoint
would take hours at 100,000 threads. Latencies are wall time of one call each.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import _harness as h
from _workload import history, prose, user_message
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.sqlite import SqliteSaver

import threadloom
import threadloom.engine.content.training as training
import threadloom.engine.threads.threadindex as threadindex
from threadloom.engine.format.schema import FORMAT_VERSION

PARTS = ("listing", "transcript", "put")
#: threadloom's listing calls (the others are SqliteSaver's references).
OURS = ("latest", "page 2", "owner", "depth")
PAGE = 20
#: The three indexes the "without" file of the put part drops.
INDEXES = ("threads_by_updated", "threads_by_created", "threads_by_owner")
#: Bumped when the listing files' contents change (a `--keep` cache is rebuilt).
BUILD_VERSION = 1

#: The hand-built queries a SqliteSaver file answers a conversation list with.
REF_LATEST = (
    "SELECT thread_id, max(checkpoint_id) AS last FROM checkpoints WHERE checkpoint_ns = '' "
    "GROUP BY thread_id ORDER BY last DESC LIMIT 20"
)
REF_BEFORE = (
    "SELECT thread_id, max(checkpoint_id) AS last FROM checkpoints WHERE checkpoint_ns = '' "
    "GROUP BY thread_id HAVING last < ? ORDER BY last DESC LIMIT 20"
)
REF_OWNER = (
    "SELECT thread_id, max(checkpoint_id) AS last FROM checkpoints WHERE checkpoint_ns = '' "
    "AND json_extract(CAST(metadata AS TEXT), '$.user_id') = ? "
    "GROUP BY thread_id ORDER BY last DESC LIMIT 20"
)
#: Read in order and deduplicated in Python until 20 threads are seen.
REF_SCAN = (
    "SELECT thread_id, checkpoint_id FROM checkpoints WHERE checkpoint_ns = '' "
    "ORDER BY checkpoint_id DESC"
)


def thread_name(i: int) -> str:
    return f"thread-{i:06d}"


def owner_name(i: int) -> str:
    return f"user-{i:03d}"


def paths(base: Path) -> list[str]:
    return [f"{base}{suffix}" for suffix in ("", "-wal", "-shm")]


def remove(base: Path) -> None:
    for path in paths(base):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def copy_db(source: Path, target: Path) -> None:
    """Copy a closed SQLite file (and a -wal left beside it) to `target`."""
    remove(target)
    shutil.copyfile(source, target)
    if os.path.exists(f"{source}-wal"):
        shutil.copyfile(f"{source}-wal", f"{target}-wal")


# -- sampling ------------------------------------------------------------------------------


class Kind:
    """One timed call: `fn`, with `setup` run untimed before each call."""

    def __init__(
        self, fn: Callable[[], Any], setup: Callable[[], Any] | None = None, calls: int = 200
    ) -> None:
        self.fn, self.setup, self.calls = fn, setup, calls
        self.samples: list[float] = []
        self.spent = 0.0

    def stats(self) -> tuple[float, float, int] | None:
        if not self.samples:
            return None
        return statistics.median(self.samples) * 1e3, h.p95(self.samples) * 1e3, len(self.samples)

    def p50(self) -> float | None:
        return statistics.median(self.samples) * 1e3 if self.samples else None


def interleave(kinds: dict[Any, Kind], *, budget: float, least: int = 5) -> None:
    """Call every kind in turn (starting one further each pass) until each has its
    `calls` samples, or has spent `budget` seconds and holds at least `least` (so slow
    references stop early); load from anything else on the machine falls on every kind
    alike."""
    live = dict(kinds)
    turn = 0
    while live:
        keys = list(live)
        turn += 1
        k = turn % len(keys)
        for key in keys[k:] + keys[:k]:
            kind = live[key]
            if kind.setup is not None:
                kind.setup()
            started = time.perf_counter()
            kind.fn()
            took = time.perf_counter() - started
            kind.samples.append(took)
            kind.spent += took
            n = len(kind.samples)
            if n >= kind.calls or (kind.spent > budget and n >= least):
                del live[key]


def profiled(
    kinds: dict[Any, Kind], keys: Sequence[Any], calls: int
) -> dict[Any, cProfile.Profile]:
    """cProfile `calls` calls of each kind of `keys` (setups outside the profile), after
    and apart from the timed calls: a profiler on would inflate the timings."""
    out = {}
    for key in keys:
        kind, prof = kinds[key], cProfile.Profile()
        for _ in range(calls):
            if kind.setup is not None:
                kind.setup()
            prof.enable()
            kind.fn()
            prof.disable()
        out[key] = prof
    return out


# -- listing: files of many threads ----------------------------------------------------------

_SNIPPETS = [prose(f"snippet:{i}", 200) for i in range(64)]


def fill(
    savers: dict[str, Any], first: int, stop: int, owners: int, checkpoints: int
) -> dict[str, float]:
    """Write threads `first`..`stop-1` to every saver, `checkpoints` each (one question and
    one answer more per checkpoint), the same checkpoint objects to each; the seconds
    spent in each saver's `put`."""
    spent = dict.fromkeys(savers, 0.0)
    for i in range(first, stop):
        tid, owner = thread_name(i), owner_name(i % owners)
        configs = {
            name: {"configurable": {"thread_id": tid, "checkpoint_ns": "", "user_id": owner}}
            for name in savers
        }
        messages: list[BaseMessage] = []
        for k in range(checkpoints):
            messages = [
                *messages,
                HumanMessage(
                    content=f"Question {k} of {tid}: {_SNIPPETS[(i + k) % 64][:80]}",
                    id=f"{tid}-h{k}",
                ),
                AIMessage(content=_SNIPPETS[(i * 7 + k) % 64], id=f"{tid}-a{k}"),
            ]
            made = empty_checkpoint()
            made["channel_values"] = {"messages": list(messages)}
            made["channel_versions"] = {"messages": k + 1}
            metadata = {"source": "loop", "step": k, "parents": {}}
            for name, saver in savers.items():
                started = time.perf_counter()
                saved = saver.put(configs[name], made, metadata, {"messages": k + 1})
                spent[name] += time.perf_counter() - started
                configs[name] = {"configurable": {**saved["configurable"], "user_id": owner}}
    return spent


@contextlib.contextmanager
def build_savers(tl_path: Path, sq_path: Path) -> Iterator[dict[str, Any]]:
    """Both savers on their files at synchronous=OFF (a build, not a measurement)."""
    with (
        threadloom.Saver.from_conn_string(str(tl_path), synchronous="OFF") as tl,
        SqliteSaver.from_conn_string(str(sq_path)) as sq,
    ):
        sq.setup()
        sq.conn.execute("PRAGMA synchronous=OFF")
        yield {"threadloom.Saver": tl, "SqliteSaver": sq}


def build_listing(
    wd: Path, sizes: Sequence[int], owners: int, checkpoints: int, reuse: bool
) -> dict[int, dict[str, Any]]:
    """The listing files of every size (each grown from a copy of the one before);
    returns per size the two paths and how they were made."""
    params = {
        "owners": owners,
        "checkpoints": checkpoints,
        "threadloom": threadloom.__version__,
        "format": FORMAT_VERSION,
        "build": BUILD_VERSION,
    }
    out: dict[int, dict[str, Any]] = {}
    previous: int | None = None
    for n in sorted(sizes):
        tl_path, sq_path = wd / f"threads-{n}.threadloom.db", wd / f"threads-{n}.sqlite.db"
        manifest = wd / f"threads-{n}.json"
        if reuse and manifest.exists() and tl_path.exists() and sq_path.exists():
            saved = json.loads(manifest.read_text())
            if saved.get("params") == params:
                h.note(f"listing: reusing the {n:,}-thread files in {wd}")
                out[n] = {"tl": tl_path, "sq": sq_path, "how": "reused (--keep)", **saved}
                previous = n
                continue
        first = 0
        if previous is not None:
            copy_db(out[previous]["tl"], tl_path)
            copy_db(out[previous]["sq"], sq_path)
            first = previous
        else:
            remove(tl_path)
            remove(sq_path)
        h.note(f"listing: writing threads {first:,}..{n - 1:,} ({checkpoints} checkpoints each)")
        started = time.perf_counter()
        with build_savers(tl_path, sq_path) as savers:
            spent = fill(savers, first, n, owners, checkpoints)
        took = time.perf_counter() - started
        how = (
            f"threads {first:,}..{n - 1:,} added to a copy of the {previous:,}-thread file"
            if previous is not None
            else f"{n:,} threads written"
        )
        saved = {
            "params": params,
            "seconds": took,
            "put_seconds": spent,
            "added": n - first,
            "made": how,
        }
        if reuse:
            manifest.write_text(json.dumps(saved))
        out[n] = {"tl": tl_path, "sq": sq_path, "how": "built", **saved}
        previous = n
    for made in out.values():
        made["tl_bytes"] = h.at_rest_bytes(str(made["tl"]))
        made["sq_bytes"] = h.at_rest_bytes(str(made["sq"]))
    return out


def first_ids(rows: Iterator[Any], wanted: int = PAGE) -> list[str]:
    """The first `wanted` distinct thread ids of (thread_id, ...) rows, read lazily."""
    seen: dict[str, None] = {}
    for row in rows:
        seen.setdefault(row[0], None)
        if len(seen) == wanted:
            break
    return list(seen)


def scan_list(saver: SqliteSaver, filter: dict[str, Any] | None = None) -> list[str]:
    """`SqliteSaver.list(None)` read until 20 distinct threads are seen."""
    return first_ids(
        (t.config["configurable"]["thread_id"],) for t in saver.list(None, filter=filter)
    )


def measure_listing(
    files: dict[int, dict[str, Any]], owners: int, calls: int, budget: float, profile: bool
) -> dict[str, Any]:
    """Every listing call at every size, interleaved (all files open at once)."""
    kinds: dict[tuple[int, str], Kind] = {}
    checks: list[str] = []
    profiles: dict[Any, cProfile.Profile] = {}
    largest = max(files)
    with contextlib.ExitStack() as stack:
        for n, made in files.items():
            tl = stack.enter_context(threadloom.Saver.from_conn_string(str(made["tl"])))
            sq = stack.enter_context(SqliteSaver.from_conn_string(str(made["sq"])))
            conn = sq.conn
            page = tl.threads(limit=PAGE)
            reference = conn.execute(REF_LATEST).fetchall()
            if [t.thread_id for t in page] != [r[0] for r in reference]:
                checks.append(f"{n:,}: threadloom's first page differs from the reference's")
            cursor, last = page[-1].cursor, reference[-1][1]
            picks = [thread_name((k * 7919) % n) for k in range(64)]
            depth = [info.cursor for info in map(tl.thread, picks) if info is not None]
            ref_depth = [
                conn.execute(
                    "SELECT max(checkpoint_id) FROM checkpoints "
                    "WHERE thread_id = ? AND checkpoint_ns = ''",
                    (tid,),
                ).fetchall()[0][0]
                for tid in picks
            ]
            turn = {"owner": 0, "depth": 0, "ref owner": 0, "ref depth": 0, "scan owner": 0}

            def nxt(key: str, _turn: dict[str, int] = turn) -> int:
                _turn[key] += 1
                return _turn[key]

            def q(sql: str, *args: Any, _conn: Any = conn) -> list[Any]:
                return _conn.execute(sql, args).fetchall()

            kinds[(n, "latest")] = Kind(lambda tl=tl: tl.threads(limit=PAGE), calls=calls)
            kinds[(n, "page 2")] = Kind(
                lambda tl=tl, c=cursor: tl.threads(limit=PAGE, before=c), calls=calls
            )
            kinds[(n, "owner")] = Kind(
                lambda tl=tl, nxt=nxt: tl.threads(
                    owner=owner_name(nxt("owner") % owners), limit=PAGE
                ),
                calls=calls,
            )
            kinds[(n, "depth")] = Kind(
                lambda tl=tl, d=depth, nxt=nxt: tl.threads(
                    limit=PAGE, before=d[nxt("depth") % len(d)]
                ),
                calls=calls,
            )
            kinds[(n, "ref latest")] = Kind(lambda q=q: q(REF_LATEST), calls=calls)
            kinds[(n, "ref page 2")] = Kind(lambda q=q, v=last: q(REF_BEFORE, v), calls=calls)
            kinds[(n, "ref owner")] = Kind(
                lambda q=q, nxt=nxt: q(REF_OWNER, owner_name(nxt("ref owner") % owners)),
                calls=calls,
            )
            kinds[(n, "ref depth")] = Kind(
                lambda q=q, d=ref_depth, nxt=nxt: q(REF_BEFORE, d[nxt("ref depth") % len(d)]),
                calls=calls,
            )
            kinds[(n, "ref scan")] = Kind(
                lambda conn=conn: first_ids(iter(conn.execute(REF_SCAN))), calls=calls
            )
            kinds[(n, "list(None)")] = Kind(lambda sq=sq: scan_list(sq), calls=calls)
            kinds[(n, "list(None) owner")] = Kind(
                lambda sq=sq, nxt=nxt: scan_list(
                    sq, {"user_id": owner_name(nxt("scan owner") % owners)}
                ),
                calls=calls,
            )
        h.note(f"listing: measuring {len(kinds)} kinds, interleaved")
        started = time.perf_counter()
        # threadloom's calls apart from the references: a 100 ms reference query between
        # two 0.1 ms calls would time its cache misses, not the index.
        for group in (OURS, None):
            chosen = {k: v for k, v in kinds.items() if (k[1] in OURS) == (group is not None)}
            interleave(chosen, budget=budget)
        h.note(f"listing: measured in {time.perf_counter() - started:.0f} s")
        if profile:
            keys = [(largest, what) for what in ("latest", "page 2", "owner")]
            profiles = profiled(kinds, keys, 200)
    return {"kinds": kinds, "checks": checks, "profiles": profiles}


def listing_report(
    files: dict[int, dict[str, Any]], measured: dict[str, Any], owners: int, checkpoints: int
) -> tuple[str, dict[str, Any]]:
    kinds: dict[tuple[int, str], Kind] = measured["kinds"]
    sizes = sorted(files)
    small, big = sizes[0], sizes[-1]
    lines = [
        f"## Listing: threads(limit=20) on files of {', '.join(f'{n:,}' for n in sizes)} threads",
        "",
        f"Each thread: {checkpoints} root checkpoints (one question and one answer more each), "
        f"one of {owners} owners in turn (`user_id` in the put's `configurable`; "
        f"{small // owners:,} to {big // owners:,} threads per owner). threadloom.Saver at "
        "its defaults; SqliteSaver's file holds the same checkpoints (same ids), written by "
        "`SqliteSaver.put` in the same loop. All files open at once; threadloom's calls at "
        "every size interleaved with one another, then SqliteSaver's likewise (each call "
        "starting one further per pass); warm (the files in the OS and SQLite page caches; "
        "`threads()` keeps no Python cache). ms, p50 / p95 (calls).",
        "",
    ]
    build_rows = []
    for n in sizes:
        made = files[n]
        spent = made.get("put_seconds", {})
        build_rows.append(
            [
                f"{n:,}",
                made["how"] + f": {made.get('made', '')}",
                f"{made.get('seconds', 0):.1f} s",
                f"{spent.get('threadloom.Saver', 0):.1f} s",
                f"{spent.get('SqliteSaver', 0):.1f} s",
                h.mib(made["tl_bytes"]),
                h.mib(made["sq_bytes"]),
            ]
        )
    lines += [
        "Files (built at synchronous=OFF, with `saver.put` directly):",
        "",
        h.table(
            [
                "threads",
                "made",
                "build wall",
                "threadloom put time",
                "SqliteSaver put time",
                "threadloom file",
                "SqliteSaver file",
            ],
            build_rows,
        ),
        "",
    ]
    labels = [
        ("latest", "threadloom `threads(limit=20)`"),
        ("page 2", "threadloom page 2 (`before=` page 1's last cursor)"),
        ("owner", "threadloom `threads(owner=, limit=20)` (owners in turn)"),
        ("depth", "threadloom page at a random depth (`before=` a random thread's cursor)"),
        ("ref latest", "SqliteSaver, reference query A (latest page)"),
        ("ref page 2", "SqliteSaver, reference query B (page 2: HAVING last < page 1's last)"),
        ("ref owner", "SqliteSaver, reference query C (one owner's latest page)"),
        ("ref depth", "SqliteSaver, reference query B at a random depth"),
        ("ref scan", "SqliteSaver, query D read until 20 distinct threads"),
        ("list(None)", "SqliteSaver `list(None)` read until 20 distinct threads"),
        ("list(None) owner", "SqliteSaver `list(None, filter={'user_id': o})`, same"),
    ]
    rows = []
    figures: dict[str, Any] = {}
    for key, label in labels:
        cells: list[Any] = [label]
        for n in sizes:
            stats = kinds[(n, key)].stats()
            cells.append("-" if stats is None else f"{stats[0]:.3f} / {stats[1]:.3f} ({stats[2]})")
        lo, hi = kinds[(small, key)].p50(), kinds[(big, key)].p50()
        cells.append(h.ratio(hi, lo))
        rows.append(cells)
        figures[key] = {n: kinds[(n, key)].p50() for n in sizes}
    lines += [
        h.table(
            ["call", *(f"{n:,} threads p50 / p95 (n)" for n in sizes), f"{big:,} / {small:,}"],
            rows,
        ),
        "",
        "threadloom over SqliteSaver's best exact reference at each size (p50 ÷ p50):",
        "",
    ]
    vs_rows = []
    for key, refs in (
        ("latest", ("ref latest", "ref scan", "list(None)")),
        ("page 2", ("ref page 2",)),
        ("owner", ("ref owner", "list(None) owner")),
        ("depth", ("ref depth",)),
    ):
        cells = [key]
        for n in sizes:
            best = min((kinds[(n, r)].p50() or float("inf")) for r in refs)
            cells.append(h.ratio(kinds[(n, key)].p50(), best))
        vs_rows.append(cells)
    lines += [
        h.table(["threadloom call", *(f"{n:,} threads" for n in sizes)], vs_rows),
        "",
        "The reference queries (SqliteSaver's `checkpoints` table has no thread API and no "
        "index but its primary key `(thread_id, checkpoint_ns, checkpoint_id)`):",
        "",
        f"- A: `{REF_LATEST}`",
        f"- B: `{REF_BEFORE}`",
        f"- C: `{REF_OWNER}`",
        f"- D: `{REF_SCAN}`",
        "",
        "They return thread ids and their newest checkpoint id only; a list showing titles "
        "or message counts would then load each thread's checkpoint. `threads()` returns "
        "the whole `ThreadInfo` (owner, title, times, counts, bytes, head, namespaces).",
    ]
    for check in measured["checks"]:
        lines.append(f"- check: {check}")
    return "\n".join(lines), {"figures": figures, "sizes": sizes}


# -- transcripts -------------------------------------------------------------------------------


def transcript_threads(sizes: Sequence[int], per_turn: int) -> dict[str, list[list[BaseMessage]]]:
    """Thread name -> the message lists of its checkpoints, in order.

    `m<N>`: one checkpoint of N messages (the agent's turns of `_workload.history`: a
    user message, a tool call, a ~1 KB tool result, an answer). `turns<N>`: the same
    conversation with a checkpoint after every turn, about N messages at the end.
    """
    out: dict[str, list[list[BaseMessage]]] = {}
    for n in sizes:
        out[f"m{n}"] = [history(f"m{n}", (n + 2) // 4)[:n]]
    made = history(f"turns{per_turn}", (per_turn + 2) // 4)
    out[f"turns{per_turn}"] = [made[: 1 + 4 * t] for t in range(1, (len(made) - 1) // 4 + 1)]
    return out


def measure_transcripts(
    wd: Path, sizes: Sequence[int], per_turn: int, calls: int, budget: float, profile: bool
) -> dict[str, Any]:
    threads = transcript_threads(sizes, per_turn)
    tl_path, sq_path = wd / "transcripts.threadloom.db", wd / "transcripts.sqlite.db"
    remove(tl_path)
    remove(sq_path)
    built: dict[str, dict[str, float]] = {}
    kinds: dict[tuple[str, str], Kind] = {}
    profiles: dict[Any, cProfile.Profile] = {}
    with contextlib.ExitStack() as stack:
        tl = stack.enter_context(threadloom.Saver.from_conn_string(str(tl_path)))
        sq = stack.enter_context(SqliteSaver.from_conn_string(str(sq_path)))
        sq.setup()
        savers: dict[str, Any] = {"threadloom.Saver": tl, "SqliteSaver": sq}
        for tid, lists in threads.items():
            spent = dict.fromkeys(savers, 0.0)
            configs = {n: {"configurable": {"thread_id": tid, "checkpoint_ns": ""}} for n in savers}
            for version, messages in enumerate(lists, 1):
                made = empty_checkpoint()
                made["channel_values"] = {"messages": list(messages)}
                made["channel_versions"] = {"messages": version}
                meta = {"source": "loop", "step": version, "parents": {}}
                for name, saver in savers.items():
                    started = time.perf_counter()
                    configs[name] = saver.put(configs[name], made, meta, {"messages": version})
                    spent[name] += time.perf_counter() - started
            built[tid] = spent
            h.note(f"transcript: {tid} written ({len(lists)} checkpoints)")
        scope = tl.checkpoints.scope

        def cold() -> None:
            scope.cache.clear()
            scope.closures.clear()

        checks = []
        for tid, lists in threads.items():
            config = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
            page = tl.messages(tid, limit=PAGE)
            whole = tl.get_tuple(config)
            ref = sq.get_tuple(config)
            expected = [m.id for m in lists[-1][-PAGE:]]
            got = {
                "messages": [m.id for m in page],
                "get_tuple": [m.id for m in whole.checkpoint["channel_values"]["messages"][-PAGE:]],
                "SqliteSaver": [m.id for m in ref.checkpoint["channel_values"]["messages"][-PAGE:]],
            }
            for what, ids in got.items():
                if ids != expected:
                    checks.append(f"{tid}: {what} returned other messages than the last {PAGE}")

            def page_of(tid: str = tid) -> Any:
                return tl.messages(tid, limit=PAGE)

            def whole_of(config: Any = config) -> Any:
                return tl.get_tuple(config)

            def sliced(config: Any = config) -> Any:
                return sq.get_tuple(config).checkpoint["channel_values"]["messages"][-PAGE:]

            kinds[(tid, "messages cold")] = Kind(page_of, cold, calls)
            kinds[(tid, "messages warm")] = Kind(page_of, page_of, calls)
            kinds[(tid, "get_tuple cold")] = Kind(whole_of, cold, calls)
            kinds[(tid, "get_tuple warm")] = Kind(whole_of, whole_of, calls)
            kinds[(tid, "SqliteSaver")] = Kind(sliced, None, calls)
        counts = {tid: len(lists) for tid, lists in threads.items()}
        totals = {tid: len(lists[-1]) for tid, lists in threads.items()}
        # The written lists (tens of thousands of messages) would only make the collector's
        # full passes longer during the timings.
        del threads, lists
        gc.collect()
        h.note(f"transcript: measuring {len(kinds)} kinds, interleaved")
        started = time.perf_counter()
        # The pages apart from the whole loads (see measure_listing).
        for group in (True, False):
            chosen = {k: v for k, v in kinds.items() if k[1].startswith("messages") == group}
            interleave(chosen, budget=budget)
        h.note(f"transcript: measured in {time.perf_counter() - started:.0f} s")
        if profile:
            biggest = f"m{max(sizes)}"
            profiles = profiled(
                kinds, [(biggest, "messages cold"), (biggest, "messages warm")], 200
            )
            profiles.update(profiled(kinds, [(biggest, "get_tuple cold")], 5))
    return {
        "kinds": kinds,
        "built": built,
        "counts": counts,
        "totals": totals,
        "checks": checks,
        "profiles": profiles,
        "bytes": (h.at_rest_bytes(str(tl_path)), h.at_rest_bytes(str(sq_path))),
    }


def transcript_report(measured: dict[str, Any], sizes: Sequence[int]) -> tuple[str, dict[str, Any]]:
    kinds: dict[tuple[str, str], Kind] = measured["kinds"]
    names = list(measured["counts"])
    lines = [
        "## Transcript: messages(tid, limit=20) against get_tuple",
        "",
        "One file per saver holding every thread below. `m<N>`: one checkpoint of N messages "
        "(`_workload.history`: user message, tool call, ~1 KB tool result, answer per turn); "
        "`turns<N>`: the same kind of conversation with a root checkpoint after every turn. "
        "Cold: `saver.checkpoints.scope.cache` and `.closures` cleared before each call (SQLite's "
        "page cache and the OS's stay warm); warm: right after the same call. SqliteSaver: "
        "`get_tuple(config)` then `channel_values['messages'][-20:]`, its only way. "
        "ms, p50 / p95 (n).",
        "",
    ]
    order = ("messages cold", "messages warm", "get_tuple cold", "get_tuple warm", "SqliteSaver")
    rows = []
    for tid in names:
        cells: list[Any] = [tid, f"{measured['totals'][tid]:,}", measured["counts"][tid]]
        for what in order:
            stats = kinds[(tid, what)].stats()
            cells.append("-" if stats is None else f"{stats[0]:.3f} / {stats[1]:.3f} ({stats[2]})")
        p = {what: kinds[(tid, what)].p50() for what in order}
        cells += [
            h.ratio(p["messages cold"], p["get_tuple cold"]),
            h.ratio(p["messages warm"], p["get_tuple warm"]),
            h.ratio(p["messages cold"], p["SqliteSaver"]),
        ]
        rows.append(cells)
    lines += [
        h.table(
            [
                "thread",
                "messages",
                "checkpoints",
                *order,
                "messages ÷ get_tuple (cold)",
                "(warm)",
                "messages cold ÷ SqliteSaver",
            ],
            rows,
        ),
        "",
    ]
    build_rows = [
        [tid, *(f"{measured['built'][tid][s]:.2f} s" for s in ("threadloom.Saver", "SqliteSaver"))]
        for tid in names
    ]
    lines += [
        "Writing them (`put` time, synchronous at each saver's own setting):",
        "",
        h.table(["thread", "threadloom.Saver", "SqliteSaver"], build_rows),
        "",
        f"On disk: threadloom {h.mib(measured['bytes'][0])}, SqliteSaver "
        f"{h.mib(measured['bytes'][1])}.",
    ]
    for check in measured["checks"]:
        lines.append(f"- check: {check}")
    small, big = f"m{min(sizes)}", f"m{max(sizes)}"
    pages = [n for n in sizes if n >= PAGE]
    full = f"m{min(pages)}" if pages else None
    figures = {(tid, what): kinds[(tid, what)].p50() for tid in names for what in order}
    return "\n".join(lines), {"figures": figures, "small": small, "big": big, "full": full}


# -- put cost with and without the index ------------------------------------------------------


@contextlib.contextmanager
def index_off() -> Iterator[None]:
    """Stub the index functions a put calls (module attributes, looked up per call; the
    dictionary retraining imported `held` by name, so its copy is stubbed too)."""
    saved = {
        name: getattr(threadindex, name)
        for name in ("note_checkpoint", "held", "derived_title", "owner_of")
    }
    retraining = training.held
    threadindex.note_checkpoint = lambda *args, **kwargs: None  # type: ignore[assignment]
    threadindex.held = lambda packs: 0  # type: ignore[assignment]
    threadindex.derived_title = lambda messages: None  # type: ignore[assignment]
    threadindex.owner_of = lambda conf, keys: None  # type: ignore[assignment]
    training.held = threadindex.held  # type: ignore[assignment]
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(threadindex, name, fn)
        training.held = retraining  # type: ignore[assignment]


class Chat:
    """`threads` conversations of `turns` turns: per turn the user's question and the answer
    are put as a checkpoint, then the answer as the node's pending write."""

    def __init__(self, threads: int, turns: int) -> None:
        self.threads, self.turns = threads, turns
        self.messages: dict[str, list[BaseMessage]] = {}
        for t in range(threads):
            tid = f"chat-{t:03d}"
            out: list[BaseMessage] = []
            for turn in range(1, turns + 1):
                out.append(user_message(tid, turn))
                out.append(
                    AIMessage(
                        content=f"Turn {turn}: " + prose(f"answer:{tid}:{turn}", 300),
                        id=f"{tid}-{turn}-answer",
                    )
                )
            self.messages[tid] = out

    def run(self, savers: dict[str, tuple[Any, Callable[[], Any]]]) -> dict[str, Any]:
        """Turn-major (every thread's turn 1, then turn 2, ...), each step on every saver
        in turn (starting one further each step, each inside its context); seconds per
        call, per saver."""
        times = {name: {"put": [], "put_writes": [], "turn": []} for name in savers}
        configs = {
            name: {
                tid: {"configurable": {"thread_id": tid, "checkpoint_ns": "", "user_id": owner}}
                for tid, owner in zip(self.messages, self.owners(), strict=True)
            }
            for name in savers
        }
        step = 0
        for turn in range(1, self.turns + 1):
            for tid, messages in self.messages.items():
                made = empty_checkpoint()
                made["channel_values"] = {"messages": messages[: 2 * turn]}
                made["channel_versions"] = {"messages": turn}
                meta = {"source": "loop", "step": turn, "parents": {}}
                writes = [("messages", [messages[2 * turn - 1]])]
                names = list(savers)
                k, step = step % len(names), step + 1
                for name in names[k:] + names[:k]:
                    saver, context = savers[name]
                    config = configs[name][tid]
                    with context():
                        started = time.perf_counter()
                        saved = saver.put(config, made, meta, {"messages": turn})
                        middle = time.perf_counter()
                        saver.put_writes(saved, writes, f"task-{turn}")
                        ended = time.perf_counter()
                    owner = config["configurable"]["user_id"]
                    configs[name][tid] = {
                        "configurable": {**saved["configurable"], "user_id": owner}
                    }
                    times[name]["put"].append(middle - started)
                    times[name]["put_writes"].append(ended - middle)
                    times[name]["turn"].append(ended - started)
        return times

    def owners(self) -> list[str]:
        return [f"user-{i % 5}" for i in range(len(self.messages))]


def chat_round(kinds: Sequence[str], chat: Chat, wd: Path, tag: str) -> dict[str, Any]:
    """One round of the chat on fresh files, every kind interleaved step by step: "with"
    (the index), "without", "SqliteSaver", or half of "without": "indexes dropped" or
    "functions stubbed" (`--profile`)."""
    files = {kind: wd / f"chat-{kind.replace(' ', '-')}-{tag}.db" for kind in kinds}
    for path in files.values():
        remove(path)
    try:
        with contextlib.ExitStack() as stack:
            savers: dict[str, tuple[Any, Callable[[], Any]]] = {}
            for kind, path in files.items():
                if kind == "SqliteSaver":
                    sq = stack.enter_context(SqliteSaver.from_conn_string(str(path)))
                    sq.setup()
                    savers[kind] = (sq, contextlib.nullcontext)
                    continue
                saver = stack.enter_context(threadloom.Saver.from_conn_string(str(path)))
                if kind in ("without", "indexes dropped"):
                    with saver.file.write() as conn:
                        for name in INDEXES:
                            conn.execute(f"DROP INDEX {name}")
                stubbed = kind in ("without", "functions stubbed")
                savers[kind] = (saver, index_off if stubbed else contextlib.nullcontext)
            times = chat.run(savers)
            if "without" in savers:
                check_without(savers["without"][0])
        return times
    finally:
        for path in files.values():
            remove(path)


def check_without(saver: Any) -> None:
    """The "without" file kept no index: no thread row holds what the index keeps."""
    with saver.file.read() as conn:
        kept = conn.execute(
            "SELECT count(*) FROM threads WHERE messages > 0 OR title IS NOT NULL "
            "OR owner IS NOT NULL OR bytes > 0"
        ).fetchall()[0][0]
        left = conn.execute(
            "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name IN "
            f"({', '.join('?' * len(INDEXES))})",
            INDEXES,
        ).fetchall()[0][0]
    if kept or left:
        raise RuntimeError(f"index still kept without it: {kept} rows, {left} indexes")


def measure_puts(wd: Path, threads: int, turns: int, rounds: int, profile: bool) -> dict[str, Any]:
    chat = Chat(threads, turns)
    kinds = ["with", "without", *(["indexes dropped", "functions stubbed"] if profile else [])]
    runs: dict[str, list[dict[str, list[float]]]] = {kind: [] for kind in [*kinds, "SqliteSaver"]}
    started = time.perf_counter()
    for r in range(rounds):
        order = kinds if r % 2 == 0 else kinds[::-1]
        for kind, times in chat_round(order, chat, wd, str(r)).items():
            runs[kind].append(times)
        # SqliteSaver (an fsync per commit) apart, so its I/O does not fall between the
        # threadloom calls.
        runs["SqliteSaver"].append(chat_round(["SqliteSaver"], chat, wd, str(r))["SqliteSaver"])
        h.note(f"put: round {r + 1}/{rounds} done ({time.perf_counter() - started:.0f} s)")
    parts = index_parts(wd, chat) if profile else None
    return {"runs": runs, "parts": parts, "seconds": time.perf_counter() - started}


def index_parts(wd: Path, chat: Chat) -> str:
    """What each index step of a put costs inside the chat's puts: the index functions
    and the writer's `_index` (title, owner, the `note_checkpoint` statement) timed
    call by call on a normal file (a cProfile of the put cannot isolate them)."""
    import threadloom.engine.checkpoints.writer as writer

    spent: dict[str, list[float]] = {}

    def timer(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent.setdefault(name, []).append(time.perf_counter() - started)

        return timed

    names = ("note_checkpoint", "held", "derived_title", "owner_of")
    saved = {name: getattr(threadindex, name) for name in names}
    index = writer.Writer._index
    path = wd / "chat-parts.db"
    remove(path)
    try:
        for name in names:
            setattr(threadindex, name, timer(f"threadindex.{name}", saved[name]))
        writer.Writer._index = timer("Writer._index (all but held)", index)  # type: ignore[method-assign]
        with threadloom.Saver.from_conn_string(str(path)) as saver:
            times = chat.run({"with": (saver, contextlib.nullcontext)})["with"]
    finally:
        for name, fn in saved.items():
            setattr(threadindex, name, fn)
        writer.Writer._index = index  # type: ignore[method-assign]
        remove(path)
    puts, p50 = len(times["put"]), statistics.median(times["put"])
    rows = [
        [
            name,
            len(values),
            f"{statistics.median(values) * 1e6:.1f}",
            f"{sum(values) / puts * 1e6:.1f}",
            f"{sum(values) / puts / p50 * 100:.1f}%",
        ]
        for name, values in sorted(spent.items())
    ]
    return "\n".join(
        [
            "### Where a put's index time goes (`--profile`)",
            "",
            f'One more "with" run, each index step timed (wall, perf_counter) inside the '
            f"calls; put p50 of this run {p50 * 1e3:.3f} ms over {puts} puts (`held` is "
            "called by put_writes too). The b-tree upkeep of `threads_by_updated` and "
            "`threads_by_owner` (every write moves `updated_at`) is inside SQLite's "
            "statements and not in this table.",
            "",
            h.table(["step", "calls", "p50 us per call", "us per put (mean)", "of put p50"], rows),
        ]
    )


def puts_report(measured: dict[str, Any], threads: int, turns: int) -> tuple[str, dict[str, Any]]:
    runs = measured["runs"]
    med = statistics.median
    rows = []
    ratios: dict[str, list[float]] = {"put": [], "put_writes": [], "turn": [], "total": []}
    for r, (a, b) in enumerate(zip(runs["with"], runs["without"], strict=True)):
        cells: list[Any] = [r + 1]
        for what in ("put", "put_writes", "turn"):
            cells += [f"{med(a[what]) * 1e3:.3f}", f"{med(b[what]) * 1e3:.3f}"]
            ratios[what].append(med(a[what]) / med(b[what]))
        ratios["total"].append(sum(a["turn"]) / sum(b["turn"]))
        cells += [
            f"{ratios['put'][-1]:.3f}",
            f"{ratios['turn'][-1]:.3f}",
            f"{ratios['total'][-1]:.3f}",
        ]
        sq = runs["SqliteSaver"][r]
        cells += [f"{med(sq['put']) * 1e3:.3f}", f"{med(sq['put_writes']) * 1e3:.3f}"]
        rows.append(cells)
    summary = {what: med(values) for what, values in ratios.items()}
    pooled_with = [x for run in runs["with"] for x in run["put"]]
    pooled_without = [x for run in runs["without"] for x in run["put"]]
    pooled_sq = [x for run in runs["SqliteSaver"] for x in run["put"]]
    lines = [
        f"## Put with and without the index ({threads} threads x {turns} turns, "
        f"{len(runs['with'])} rounds)",
        "",
        f"Per turn and thread: one `put` (the list grown by a question and a ~300-character "
        f"answer; {2 * turns} messages at the end) and one `put_writes` (the answer), "
        "turn-major across the threads. Each round opens fresh files, one per kind, and "
        "runs every step on each of them in turn (the first one rotating per step), so "
        'load from elsewhere falls on both alike. "with": a normal file. "without": the '
        f"same saver after `DROP INDEX {', '.join(INDEXES)}` (SQL over `saver.file.write()`) "
        "and, around its calls only, `threadloom.engine.threads.threadindex`'s `note_checkpoint` a "
        "no-op, `held` returning 0 (also in the dictionary retraining) and `derived_title`/"
        "`owner_of` returning None (the title and owner work of a put); checked after the "
        "round: no thread row of that file holds a count, title, owner or bytes (a "
        "retraining still runs its `UPDATE threads SET bytes`, by minus the old lengths "
        "there, so they go below 0). This approximates "
        "a put without the index: the `bytes = bytes + ?` folded into the existing "
        "`UPDATE threads` (`Scope.reserve`) and the `RETURNING ref` of value inserts remain. "
        "SqliteSaver (its own settings: WAL, synchronous=FULL; threadloom at NORMAL) runs "
        "the same chat after each round on its own, for scale. ms.",
        "",
        h.table(
            [
                "round",
                "put p50 with",
                "without",
                "put_writes p50 with",
                "without",
                "turn p50 with",
                "without",
                "put ratio",
                "turn ratio",
                "total ratio",
                "SqliteSaver put p50",
                "SqliteSaver put_writes p50",
            ],
            rows,
        ),
        "",
        f"Median of the rounds, with ÷ without: put p50 **{summary['put']:.3f}x**, "
        f"put_writes p50 {summary['put_writes']:.3f}x, turn (put + put_writes) p50 "
        f"{summary['turn']:.3f}x, total time of the run's calls {summary['total']:.3f}x. "
        f"Pooled put p50: with {med(pooled_with) * 1e3:.3f} ms, without "
        f"{med(pooled_without) * 1e3:.3f} ms, SqliteSaver {med(pooled_sq) * 1e3:.3f} ms "
        f"(threadloom with ÷ SqliteSaver {med(pooled_with) / med(pooled_sq):.2f}x). "
        f"Part took {measured['seconds']:.0f} s.",
    ]

    def p50s(kind: str, what: str) -> list[float]:
        return [med(run[what]) for run in runs[kind]]

    def share(tops: list[float], bottoms: list[float]) -> float:
        return med(a / b for a, b in zip(tops, bottoms, strict=True))

    for kind in ("indexes dropped", "functions stubbed"):
        if runs.get(kind):
            put, writes = p50s(kind, "put"), p50s(kind, "put_writes")
            lines += [
                "",
                f'Half of "without" (`--profile`), {kind} only, medians of the rounds: put p50 '
                f"with ÷ this {share(p50s('with', 'put'), put):.3f}x, this ÷ without "
                f"{share(put, p50s('without', 'put')):.3f}x; put_writes p50 with ÷ this "
                f"{share(p50s('with', 'put_writes'), writes):.3f}x, this ÷ without "
                f"{share(writes, p50s('without', 'put_writes')):.3f}x.",
            ]
    return "\n".join(lines), {"summary": summary, "ratios": ratios}


# -- the targets --------------------------------------------------------------------------------


def verdict(value: float | None, bound: float) -> str:
    if value is None:
        return "-"
    return "PASS" if value <= bound else "MISS"


def targets(
    listing: dict[str, Any] | None,
    transcript: dict[str, Any] | None,
    puts: dict[str, Any] | None,
) -> str:
    rows: list[list[Any]] = []
    if listing is not None:
        sizes, figures = listing["sizes"], listing["figures"]
        small, big = sizes[0], sizes[-1]
        middle = 10_000 if 10_000 in sizes else sizes[len(sizes) // 2]
        for key, label in (
            ("latest", "`threads(limit=20)`"),
            ("page 2", "page 2 (`before=cursor`)"),
            ("owner", "`threads(owner=, limit=20)`"),
        ):
            at = figures[key][middle]
            rows.append(
                [f"{label} p50 at {middle:,} threads", f"{at:.3f} ms", "<= 5 ms", verdict(at, 5)]
            )
            lo, hi = figures[key][small], figures[key][big]
            flat = hi / lo if lo and hi else None
            rows.append(
                [
                    f"{label} p50 {big:,} ÷ {small:,} threads",
                    "-" if flat is None else f"{flat:.2f}x",
                    "<= 1.5x",
                    verdict(flat, 1.5),
                ]
            )
    if transcript is not None:
        f, small, big = transcript["figures"], transcript["small"], transcript["big"]
        for state in ("cold", "warm"):
            lo, hi = f[(small, f"messages {state}")], f[(big, f"messages {state}")]
            flat = hi / lo if lo and hi else None
            rows.append(
                [
                    f"`messages(limit=20)` p50 {big[1:]} ÷ {small[1:]} messages ({state})",
                    "-" if flat is None else f"{flat:.2f}x",
                    "<= 1.5x",
                    verdict(flat, 1.5),
                ]
            )
        full = transcript["full"]
        for state in ("cold", "warm"):
            if full is None or full == small:
                break
            lo, hi = f[(full, f"messages {state}")], f[(big, f"messages {state}")]
            flat = hi / lo if lo and hi else None
            rows.append(
                [
                    f"(extra) `messages(limit=20)` p50 {big[1:]} ÷ {full[1:]} messages "
                    f"({state}; a full page of {PAGE} at both ends)",
                    "-" if flat is None else f"{flat:.2f}x",
                    "<= 1.5x",
                    verdict(flat, 1.5),
                ]
            )
        for state in ("cold", "warm"):
            page, whole = f[(big, f"messages {state}")], f[(big, f"get_tuple {state}")]
            share = page / whole if page and whole else None
            rows.append(
                [
                    f"`messages` ÷ `get_tuple` p50 at {big[1:]} messages ({state})",
                    "-" if share is None else f"{share:.3f}x ({page:.3f} / {whole:.2f} ms)",
                    "<= 0.1x",
                    verdict(share, 0.1),
                ]
            )
    if puts is not None:
        s = puts["summary"]
        rows.append(
            [
                "put p50 with ÷ without the index (median of rounds)",
                f"{s['put']:.3f}x",
                "<= 1.05x",
                verdict(s["put"], 1.05),
            ]
        )
        rows.append(
            [
                "put + put_writes per turn, p50, with ÷ without (median of rounds)",
                f"{s['turn']:.3f}x",
                "<= 1.05x",
                verdict(s["turn"], 1.05),
            ]
        )
    return "\n".join(["## Targets", "", h.table(["target", "measured", "bound", "verdict"], rows)])


# -- main ------------------------------------------------------------------------------------


@contextlib.contextmanager
def directory(keep: str | None) -> Iterator[Path]:
    if keep:
        path = Path(keep)
        path.mkdir(parents=True, exist_ok=True)
        yield path
        h.note(f"files kept in {path}")
        return
    path = Path(tempfile.mkdtemp(prefix="threadloom-conversations-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a smoke run (about 30 s)")
    p.add_argument("--parts", default=",".join(PARTS), help=f"subset of: {', '.join(PARTS)}")
    p.add_argument("--threads", help="listing sizes (default 1000,10000,100000)")
    p.add_argument(
        "--owners", type=int, help="owners of the listing threads (default 50; --quick 10)"
    )
    p.add_argument("--checkpoints", type=int, default=2, help="root checkpoints per thread")
    p.add_argument("--messages", help="transcript sizes (default 10,1000,10000)")
    p.add_argument("--per-turn", type=int, help="messages of the checkpoint-per-turn thread")
    p.add_argument("--chat", help="put workload THREADSxTURNS (default 20x200)")
    p.add_argument("--rounds", type=int, help="put rounds (default 5)")
    p.add_argument("--keep", metavar="DIR", help="build (and reuse) the listing files in DIR")
    p.add_argument("--profile", action="store_true", help="cProfile threadloom's calls")
    args = p.parse_args(argv)
    parts = [s.strip() for s in args.parts.split(",") if s.strip()]
    if set(parts) - set(PARTS):
        p.error(f"unknown part(s) {sorted(set(parts) - set(PARTS))}; choose from {PARTS}")
    quick = args.quick
    sizes = [
        int(s) for s in (args.threads or ("200,2000" if quick else "1000,10000,100000")).split(",")
    ]
    lengths = [
        int(s)
        for s in (args.messages or ("10,20,300,1000" if quick else "10,20,1000,10000")).split(",")
    ]
    per_turn = args.per_turn or (300 if quick else 1000)
    chat_threads, chat_turns = (
        int(x) for x in (args.chat or ("5x30" if quick else "20x200")).split("x")
    )
    rounds = args.rounds or (2 if quick else 5)
    owners = args.owners or (10 if quick else 50)
    calls, budget = (60, 0.5) if quick else (400, 3.0)
    command = " ".join(
        ["python bench/bench_conversations.py", *(argv if argv is not None else sys.argv[1:])]
    )
    print(f"# Conversations: `{command}`")
    print()
    print(h.describe_machine())
    print(f"Load average at the start: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}.")
    begun = time.perf_counter()
    listing = transcript = puts = None
    failures = h.Failures()
    profiles: list[tuple[str, cProfile.Profile]] = []
    with directory(args.keep) as wd:
        if "listing" in parts:
            with failures.guard("listing", "threadloom.Saver"):
                files = build_listing(wd, sizes, owners, args.checkpoints, bool(args.keep))
                measured = measure_listing(files, owners, calls, budget, args.profile)
                text, listing = listing_report(files, measured, owners, args.checkpoints)
                print()
                print(text)
                sys.stdout.flush()
                for (n, what), prof in measured["profiles"].items():
                    profiles.append((f"threads, {what}, at {n:,} threads", prof))
        if "transcript" in parts:
            with failures.guard("transcript", "threadloom.Saver"):
                measured = measure_transcripts(wd, lengths, per_turn, calls, budget, args.profile)
                text, transcript = transcript_report(measured, lengths)
                print()
                print(text)
                sys.stdout.flush()
                for (tid, what), prof in measured["profiles"].items():
                    profiles.append((f"{what} of {tid}", prof))
                remove(wd / "transcripts.threadloom.db")
                remove(wd / "transcripts.sqlite.db")
        if "put" in parts:
            with failures.guard("put", "threadloom.Saver"):
                measured = measure_puts(wd, chat_threads, chat_turns, rounds, args.profile)
                text, puts = puts_report(measured, chat_threads, chat_turns)
                print()
                print(text)
                if measured["parts"] is not None:
                    print()
                    print(measured["parts"])
    print()
    print(targets(listing, transcript, puts))
    print()
    print(
        f"Whole run: {time.perf_counter() - begun:.0f} s; load average at the end: "
        f"{' / '.join(f'{x:.2f}' for x in os.getloadavg())} (1 / 5 / 15 min; 2 cores here "
        "means anything above ~1 is another process competing)."
    )
    for title, prof in profiles:
        print(h.profile_report(prof, title, top=20))
    return failures.report()


if __name__ == "__main__":
    raise SystemExit(main())
