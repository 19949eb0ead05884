"""Damage harness: a fixture file, ways to damage copies of it, and judges of the result.

Everything here goes through threadloom's public surface only (`Saver` and the
`threadloom verify` command, run in this process through its `main(argv)` unless asked
for real processes), so it measures any implementation of the engine. The one
exception is the damage itself, done with apsw or raw bytes on a copy, as a disk, a
bug or a hand would do it.

Invariants: the fixture is deterministic in content (fixed seeds, fixed checkpoint ids
and timestamps); the inventory of threads, namespaces and checkpoint ids is always taken
from the ORIGINAL file, never from a damaged copy, so a copy that loses a checkpoint is
caught as `wrong` rather than silently compared on less.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import shutil
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.types import Interrupt

from threadloom import Saver
from threadloom.cli import main
from threadloom.errors import ThreadloomError

SEED = 20250611
#: Checkpoints per chat thread.
STEPS = 16
#: Bytes of each chat message (every value is then stored in content blocks).
MESSAGE_BYTES = 4200
#: Bytes of the one large value (held by thread `chat-0` of the first scope).
LARGE_BYTES = 300 * 1024
#: The subgraph namespace of thread `chat-0`.
CHILD_NS = "child:6a5e2a0c-1f0b-4c3e-9d1a-5b7e8f9a0b1c"


@dataclass(frozen=True)
class Scope:
    """One document scope of the file: a saver's `namespace` and `agent_id`."""

    namespace: str
    agent_id: str

    def open(self, path: Path, **kwargs: Any) -> AbstractContextManager[Saver]:
        """Open a Saver on `path` in this scope for a `with` block."""
        return Saver.from_conn_string(
            str(path), namespace=self.namespace, agent_id=self.agent_id, **kwargs
        )


#: The default scope (the shared engine's) and a second one holding a same-named thread.
SCOPES = (
    Scope("naas_abi_core.services.agent", "engine.v1"),
    Scope("tests.integrity", "agent.b"),
)
#: Chat threads per scope; `chat-0` exists in both scopes with different content.
THREADS = {SCOPES[0]: ("chat-0", "chat-1", "chat-2"), SCOPES[1]: ("chat-0", "chat-b1")}


# -- the fixture -----------------------------------------------------------------------


def _text(rng: random.Random, size: int) -> str:
    words = ("memory", "thread", "graph", "agent", "tool", "node", "edge", "state", "sqlite")
    out: list[str] = []
    length = 0
    while length < size:
        word = f"{rng.choice(words)}{rng.randrange(10_000)}"
        out.append(word)
        length += len(word) + 1
    return " ".join(out)[:size]


def _checkpoint_id(scope: int, thread: int, ns: int, step: int) -> str:
    # uuid-shaped, sorting by step within a thread and namespace, as uuid6 ids do
    return f"1f0a{scope:x}{thread:x}{ns:x}0-{step:04x}-6000-8000-000000000000"


def _chat(saver: Saver, scope: int, index: int, thread_id: str, ns: str, steps: int) -> None:
    """Put `steps` checkpoints of a growing conversation, with pending writes."""
    rng = random.Random(f"{SEED}-{scope}-{thread_id}-{ns}")
    ns_tag = 1 if ns else 0
    config: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
    messages: list[Any] = []
    versions: dict[str, Any] = {}
    large = rng.randbytes(LARGE_BYTES) if (scope, index, ns) == (0, 0, "") else None
    for step in range(steps):
        kind = HumanMessage if step % 2 == 0 else AIMessage
        messages = [*messages, kind(content=_text(rng, MESSAGE_BYTES), id=f"m-{step}")]
        values: dict[str, Any] = {"messages": messages, "step": step}
        if large is not None and step >= 3:
            values["attachment"] = large if step < 10 else large + b"appendix"
        updated = [name for name in values if name != "attachment" or step in (3, 10)]
        for name in updated:
            versions[name] = saver.get_next_version(versions.get(name), None)
        checkpoint = {
            "v": 4,
            "id": _checkpoint_id(scope, index, ns_tag, step),
            "ts": f"2025-06-11T12:{step:02d}:00+00:00",
            "channel_values": dict(values),
            "channel_versions": dict(versions),
            "versions_seen": {"agent": {"messages": versions["messages"]}},
            "updated_channels": updated,
        }
        metadata = {
            "source": "loop" if step else "input",
            "step": step,
            "run_id": f"run-{scope}-{thread_id}-{step // 4}",
            "parents": {"": "root"} if ns else {},
        }
        new = {name: versions[name] for name in updated}
        config = saver.put(config, checkpoint, metadata, new)  # type: ignore[arg-type]
        if step == steps // 2:
            saver.put_writes(
                config,
                [("messages", [AIMessage(content=_text(rng, MESSAGE_BYTES))]), ("branch", None)],
                task_id=f"task-{thread_id}-{step}",
            )
        if step == steps - 1:
            task = f"task-{thread_id}-last"
            saver.put_writes(config, [("messages", [HumanMessage(content="hi")])], task)
            saver.put_writes(config, [("__error__", "first failure")], task, task_path="~a")
            saver.put_writes(config, [("__error__", "replaced failure")], task, task_path="~a")
            saver.put_writes(
                config,
                [("__interrupt__", (Interrupt(value=_text(rng, 5000), id="int-1"),))],
                f"{task}-interrupt",
            )


