"""The Store's items: exact values, timestamps, namespace rules, batches, one shared file."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import apsw
import pytest
from langgraph.store.base import GetOp, InvalidNamespaceError, PutOp, SearchOp

from threadloom import Saver, Store
from threadloom.engine.checks.verify import verify
from threadloom.errors import CorruptionError, InvalidArgumentError


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.from_conn_string(tmp_path / "memory.db") as opened:
        yield opened


def test_values_of_any_json_shape_come_back_exactly(store: Store, tmp_path: Path) -> None:
    """Ints beyond 2**63 (and 2**64), floats, unicode outside the BMP, nesting, empty
    containers and a 1 MiB value come back equal, also after the file is reopened."""
    values = {
        "big": {"n": 2**64 + 1, "neg": -(2**70), "f": 0.1, "e": 1e-300, "z": -0.0},
        "text": {"s": "naïve café – 日本語 – 🦜", "nested": {"a": [1, [2, {"b": None}]], "e": {}}},
        "huge": {"blob": "x" * (1 << 20), "list": list(range(1000))},
        "flags": {"t": True, "f": False, "n": None, "l": []},
    }
    for key, value in values.items():
        store.put(("docs",), key, value)
    path = store.file.path
    store.close()
    with Store.from_conn_string(path) as again:
        for key, value in values.items():
            item = again.get(("docs",), key)
            assert item is not None
            assert json.dumps(item.value, sort_keys=True) == json.dumps(value, sort_keys=True)
            assert item.value == value
            assert type(item.value.get("big", {}).get("n", 0)) is int


def test_a_value_json_would_change_is_refused_and_nothing_is_written(store: Store) -> None:
    store.put(("docs",), "kept", {"v": 1})
    for bad in ({"t": (1, 2)}, {"s": {1, 2}}, {1: "int key"}, {"when": datetime.now()}):
        with pytest.raises(TypeError, match="store values are JSON"):
            store.batch([PutOp(("docs",), "a", {"ok": 1}), PutOp(("docs",), "b", bad)])
    assert store.get(("docs",), "a") is None and store.get(("docs",), "b") is None
    assert store.get(("docs",), "kept") is not None


def test_timestamps_are_utc_and_an_update_keeps_created_at(store: Store) -> None:
    before = datetime.now(timezone.utc)
    store.put(("p",), "k", {"v": 1})
    first = store.get(("p",), "k")
    assert first is not None and first.created_at == first.updated_at
    assert first.created_at.tzinfo is not None and first.created_at >= before.replace(microsecond=0)
    time.sleep(0.002)
    store.put(("p",), "k", {"v": 2})
    second = store.get(("p",), "k")
    assert second is not None and second.value == {"v": 2}
    assert second.created_at == first.created_at and second.updated_at > first.updated_at


@pytest.mark.parametrize(
    "namespace",
    [(), ("",), ("a.b",), ("langgraph", "x"), ("a", "b\x00"), ("a", 1)],
)
def test_namespace_rules_hold_also_for_ops_given_to_batch(
    store: Store, namespace: tuple[object, ...]
) -> None:
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(namespace, "k", {"v": 1})])  # type: ignore[arg-type]
    with pytest.raises(InvalidNamespaceError):
        store.put(namespace, "k", {"v": 1})  # type: ignore[arg-type]
    assert store.list_namespaces() == []


def test_a_dotted_label_cannot_address_a_deeper_namespace(store: Store) -> None:
    """`("a.b",)` must never read `("a", "b")` (namespaces are stored joined by dots)."""
    store.put(("a", "b"), "k", {"v": 1})
    for op in (GetOp(("a.b",), "k"), SearchOp(("a.b",))):
        with pytest.raises(InvalidNamespaceError):
            store.batch([op])


def test_a_batch_is_one_transaction_reads_see_the_state_before_it(store: Store) -> None:
    store.put(("n",), "k", {"v": 0})
    results = store.batch(
        [
            PutOp(("n",), "k", {"v": 1}),
            GetOp(("n",), "k"),
            PutOp(("n",), "k", {"v": 2}),
            SearchOp(("n",)),
        ]
    )
    assert results[0] is None and results[2] is None
    assert results[1] is not None and results[1].value == {"v": 0}
    assert [i.value for i in results[3]] == [{"v": 0}]
    item = store.get(("n",), "k")
    assert item is not None and item.value == {"v": 2}  # the last put of a key wins
    with pytest.raises(InvalidArgumentError):
        store.batch([PutOp(("n",), "k", {"v": 3}), PutOp(("n",), "other", "not a dict")])  # type: ignore[arg-type]
    item = store.get(("n",), "k")
    assert item is not None and item.value == {"v": 2}


def test_delete_removes_the_item_its_namespace_and_its_text(store: Store) -> None:
    store.put(("u", "1"), "a", {"text": "remember the milk"})
    store.put(("u", "2"), "b", {"text": "milk is white"})
    store.delete(("u", "1"), "a")
    assert store.get(("u", "1"), "a") is None
    assert store.list_namespaces() == [("u", "2")]
    assert [i.key for i in store.search_text(("u",), "milk")] == ["b"]
    store.put(("u", "1"), "a", {"text": "buy bread"})  # re-put with other text
    assert [i.key for i in store.search_text(("u",), "milk")] == ["b"]
    assert [i.key for i in store.search_text(("u",), "bread")] == ["a"]
    assert verify(store.file).sound


def test_purge_deletes_a_prefix_in_one_transaction(store: Store) -> None:
    for tenant in ("acme", "other"):
        for user in range(3):
            store.put((tenant, "user", str(user)), "profile", {"big": "x" * 9000, "u": user})
    assert store.purge(("acme",)) == 3
    assert [ns[0] for ns in store.list_namespaces()] == ["other"] * 3
    assert verify(store.file).sound


def test_checkpoints_and_the_store_share_one_file(tmp_path: Path) -> None:
    """A saver and a store on one path share the file object; verify covers both."""
    from langgraph.graph import START, MessagesState, StateGraph

    path = tmp_path / "agent.db"

    def reply(state: MessagesState) -> dict[str, list[tuple[str, str]]]:
        return {"messages": [("ai", "noted")]}

    graph = StateGraph(MessagesState).add_node("reply", reply).add_edge(START, "reply")
    with Saver.from_conn_string(str(path)) as saver, Store.from_conn_string(path) as store:
        assert store.file is saver.file
        app = graph.compile(checkpointer=saver, store=store)
        app.invoke({"messages": [("user", "hi")]}, {"configurable": {"thread_id": "t"}})
        store.put(("u", "1", "facts"), "f1", {"text": "likes tea"})
        report = verify(saver.file)
        assert report.sound and "store" in report.checks
    with Store.from_conn_string(path) as store:
        item = store.get(("u", "1", "facts"), "f1")
        assert item is not None and item.value == {"text": "likes tea"}


def test_a_damaged_item_raises_and_verify_names_it(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with Store.from_conn_string(path) as store:
        store.put(("u",), "a", {"text": "alpha"})
        store.put(("u",), "b", {"text": "beta"})
    raw = apsw.Connection(str(path))
    raw.execute("UPDATE store_items SET key = 'c' WHERE key = 'b'")  # b's row now claims c
    raw.execute("UPDATE store_fields SET value = x'2078' WHERE item = 1")
    raw.close()
    with Store.from_conn_string(path) as store:
        with pytest.raises(CorruptionError):
            store.get(("u",), "c")
        report = verify(store.file)
        assert not report.sound
        problems = [p.detail for p in report.problems if p.check == "store"]
        assert any("store item u/c" in p for p in problems)
        assert any("filter index" in p for p in problems)


def test_every_get_checks_its_row_also_for_a_key_read_just_before(tmp_path: Path) -> None:
    """A get unseals the row's digest with the key it asked for and checks the body
    against it on every read, alone or in a batch, also for keys read a moment ago
    (whose identity digests the store keeps): a body changed under its digest, or
    another item's body and digest copied in, raises and names the item."""
    with Store.from_conn_string(tmp_path / "m.db") as store:
        for key in "abc":
            store.put(("u",), key, {"text": f"about {key}"})
        for key in "abc":
            item = store.get(("u",), key)
            assert item is not None and item.value == {"text": f"about {key}"}
        with store.file.write() as conn:
            a = "SELECT {} FROM store_items WHERE key = 'a'"
            conn.execute(f"UPDATE store_items SET body = ({a.format('body')}) WHERE key = 'b'")
            conn.execute(
                f"UPDATE store_items SET (body, digest) = ({a.format('body, digest')}) "
                "WHERE key = 'c'"
            )
        for key in "bc":
            with pytest.raises(CorruptionError, match=f"store item u/{key} is damaged"):
                store.get(("u",), key)
            with pytest.raises(CorruptionError, match=f"store item u/{key} is damaged"):
                store.batch([GetOp(("u",), "a"), GetOp(("u",), key)])
        item = store.get(("u",), "a")
        assert item is not None and item.value == {"text": "about a"}


