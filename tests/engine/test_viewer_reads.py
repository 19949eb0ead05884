"""The viewer's engine reads: the checkpoint history (engine/conversations/history.py),
thread search,
the Store's tree and the file's space, all on a read-only open that writes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.engine.test_graphs import counter_graph, subgraph_graph
from threadloom import Saver, Store
from threadloom.engine import CheckpointStore, File
from threadloom.engine.checks import viewer_reads as inspect_view
from threadloom.engine.items.rows import Items
from threadloom.engine.threads import threadindex
from threadloom.errors import InvalidArgumentError
from threadloom.protocol import DEFAULT_AGENT_ID, DEFAULT_NAMESPACE


def forked(path: Path) -> list[Any]:
    """A three-step run forked at its second checkpoint; LangGraph's own history."""
    with Saver.from_conn_string(str(path)) as saver:
        graph = counter_graph().compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "t"}}
        graph.invoke({"count": 0, "log": []}, config)
        past = next(s for s in graph.get_state_history(config) if s.next == ("step2",))
        graph.invoke(None, graph.update_state(past.config, {"count": 100, "log": ["f"]}))
        return list(graph.get_state_history(config))


def readonly(path: Path) -> CheckpointStore:
    return CheckpointStore(
        File.open(path, readonly=True), namespace=DEFAULT_NAMESPACE, agent_id=DEFAULT_AGENT_ID
    )


def test_the_tree_is_langgraph_history_with_steps_sources_nodes_and_forks(tmp_path: Path) -> None:
    """Every checkpoint comes back newest first with LangGraph's step, source and parent;
    steps name their node, and the fork point counts two children."""
    path = tmp_path / "m.db"
    states = forked(path)
    store = readonly(path)
    tree = store.histories.history("t", ns="", limit=100)
    assert tree.found and tree.next is None and tree.total == len(states) == len(tree.steps)
    assert tree.head == tree.steps[0].checkpoint_id
    by_id = {n.checkpoint_id: n for n in tree.steps}
    assert [n.checkpoint_id for n in tree.steps] == sorted(by_id, reverse=True)
    for state in states:
        node = by_id[state.config["configurable"]["checkpoint_id"]]
        assert (node.step, node.source) == (state.metadata["step"], state.metadata["source"])
        parent = (
            state.parent_config["configurable"]["checkpoint_id"] if state.parent_config else None
        )
        assert node.parent_id == parent
        assert node.time == state.created_at
    assert {n.nodes for n in tree.steps if n.source == "loop"} >= {("step1",), ("step2",)}
    assert all(n.nodes == () for n in tree.steps if n.source != "loop")
    forks = [n for n in tree.steps if n.forks == 2]
    assert len(forks) == 1 and forks[0].step == 1
    store.file.close()


def test_the_tree_pages_by_id_and_reads_child_namespaces(tmp_path: Path) -> None:
    """Pages of 3 cover the history once in order; a subgraph's namespace has its own tree;
    an unknown thread is not found; a bad limit is refused."""
    path = tmp_path / "m.db"
    everything = [s.config["configurable"]["checkpoint_id"] for s in forked(path)]
    with Saver.from_conn_string(str(path)) as saver:
        graph = subgraph_graph().compile(checkpointer=saver)
        graph.invoke(
            {"messages": ["hi"], "notes": [], "done": False}, {"configurable": {"thread_id": "s"}}
        )
    store = readonly(path)
    seen: list[str] = []
    before = None
    while True:
        page = store.histories.history("t", ns="", limit=3, before=before)
        seen += [n.checkpoint_id for n in page.steps]
        if page.next is None:
            break
        before = page.next
    assert seen == sorted(everything, reverse=True)
    info = store.thread("s")
    assert info is not None
    child = next(ns for ns in info.namespaces if ns)
    sub = store.histories.history("s", ns=child)
    assert sub.total == len(sub.steps) > 0 and all(n.checkpoint_ns == child for n in sub.steps)
    assert {"research"} <= {name for n in sub.steps for name in n.nodes}
    assert not store.histories.history("nope").found
    with pytest.raises(InvalidArgumentError):
        store.histories.history("t", limit=0)
    store.file.close()