def build(path: Path) -> Path:
    """Write the fixture file at `path` (which must not exist) and close it."""
    for s, scope in enumerate(SCOPES):
        with scope.open(path) as saver:
            for t, thread_id in enumerate(THREADS[scope]):
                _chat(saver, s, t, thread_id, "", STEPS)
                if (s, t) == (0, 0):
                    _chat(saver, s, t, thread_id, CHILD_NS, 4)
    leftovers = [p.name for p in path.parent.glob(path.name + "-*")]
    assert not leftovers, f"a closed file must have no side files, found {leftovers}"
    return path


# -- reading everything ----------------------------------------------------------------


@dataclass(frozen=True)
class Inventory:
    """What the original holds: per scope, per (thread_id, checkpoint_ns), checkpoint ids."""

    checkpoints: dict[Scope, dict[tuple[str, str], list[str]]]
    run_ids: dict[Scope, dict[tuple[str, str], list[str]]]


def inventory(path: Path) -> Inventory:
    """Read the original's threads, namespaces, checkpoint ids and run ids via `list(None)`."""
    checkpoints: dict[Scope, dict[tuple[str, str], list[str]]] = {}
    run_ids: dict[Scope, dict[tuple[str, str], list[str]]] = {}
    for scope in SCOPES:
        with scope.open(path, readonly=True) as saver:
            found: dict[tuple[str, str], list[str]] = {}
            runs: dict[tuple[str, str], list[str]] = {}
            for item in saver.list(None):
                c = item.config["configurable"]
                slot = (c["thread_id"], c["checkpoint_ns"])
                found.setdefault(slot, []).append(c["checkpoint_id"])
                run = item.metadata.get("run_id")
                if run not in runs.setdefault(slot, []):
                    runs[slot].append(run)
        checkpoints[scope], run_ids[scope] = found, runs
    return Inventory(checkpoints, run_ids)


def _plain(item: Any) -> Any:
    """A CheckpointTuple (or None) as a comparable dict of everything a caller sees."""
    if item is None:
        return None
    return {
        "config": item.config,
        "checkpoint": item.checkpoint,
        "metadata": item.metadata,
        "parent_config": item.parent_config,
        "pending_writes": item.pending_writes,
    }


def reads(saver: Saver, scope: Scope, inv: Inventory) -> Iterator[tuple[str, Callable[[], Any]]]:
    """Yield (label, read) for every public read the original can answer in `scope`."""
    tag = scope.agent_id
    yield f"{tag} list(None)", lambda: [_plain(t) for t in saver.list(None)]
    for (thread_id, ns), ids in inv.checkpoints[scope].items():
        base = {"thread_id": thread_id, "checkpoint_ns": ns}
        where = f"{tag} {thread_id} ns={ns[:8]!r}"
        yield f"{where} list", lambda b=base: [_plain(t) for t in saver.list({"configurable": b})]
        yield f"{where} latest", lambda b=base: _plain(saver.get_tuple({"configurable": b}))
        for cid in ids:
            cfg = {"configurable": {**base, "checkpoint_id": cid}}
            yield f"{where} get {cid}", lambda c=cfg: _plain(saver.get_tuple(c))
        for run in inv.run_ids[scope][(thread_id, ns)]:
            flt = {"run_id": run}
            yield (
                f"{where} list(filter={run})",
                lambda b=base, f=flt: [
                    _plain(t) for t in saver.list({"configurable": b}, filter=f)
                ],
            )


