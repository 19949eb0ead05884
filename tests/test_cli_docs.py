"""Every example command of docs/cli.md and of the README's "Command line" section runs as
written and exits as documented (0), on real sources and a real broker.

The examples run in order, in a folder holding what they name: `memory.db` (the demo's
thread and `t-1`, `t-42`), `checkpoints.sqlite` (a LangGraph SqliteSaver file),
`storage/documents.sqlite` (a naas engine's file, written by naas itself). The only
substitutions are the documented placeholders: `...` in a secret or a PostgreSQL URL
(the test's secret, the test server), and the broker `nats://127.0.0.1:4222` (the test's
nats-server, where `threadloom serve` answers as the document service). `view` and
`serve`, which run until stopped, are stopped with Ctrl-C once they say they are ready.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.migration.conftest import naas_files  # noqa: F401  (fixture, used by name)
from tests.nats.conftest import naas_env, nats_server  # noqa: F401  (fixtures, used by name)
from threadloom.cli import main

ROOT = Path(__file__).resolve().parents[1]
SRC = str(ROOT / "src")
#: The broker address the examples name.
BROKER = "nats://127.0.0.1:4222"
SECRET = "docs-test-secret"


def examples(path: Path, section: str | None = None) -> list[str]:
    """The command lines of the ```sh blocks of `path` (of one `## ` section if named)."""
    text = path.read_text()
    if section is not None:
        start = text.index(f"\n## {section}\n")
        end = text.find("\n## ", start + 1)
        text = text[start : end if end >= 0 else None]
    lines: list[str] = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, flags=re.S | re.M):
        lines.extend(line for line in block.splitlines() if line.strip())
    return lines


def test_the_examples_are_found() -> None:
    """The extraction finds the blocks (a renamed section would silently test nothing)."""
    assert len(examples(ROOT / "docs" / "cli.md")) >= 10
    assert any(
        line.startswith("threadloom serve") for line in examples(ROOT / "README.md", "Command line")
    )


@pytest.fixture
def folder(
    tmp_path: Path,
    naas_files: dict[str, tuple[Path, dict[str, Any]]],  # noqa: F811
    postgres_url: str,
) -> Path:
    """The folder the examples run in, holding every file they name."""
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.sqlite import SqliteSaver

    from threadloom import Saver

    work = tmp_path / "work"
    work.mkdir()
    assert main(["demo", str(work / "memory.db")]) == 0
    with Saver.from_conn_string(str(work / "memory.db")) as saver:
        for thread_id in ("t-1", "t-42"):
            config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
            saver.put(config, empty_checkpoint(), {}, {})  # type: ignore[arg-type]
    with SqliteSaver.from_conn_string(str(work / "checkpoints.sqlite")) as source:
        config = {"configurable": {"thread_id": "from-sqlite", "checkpoint_ns": ""}}
        source.put(config, empty_checkpoint(), {}, {})  # type: ignore[arg-type]
    (work / "storage").mkdir()
    shutil.copy(naas_files["v2"][0], work / "storage" / "documents.sqlite")
    _postgres_source(postgres_url)
    return work


def _postgres_source(url: str) -> None:
    """A PostgresSaver thread and a PostgresStore item in the test server's database."""
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.store.postgres import PostgresStore

    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()
        config = {"configurable": {"thread_id": "from-postgres", "checkpoint_ns": ""}}
        saver.put(config, empty_checkpoint(), {}, {})  # type: ignore[arg-type]
    with PostgresStore.from_conn_string(url) as store:
        store.setup()
        store.put(("users", "ada"), "fact", {"text": "likes tea"})


@pytest.fixture
def service(folder: Path, nats_server: str) -> Iterator[str]:  # noqa: F811
    """`threadloom serve` on the test broker: the document service the examples talk to."""
    served = folder.parent / "served.db"
    process = subprocess.Popen(
        [sys.executable, "-m", "threadloom", "serve", str(served), "--nats", nats_server],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC, "THREADLOOM_NATS_JWT_SECRET": SECRET},
    )
    assert process.stdout is not None
    assert process.stdout.readline().startswith("ready: ")
    try:
        yield nats_server
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(60) == 0


class Runner:
    """Runs example lines in order in one folder with one environment."""

    def __init__(self, folder: Path, broker: str, postgres: str) -> None:
        self.folder = folder
        self.broker = broker
        self.postgres = postgres
        self.env = {**os.environ, "PYTHONPATH": SRC}
        self.env.pop("THREADLOOM_NATS_JWT_SECRET", None)
        self.env.pop("POSTGRES_URL", None)

    def run(self, line: str) -> None:
        words = [w.replace(BROKER, self.broker) for w in shlex.split(line, comments=True)]
        if words[0] == "pip":
            return  # installs; the environment has every extra
        if words[0] == "export":
            name, _, value = words[1].partition("=")
            if "..." in value:  # a documented placeholder
                value = {"THREADLOOM_NATS_JWT_SECRET": SECRET, "POSTGRES_URL": self.postgres}[name]
            self.env[name] = value
            return
        assert words[0] == "threadloom", f"not a threadloom command: {line}"
        argv = [sys.executable, "-m", "threadloom", *words[1:]]
        if words[1] in ("view", "serve"):
            self._until_ready(argv, line)
            return
        done = subprocess.run(
            argv, cwd=self.folder, env=self.env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
        assert "Traceback" not in done.stderr, line

    def _until_ready(self, argv: list[str], line: str) -> None:
        process = subprocess.Popen(
            argv,
            cwd=self.folder,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert process.stdout is not None
        first = process.stdout.readline()
        ready = first.startswith(("ready: ", "threadloom view: http://"))
        process.send_signal(signal.SIGINT)
        rest = process.communicate(timeout=60)[0]
        assert ready, f"{line}\n{first}{rest}"
        assert process.returncode == 0, f"{line}\n{first}{rest}"
        assert "Traceback" not in rest, line


@pytest.mark.parametrize(
    ("doc", "section"),
    [("docs/cli.md", None), ("README.md", "Command line")],
    ids=["cli", "readme"],
)
def test_every_documented_example_runs_as_written(
    folder: Path, service: str, postgres_url: str, doc: str, section: str | None
) -> None:
    """Each example line, in order, exits 0 without a traceback (docs/cli.md; the README's
    Command line section)."""
    runner = Runner(folder, service, postgres_url)
    for line in examples(ROOT / doc, section):
        runner.run(line)