def test_a_dictionary_retraining_keeps_every_item_and_its_indexes(store: Store) -> None:
    """Retraining re-encodes item bodies in place: filter rows, text rows and namespaces
    hang on the item rows and must survive (a delete and re-insert would drop them)."""
    for i in range(300):
        store.put(("u", str(i % 3)), f"k{i}", {"text": f"note {i} about tea", "i": i})
    store.file.content.train(force=True)
    assert store.file.content.current is not None
    assert len(store.search(("u",), filter={"i": {"$lt": 100}}, limit=500)) == 100
    assert store.search_text(("u",), "note 7 about tea", limit=1)[0].key == "k7"
    assert store.list_namespaces() == [("u", "0"), ("u", "1"), ("u", "2")]
    item = store.get(("u", "1"), "k1")
    assert item is not None and item.value == {"text": "note 1 about tea", "i": 1}
    assert verify(store.file).sound


def test_a_retraining_that_meets_a_damaged_item_names_it_and_changes_nothing(
    store: Store,
) -> None:
    """A body whose digest no longer matches stops the re-encoding with an error naming
    its item; the training's transaction leaves the file as it was."""
    for i in range(300):
        store.put(("u",), f"k{i}", {"text": f"note {i} about tea", "i": i})
    with store.file.write() as conn:
        conn.execute("UPDATE store_items SET digest = zeroblob(16) WHERE key = 'k7' AND blocks = 0")
        before = conn.execute("SELECT id, body FROM store_items ORDER BY id").fetchall()
    with pytest.raises(CorruptionError, match="store item k7 is damaged"):
        store.file.content.train(force=True)
    with store.file.read() as conn:
        assert conn.execute("SELECT id, body FROM store_items ORDER BY id").fetchall() == before
    item = store.get(("u",), "k8")
    assert item is not None and item.value == {"text": "note 8 about tea", "i": 8}