RAISED, RAISED_OTHER, WRONG, IDENTICAL = "raised", "raised-other", "wrong", "identical"
#: A whole thread (or scope) reads as absent: its name leads nowhere. Format 4 checks a
#: scope's threads against its census the first time a scope meets a missing thread, so
#: on a file damaged at rest this is a failure like `wrong` (kept apart to be counted).
UNREACHABLE = "unreachable"
#: Only filtered lists differ: `list(filter=...)` decides on the `checkpoint_keys` rows
#: in SQL and trusts them as SQLite's own indexes are trusted (docs/FORMAT.md, format
#: 4: checking them on each read would cost what deciding filters in SQL saves);
#: `verify` must report it (its `keys` check compares them with the metadata).
FILTER_INDEX = "filter-index"
#: Worst first: a copy's outcome is the worst outcome of any of its reads.
SEVERITY = (WRONG, RAISED_OTHER, FILTER_INDEX, UNREACHABLE, RAISED, IDENTICAL)


@dataclass
class Snapshot:
    """Every read's result (or the exception it raised), by label."""

    results: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, BaseException] = field(default_factory=dict)


def snapshot(path: Path, inv: Inventory) -> Snapshot:
    """Read everything the inventory names from `path` (opened read-only), scope by scope."""
    snap = Snapshot()
    for scope in SCOPES:
        opened = scope.open(path, readonly=True)
        try:
            saver = opened.__enter__()
        except Exception as exc:  # judged by the caller: a ThreadloomError is a fine answer
            snap.errors[f"{scope.agent_id} open"] = exc
            continue
        for label, read in reads(saver, scope, inv):
            try:
                snap.results[label] = read()
            except Exception as exc:
                snap.errors[label] = exc
        try:
            opened.__exit__(None, None, None)
        except Exception as exc:
            snap.errors[f"{scope.agent_id} close"] = exc
    return snap


@dataclass
class Outcome:
    """How a damaged copy read compared with the original."""

    kind: str
    details: list[str]

    def __str__(self) -> str:
        return f"{self.kind}: " + "; ".join(self.details[:4])


def judge(original: Snapshot, damaged: Snapshot) -> Outcome:
    """Compare a damaged copy's reads with the original's: the worst read decides."""
    found: dict[str, list[str]] = {kind: [] for kind in SEVERITY}
    for label, exc in damaged.errors.items():
        kind = RAISED if isinstance(exc, ThreadloomError) else RAISED_OTHER
        found[kind].append(f"{label}: {type(exc).__module__}.{type(exc).__name__}: {exc}"[:300])
    gone = _unreachable(original, damaged)
    for label, result in damaged.results.items():
        if result == original.results[label]:
            continue
        tag, _, rest = label.partition(" ")
        thread = rest.split(" ", 1)[0]
        if (tag, thread) in gone or (
            rest == "list(None)"
            and result
            == [
                t
                for t in original.results[label]
                if (tag, t["config"]["configurable"]["thread_id"]) not in gone
            ]
        ):
            found[UNREACHABLE].append(f"{label} reads as absent")
        elif " list(filter=" in label:
            found[FILTER_INDEX].append(f"{label} returned {_describe(result)} without raising")
        else:
            found[WRONG].append(f"{label} returned {_describe(result)} without raising")
    for kind in SEVERITY:
        if found[kind]:
            return Outcome(kind, found[kind])
    return Outcome(IDENTICAL, [])


def _unreachable(original: Snapshot, damaged: Snapshot) -> set[tuple[str, str]]:
    """(scope tag, thread id) of every thread whose reads each returned absent or raised
    (at least one absent): its name leads nowhere, or to damage."""
    reads: dict[tuple[str, str], list[Any]] = {}
    for label in original.results:
        tag, _, rest = label.partition(" ")
        if rest != "list(None)":
            reads.setdefault((tag, rest.split(" ", 1)[0]), []).append(label)
    return {
        key
        for key, labels in reads.items()
        if all(
            label in damaged.errors or damaged.results.get(label) in (None, []) for label in labels
        )
        and any(damaged.results.get(label, 0) in (None, []) for label in labels)
        and any(original.results[label] not in (None, []) for label in labels)
    }


