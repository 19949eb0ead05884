"""A naas Agent's chat through a real naas engine: threadloom's adapter vs naas's SQLite adapter.

Run: `python bench/bench_naas.py` (`--quick`: 2 conversations of 10 turns;
`--conversations N`, `--turns N`, `--keep`).

Starts what tests/naas starts: the cached naas venv (tests/nats/README.md) with this
tree's threadloom on its path, and in it naas-abi-core 3.1.0's `Engine` loaded from a
project's `config.yaml` (tests/naas/_project.py), a naas `Agent` built with
`memory=None` (so on the engine's own `DocumentCheckpointSaver`) and a deterministic
chat model that echoes the user's message (tests/naas/naas_engine_chat.py). One process
per conversation, CONVERSATIONS conversations of TURNS turns, the same messages on every
project (400-character stretches of this repository's documentation, none repeated):

- `naas sqlite`: `document_adapter: {adapter: sqlite}` (naas's default in NATS mode);
- `threadloom adapter`: `adapter: custom` naming `threadloom.naas.DocumentAdapter` (the
  LangGraph collections in storage/memory.db, the rest in naas's SQLite adapter);
- `threadloom bind`: no document service, `threadloom.naas.bind("storage/memory.db")`
  (agents on `threadloom.Saver` directly, no document round trip).

Turn time is `Agent.invoke` measured in the engine process (the model answers at once,
so it is the memory's cost plus the agent's own work); bytes are what the project's
`storage/` holds after the engines shut down (each SQLite file with its -wal and -shm),
and the memory files alone; for threadloom's file also after `threadloom compact` (run
on a copy), which packs the value table's B-tree (values are keyed by thread and hash,
so live inserts leave its pages about 60% full).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import _harness as h  # noqa: E402

from tests.naas._project import NAAS_SQLITE, THREADLOOM, write_project  # noqa: E402
from tests.nats._peers import ensure_naas_env  # noqa: E402

CHAT = ROOT / "tests" / "naas" / "naas_engine_chat.py"
SUBJECTS = ("naas sqlite", "threadloom adapter", "threadloom bind")
BASE = "naas sqlite"
#: Characters of a user message (the echo model's reply is as long).
MESSAGE_CHARS = 400


def corpus() -> str:
    """Prose to cut messages from: this repository's documentation, whitespace folded.

    Real messages do not repeat one template (a dictionary would compress a template to
    almost nothing, flattering threadloom), so every message is another stretch of text.
    """
    paths = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return " ".join(" ".join(p.read_text().split()) for p in paths)


def messages_of(text: str, conversation: int, turns: int) -> list[str]:
    """The messages of one conversation: consecutive stretches, each conversation elsewhere."""
    start = (conversation * turns * MESSAGE_CHARS * 7919) % max(1, len(text) - MESSAGE_CHARS)
    out = []
    for turn in range(turns):
        at = (start + turn * MESSAGE_CHARS) % (len(text) - MESSAGE_CHARS)
        out.append(text[at : at + MESSAGE_CHARS])
    return out


def project_for(subject: str, directory: Path) -> tuple[Path, list[str]]:
    """The project of a subject and the driver options it runs with."""
    if subject == "naas sqlite":
        return write_project(directory, document_adapter=NAAS_SQLITE), []
    if subject == "threadloom adapter":
        return write_project(directory, document_adapter=THREADLOOM), []
    project = write_project(directory, document_adapter=None)
    return project, ["--bind", str(project / "storage" / "memory.db")]


def storage_bytes(project: Path) -> tuple[int, int]:
    """(every file under storage/, the memory files: memory.db or documents.sqlite)."""
    storage = project / "storage"
    total = sum(p.stat().st_size for p in storage.rglob("*") if p.is_file())
    memory = "memory.db" if (storage / "memory.db").exists() else "documents.sqlite"
    return total, h.at_rest_bytes(str(storage / memory))


def run_subject(
    naas: Any, subject: str, directory: Path, conversations: int, turns: int
) -> dict[str, Any]:
    project, options = project_for(subject, directory)
    text = corpus()
    times: list[float] = []
    per_turn: list[list[float]] = [[] for _ in range(turns)]
    checkpoints = 0
    for conversation in range(conversations):
        messages = messages_of(text, conversation, turns)
        report = naas.run(
            CHAT,
            *options,
            str(project),
            f"conversation-{conversation}",
            *messages,
            cwd=project,
            threadloom=True,
            timeout=900,
        ).json()
        assert len(report["messages"]) == 2 * turns, report["messages"][-2:]
        assert report["replies"][-1].startswith(f"echo: {messages[-1]}"), report["replies"][-1]
        for turn, seconds in enumerate(report["seconds"]["turns"]):
            times.append(seconds)
            per_turn[turn].append(seconds)
        checkpoints += report["checkpoints"]
    total, memory = storage_bytes(project)
    compacted = None
    if (project / "storage" / "memory.db").exists():
        compacted = compacted_bytes(project / "storage" / "memory.db", directory / "copy.db")
    h.note(f"{subject}: {checkpoints} checkpoints, {h.kib(memory)} memory, {h.kib(total)} storage/")
    tenth = max(1, turns // 10)
    return {
        "median": statistics.median(times) * 1000,
        "mean": statistics.fmean(times) * 1000,
        "first": statistics.fmean(t for turn in per_turn[:tenth] for t in turn) * 1000,
        "last": statistics.fmean(t for turn in per_turn[-tenth:] for t in turn) * 1000,
        "total": total,
        "memory": memory,
        "compacted": compacted,
        "checkpoints": checkpoints,
    }


def compacted_bytes(memory: Path, copy: Path) -> int:
    """The file's bytes after `threadloom compact` (on a copy: the run's file stays as is)."""
    shutil.copyfile(memory, copy)
    done = subprocess.run(
        [sys.executable, "-m", "threadloom", "compact", "--db", str(copy), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(json.loads(done.stdout)["bytes_after"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="2 conversations of 10 turns")
    parser.add_argument("--conversations", type=int, default=10)
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--keep", action="store_true", help="keep the projects (path on stderr)")
    args = parser.parse_args()
    conversations, turns = (2, 10) if args.quick else (args.conversations, args.turns)
    print(h.describe_machine())
    print(f"{conversations} conversations x {turns} turns, one engine process each\n")
    naas = ensure_naas_env()
    results: dict[str, dict[str, Any]] = {}
    with h.workdir(args.keep) as scratch:
        for subject in SUBJECTS:
            directory = scratch / subject.replace(" ", "-")
            results[subject] = run_subject(naas, subject, directory, conversations, turns)
    base = results[BASE]
    rows = []
    for subject, r in results.items():
        rows.append(
            [
                subject,
                f"{r['median']:.1f}",
                f"{r['mean']:.1f}",
                f"{r['first']:.1f} / {r['last']:.1f}",
                h.ratio(r["median"], base["median"]),
                h.kib(r["memory"]),
                h.ratio(r["memory"], base["memory"]),
                h.kib(r["total"]),
                h.ratio(r["total"], base["total"]),
                "-" if r["compacted"] is None else h.ratio(r["compacted"], base["memory"]),
            ]
        )
    headers = [
        "memory of the engine",
        "turn ms p50",
        "mean",
        f"first / last {max(1, turns // 10)} turns",
        "turn vs naas",
        "memory file",
        "vs naas",
        "storage/",
        "vs naas",
        "compacted vs naas",
    ]
    print(h.table(headers, rows))
    per_conversation = {s: (r["memory"] / conversations) for s, r in results.items()}
    print(
        "\nmemory per conversation: "
        + ", ".join(f"{s} {h.kib(int(v))}" for s, v in per_conversation.items())
    )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