def test_a_format_4_file_upgrades_and_then_holds_a_store(tmp_path: Path) -> None:
    """The file written by the last format-4 commit opens with its documents unchanged,
    gains the Store's tables in one transaction, holds items, and verifies sound."""
    import shutil

    import ormsgpack
    import zstandard

    from threadloom.engine.format.schema import FORMAT_VERSION

    data = Path(__file__).resolve().parents[1] / "data" / "format4"
    path = tmp_path / "old.db"
    shutil.copy(data / "format4.db", path)
    raw = zstandard.ZstdDecompressor().decompress((data / "documents.msgpack.zst").read_bytes())
    with Saver.from_conn_string(str(path)) as saver, Store.from_conn_string(path) as store:
        assert ormsgpack.packb([list(d) for d in saver.documents()]) == ormsgpack.packb(
            ormsgpack.unpackb(raw)
        )
        store.put(("ada", "facts"), "f", {"text": "likes tea"})
        assert store.search_text(("ada",), "tea")[0].key == "f"
        assert verify(saver.file).sound
    conn = apsw.Connection(str(path))
    assert conn.execute("PRAGMA user_version").fetchall() == [(FORMAT_VERSION,)]


def test_the_readme_memory_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import re

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = re.search(r"<!-- memory-example -->\n```python\n(.*?)```", readme, re.S)
    assert block is not None
    monkeypatch.chdir(tmp_path)
    exec(compile(block.group(1), "README.md (memory example)", "exec"), {})


def test_doctor_counts_the_store_and_compact_keeps_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from threadloom.cli import main

    path = tmp_path / "m.db"
    with Store.from_conn_string(path) as store:
        for i in range(400):
            store.put(("u", str(i % 4)), f"k{i}", {"text": f"fact {i} " * 20, "i": i})
        for i in range(0, 400, 2):
            store.delete(("u", str(i % 4)), f"k{i}")
    assert main(["doctor", "--json", "--db", str(path)]) == 0
    before = json.loads(capsys.readouterr().out)
    assert before["store_items"] == 200 and before["store_namespaces"] == 2
    assert main(["compact", "--db", str(path)]) == 0
    capsys.readouterr()
    assert main(["doctor", "--json", "--db", str(path)]) == 0
    after = json.loads(capsys.readouterr().out)
    assert after["store_items"] == 200 and after["file_bytes"] < before["file_bytes"]
    with Store.from_conn_string(path) as store:
        assert len(store.search(("u",), filter={"i": {"$lt": 100}}, limit=100)) == 50
        assert store.search_text(("u",), "fact 7", limit=1)[0].key == "k7"
        assert verify(store.file).sound


def _writer(path: str, who: str) -> None:
    with Store.from_conn_string(path) as store:
        for i in range(150):
            store.put(("shared", who), f"k{i}", {"text": f"{who} fact {i}", "i": i})
            if i % 10 == 0:
                store.delete(("shared", who), f"k{i - 5}")


