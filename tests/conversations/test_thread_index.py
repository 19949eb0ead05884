"""The thread index: kept in the transaction of every write, right after every operation.

Real graphs (a tool agent, a subgraph) write the threads; every test compares the index
with what the rows say (`_index.expected`), so a path that forgets the index fails here.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.graph import START, StateGraph

from tests.conversations._index import check_all, expected, kept
from tests.engine.test_graphs import agent_graph, subgraph_graph
from threadloom import Saver
from threadloom.errors import InvalidArgumentError


def chat(saver: Saver, thread_id: str, text: str, **configurable: Any) -> dict[str, Any]:
    graph = agent_graph().compile(checkpointer=saver)
    config = {"configurable": {"thread_id": thread_id, **configurable}}
    return graph.invoke({"messages": [HumanMessage(content=text)]}, config)


def test_a_tool_agent_conversation_is_indexed_as_it_runs(tmp_path: Path) -> None:
    with Saver.from_conn_string(str(tmp_path / "m.db")) as saver:
        chat(saver, "t1", "What is six times two?   Please\nexplain.", user_id="ada")
        state = chat(saver, "t1", "And six times three?", user_id="ada")
        info = saver.thread("t1")
        assert info is not None
        assert info.owner == "ada"
        assert info.title == "What is six times two? Please explain."
        assert info.messages == len(state["messages"]) == 8
        assert kept(saver, "t1") == expected(saver, "t1")
        assert info.created_at <= info.updated_at <= datetime.now(timezone.utc)
        assert info.updated_at.tzinfo is timezone.utc
        assert info.summary is None and info.tags == ()


def test_the_owner_key_is_configurable_and_a_later_run_does_not_change_it(
    tmp_path: Path,
) -> None:
    with Saver.from_conn_string(str(tmp_path / "m.db"), owner_keys=["tenant_user"]) as saver:
        chat(saver, "t1", "hello", user_id="ignored", tenant_user="u-7")
        chat(saver, "t1", "again", tenant_user="u-8")
        assert saver.thread("t1").owner == "u-7"  # type: ignore[union-attr]
        chat(saver, "t2", "no owner here", user_id="ada")
        assert saver.thread("t2").owner is None  # type: ignore[union-attr]
    with Saver.from_conn_string(str(tmp_path / "n.db")) as saver:
        chat(saver, "t3", "hi", langgraph_auth_user_id="auth-1")
        assert saver.thread("t3").owner == "auth-1"  # type: ignore[union-attr]
    with pytest.raises(InvalidArgumentError, match="owner_keys"):
        Saver(str(tmp_path / "o.db"), owner_keys="user_id")


def test_a_long_first_question_is_cut_at_a_word_and_a_system_prompt_is_skipped(
    tmp_path: Path,
) -> None:
    with Saver.from_conn_string(str(tmp_path / "m.db")) as saver:
        compiled = agent_graph().compile(checkpointer=saver)
        question = "Please compute " + "the product of six and two " * 10
        compiled.invoke(
            {"messages": [SystemMessage(content="You are terse."), HumanMessage(content=question)]},
            {"configurable": {"thread_id": "t"}},
        )
        title = saver.thread("t").title  # type: ignore[union-attr]
        assert title is not None and title.endswith("…") and len(title) <= 80
        assert question.startswith(title[:-1].rstrip())


def test_pages_by_last_activity_cover_every_thread_once_and_filter_by_owner(
    tmp_path: Path,
) -> None:
    with Saver.from_conn_string(str(tmp_path / "m.db")) as saver:
        for i in range(23):
            chat(saver, f"t{i:02d}", f"question {i}", user_id="ada" if i % 3 else "bob")
        chat(saver, "t05", "back to five", user_id="ada")  # most recent activity now
        seen: list[str] = []
        before = None
        while True:
            page = saver.threads(limit=5, before=before)
            if not page:
                break
            seen += [t.thread_id for t in page]
            before = page[-1].cursor
        assert seen[0] == "t05"
        assert sorted(seen) == sorted(f"t{i:02d}" for i in range(23)) and len(seen) == 23
        updated = [saver.thread(t).updated_at for t in seen]  # type: ignore[union-attr]
        assert updated == sorted(updated, reverse=True)
        bobs = saver.threads(owner="bob", limit=100)
        assert [t.thread_id for t in bobs] == [f"t{i:02d}" for i in range(21, -1, -3)]
        created = saver.threads(order="created", limit=3)
        assert [t.thread_id for t in created] == ["t22", "t21", "t20"]
        nxt = saver.threads(order="created", limit=3, before=created[-1].cursor)
        assert [t.thread_id for t in nxt] == ["t19", "t18", "t17"]
        with pytest.raises(InvalidArgumentError, match="cursor"):
            saver.threads(order="updated", before=created[-1].cursor)
        with pytest.raises(InvalidArgumentError, match="limit"):
            saver.threads(limit=0)
        with pytest.raises(InvalidArgumentError, match="order"):
            saver.threads(order="title")


def test_a_page_is_read_through_an_index_not_a_scan(tmp_path: Path) -> None:
    from threadloom.engine.threads.threadindex import page_query

    with Saver.from_conn_string(str(tmp_path / "m.db")) as saver:
        chat(saver, "t", "hi", user_id="ada")
        with saver.file.read() as conn:
            for owner, order, index in (
                (None, "updated", "threads_by_updated"),
                ("ada", "updated", "threads_by_owner"),
                (None, "created", "threads_by_created"),
                ("ada", "created", "threads_by_owner_created"),
            ):
                for after in (None, (1e12, 5)):
                    sql, args = page_query(1, owner, order, after)
                    plan = conn.execute("EXPLAIN QUERY PLAN " + sql, (*args, 20)).fetchall()
                    text = " ".join(str(r[-1]) for r in plan)
                    wanted = f"INDEX {index} (scope=?" + (" AND owner=?" if owner else "")
                    assert wanted in text and "TEMP B-TREE" not in text, text


def test_set_thread_keeps_what_the_application_sets(tmp_path: Path) -> None:
    with Saver.from_conn_string(str(tmp_path / "m.db")) as saver:
        chat(saver, "t", "first question", user_id="ada")
        saver.set_thread("t", title="Budget review", summary="Asked twice.", tags=["q3", "q3", "x"])
        chat(saver, "t", "second question", user_id="ada")
        info = saver.thread("t")
        assert info is not None
        assert (info.title, info.summary, info.tags) == (
            "Budget review",
            "Asked twice.",
            ("q3", "x"),
        )
        saver.set_thread("t", title=None, tags=None, owner="carol")
        info = saver.thread("t")
        assert info is not None
        assert (info.title, info.tags, info.owner) == ("first question", (), "carol")
        fresh = saver.set_thread("new", title="Draft", owner="ada")
        assert (fresh.thread_id, fresh.checkpoints, fresh.messages) == ("new", 0, 0)
        assert [t.thread_id for t in saver.threads(owner="ada")] == ["new"]
        for bad in ({"title": 3}, {"tags": "q3"}, {"tags": [1]}, {"summary": "a\0b"}):
            with pytest.raises(InvalidArgumentError):
                saver.set_thread("t", **bad)
        with pytest.raises(InvalidArgumentError, match="sets title"):
            saver.checkpoints.set_thread("t", name="x")


def test_subgraph_checkpoints_count_but_root_messages_are_the_index(tmp_path: Path) -> None:
    from langgraph.types import Command

    with Saver.from_conn_string(str(tmp_path / "m.db")) as saver:
        graph = subgraph_graph().compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "s"}}
        graph.invoke({"log": []}, config)
        graph.invoke(Command(resume="yes"), config)
        info = saver.thread("s")
        assert info is not None and len(info.namespaces) >= 2
        assert kept(saver, "s") == expected(saver, "s")


def test_delete_prune_copy_and_delete_for_runs_keep_the_index_right(tmp_path: Path) -> None:
    with Saver.from_conn_string(str(tmp_path / "m.db")) as saver:
        saver.checkpoints.grace = 0
        for i in range(3):
            chat(saver, "a", f"question {i}", user_id="ada")
            chat(saver, "b", f"question {i}", user_id="bob", run_id=f"run-{i}")
        check_all(saver)
        saver.copy_thread("a", "a-copy")
        copy = saver.thread("a-copy")
        assert copy is not None and (copy.owner, copy.title) == ("ada", "question 0")
        check_all(saver)
        saver.prune(["a"])
        assert saver.thread("a").checkpoints == 1  # type: ignore[union-attr]
        check_all(saver)
        saver.delete_for_runs(["run-2"])  # the newest run: the head moves back
        check_all(saver)
        assert saver.thread("b").messages == 8  # type: ignore[union-attr]
        saver.delete_thread("b")
        assert saver.thread("b") is None
        assert {t.thread_id for t in saver.threads()} == {"a", "a-copy"}
        check_all(saver)


def test_documents_imported_into_another_file_are_indexed(tmp_path: Path) -> None:
    with Saver.from_conn_string(str(tmp_path / "a.db")) as source:
        chat(source, "t", "what is six times two", user_id="ada")
        documents = [(c, d) for c, _, d in source.documents("t")]
    with Saver.from_conn_string(str(tmp_path / "b.db")) as target:
        target.checkpoints.view.import_documents(documents)
        info = target.thread("t")
        assert info is not None
        assert (info.owner, info.title, info.messages) == ("ada", "what is six times two", 4)
        assert kept(target, "t") == expected(target, "t")


def test_a_dictionary_training_keeps_the_bytes_right(tmp_path: Path) -> None:
    with Saver.from_conn_string(str(tmp_path / "m.db")) as saver:
        for i in range(40):
            chat(saver, f"t{i}", f"question {i} " * 30)
        saver.file.content.compact()
        check_all(saver)


def test_a_format_5_file_is_indexed_by_its_upgrade(tmp_path: Path) -> None:
    data = Path(__file__).resolve().parents[1] / "data" / "format5"
    path = tmp_path / "old.db"
    shutil.copy(data / "format5.db", path)
    with Saver.from_conn_string(str(path)) as saver:
        gamma = saver.thread("gamma")
        assert gamma is not None
        assert (gamma.owner, gamma.messages, gamma.checkpoints) == ("grace", 80, 40)
        assert gamma.title is not None and gamma.title.startswith("question 1: ")
        alpha = saver.thread("alpha")
        assert alpha is not None and alpha.owner is None and alpha.messages == 25
        assert alpha.namespaces == ("", "sub:1")
        check_all(saver)
        assert [t.thread_id for t in saver.threads(owner="grace")] == ["gamma"]
        assert saver.messages("gamma", limit=2)[-1].id == "gamma-40-a"


def _crash_writer(path: Path) -> subprocess.Popen[bytes]:
    code = (
        "import sys\n"
        "from langchain_core.messages import HumanMessage\n"
        "from tests.engine.test_graphs import agent_graph\n"
        "from threadloom import Saver\n"
        "saver = Saver(sys.argv[1])\n"
        "graph = agent_graph().compile(checkpointer=saver)\n"
        "i = 0\n"
        "while True:\n"
        "    i += 1\n"
        "    graph.invoke({'messages': [HumanMessage(content=f'q{i}')]},\n"
        "                 {'configurable': {'thread_id': f't{i % 3}', 'user_id': 'ada'}})\n"
        "    if i == 3: print('ready', flush=True)\n"
    )
    root = Path(__file__).resolve().parents[2]
    return subprocess.Popen(
        [sys.executable, "-c", code, str(path)],
        cwd=root,
        stdout=subprocess.PIPE,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
        },
    )


def test_a_writer_killed_mid_run_leaves_the_index_consistent(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    for _ in range(3):
        child = _crash_writer(path)
        assert child.stdout is not None and child.stdout.readline().strip() == b"ready"
        time.sleep(0.3)
        child.send_signal(signal.SIGKILL)
        child.wait()
        with Saver.from_conn_string(str(path)) as saver:
            check_all(saver)
            assert {t.owner for t in saver.threads()} == {"ada"}


def test_a_messages_state_without_a_messages_channel_counts_zero(tmp_path: Path) -> None:
    def node(state: dict[str, Any]) -> dict[str, Any]:
        return {"notes": state.get("notes", []) + ["n"]}

    from typing import TypedDict

    class Notes(TypedDict, total=False):
        notes: list[str]

    graph = StateGraph(Notes)
    graph.add_node("n", node)
    graph.add_edge(START, "n")
    with Saver.from_conn_string(str(tmp_path / "m.db")) as saver:
        graph.compile(checkpointer=saver).invoke(
            {"notes": []}, {"configurable": {"thread_id": "x"}}
        )
        info = saver.thread("x")
        assert info is not None and (info.messages, info.title) == (0, None)
        check_all(saver)


def test_verify_reports_a_thread_whose_bytes_the_index_got_wrong(tmp_path: Path) -> None:
    from threadloom.engine.checks.verify import verify

    with Saver.from_conn_string(str(tmp_path / "m.db")) as saver:
        chat(saver, "t", "hello", user_id="ada")
        assert verify(saver.file).sound
        with saver.file.write() as conn:
            conn.execute("UPDATE threads SET bytes = bytes + 1")
        found = [p for p in verify(saver.file).problems if p.check == "index"]
        assert len(found) == 1 and found[0].thread == "t" and "bytes" in found[0].detail


def test_the_upgrade_reads_with_the_savers_settings_and_reindex_reads_again(
    tmp_path: Path,
) -> None:
    data = Path(__file__).resolve().parents[1] / "data" / "format5"
    path = tmp_path / "old.db"
    shutil.copy(data / "format5.db", path)
    with Saver.from_conn_string(str(path), messages_channel="chat", owner_keys=["account"]) as s:
        gamma = s.thread("gamma")
        assert gamma is not None and (gamma.owner, gamma.messages) == (None, 0)
    with Saver.from_conn_string(str(path)) as saver:
        assert saver.reindex() == 3
        gamma = saver.thread("gamma")
        assert gamma is not None and (gamma.owner, gamma.messages) == ("grace", 80)


def test_a_title_is_looked_for_only_while_the_thread_has_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from threadloom.engine.threads import threadindex

    calls: list[int] = []
    original = threadindex.derived_title

    def counting(messages: Any) -> str | None:
        calls.append(1)
        return original(messages)

    monkeypatch.setattr(threadindex, "derived_title", counting)
    with Saver.from_conn_string(str(tmp_path / "m.db")) as saver:
        chat(saver, "t", "first")
        titled = len(calls)
        chat(saver, "t", "second")
        assert titled >= 1 and len(calls) == titled  # titled after the first turn


def test_thread_times_are_utc_datetimes_and_their_json_is_iso(tmp_path: Path) -> None:
    """`ThreadInfo` gives timezone-aware UTC datetimes; `as_json()` gives ISO strings."""
    with Saver.from_conn_string(str(tmp_path / "m.db")) as saver:
        chat(saver, "t", "hello")
        info = saver.thread("t")
    assert info is not None
    assert isinstance(info.created_at, datetime) and info.created_at.tzinfo is timezone.utc
    assert info.created_at <= info.updated_at <= datetime.now(timezone.utc)
    shown = info.as_json()
    assert datetime.fromisoformat(shown["updated_at"]) == info.updated_at
    assert shown["created_at"].endswith("+00:00")