def test_thread_search_matches_ids_and_titles_and_pages(tmp_path: Path) -> None:
    """`matching` finds a text in ids or titles (case-folded, `%` and `_` literal), filters by
    owner and pages by the index cursor."""
    path = tmp_path / "m.db"
    with Saver.from_conn_string(str(path)) as saver:
        for i in range(7):
            saver.set_thread(f"t-{i}", title=f"Trip {i} to Lisbon", owner="ada" if i % 2 else "bob")
        saver.set_thread("x_1", title="100% done")
        store = saver.checkpoints
        scope = store.scope.id
        assert scope is not None
        with store.file.read() as conn:
            found = threadindex.matching(conn, scope, "lisbon")
            assert len(found) == 7
            assert [t.thread_id for t in threadindex.matching(conn, scope, "T-3")] == ["t-3"]
            assert [t.thread_id for t in threadindex.matching(conn, scope, "%")] == ["x_1"]
            assert [t.thread_id for t in threadindex.matching(conn, scope, "_")] == ["x_1"]
            ada = threadindex.matching(conn, scope, "trip", owner="ada")
            assert {t.owner for t in ada} == {"ada"} and len(ada) == 3
            first = threadindex.matching(conn, scope, "trip", limit=4)
            rest = threadindex.matching(conn, scope, "trip", limit=4, before=first[-1].cursor)
            assert [t.thread_id for t in first + rest] == [t.thread_id for t in found]
            with pytest.raises(InvalidArgumentError):
                threadindex.matching(conn, scope, "")


def test_store_tree_items_and_space(tmp_path: Path) -> None:
    """The namespace tree groups one level at a time with item counts, a namespace's items
    page by key, the Store's totals come from its namespace rows, and the space figures
    add up."""
    path = tmp_path / "m.db"
    with Store.from_conn_string(str(path)) as store:
        for user in ("ada", "bob"):
            for i in range(5):
                store.put(("acme", "user", user, "facts"), f"k{i}", {"text": f"{user} {i}"})
        store.put(("acme", "user", "ada"), "profile", {"name": "Ada"})
        store.put(("other",), "k", {"text": "x"})
    file = File.open(path, readonly=True)
    items = Items(file)
    with file.read() as conn:
        root = inspect_view.namespace_children(conn, ())
        assert [(c.label, c.namespaces, c.items, c.leaf) for c in root] == [
            ("acme", 3, 11, False),
            ("other", 1, 1, True),
        ]
        users = inspect_view.namespace_children(conn, ("acme", "user"))
        assert [(c.label, c.items, c.leaf) for c in users] == [("ada", 6, True), ("bob", 5, False)]
        assert [
            c.label for c in inspect_view.namespace_children(conn, ("acme", "user"), after="ada")
        ] == ["bob"]
        facts = ("acme", "user", "ada", "facts")
        page = inspect_view.namespace_items(items, conn, facts, limit=3)
        more = inspect_view.namespace_items(items, conn, facts, after=page[-1].key, limit=3)
        assert [s.key for s in page + more] == [f"k{i}" for i in range(5)]
        assert inspect_view.namespace_count(conn, facts) == 5
        assert [
            s.key for s in inspect_view.namespace_items(items, conn, ("acme", "user", "ada"))
        ] == ["profile"]
        space = inspect_view.summary(conn)
        assert space["pages"] * space["page_size"] == path.stat().st_size
        measured = inspect_view.measure(conn)
        assert measured["reclaimable"] >= space["free_pages"] * space["page_size"]
        assert "store_items" in measured["tables"]
        assert inspect_view.store_totals(conn) == {"namespaces": 4, "items": 12}
        assert inspect_view.scopes(conn) == []
    file.close()
