"""Task ids stored as keys (format 12, engine/format/idkeys.py)."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path
from typing import Any

import apsw
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.base import WRITES_IDX_MAP

from tests.engine._fixtures import copied, documents, dumped, put_values
from threadloom import Saver
from threadloom.engine.checks.verify import verify
from threadloom.engine.format import idkeys
from threadloom.engine.format.schema import FORMAT_VERSION, TASKKEYS_FORMAT
from threadloom.errors import FormatError
from threadloom.protocol import WRITES

FORMAT11 = Path(__file__).resolve().parents[1] / "data" / "format11"
UUID_TASK = "7f1c2a4e-9b3d-4c5e-8f60-0a1b2c3d4e5f"


def test_a_canonical_uuid_takes_17_bytes() -> None:
    stored = idkeys.key(UUID_TASK)
    assert stored == b"\x01" + uuid.UUID(UUID_TASK).bytes
    assert idkeys.text(stored) == UUID_TASK


@pytest.mark.parametrize(
    "task_id",
    [
        UUID_TASK.upper(),  # fromhex takes uppercase, but it would come back lowercase
        "{" + UUID_TASK[1:-1] + "}",
        UUID_TASK.replace("-", ""),
        UUID_TASK[:-1] + " ",  # a space fromhex would skip
        UUID_TASK[:8] + "_" + UUID_TASK[9:],
        # 36 characters with the four dashes in place and more: fewer than 32 digits.
        "aaaaaaaa-bbbb-cccc-dddd--eeeeeeeeee-",
        "aaaaaaaa-bbbb-cccc-dddd-------------",
        "00000000-0000-0000-0000-00-00-00-00-",
        "task-1",
        "",
        "\udc80 lone surrogate",
    ],
)
def test_any_other_task_id_stays_text(task_id: str) -> None:
    assert idkeys.key(task_id) == task_id
    assert idkeys.text(idkeys.key(task_id)) == task_id


#: Text shaped like a UUID's groups, dashes and hex digits anywhere in them.
_LOOKALIKES = st.text(alphabet="0123456789abcdefABCDEF- ", min_size=36, max_size=36).map(
    lambda s: s[:8] + "-" + s[9:13] + "-" + s[14:18] + "-" + s[19:23] + "-" + s[24:]
)


@given(st.text() | st.uuids().map(str) | _LOOKALIKES)
def test_every_task_id_comes_back_the_same(task_id: str) -> None:
    assert idkeys.text(idkeys.key(task_id)) == task_id


@given(st.lists(st.text() | st.uuids().map(str) | _LOOKALIKES, min_size=2, max_size=2))
def test_two_task_ids_share_a_key_only_when_equal(pair: list[str]) -> None:
    assert (idkeys.key(pair[0]) == idkeys.key(pair[1])) == (pair[0] == pair[1])


def test_a_write_of_a_uuid_lookalike_task_reads_back(tmp_path: Path) -> None:
    """Two look-alikes with the same hex digits were one 16-byte key: the second write
    vanished and the first read back as damage."""
    first, second = "aaaaaaaa-bbbb-cccc-dddd--eeeeeeeeee-", "aaaaaaaa-bbbb-cccc-dddd-e-eeeeeeeee-"
    with Saver.from_conn_string(str(tmp_path / "t.db")) as saver:
        config = put_values(saver, "t", {"n": 1})
        saver.put_writes(config, [("n", 2)], first)
        saver.put_writes(config, [("n", 3)], second)
        got = saver.get_tuple(config)
        assert got is not None
        assert got.pending_writes == [(first, "n", 2), (second, "n", 3)]
        assert verify(saver.file).sound


def test_writes_of_uuid_and_text_tasks_come_back_in_the_texts_order(tmp_path: Path) -> None:
    """SQLite orders a BLOB after every TEXT; readers order by the text, so a checkpoint's
    writes come back as they did when every id was text (task path, task id, index)."""
    path = tmp_path / "mixed.db"
    tasks = ["zz-text", UUID_TASK, "00-text", "ffffffff-ffff-4fff-8fff-ffffffffffff"]
    with Saver.from_conn_string(str(path)) as saver:
        config = put_values(saver, "t", {"n": 1})
        for i, task in enumerate(tasks):
            saver.put_writes(config, [("n", i), ("log", task)], task)
        got = saver.get_tuple(config)
        assert got is not None
        assert [w[0] for w in got.pending_writes or []] == [
            t for t in sorted(tasks) for _ in range(2)
        ]
        listed = next(iter(saver.list(config)))
        assert listed.pending_writes == got.pending_writes
        # put_writes again: the first write of a (task, index) wins, under either form.
        for task in tasks:
            saver.put_writes(config, [("n", 99), ("log", "again")], task)
        again = saver.get_tuple(config)
        assert again is not None and again.pending_writes == got.pending_writes
        found = saver.checkpoints.view.find(
            WRITES, thread_id="t", checkpoint_ids=[config["configurable"]["checkpoint_id"]]
        )
        assert [d.data["task_id"] for d in found] == [t for t in sorted(tasks) for _ in range(2)]
    conn = apsw.Connection(str(path))
    try:
        stored = dict(conn.execute("SELECT task_key, typeof(task_key) FROM writes"))
    finally:
        conn.close()
    assert stored[idkeys.key(UUID_TASK)] == "blob"
    assert stored["zz-text"] == "text"


def test_a_format_11_file_upgrades_with_task_ids_as_keys_and_goes_on(tmp_path: Path) -> None:
    """tests/data/format11/make.py (written by the last format-11 commit): a thread a
    LangGraph graph ran, a checkpoint with UUID and text tasks' writes, a failed task's
    error. The upgrade rebuilds `writes` with keys, seals unchanged: the same documents,
    the same reads, a sound verify, the status kept by the rebuilt triggers."""
    path = copied(FORMAT11, tmp_path)
    conn = apsw.Connection(str(path))
    try:
        assert conn.execute("PRAGMA user_version").fetchall() == [(TASKKEYS_FORMAT - 1,)]
        before = conn.execute("SELECT count(*), sum(length(task_id)) FROM writes").fetchall()[0]
        uuids = conn.execute(
            "SELECT count(*) FROM writes WHERE task_id GLOB '*-*-*-*-*' AND length(task_id) = 36 "
            "AND task_id = lower(task_id)"
        ).fetchall()[0][0]
    finally:
        conn.close()
    expected = dumped(FORMAT11)
    with Saver.from_conn_string(str(path)) as saver:
        assert documents(saver) == expected
        assert verify(saver.file).sound
        history = list(saver.list({"configurable": {"thread_id": "graph"}}))
        assert len(history) == 12 and all(c.checkpoint for c in history)
        mixed = saver.get_tuple({"configurable": {"thread_id": "mixed", "checkpoint_ns": ""}})
        assert mixed is not None
        assert [w[0] for w in mixed.pending_writes or []] == [
            UUID_TASK,  # "7f1c..." < "Task-Upper" < "zz-..." as text
            "Task-Upper",
            "zz-text-task",
            "zz-text-task",
        ]
        failed = saver.checkpoints.threads(limit=10)
        assert {t.thread_id: t.status for t in failed}["failed"] == "error"
        config = put_values(saver, "new", {"n": 1})
        saver.put_writes(config, [("n", 2)], str(uuid.uuid4()))
        assert verify(saver.file).sound
    conn = apsw.Connection(str(path))
    try:
        assert conn.execute("PRAGMA user_version").fetchall() == [(FORMAT_VERSION,)]
        after = conn.execute(
            "SELECT count(*), sum(length(task_key)), sum(typeof(task_key) = 'blob') FROM writes "
            "WHERE thread IN (SELECT id FROM threads WHERE thread_id <> 'new')"
        ).fetchall()[0]
        assert after[0] == before[0] and after[2] == uuids > 10
        assert after[1] < before[1] - 19 * uuids + 1  # 17 bytes a UUID against 36
        triggers = {
            r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE tbl_name = 'writes'")
        }
        assert {"pending_insert", "pending_update", "pending_delete"} <= triggers
        assert {"status_write_insert", "status_write_update", "status_write_delete"} <= triggers
    finally:
        conn.close()


def test_a_statement_of_an_older_threadloom_fails_instead_of_matching_keys(
    tmp_path: Path,
) -> None:
    """An older threadloom still holding the file names `writes.task_id`, which format 12
    renamed: its statements fail loudly instead of comparing keys with text."""
    path = copied(FORMAT11, tmp_path)
    Saver(str(path)).close()
    conn = apsw.Connection(str(path))
    try:
        for old in ("SELECT task_id FROM writes", "DELETE FROM writes WHERE task_id = 'x'"):
            with pytest.raises(apsw.SQLError, match="no such column"):
                conn.execute(old)
    finally:
        conn.close()


def test_writes_made_by_an_older_threadloom_after_the_upgrade_are_rebuilt(
    tmp_path: Path,
) -> None:
    """A `writes` in the old shape in a file whose version says 12 (an older threadloom
    made the checkpoint tables after the upgrade): a read-only open refuses it with what
    to do, a writable one rebuilds it, and every document reads back as written."""
    path = copied(FORMAT11, tmp_path)
    conn = apsw.Connection(str(path))
    try:
        conn.execute(f"PRAGMA user_version = {FORMAT_VERSION}")
    finally:
        conn.close()
    with pytest.raises(FormatError, match="older threadloom"):
        Saver(str(path), readonly=True)
    expected = dumped(FORMAT11)
    with Saver.from_conn_string(str(path)) as saver:
        assert documents(saver) == expected
        assert verify(saver.file).sound


def test_verify_names_a_uuid_stored_as_text(tmp_path: Path) -> None:
    """The same task id kept as text instead of its key (a tampered file) has a good seal
    (seals bind the text) but no lookup finds it: verify names it."""
    path = tmp_path / "t.db"
    with Saver.from_conn_string(str(path)) as saver:
        config = put_values(saver, "t", {"n": 1})
        saver.put_writes(config, [("n", 2)], UUID_TASK)
    conn = apsw.Connection(str(path))
    try:
        conn.execute(
            "UPDATE writes SET task_key = ? WHERE task_key = ?", (UUID_TASK, idkeys.key(UUID_TASK))
        )
        assert conn.changes() == 1
    finally:
        conn.close()
    with Saver.from_conn_string(str(path)) as saver:
        report = verify(saver.file)
    assert not report.sound
    assert any(UUID_TASK in p.detail and "key" in p.detail for p in report.problems)


def test_a_format_11_file_with_a_damaged_task_id_upgrades_and_verify_names_it(
    tmp_path: Path,
) -> None:
    """A task id whose bytes are not UTF-8 (damage) does not stop the upgrade (a file
    neither a writable nor a read-only open could then use): the row keeps its bytes, its
    seal fails, and verify names it."""
    path = copied(FORMAT11, tmp_path)
    conn = apsw.Connection(str(path))
    try:
        conn.execute(
            "UPDATE writes SET task_id = CAST(CAST(task_id AS BLOB) || x'ff' AS TEXT) "
            "WHERE task_id = 'Task-Upper'"
        )
        assert conn.changes() == 1
    finally:
        conn.close()
    with Saver.from_conn_string(str(path)) as saver:
        report = verify(saver.file)
        assert saver.get_tuple({"configurable": {"thread_id": "graph", "checkpoint_ns": ""}})
    assert not report.sound
    assert any("Task-Upper\ufffd" in p.detail for p in report.problems)


_TASKS = st.sampled_from(
    [
        UUID_TASK,
        "00000000-0000-0000-0000-000000000000",
        "ffffffff-ffff-ffff-ffff-ffffffffffff",
        UUID_TASK.upper(),
        "aaaaaaaa-bbbb-cccc-dddd--eeeeeeeeee-",
        "aaaaaaaa-bbbb-cccc-dddd-e-eeeeeeeee-",
        "task-1",
        "",
        "\x01" + "a" * 16,
    ]
)
_CHANNELS = st.sampled_from(["messages", "note", "__error__", "__interrupt__"])
_CALLS = st.lists(
    st.tuples(
        st.integers(0, 1),  # which checkpoint
        _TASKS,
        st.lists(st.tuples(_CHANNELS, st.integers(0, 99)), min_size=1, max_size=3),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(_CALLS)
def test_pending_writes_match_a_model_whatever_the_task_ids(calls: list[Any]) -> None:
    """put_writes of UUID, look-alike and text task ids, then the writes read back (after a
    reopen and in a copy of the thread) are a model's: the first write of a (task, index)
    wins, a special channel's write replaces, in LangGraph's order (task id, index)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "m.db"
        model: list[dict[tuple[str, int], tuple[str, str, int]]] = [{}, {}]
        with Saver.from_conn_string(str(path)) as saver:
            configs = [put_values(saver, "t", {"n": step}, step) for step in (1, 2)]
            for at, task, writes in calls:
                saver.put_writes(configs[at], writes, task)
                for i, (channel, value) in enumerate(writes):
                    key = (task, WRITES_IDX_MAP.get(channel, i))
                    if channel in WRITES_IDX_MAP:
                        model[at][key] = (task, channel, value)
                    else:
                        model[at].setdefault(key, (task, channel, value))
        expected = [[written[k] for k in sorted(written)] for written in model]
        with Saver.from_conn_string(str(path)) as saver:
            saver.copy_thread("t", "copy")
            for thread_id in ("t", "copy"):
                for at, config in enumerate(configs):
                    wanted = {"configurable": {**config["configurable"], "thread_id": thread_id}}
                    got = saver.get_tuple(wanted)
                    assert got is not None
                    assert got.pending_writes == expected[at], (thread_id, at)
            listed = {
                c.config["configurable"]["checkpoint_id"]: c.pending_writes
                for c in saver.list({"configurable": {"thread_id": "t"}})
            }
            for at, config in enumerate(configs):
                assert listed[config["configurable"]["checkpoint_id"]] == expected[at]
            assert verify(saver.file).sound