def test_two_processes_write_one_store(tmp_path: Path) -> None:
    """Processes writing the same file (and new namespaces, paths and text) at once end
    with every item each wrote, and a sound file."""
    import multiprocessing

    path = str(tmp_path / "shared.db")
    Store(path).close()
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_writer, args=(path, who)) for who in ("a", "b")]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    with Store.from_conn_string(path) as store:
        for who in ("a", "b"):
            found = store.search(("shared", who), limit=1000)
            assert len(found) == 150 - 14
            assert store.search_text(("shared",), f"{who} fact 77", limit=1)[0].key == "k77"
        assert verify(store.file).sound


def test_a_read_only_store_reads_and_refuses_writes(tmp_path: Path) -> None:
    from threadloom.errors import ReadOnlyError

    path = tmp_path / "ro.db"
    ttl = {"default_ttl": 10.0, "refresh_on_read": True}
    with Store.from_conn_string(path, ttl=ttl) as store:  # type: ignore[arg-type]
        store.put(("u",), "a", {"text": "tea in lisbon", "n": 1})
    before = path.read_bytes()
    with Store(path, readonly=True, ttl=ttl) as store:  # type: ignore[arg-type]
        item = store.get(("u",), "a")  # refresh_on_read, but nothing may be written
        assert item is not None and item.value["n"] == 1
        assert [i.key for i in store.search_text(("u",), "tea")] == ["a"]
        assert [i.key for i in store.search(("u",), filter={"n": 1})] == ["a"]
        assert store.list_namespaces() == [("u",)]
        with pytest.raises(ReadOnlyError):
            store.put(("u",), "b", {"n": 2})
    assert path.read_bytes() == before


def test_nan_is_present_equals_nothing_and_leaves_no_stale_rows(store: Store) -> None:
    from threadloom.engine.items.fieldkeys import matches

    nan = float("nan")
    docs = {"nan": {"x": nan}, "none": {"x": None}, "missing": {"y": 1}}
    for key, value in docs.items():
        store.put(("n",), key, value)
    for filter in ({"x": None}, {"x": {"$eq": nan}}, {"x": {"$ne": nan}}, {"x": nan}):
        want = {k for k, v in docs.items() if matches(v, filter)}
        assert {i.key for i in store.search(("n",), filter=filter)} == want, filter
    store.put(("n",), "obj", {"a": {"b": nan}, "tags": [nan]})
    assert verify(store.file).sound
    store.put(("n",), "obj", {"a": 5})
    assert "obj" not in {i.key for i in store.search(("n",), filter={"a": {}})}
    assert "obj" in {i.key for i in store.search(("n",), filter={"tags": None})}
    assert verify(store.file).sound


def test_text_sqlite_cannot_hold_is_refused_clearly(store: Store) -> None:
    from threadloom.errors import InvalidValueError

    for namespace, key, value in [
        (("n",), "a\x00b", {"v": 1}),
        (("n",), "k", {"v": "\udc80"}),
        (("n",), "k", {"\ud800": 1}),
        (("n",), "k", {"v": 1 << 20_000}),
        (("n",), "\ud800", {"v": 1}),
    ]:
        with pytest.raises(InvalidValueError):
            store.put(namespace, key, value)
    assert store.list_namespaces() == []


def test_a_store_that_cannot_open_keeps_no_share_of_the_file(tmp_path: Path) -> None:
    from threadloom.engine.file import File

    path = tmp_path / "s.db"
    with Store.from_conn_string(path):
        pass
    for index in ({"dims": 4}, {"dims": 4, "embed": lambda t: [[0.0] * 4], "distance_type": "x"}):
        with pytest.raises(InvalidArgumentError):
            Store(path, index=index)  # type: ignore[arg-type]
    shared = File.open(path)
    assert shared._users == 1
    shared.close()


def test_word_search_without_a_text_index_is_refused(tmp_path: Path) -> None:
    """A store opened with text=False refuses `search_text`; `search(query=)` lists."""
    with Store.from_conn_string(tmp_path / "q.db", text=False) as store:
        store.put(("n",), "a", {"text": "tea"})
        with pytest.raises(InvalidArgumentError, match="text=False"):
            store.search_text(("n",), "tea")
        assert [i.key for i in store.search(("n",), query="coffee")] == ["a"]


def test_a_batch_that_empties_a_namespace_and_puts_into_it_keeps_the_new_item(
    store: Store,
) -> None:
    """A batch that deletes a namespace's only item and puts another key in it stores the
    new item (the namespace, dropped with its last item, is made again)."""
    store.put(("solo",), "old", {"v": 1})
    store.batch([PutOp(("solo",), "old", None), PutOp(("solo",), "new", {"v": 2})])
    assert store.get(("solo",), "old") is None
    item = store.get(("solo",), "new")
    assert item is not None and item.value == {"v": 2}
    assert store.list_namespaces() == [("solo",)]
