"""`migrate --store`: LangGraph SqliteStore and PostgresStore items into the threadloom Store.

Oracle: the source store's own `search` (namespace, key, value, created_at, updated_at),
which the threadloom Store must return for every item after the copy; the target's index
config embeds the copied items (a deterministic embedder records what it was given).
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.store.base import BaseStore
from langgraph.store.postgres import PostgresStore
from langgraph.store.sqlite import SqliteStore

from tests.migration import _graphs
from tests.store._hashing_embedder import HashingEmbedder
from threadloom import Store, migrate
from threadloom.cli import main as cli
from threadloom.errors import MigrationError

ITEMS = [
    (("acme", "user", "ada", "profile"), "profile", {"name": "Ada", "langs": ["en", "fr"]}),
    (("acme", "user", "ada", "facts"), "f1", {"text": "Ada prefers tea"}),
    (("acme", "user", "ada", "facts"), "f2", {"text": "Ada lives in Lisbon"}),
    (("acme", "user", "bob", "facts"), "f1", {"text": "Bob rides a bicycle to work"}),
    (("acme",), "settings", {"tz": "UTC", "n": 2**60, "nested": {"a": [1, None, True]}}),
]


def fill(store: BaseStore) -> None:
    """Put the items, then update one a second later (its times differ from the others',
    and on PostgresStore from each other)."""
    for namespace, key, value in ITEMS:
        store.put(namespace, key, value)
    time.sleep(1.1)  # SqliteStore's times have a resolution of one second
    store.put(ITEMS[1][0], ITEMS[1][1], {"text": "Ada prefers green tea"})


def utc(moment: datetime) -> datetime:
    """A time as UTC (SqliteStore returns naive UTC times, the threadloom Store aware ones)."""
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment


def listed(store: BaseStore) -> list[tuple[Any, ...]]:
    """Every item: namespace, key, value and times, sorted."""
    found = store.search((), limit=1000)
    return sorted(
        (tuple(i.namespace), i.key, json.dumps(i.value), utc(i.created_at), utc(i.updated_at))
        for i in found
    )


def shape(value: Any) -> Any:
    """The keys of a JSON value, recursively (lists by their first element)."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return type(value).__name__


def sqlite_store(path: Path) -> tuple[SqliteStore, sqlite3.Connection]:
    conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
    store = SqliteStore(conn)
    store.setup()
    return store, conn


def test_a_sqlite_store_beside_the_saver_comes_across(tmp_path: Path) -> None:
    """Items of a SqliteStore in the SqliteSaver's own file keep namespace, key, value and
    both times; a dry run writes nothing, a rerun copies nothing."""
    source = tmp_path / "app.sqlite"
    with SqliteSaver.from_conn_string(str(source)) as saver:
        _graphs.run("review", saver, "review")
    store, conn = sqlite_store(source)
    fill(store)
    expected = listed(store)
    conn.close()
    # SqliteStore's replace resets created_at too, so times differ between items only:
    # the updated item's come after every other's (which may straddle a second).
    updated = next(i for i in expected if (i[0], i[1]) == ITEMS[1][:2])
    assert all(i[3] < updated[3] for i in expected if i is not updated)
    target = tmp_path / "memory.db"
    dry = migrate(str(source), str(target), store=True).as_dict()["store"]
    assert dry["items"] == dry["missing"] == len(ITEMS) and dry["copied"] == 0
    assert dry["namespaces"] == 4 and not target.exists()
    report = migrate(str(source), str(target), store=True, apply=True).as_dict()
    assert report["copied"] == 3 and report["store"]["copied"] == len(ITEMS)
    assert report["store"]["source"] == {"kind": "sqlite", "path": str(source)}
    with Store.from_conn_string(str(target)) as ours:
        assert listed(ours) == expected
        assert ours.search_text(("acme", "user", "ada"), "green tea")[0].key == "f1"
    again = migrate(str(source), str(target), store=True, apply=True).as_dict()["store"]
    assert again["present"] == len(ITEMS) and again["copied"] == 0


