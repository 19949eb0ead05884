"""Migrating out: a threadloom file's threads and Store into PostgresSaver / PostgresStore.

Oracle: LangGraph's own PostgresSaver and PostgresStore reading the database (state
history, tuples, pending writes in order, Store items), against the threadloom file read
through `Saver` and `Store`; and the graphs resumed on both sides. The server is the
session's (tests/_postgres.py); one source file, written once for the module, is only
read by the migrations (each test has a database of its own).
"""

from __future__ import annotations

import json
import shutil
import sys
from datetime import timezone
from pathlib import Path
from typing import Any, NamedTuple

import psycopg
import pytest
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.store.postgres import PostgresStore

from tests.migration import _graphs
from threadloom import Saver, Store, migrate
from threadloom.cli import main
from threadloom.errors import MigrationError
from threadloom.protocol import WRITES

#: The scenarios resumed on both sides (the fork: two branches, one version counter).
RESUMED = ("fork", "subgraph", "tools")
ITEMS = [
    (("acme", "user", "ada", "facts"), "f1", {"text": "Ada prefers tea"}),
    (("acme", "user", "ada", "facts"), "f2", {"text": "Ada lives in Lisbon", "n": [1, 2]}),
    (("acme", "user", "bob"), "profile", {"name": "Bob", "nested": {"a": None}}),
    (("acme",), "settings", {"tz": "UTC"}),
]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A threadloom file holding every scenario's thread and Store items in namespaces."""
    path = tmp_path_factory.mktemp("out") / "memory.db"
    with Saver.from_conn_string(str(path)) as saver:
        for name in _graphs.SCENARIOS:
            _graphs.run(name, saver, name)
    with Store.from_conn_string(str(path)) as store:
        for namespace, key, value in ITEMS:
            store.put(namespace, key, value)
    return path


def counters(value: Any) -> Any:
    """A tuples() form with every channel version as its counter: a threadloom integer
    and the PostgresSaver string it is written as ("0..07.0.123") read alike."""
    if isinstance(value, dict):
        out = {k: counters(v) for k, v in value.items()}
        checkpoint = out.get("checkpoint")
        if isinstance(checkpoint, dict):
            checkpoint["channel_versions"] = _counted(checkpoint["channel_versions"])
            checkpoint["versions_seen"] = {
                node: _counted(seen) for node, seen in checkpoint["versions_seen"].items()
            }
        return out
    if isinstance(value, list):
        return [counters(v) for v in value]
    return value


def _counted(versions: dict[str, Any]) -> dict[str, Any]:
    return {k: int(str(v).split(".")[0]) for k, v in versions.items()}


def rows(url: str) -> dict[str, int]:
    """The number of rows of each PostgresSaver table (0 for a table that does not exist)."""
    found = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes", "store"):
            exists = conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()
            found[table] = (
                conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]  # type: ignore[index]
                if exists and exists[0]
                else 0
            )
    return found


def items_of(store: Any) -> list[tuple[Any, ...]]:
    """Every Store item: namespace, key, value, both times (as UTC)."""
    return sorted(
        (tuple(i.namespace), i.key, json.dumps(i.value, sort_keys=True),
         i.created_at.astimezone(timezone.utc), i.updated_at.astimezone(timezone.utc))
        for i in store.search((), limit=100)
    )  # fmt: skip


