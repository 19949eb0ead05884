"""Migrating in the environment the README's set-up builds (`pip install '.[demo]'`).

That venv has langgraph and langchain-core but none of the `migrate` extra's drivers
(langgraph-checkpoint-sqlite, langgraph-checkpoint-postgres, psycopg). Each test runs
threadloom in a child Python whose import system refuses those packages as an absent
install does (`ModuleNotFoundError`), so they hold whatever the test venv has installed:
a SqliteSaver file (written here with the stock saver) migrates, and a source that needs
a missing driver is refused in one `error:`/`hint:` pair, with nothing written.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver

import threadloom
from tests.migration import _graphs
from threadloom import Saver

ROOT = Path(__file__).resolve().parents[2]
#: The packages the README's venv lacks, refused with their submodules.
ABSENT = (
    "langgraph.checkpoint.sqlite",
    "langgraph.store.sqlite",
    "langgraph.checkpoint.postgres",
    "langgraph.store.postgres",
    "psycopg",
    "psycopg_binary",
    "aiosqlite",
)
#: Run first in the child: a finder ahead of every other that says the ABSENT packages
#: are not installed.
BLOCK = f"""
import sys
class _Absent:
    names = {ABSENT!r}
    def find_spec(self, name, path=None, target=None):
        if any(name == n or name.startswith(n + ".") for n in self.names):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, _Absent())
"""
CLI = BLOCK + "from threadloom.cli import main\nsys.exit(main(sys.argv[1:]))\n"


def child(code: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run `code` with `args` in a child Python that lacks the ABSENT packages, importing
    this threadloom and the tests package."""
    src = str(Path(threadloom.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, str(ROOT)])}
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def write_source(path: Path) -> None:
    """A SqliteSaver file holding thread t-1 of the agent graph, written by the stock saver."""
    with SqliteSaver.from_conn_string(str(path)) as saver:
        app = _graphs.agent_graph().compile(checkpointer=saver)
        app.invoke({"messages": [HumanMessage("what is 6 x 2?", id="h1")]}, _graphs.config("t-1"))


def test_the_child_lacks_the_drivers(tmp_path: Path) -> None:
    """The child's import of SqliteSaver fails as on a venv without it (the other tests
    would prove nothing otherwise)."""
    run = child(BLOCK + "from langgraph.checkpoint.sqlite import SqliteSaver\n", cwd=tmp_path)
    assert run.returncode == 1
    assert "ModuleNotFoundError: No module named 'langgraph.checkpoint.sqlite'" in run.stderr


@pytest.mark.parametrize("name", ["tools", "subgraph", "send"])
def test_a_sqlite_saver_file_migrates_without_langgraph_checkpoint_sqlite(
    tmp_path: Path, sqlite_source: object, read_sqlite: object, name: str
) -> None:
    """`threadloom migrate FILE --db NEW --apply` copies a SqliteSaver file where
    langgraph-checkpoint-sqlite is not installed, and the threads read as on SqliteSaver."""
    source = sqlite_source(name)  # type: ignore[operator]
    run = child(CLI, "migrate", str(source), "--db", "memory.db", "--apply", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("applied: 1 threads")
    reader = read_sqlite(source)  # type: ignore[operator]
    with Saver.from_conn_string(str(tmp_path / "memory.db")) as saver:
        assert _graphs.snapshots(name, saver, name) == _graphs.snapshots(name, reader, name)
        assert _graphs.tuples(saver, name) == _graphs.tuples(reader, name)


def test_postgres_without_psycopg_is_one_error(tmp_path: Path) -> None:
    """`migrate --from postgres` without the migrate extra says which package is missing
    and how to install it, exits 1, and creates no target."""
    url = "postgresql://nobody@127.0.0.1:9/none"
    run = child(
        CLI,
        "migrate",
        "--from",
        "postgres",
        "--source-url",
        url,
        "--db",
        "m.db",
        "--apply",
        cwd=tmp_path,
    )
    assert run.returncode == 1
    assert run.stderr.splitlines() == [
        "error: reading a PostgresSaver database needs psycopg, which is not installed",
        "hint: install the migrate extra: pip install '.[migrate]' in threadloom's clone",
    ]
    assert not (tmp_path / "m.db").exists()


def test_a_sqlite_store_without_its_driver_is_one_error(tmp_path: Path) -> None:
    """`migrate --store` from a SqliteStore file without langgraph-checkpoint-sqlite is
    refused before anything is copied (the checkpoints included)."""
    write_source(tmp_path / "checkpoints.sqlite")
    from langgraph.store.sqlite import SqliteStore

    with SqliteStore.from_conn_string(str(tmp_path / "store.sqlite")) as store:
        store.setup()
        store.put(("users", "ada"), "k", {"text": "tea"})
    run = child(
        CLI,
        "migrate",
        "checkpoints.sqlite",
        "--db",
        "m.db",
        "--apply",
        "--store",
        "--store-source",
        "store.sqlite",
        cwd=tmp_path,
    )
    assert run.returncode == 1
    assert run.stderr.splitlines() == [
        "error: reading a LangGraph SqliteStore needs langgraph-checkpoint-sqlite, which is "
        "not installed",
        "hint: install the migrate extra: pip install '.[migrate]' in threadloom's clone",
    ]
    assert not (tmp_path / "m.db").exists()


def test_the_readme_migration_section_runs_as_written(tmp_path: Path) -> None:
    """README's "Moving from SqliteSaver" commands and Python, run as written in the
    README's environment on a SqliteSaver file, copy the thread once and the graph reads
    it back."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Moving from SqliteSaver", 1)[1].split("\n## ", 1)[0]
    commands = re.search(r"<!-- migrate-commands -->\n```sh\n(.*?)```", section, re.S)
    example = re.search(r"<!-- migrate-example -->\n```python\n(.*?)```", section, re.S)
    assert commands is not None and example is not None
    write_source(tmp_path / "checkpoints.sqlite")
    out = []
    for line in commands.group(1).splitlines():
        argv = shlex.split(line, comments=True)
        assert argv[0] == "threadloom"
        run = child(CLI, *argv[1:], cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        out.append(run.stdout)
    assert out[0].startswith("dry-run: 1 threads") and out[1].startswith("applied: 1 threads")
    # The example runs where the application's `graph` is defined.
    program = (
        BLOCK
        + "from tests.migration._graphs import agent_graph\ngraph = agent_graph()\n"
        + example.group(1)
    )
    run = child(program, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    printed = run.stdout.splitlines()
    assert printed[0] == "0 checkpoints copied"  # the command above copied them already
    assert printed[1].startswith("The answer is 12.")