def _describe(result: Any) -> str:
    if result is None:
        return "None"
    if isinstance(result, list):
        return f"a list of {len(result)}"
    return "a different tuple"


# -- verify ----------------------------------------------------------------------------


@dataclass
class Verdict:
    """What `threadloom verify` said about a file, as JSON and as plain text."""

    json_code: int
    plain_code: int
    json_out: str
    plain_out: str
    stderr: str
    #: Files of this process still open on the checked path after an in-process verify.
    left_open: tuple[str, ...] = ()

    @property
    def traceback(self) -> bool:
        """True when either run printed a Python traceback."""
        return "Traceback (most recent call last)" in self.stderr

    @property
    def codes(self) -> tuple[int, int]:
        """The exit codes of the JSON and the plain run."""
        return self.json_code, self.plain_code

    @property
    def report(self) -> Any:
        """The parsed JSON report (None when stdout is not JSON)."""
        try:
            return json.loads(self.json_out)
        except ValueError:
            return None


def verify(path: Path, *, processes: bool = False) -> Verdict:
    """Run `threadloom verify --db PATH` with `--json` and plain.

    In this process by default, through the command line's own `main(argv)`: what a
    `python -m threadloom` process adds is its start (about 0.4 s of CPU each, twice a case)
    and the console-script line `sys.exit(main())`, which `in_process` mirrors, so the
    outcome is the same. `processes=True` starts the two real processes side by side
    (tests/integrity/test_damage.py compares the two ways on a sound and a damaged file).
    """
    base = ["verify", "--db", str(path)]
    if processes:
        return _verify_in_processes(base)
    (json_code, json_out, json_err), (plain_code, plain_out, plain_err) = (
        in_process(argv) for argv in (base + ["--json"], base)
    )
    return Verdict(
        json_code, plain_code, json_out, plain_out, json_err + plain_err, open_files(path)
    )


def _verify_in_processes(base: list[str]) -> Verdict:
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "threadloom", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for argv in (base + ["--json"], base)
    ]
    (json_out, json_err), (plain_out, plain_err) = (run.communicate(timeout=120) for run in runs)
    return Verdict(
        runs[0].returncode, runs[1].returncode, json_out, plain_out, json_err + plain_err
    )


def in_process(argv: list[str]) -> tuple[int, str, str]:
    """Run `threadloom ARGV` in this process as `python -m threadloom` would run it.

    Returns:
        The exit code, stdout and stderr: `main`'s return value; a SystemExit's code
        (argparse's usage errors); 1 and the traceback on stderr for any other exception,
        as the interpreter does with one that escapes a script.
    """
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
            if not isinstance(exc.code, (int, type(None))):
                print(exc.code, file=sys.stderr)
        except Exception:
            traceback.print_exc()
            code = 1
    return code, out.getvalue(), err.getvalue()


def open_files(path: Path) -> tuple[str, ...]:
    """The files of this process open on `path` or its `-wal`, `-shm` or `-journal`."""
    folder = Path("/proc/self/fd")
    if not folder.is_dir():  # not Linux: nothing to check
        return ()
    names = {str(path.resolve()) + suffix for suffix in ("", "-wal", "-shm", "-journal")}
    found = []
    for fd in os.listdir(folder):
        with contextlib.suppress(OSError):
            target = os.readlink(folder / fd)
            if target in names:
                found.append(target)
    return tuple(sorted(found))


# -- the fixture, once per process -----------------------------------------------------


@dataclass(frozen=True)
class Original:
    """The built fixture: its path, inventory and the snapshot every copy is compared to."""

    path: Path
    inventory: Inventory
    snapshot: Snapshot

    def copy(self, directory: Path, name: str) -> Path:
        """Copy the original file into `directory` and return the copy's path."""
        target = directory / f"{name}.db"
        shutil.copyfile(self.path, target)
        return target


def original(directory: Path) -> Original:
    """Build the fixture in `directory` (once) and read it back."""
    path = directory / "original.db"
    if not path.exists():
        build(path)
    inv = inventory(path)
    snap = snapshot(path, inv)
    assert not snap.errors, f"the fixture itself does not read back: {snap.errors}"
    return Original(path, inv, snap)