class Run(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> Run:
    """`threadloom migrate ARGV` run in this process; its exit code and output."""
    capsys.readouterr()
    code = main(["migrate", *argv])
    out, err = capsys.readouterr()
    return Run(code, out, err)


def test_every_thread_reads_on_postgres_saver_as_in_the_file(
    source: Path, postgres_database: str
) -> None:
    """Applied, PostgresSaver returns each thread's state history, subgraph states and
    checkpoint tuples (pending writes in order, with their task paths) as threadloom does,
    its versions as PostgresSaver strings; PostgresStore returns the Store's items with
    their times."""
    report = migrate(str(source), postgres_database, to="postgres", apply=True, store=True)
    found = report.as_dict()
    assert found["threads"] == len(_graphs.SCENARIOS)
    assert found["copied"] == found["checkpoints"] == found["missing"] > 30
    assert found["writes_copied"] == found["writes"] > 30
    assert found["target"] == {"kind": "postgres", "url": postgres_database}
    assert found["store"]["copied"] == found["store"]["items"] == len(ITEMS)
    assert found["store"]["namespaces"] == 3
    with (
        PostgresSaver.from_conn_string(postgres_database) as pg,
        Saver.from_conn_string(str(source)) as saver,
    ):
        for name in _graphs.SCENARIOS:
            assert _graphs.snapshots(name, pg, name) == _graphs.snapshots(name, saver, name), name
            theirs, ours = _graphs.tuples(pg, name), _graphs.tuples(saver, name)
            assert counters(theirs) == counters(ours), name
            versions = [v for t in theirs for v in t["checkpoint"]["channel_versions"].values()]
            assert all(isinstance(v, str) for v in versions), name
        ours_paths = sorted(d["task_path"] for c, _, d in saver.documents() if c == WRITES)
    with psycopg.connect(postgres_database, autocommit=True) as conn:
        theirs_paths = sorted(
            r[0] for r in conn.execute("SELECT task_path FROM checkpoint_writes").fetchall()
        )
    assert theirs_paths == ours_paths and sum(1 for p in theirs_paths if p) > 4
    with (
        psycopg.connect(postgres_database, autocommit=True) as conn,
        Store.from_conn_string(str(source)) as ours_store,
    ):
        assert items_of(PostgresStore(conn)) == items_of(ours_store)


def test_threads_continue_on_postgres_as_in_the_file(
    source: Path, postgres_database: str, tmp_path: Path
) -> None:
    """Migrated threads, resumed by their graphs on PostgresSaver, reach the state and
    history they reach on the threadloom file (the fork's two branches included). Gone on
    with on PostgreSQL only, they are present; gone on with on both sides, diverged and
    left alone unless included."""
    copy = tmp_path / "memory.db"
    shutil.copy(source, copy)
    migrate(str(copy), postgres_database, to="postgres", apply=True)
    with PostgresSaver.from_conn_string(postgres_database) as pg:
        theirs = {name: _graphs.continued(name, pg, name) for name in RESUMED}
    ahead = migrate(str(copy), postgres_database, to="postgres", apply=True).as_dict()
    assert ahead["diverged"] == [] and ahead["copied"] == 0
    assert ahead["present"] == ahead["checkpoints"]
    with Saver.from_conn_string(str(copy)) as saver:
        for name in RESUMED:
            assert _graphs.continued(name, saver, name) == theirs[name], name
    before = rows(postgres_database)
    both = migrate(str(copy), postgres_database, to="postgres", apply=True).as_dict()
    assert sorted(both["diverged"]) == sorted(both["skipped"]) == sorted(RESUMED)
    assert both["copied"] == 0 and rows(postgres_database) == before
    included = migrate(
        str(copy), postgres_database, to="postgres", apply=True, include_diverged=True
    ).as_dict()
    assert included["copied"] == both["missing"] > 0 and included["skipped"] == []


def test_a_dry_run_writes_nothing(source: Path, postgres_database: str) -> None:
    """Without apply the report counts every checkpoint and item as missing, and the
    database gets no table."""
    found = migrate(str(source), postgres_database, to="postgres", store=True).as_dict()
    assert found["mode"] == "dry-run"
    assert found["missing"] == found["checkpoints"] > 30 and found["copied"] == 0
    assert found["store"]["missing"] == len(ITEMS) and found["store"]["copied"] == 0
    assert rows(postgres_database) == dict.fromkeys(rows(postgres_database), 0)
    with psycopg.connect(postgres_database, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchone()
    assert tables == (0,)


def test_an_interrupted_run_resumes_and_a_rerun_changes_nothing(
    source: Path, postgres_database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run stopped after two threads keeps them whole; the rerun copies only the rest
    (the two present), and a third run writes no row."""

    def stop_after_two(done: int, total: int) -> None:
        if done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        migrate(str(source), postgres_database, to="postgres", apply=True, progress=stop_after_two)
    with PostgresSaver.from_conn_string(postgres_database) as pg:
        first = sorted({t.config["configurable"]["thread_id"] for t in pg.list(None)})
    assert first == sorted(_graphs.SCENARIOS)[:2]
    out = ("--to", "postgres", "--target-url", postgres_database)
    done = cli(capsys, str(source), *out, "--apply", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (
        report["present"] == sum(t["checkpoints"] for t in _per_thread(source, first))
        and report["copied"] == report["checkpoints"] - report["present"] > 0
    )
    before = rows(postgres_database)
    again = migrate(str(source), postgres_database, to="postgres", apply=True).as_dict()
    assert again["copied"] == again["writes_copied"] == 0
    assert again["present"] == again["checkpoints"]
    assert rows(postgres_database) == before


def _per_thread(source: Path, names: list[str]) -> list[dict[str, int]]:
    with Saver.from_conn_string(str(source)) as saver:
        return [
            {"checkpoints": len(list(saver.list({"configurable": {"thread_id": n}})))}
            for n in names
        ]


def test_a_target_holding_another_checkpoint_is_refused(
    source: Path, postgres_database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A checkpoint id the database holds with other metadata is a conflict: the thread is
    not written (its missing checkpoint stays missing), the row is not overwritten, and
    the command exits 1."""
    migrate(str(source), postgres_database, to="postgres", apply=True, threads=["review"])
    with psycopg.connect(postgres_database, autocommit=True) as conn:
        ids = [r[0] for r in conn.execute(
            "SELECT checkpoint_id FROM checkpoints WHERE thread_id = 'review' "
            "ORDER BY checkpoint_id").fetchall()]  # fmt: skip
        conn.execute(
            "UPDATE checkpoints SET metadata = metadata || '{\"step\": 99}' "
            "WHERE thread_id = 'review' AND checkpoint_id = %s",
            (ids[0],),
        )
        conn.execute("DELETE FROM checkpoints WHERE checkpoint_id = %s", (ids[-1],))
    found = migrate(str(source), postgres_database, to="postgres", apply=True).as_dict()
    assert len(found["conflicts"]) == 1 and found["conflicts"][0].startswith(
        f"review: checkpoint {ids[0]} is in the target with another metadata"
    )
    with psycopg.connect(postgres_database, autocommit=True) as conn:
        kept = conn.execute(
            "SELECT checkpoint_id, metadata->>'step' FROM checkpoints "
            "WHERE thread_id = 'review' ORDER BY checkpoint_id"
        ).fetchall()
    assert [i for i, _ in kept] == ids[:-1] and kept[0][1] == "99"
    out = ("--to", "postgres", "--target-url", postgres_database)
    done = cli(capsys, str(source), *out, "--apply", "--thread", "review")
    assert done.returncode == 1
    assert "conflict: review: checkpoint" in done.stdout


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("mysql://root@127.0.0.1/app", "error: mysql://root@127.0.0.1/app is not a PostgreSQL URL"),
        (
            "postgresql://postgres:s3cret-pw@127.0.0.1:9/app",
            "error: cannot reach the PostgreSQL database postgresql://postgres:***@127.0.0.1:9/app",
        ),
    ],
)
def test_a_bad_url_is_one_error_and_writes_nothing(
    source: Path, url: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A URL that is not PostgreSQL's, or a server that does not answer, is refused in one
    error and hint line (no password shown, no traceback), the file untouched."""
    before = source.read_bytes()
    done = cli(capsys, str(source), "--to", "postgres", "--target-url", url, "--apply")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith(expected) and lines[1].startswith("hint: ")
    assert "s3cret-pw" not in done.stderr
    assert source.read_bytes() == before


def test_a_missing_driver_is_named(
    source: Path,
    postgres_database: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without psycopg (the migrate extra) the way out says which package to install, and
    the database gets no table."""
    monkeypatch.setitem(sys.modules, "psycopg", None)  # `import psycopg` now fails
    done = cli(capsys, str(source), "--to", "postgres", "--target-url", postgres_database,
               "--apply")  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.startswith(
        "error: writing a PostgresSaver database needs psycopg, which is not installed"
    )
    assert "hint: install the migrate extra" in done.stderr
    monkeypatch.undo()
    assert rows(postgres_database) == dict.fromkeys(rows(postgres_database), 0)


def test_the_wrong_arguments_are_refused(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A source that is not a threadloom file, and a thread the file lacks, are refused
    before the database is reached; from Python, a source kind with `to` is refused."""
    other = tmp_path / "notes.txt"
    other.write_text("not a database\n")
    done = cli(
        capsys, str(other), "--to", "postgres", "--target-url", "postgresql://u@127.0.0.1:9/x"
    )
    assert done.returncode == 1 and done.stderr.startswith("error: ")
    done = cli(capsys, str(source), "--to", "postgres", "--target-url", "postgresql://u@127.0.0.1:9/x",
               "--thread", "nope")  # fmt: skip
    assert done.returncode == 1 and "'nope'" in done.stderr
    with pytest.raises(MigrationError, match="leave them out"):
        migrate(str(source), "postgresql://u@127.0.0.1:9/x", to="postgres", kind="sqlite")


def test_long_lists_and_plain_values_come_across(postgres_database: str, tmp_path: Path) -> None:
    """A list channel of 1, 15, 16 and 40 elements (both short msgpack array headers), an
    empty list and plain values read back through PostgresSaver as they were put."""
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.base import empty_checkpoint

    path = str(tmp_path / "lists.db")
    with Saver.from_conn_string(path) as saver:
        parent: str | None = None
        for n, size in enumerate((1, 15, 16, 40), start=1):
            made = empty_checkpoint()
            made["id"] = f"1ef0{n:04d}-0000-6000-8000-000000000000"
            made["channel_values"] = {
                "messages": [HumanMessage(f"m{i}", id=f"h{i}") for i in range(min(size, 16))]
                if size <= 16
                else list(range(size)),
                "empty": [],
                "count": n,
                "name": f"step {n}",
                "nothing": None,
            }
            made["channel_versions"] = {
                "messages": n,
                "empty": 1,
                "count": n,
                "name": n,
                "nothing": 1,
            }
            conf: dict[str, Any] = {"thread_id": "lists", "checkpoint_ns": ""}
            if parent is not None:
                conf["checkpoint_id"] = parent
            versions = (
                made["channel_versions"]
                if parent is None
                else {"messages": n, "count": n, "name": n}
            )
            saver.put({"configurable": conf}, made, {"source": "loop", "step": n}, versions)
            parent = made["id"]
        ours = counters(_graphs.tuples(saver, "lists"))
    report = migrate(path, postgres_database, to="postgres", apply=True).as_dict()
    assert report["copied"] == 4
    with PostgresSaver.from_conn_string(postgres_database) as pg:
        assert counters(_graphs.tuples(pg, "lists")) == ours


@pytest.mark.parametrize("count", [0, 1, 15, 16, 65_535, 65_536])
def test_a_list_blob_has_the_serializers_array_header(count: int) -> None:
    """The array header put before a list's stored elements is msgpack's own, in every
    size class."""
    import ormsgpack

    from threadloom.langgraph.migration.postgres_rows import _array

    packed = ormsgpack.packb([None] * count)
    assert _array(count) + b"\xc0" * count == packed


def test_threads_from_postgres_saver_go_back_as_present(
    postgres_database: str, tmp_path: Path
) -> None:
    """Threads migrated in from PostgresSaver (string versions) and out again to the same
    database are all present: no conflict, nothing written."""
    with PostgresSaver.from_conn_string(postgres_database) as pg:
        pg.setup()
        for name in ("fork", "subgraph"):
            _graphs.run(name, pg, name)
    path = str(tmp_path / "memory.db")
    assert migrate(postgres_database, path, apply=True).copied > 10
    before = rows(postgres_database)
    found = migrate(path, postgres_database, to="postgres", apply=True).as_dict()
    assert found["present"] == found["checkpoints"] > 10 and found["conflicts"] == []
    assert found["copied"] == found["writes_copied"] == 0
    assert rows(postgres_database) == before