def test_items_are_embedded_with_the_target_index(tmp_path: Path) -> None:
    """With an index config the copied items are embedded (the embedder is given their
    texts) and found by vector search; a separate SqliteStore file is read via
    store_source."""
    app = tmp_path / "app.sqlite"
    with SqliteSaver.from_conn_string(str(app)) as saver:
        _graphs.run("fork", saver, "fork")
    items = tmp_path / "items.sqlite"
    store, conn = sqlite_store(items)
    fill(store)
    expected = listed(store)
    conn.close()
    embedder = HashingEmbedder()
    target = tmp_path / "memory.db"
    index = {"dims": embedder.dims, "embed": embedder, "fields": ["text"]}
    report = migrate(
        str(app), str(target), store=True, store_source=str(items), store_index=index, apply=True
    ).as_dict()
    assert report["store"]["embedded"] is True and report["store"]["copied"] == len(ITEMS)
    embedded = [t for method, texts in embedder.calls for t in texts]
    assert sorted(embedded) == sorted(
        ["Ada prefers green tea", "Ada lives in Lisbon", "Bob rides a bicycle to work"]
    )
    with Store.from_conn_string(str(target), index=index) as ours:
        assert listed(ours) == expected
        hits = ours.search(("acme", "user"), query="who rides a bicycle")
        assert hits[0].key == "f1" and hits[0].namespace[2] == "bob" and hits[0].score > 0.3


def test_a_postgres_store_comes_across(tmp_path: Path, postgres_database: str) -> None:
    """Items of a PostgresStore in the PostgresSaver's database keep their fields and times."""
    with PostgresSaver.from_conn_string(postgres_database) as saver:
        saver.setup()
        _graphs.run("send", saver, "send")
    with PostgresStore.from_conn_string(postgres_database) as store:
        store.setup()
        fill(store)
        expected = listed(store)
    updated = next(i for i in expected if i[:2] == (ITEMS[1][0], ITEMS[1][1]))
    assert updated[3] < updated[4]  # PostgresStore keeps created_at on update
    target = tmp_path / "memory.db"
    report = migrate(postgres_database, str(target), store=True, apply=True).as_dict()
    assert report["store"]["source"]["kind"] == "postgres"
    assert report["store"]["copied"] == len(ITEMS)
    with Store.from_conn_string(str(target)) as ours:
        assert listed(ours) == expected


def test_a_file_without_a_store_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--store` on a SqliteSaver file that holds no SqliteStore names what the file is;
    the threads copied before stay, and the exit status is 1."""
    source = tmp_path / "app.sqlite"
    with SqliteSaver.from_conn_string(str(source)) as saver:
        _graphs.run("fork", saver, "fork")
    target = tmp_path / "memory.db"
    with pytest.raises(MigrationError, match="holds no LangGraph SqliteStore tables"):
        migrate(str(source), str(target), store=True)
    assert cli(["migrate", str(source), "--db", str(target), "--store", "--json"]) == 1
    assert "error: " in capsys.readouterr().err
    assert not target.exists()


def test_the_cli_copies_a_store_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`threadloom migrate --store --store-source FILE --json` reports the store copy."""
    app = tmp_path / "app.sqlite"
    with SqliteSaver.from_conn_string(str(app)) as saver:
        _graphs.run("fork", saver, "fork")
    items = tmp_path / "items.sqlite"
    store, conn = sqlite_store(items)
    fill(store)
    conn.close()
    target = tmp_path / "memory.db"
    args = ["migrate", str(app), "--db", str(target), "--store", "--store-source", str(items)]
    assert cli(args) == 0  # a dry run says the items will need embedding
    said = capsys.readouterr().out
    assert f"store: {len(ITEMS)} items without embeddings" in said
    assert f"(threadloom reembed {target} --embed MODULE:NAME --dims N --apply)" in said
    assert cli([*args, "--apply", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    docs = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    section = docs[docs.index("## `threadloom migrate") : docs.index("## `threadloom serve")]
    (example,) = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", section, re.S)]
    assert shape(example) == shape(printed)  # docs/cli.md gives the report's fields
    found = printed["store"]
    assert found == {
        "source": {"kind": "sqlite", "path": str(items)},
        "namespaces": 4,
        "items": len(ITEMS),
        "present": 0,
        "missing": len(ITEMS),
        "copied": len(ITEMS),
        "embedded": False,
        "unembedded": len(ITEMS),
    }
