"""Erasure: nothing of the owner is left, everything of the others is as it was."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage

from tests.conversations._index import check_all
from tests.engine.test_graphs import agent_graph
from threadloom import AsyncSaver, OwnerStore, Saver, Store
from threadloom.engine.checks.verify import verify
from threadloom.errors import InvalidArgumentError


def fill(saver: Saver, store: Store) -> None:
    graph = agent_graph().compile(checkpointer=saver)
    for owner, threads in (("ada", ("a1", "a2")), ("bob", ("b1",))):
        for thread_id in threads:
            for turn in range(2):
                graph.invoke(
                    {"messages": [HumanMessage(content=f"{thread_id} turn {turn}")]},
                    {"configurable": {"thread_id": thread_id, "user_id": owner}},
                )
        OwnerStore(store, owner).put(("facts",), "f1", {"text": f"{owner} likes tea"})
        store.put(("acme", "user", owner, "profile"), "p", {"name": owner})
    saver.set_thread("a1", summary="private summary")


def test_erase_removes_every_thread_and_namespace_of_the_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with Saver.from_conn_string(str(path)) as saver, Store.from_conn_string(path) as store:
        fill(saver, store)
        with saver.lease("a2"):
            pass
        bobs = saver.documents("b1")
        dry = saver.erase("ada", store=[("ada",), ("acme", "user", "ada")], apply=False)
        assert dry.threads == ["a1", "a2"] and dry.items == 2 and not dry.applied
        assert saver.thread("a1") is not None  # a dry run changes nothing
        done = saver.erase("ada", store=[("ada",), ("acme", "user", "ada")])
        assert done.as_json() == {**dry.as_json(), "applied": True}
        assert done.checkpoints > 0 and done.values > 0
        assert saver.threads(owner="ada") == [] and saver.thread("a1") is None
        assert saver.documents("a1") == [] and saver.documents("a2") == []
        assert store.search(("ada",)) == [] and store.search(("acme", "user", "ada")) == []
        assert saver.documents("b1") == bobs
        assert [i.key for i in store.search(("bob",))] == ["f1"]
        assert [t.thread_id for t in saver.threads()] == ["b1"]
        with saver.file.read() as conn:
            assert conn.execute("SELECT count(*) FROM leases").fetchall() == [(0,)]
        check_all(saver)
        assert verify(saver.file).sound
        again = saver.erase("ada")
        assert (again.threads, again.items) == ([], 0)


def test_the_default_namespace_is_the_owner_store_root(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with Saver.from_conn_string(str(path)) as saver, Store.from_conn_string(path) as store:
        fill(saver, store)
        report = saver.erase("bob")
        assert report.items == 1 and report.namespaces == [["bob"]]
        assert store.search(("acme", "user", "bob"))  # a tenant layout names its own prefix
        assert saver.erase("ada", store=()).items == 0
        assert OwnerStore(store, "ada").search(("facts",))


def test_an_empty_prefix_or_owner_is_refused(tmp_path: Path) -> None:
    with Saver.from_conn_string(str(tmp_path / "m.db")) as saver:
        with pytest.raises(InvalidArgumentError, match="every item"):
            saver.erase("ada", store=[()])
        with pytest.raises(InvalidArgumentError, match="tuple of labels"):
            saver.erase("ada", store=["ada"])  # type: ignore[list-item]
        with pytest.raises(InvalidArgumentError, match="owner"):
            saver.erase("")


def test_aerase(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with Saver.from_conn_string(str(path)) as saver, Store.from_conn_string(path) as store:
        fill(saver, store)

    async def main() -> list[str]:
        async with AsyncSaver.from_conn_string(str(path)) as saver:
            return (await saver.aerase("ada")).threads

    assert asyncio.run(main()) == ["a1", "a2"]


def test_owner_stands_for_the_encoded_label_and_raw_dotted_labels_are_refused(
    tmp_path: Path,
) -> None:
    from threadloom.langgraph.conversations import OWNER

    path = tmp_path / "m.db"
    with Saver.from_conn_string(str(path)) as saver, Store.from_conn_string(path) as store:
        email = "ada@example.com"
        OwnerStore(store, "acme", "user", email).put(("facts",), "f", {"text": "tea"})
        store.put(("acme", "user", "ada@example", "com"), "other", {"text": "not ada's"})
        with pytest.raises(InvalidArgumentError, match="encode_label"):
            saver.erase(email, store=[("acme", "user", email)])
        report = saver.erase(email, store=[("acme", "user", OWNER)])
        assert report.items == 1
        assert OwnerStore(store, "acme", "user", email).search(("facts",)) == []
        assert [i.key for i in store.search(("acme", "user", "ada@example", "com"))] == ["other"]


def test_a_thread_under_a_live_lease_is_not_erased_unless_forced(tmp_path: Path) -> None:
    from threadloom import LeaseLostError, ThreadBusyError

    path = tmp_path / "m.db"
    with Saver.from_conn_string(str(path)) as saver, Store.from_conn_string(path) as store:
        fill(saver, store)
        with pytest.raises(LeaseLostError), saver.lease("a2"):  # the run learns it lost
            with pytest.raises(ThreadBusyError, match="a2"):
                saver.erase("ada")
            assert saver.thread("a1") is not None  # nothing changed
            assert saver.erase("ada", force=True).threads == ["a1", "a2"]


def test_compact_after_an_erase_leaves_no_block_of_the_owner(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with Saver.from_conn_string(str(path)) as saver:
        graph = agent_graph().compile(checkpointer=saver)
        secret = "the launch code is " + "7 1 9 " * 2000  # big: stored in blocks
        graph.invoke(
            {"messages": [HumanMessage(content=secret)]},
            {"configurable": {"thread_id": "s", "user_id": "ada"}},
        )
        with saver.file.read() as conn:
            before = conn.execute("SELECT count(*) FROM blocks").fetchall()[0][0]
        assert before > 0
        saver.erase("ada")
        with saver.file.read() as conn:  # released, waiting for the grace
            assert conn.execute("SELECT count(*) FROM blocks WHERE refs > 0").fetchall() == [(0,)]
        saver.file.content.compact()
        with saver.file.read() as conn:
            assert conn.execute("SELECT count(*) FROM blocks").fetchall() == [(0,)]
            assert conn.execute("SELECT count(*) FROM extents").fetchall() == [(0,)]


def test_erase_names_the_namespaces_holding_the_owner_it_keeps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`threadloom erase` warns, in a dry run and when applied, of the Store namespaces that
    hold the owner's label outside the erased prefixes, and lists them in its JSON."""
    from threadloom.cli import main

    path = tmp_path / "m.db"
    with Saver.from_conn_string(str(path)) as saver, Store.from_conn_string(path) as store:
        fill(saver, store)
        store.put(("users", "bob", "facts"), "f", {"text": "bob's memory"})
        store.put(("users", "bobby", "facts"), "f", {"text": "another owner"})
    dry = ["erase", str(path), "--owner", "bob"]
    assert main(dry) == 0
    out, err = capsys.readouterr()
    assert err.splitlines() == [
        "warning: 2 Store namespaces holding the label of 'bob' will be kept: "
        "acme.user.bob.profile, users.bob.facts",
        "hint: erasure matches namespace prefixes only; name them with --store-prefix "
        "(e.g. --store-prefix acme.user.{owner}) to erase their items too",
    ]
    assert main([*dry, "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["kept_namespaces"] == [
        ["acme", "user", "bob", "profile"],
        ["users", "bob", "facts"],
    ]
    assert "warning: 2 Store namespaces" in err
    covered = [*dry, "--store-prefix", "{owner}", "--store-prefix", "users.{owner}"]
    assert main([*covered, "--apply", "--json"]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["items"] == 2 and report["kept_namespaces"] == [
        ["acme", "user", "bob", "profile"]
    ]
    assert "were kept: acme.user.bob.profile" in err
    with Store.from_conn_string(path) as store:
        assert store.search(("users", "bob")) == []
        assert [i.key for i in store.search(("users", "bobby"))] == ["f"]


def test_erase_and_compact_leave_no_word_of_the_owner_in_the_file(tmp_path: Path) -> None:
    """Distinctive words of bob's (messages, thread title and summary, Store values, its
    text, object keys, a namespace) are in the file before; after erase + compact none is
    in the file (or a WAL), while ada's are all still there."""
    path = tmp_path / "m.db"
    words = {
        "bob": ["Quetzalbobtitle", "Zanzibobmessage", "Lisbobquux", "bobkeyzz", "Bobnested"],
        "ada": ["Quetzaladatitle", "Zanziadamessage", "Lisadaquux", "adakeyzz", "Adanested"],
    }
    with Saver.from_conn_string(str(path)) as saver, Store.from_conn_string(path) as store:
        graph = agent_graph().compile(checkpointer=saver)
        for owner, (title, message, text, key, nested) in words.items():
            graph.invoke(
                {"messages": [HumanMessage(content=f"{title} then {message}")]},
                {"configurable": {"thread_id": f"t-{owner}", "user_id": owner}},
            )
            saver.set_thread(f"t-{owner}", summary=f"summary {title}")
            mine = OwnerStore(store, owner)
            mine.put(("facts",), f"{key}@example.com", {"text": f"lives in {text}"})
            # An older version of the item: its words were deleted from the text index
            # before the erasure, and must not survive it either.
            mine.put(("notes",), "n", {"text": f"{nested} draft", f"{key}field": {"x": nested}})
            mine.put(("notes",), "n", {"text": f"{nested} final", f"{key}field": {"x": 1}})

        def held() -> set[str]:
            data = b"".join(
                p.read_bytes() for p in (path, path.with_name(path.name + "-wal")) if p.exists()
            )
            return {
                w
                for ws in words.values()
                for w in ws
                if w.encode() in data or w.lower().encode() in data
            }

        assert {"Lisbobquux", "bobkeyzz", "Bobnested"} <= held()
        dry = saver.erase("bob", apply=False)
        done = saver.erase("bob")
        assert done.digest == dry.digest and len(done.digest) == 64
        assert done.paths == dry.paths > 0
        assert saver.erase("bob", apply=False).digest != done.digest  # nothing left to remove
        saver.file.content.compact()
        assert verify(saver.file).sound
        ada = OwnerStore(store, "ada")
        assert [i.key for i in ada.search_text(("notes",), "Adanested")] == ["n"]
        assert [i.key for i in ada.search(("facts",), filter={"text": "lives in Lisadaquux"})]
    assert held() == set(words["ada"])


def test_a_store_whose_path_numbers_an_erasure_swept_writes_and_filters_right(
    tmp_path: Path,
) -> None:
    """A Store that remembered field path numbers before another Store's erasure swept
    them (another process, as far as memory goes) forgets them at its next write: filters
    find what it writes after."""
    path = tmp_path / "m.db"
    with Saver.from_conn_string(str(path)) as saver, Store.from_conn_string(path) as first:
        OwnerStore(first, "bob").put(("facts",), "k", {"colour": {"name": "teal"}})
        with Store.from_conn_string(path) as other:
            OwnerStore(other, "bob").put(("facts",), "k2", {"shape": "round"})
            assert saver.erase("bob").paths >= 2
            OwnerStore(other, "bob").put(("facts",), "k3", {"shape": "square"})
        OwnerStore(first, "ada").put(("facts",), "k", {"colour": {"name": "teal"}})
        OwnerStore(first, "ada").put(("facts",), "k4", {"shape": "square"})
        ada, bob = OwnerStore(first, "ada"), OwnerStore(first, "bob")
        assert [i.key for i in ada.search(("facts",), filter={"colour": {"name": "teal"}})] == ["k"]
        assert [i.key for i in ada.search(("facts",), filter={"shape": "square"})] == ["k4"]
        assert [i.key for i in bob.search(("facts",), filter={"shape": "square"})] == ["k3"]
        assert verify(saver.file).sound
