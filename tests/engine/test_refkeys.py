"""Refs stored as binary keys (format 11, engine/format/refkeys.py)."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.engine._fixtures import copied, documents, dumped, put_values
from threadloom import Saver, Store
from threadloom.engine.checks.verify import verify
from threadloom.engine.format import refkeys
from threadloom.engine.format.schema import FORMAT_VERSION, REFKEYS_FORMAT
from threadloom.errors import FormatError, MissingDocumentsError, ProtocolError
from threadloom.protocol import BLOBS, ITEMS, PARTS

FORMAT10 = Path(__file__).resolve().parents[1] / "data" / "format10"
HEX = "0123456789abcdef"


def test_a_canonical_ref_takes_33_bytes_and_a_part_keeps_its_suffix() -> None:
    digest = "0f" * 32
    assert refkeys.key("c-" + digest) == b"c" + bytes.fromhex(digest)
    assert refkeys.key("p-" + digest + ".12") == b"p" + bytes.fromhex(digest) + b".12"
    assert refkeys.text(b"p" + bytes.fromhex(digest) + b".12") == "p-" + digest + ".12"


@pytest.mark.parametrize(
    "ref",
    [
        "c-" + "AB" * 32,  # uppercase hex: fromhex takes it, but it would come back lowercase
        "c-" + "ab" * 31 + " a",  # a space fromhex would skip
        "c-" + "ab" * 31,  # too short
        "c_" + "ab" * 32,
        "C-" + "ab" * 32,
        "é-" + "ab" * 32,
        "c-" + "ab" * 32 + "é",
        "not a ref",
        "",
        "\udc80 lone surrogate",
    ],
)
def test_any_other_text_is_kept_whole_and_comes_back_the_same(ref: str) -> None:
    stored = refkeys.key(ref)
    assert stored[0] == refkeys.WHOLE
    assert refkeys.text(stored) == ref


@given(st.text())
def test_every_string_comes_back_the_same(ref: str) -> None:
    assert refkeys.text(refkeys.key(ref)) == ref


@given(
    st.lists(
        st.tuples(st.sampled_from("bcep"), st.text(HEX, min_size=64, max_size=64)),
        min_size=2,
        max_size=20,
    )
)
def test_keys_of_canonical_refs_sort_as_their_text(parts: list[tuple[str, str]]) -> None:
    refs = [f"{letter}-{digits}" for letter, digits in parts]
    assert sorted(refs) == [refkeys.text(k) for k in sorted(refkeys.keys(refs))]


def test_a_damaged_key_still_names_something() -> None:
    """A key cut short or holding bad UTF-8 reads as some text (the seal then fails), never
    as an exception in the middle of a read."""
    assert refkeys.text(b"c\x01\x02") == "c-0102"
    assert refkeys.text(b"\x00\xff\xfe") == "\ufffd\ufffd"
    assert not refkeys.valid(b"c\x01\x02")
    assert refkeys.valid(refkeys.key("c-" + "00" * 32))
    assert refkeys.valid(refkeys.key("anything"))


def test_a_new_file_stores_refs_as_keys_and_reads_them_back(tmp_path: Path) -> None:
    path = tmp_path / "keys.db"
    with Saver.from_conn_string(str(path)) as saver:
        config = put_values(
            saver, "t", {"messages": [f"message {i}: " + "words " * 40 for i in range(40)], "n": 7}
        )
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        stored = [r[0] for r in conn.execute("SELECT ref_key FROM vals")]
        assert conn.execute("PRAGMA user_version").fetchall() == [(FORMAT_VERSION,)]
    finally:
        conn.close()
    assert stored and all(type(k) is bytes and len(k) == 33 for k in stored)
    assert {refkeys.text(k)[:2] for k in stored} == {"b-", "c-", "e-"}
    with Saver.from_conn_string(str(path)) as saver:
        found = saver.get_tuple(config)
        assert found is not None
        assert found.checkpoint["channel_values"]["messages"][39].startswith("message 39:")
        assert verify(saver.file).sound
        collections = {c for c, _, d in saver.documents() if "ref" in d}
    assert collections == {BLOBS, ITEMS}


def test_documents_with_refs_the_saver_would_not_write_import_and_export_unchanged(
    tmp_path: Path,
) -> None:
    """A document imported with a ref of another shape (kept whole) is found by its ref,
    exported as it came, listed in its collection and deleted by its ref."""
    with Saver.from_conn_string(str(tmp_path / "odd.db")) as saver:
        agent = saver.checkpoints.scope.agent_id
        odd = [
            (BLOBS, {"agent_id": agent, "thread_id": "t", "ref": "b-ODD", "value": {"n": 1}}),
            (ITEMS, {"agent_id": agent, "thread_id": "t", "ref": "e-" + "AB" * 32, "value": {}}),
            (PARTS, {"agent_id": agent, "thread_id": "t", "ref": "p-x.0", "payload": b"xy"}),
        ]
        view = saver.checkpoints.view
        assert view.import_documents(odd).stored == 3
        exported = sorted((c, d["ref"]) for c, _, d in saver.documents("t"))
        assert exported == sorted((c, d["ref"]) for c, d in odd)
        for collection, data in odd:
            found = view.find(collection, thread_id="t", refs=[data["ref"]])
            assert [d.data["ref"] for d in found] == [data["ref"]]
            others = [c for c in (BLOBS, ITEMS, PARTS) if c != collection]
            assert all(not view.find(c, thread_id="t", refs=[data["ref"]]) for c in others)
        assert view.present_refs("t", ["b-ODD", "b-missing"]) == {"b-ODD"}
        assert view.delete(BLOBS, {"thread_id": "t", "ref": "b-ODD"})
        assert view.present_refs("t", ["b-ODD"]) == set()
        assert verify(saver.file).sound


@pytest.mark.parametrize("ref", [None, 7, b"c-bytes", ""])
def test_an_import_without_a_text_ref_is_refused_whole(tmp_path: Path, ref: object) -> None:
    with Saver.from_conn_string(str(tmp_path / "bad.db")) as saver:
        agent = saver.checkpoints.scope.agent_id
        good = {"agent_id": agent, "thread_id": "t", "ref": "b-" + "00" * 32, "value": {}}
        bad = {"agent_id": agent, "thread_id": "t", "ref": ref, "value": {}}
        with pytest.raises(ProtocolError, match="needs a ref"):
            saver.checkpoints.view.import_documents([(BLOBS, good), (BLOBS, bad)])
        assert list(saver.documents("t")) == []


def test_a_format_10_file_upgrades_with_its_refs_as_keys_and_goes_on(tmp_path: Path) -> None:
    """tests/data/format10/make.py (written by the last format-10 commit): chat threads, a
    thread of deltas, a value in parts, Store items and a lease. The upgrade rebuilds
    `vals` with binary keys, seals unchanged: the same documents, a sound verify, every
    thread readable, both memories take new writes, and the file is smaller."""
    path = copied(FORMAT10, tmp_path)
    conn = apsw.Connection(str(path))
    try:
        assert conn.execute("PRAGMA user_version").fetchall() == [(REFKEYS_FORMAT - 1,)]
        before = conn.execute("SELECT count(*), sum(blocks = -1) FROM vals").fetchall()[0]
        text_refs = {str(r[0]) for r in conn.execute("SELECT ref FROM vals")}
        old_bytes = conn.execute("SELECT sum(length(ref)) FROM vals").fetchall()[0][0]
    finally:
        conn.close()
    expected = dumped(FORMAT10)
    saver = Saver(str(path))
    try:
        assert documents(saver) == expected
        assert verify(saver.file).sound
        for thread_id in ("alpha", "beta", "gamma", "delta", "parts"):
            config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
            assert saver.get_tuple(config) is not None, thread_id
            assert list(saver.list(config))
        config = {"configurable": {"thread_id": "delta", "checkpoint_ns": ""}}
        assert len(saver.get_tuple(config).checkpoint["channel_values"]["messages"]) == 40  # type: ignore[union-attr]
        assert saver.checkpoints.leases.holder("gamma") is None
        put_values(saver, "new", {"messages": ["after the upgrade"]})
        assert verify(saver.file).sound
    finally:
        saver.close()
    with Store.from_conn_string(str(path)) as store:
        assert store.get(("grace", "facts"), "tea").value == {"text": "likes green tea"}  # type: ignore[union-attr]
        store.put(("grace", "facts"), "coffee", {"text": "no coffee"})
        assert len(store.search(("grace",))) == 3
    conn = apsw.Connection(str(path))
    try:
        assert conn.execute("PRAGMA user_version").fetchall() == [(FORMAT_VERSION,)]
        stored = [r[0] for r in conn.execute("SELECT ref_key FROM vals")]
        assert all(type(k) is bytes for k in stored)
        assert text_refs <= {refkeys.text(k) for k in stored}
        after = conn.execute(
            "SELECT count(*), sum(blocks = -1) FROM vals WHERE thread IN "
            "(SELECT id FROM threads WHERE thread_id <> 'new')"
        ).fetchall()[0]
        assert after == before
        new_bytes = conn.execute(
            "SELECT sum(length(ref_key)) FROM vals WHERE thread IN "
            "(SELECT id FROM threads WHERE thread_id <> 'new')"
        ).fetchall()[0][0]
        assert new_bytes < 0.51 * old_bytes  # 33 bytes a ref against 66
    finally:
        conn.close()


def test_a_file_without_checkpoint_tables_upgrades_without_making_them(tmp_path: Path) -> None:
    """Format 8 on makes a feature's tables when it first writes: a format-10 file holding
    only the Store upgrades without a `vals` table (the rebuild has nothing to rebuild),
    and its first checkpoint then makes `vals` in the new shape."""
    path = tmp_path / "store-only.db"
    with Store.from_conn_string(str(path)) as store:
        store.put(("a",), "k", {"v": 1})
    conn = apsw.Connection(str(path))
    try:
        assert not conn.execute("SELECT 1 FROM sqlite_schema WHERE name = 'vals'").fetchall()
        conn.execute(f"PRAGMA user_version = {REFKEYS_FORMAT - 1}")
    finally:
        conn.close()
    with Saver.from_conn_string(str(path)) as saver:
        with saver.file.read() as read:
            assert read.execute("PRAGMA user_version").fetchall() == [(FORMAT_VERSION,)]
            assert not read.execute(
                "SELECT 1 FROM main.sqlite_schema WHERE name = 'vals'"
            ).fetchall()
        put_values(saver, "t", {"n": 1})
        with saver.file.read() as read:
            sql = read.execute("SELECT sql FROM main.sqlite_schema WHERE name = 'vals'").fetchall()
        assert "ref_key BLOB" in str(sql[0][0])
        assert verify(saver.file).sound


def test_a_statement_of_an_older_threadloom_fails_instead_of_matching_keys(
    tmp_path: Path,
) -> None:
    """An older threadloom that had the file open before the upgrade goes on with its
    prepared statements: they name `vals.ref`, which format 11 renamed, so they fail
    loudly instead of comparing binary keys with text refs (and deleting what they miss)."""
    path = copied(FORMAT10, tmp_path)
    Saver(str(path)).close()
    conn = apsw.Connection(str(path))
    try:
        for old in ("SELECT ref FROM vals", "DELETE FROM vals WHERE thread = 1 AND ref IN ('x')"):
            with pytest.raises(apsw.SQLError, match="no such column"):
                conn.execute(old)
        assert conn.execute("SELECT count(*) FROM vals").fetchall()[0][0] > 0
    finally:
        conn.close()


def test_vals_made_by_an_older_threadloom_after_the_upgrade_is_rebuilt(tmp_path: Path) -> None:
    """A file that moved to format 11 before it had checkpoint tables, whose tables an
    older threadloom then made in its own shape (here: a format-10 file whose version says
    11): a read-only open refuses it with what to do, a writable one rebuilds `vals`, and
    every document reads back as written."""
    path = copied(FORMAT10, tmp_path)
    conn = apsw.Connection(str(path))
    try:
        conn.execute(f"PRAGMA user_version = {FORMAT_VERSION}")
    finally:
        conn.close()
    with pytest.raises(FormatError, match="older threadloom"):
        Saver(str(path), readonly=True)
    expected = dumped(FORMAT10)
    with Saver.from_conn_string(str(path)) as saver:
        assert documents(saver) == expected
        assert verify(saver.file).sound


def test_a_format_10_file_with_a_damaged_ref_upgrades_and_verify_names_it(
    tmp_path: Path,
) -> None:
    """A ref whose bytes are not UTF-8 (damage) does not stop the upgrade: the row is kept
    with its bytes, its seal fails, and verify names it."""
    path = copied(FORMAT10, tmp_path)
    conn = apsw.Connection(str(path))
    try:
        conn.execute(
            "UPDATE vals SET ref = CAST(CAST(ref AS BLOB) || x'ff' AS TEXT) WHERE (thread, ref) "
            "IN (SELECT thread, ref FROM vals WHERE ref LIKE 'b-%' LIMIT 1)"
        )
        assert conn.changes() == 1
    finally:
        conn.close()
    with Saver.from_conn_string(str(path)) as saver:
        report = verify(saver.file)
    assert not report.sound
    assert any("\ufffd" in p.detail for p in report.problems)


def test_a_body_naming_a_ref_that_is_not_text_reads_as_missing(tmp_path: Path) -> None:
    """A checkpoint imported with a channel entry naming a number as its blob (nothing of
    ours writes one) reads as a missing document, not as a TypeError."""
    with Saver.from_conn_string(str(tmp_path / "n.db")) as saver:
        put_values(saver, "t", {"n": "x" * 10})
        doc = next(d for _, _, d in saver.documents("t") if "checkpoint" in d)
        saver.checkpoints.view.import_documents(
            [
                (
                    "langgraph_checkpoints_v2",
                    {**doc, "thread_id": "bad", "channels": {"n": {"blob": 5}}},
                )
            ]
        )
        with pytest.raises(MissingDocumentsError):
            saver.get_tuple({"configurable": {"thread_id": "bad", "checkpoint_ns": ""}})
    with pytest.raises(ProtocolError, match="not int"):
        refkeys.key(5)  # type: ignore[arg-type]


@pytest.mark.parametrize("blob", [5, [1, 2]])
def test_compact_leaves_a_thread_naming_a_ref_that_is_not_text_alone(
    tmp_path: Path, blob: object
) -> None:
    """`compact` and a retention run list such a thread as damaged and go on with the
    others (they stopped for the whole file with an AttributeError, or a TypeError for an
    unhashable ref)."""
    from threadloom.engine.checks.reclaim import compact
    from threadloom.langgraph.retention import RetentionPolicy

    with Saver.from_conn_string(str(tmp_path / "n.db")) as saver:
        put_values(saver, "t", {"n": "x" * 10})
        doc = next(d for _, _, d in saver.documents("t") if "checkpoint" in d)
        saver.checkpoints.view.import_documents(
            [
                (
                    "langgraph_checkpoints_v2",
                    {**doc, "thread_id": "bad", "channels": {"n": {"blob": blob}}},
                )
            ]
        )
        before = {ref: d for ref, _, d in saver.documents("bad")}
        done = compact(saver.file, grace=0)
        assert done.damaged == ["bad"]
        assert {ref: d for ref, _, d in saver.documents("bad")} == before
        pruned = saver.apply_retention(RetentionPolicy(keep_last=1, min_age=0))
        assert pruned.damaged == ["bad"]
        assert {ref: d for ref, _, d in saver.documents("bad")} == before
        found = saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
        assert found is not None and found.checkpoint["channel_values"] == {"n": "x" * 10}


def test_verify_names_a_row_stored_under_a_key_that_is_not_its_refs(tmp_path: Path) -> None:
    """The same ref kept whole instead of as its 33-byte key (a tampered file) has a good
    seal (seals bind the text) but no lookup finds it: verify names it."""
    path = tmp_path / "c.db"
    with Saver.from_conn_string(str(path)) as saver:
        put_values(saver, "t", {"note": "word " * 4000})
    conn = apsw.Connection(str(path))
    try:
        (stored,) = [
            r[0]
            for r in conn.execute(
                "SELECT ref_key FROM vals WHERE substr(ref_key, 1, 1) = ?", (b"b",)
            )
        ]
        other = b"\x00" + refkeys.text(stored).encode()
        conn.execute("UPDATE vals SET ref_key = ? WHERE ref_key = ?", (other, stored))
    finally:
        conn.close()
    with Saver.from_conn_string(str(path)) as saver:
        report = verify(saver.file)
    assert not report.sound
    assert any(refkeys.text(stored) in p.detail and "key" in p.detail for p in report.problems)


def test_a_rebuild_copies_keys_it_finds_already_binary(tmp_path: Path) -> None:
    """A `vals` whose `ref` column already holds keys (a build between the two commits of
    format 11 wrote such files) is rebuilt with its keys as they are, not encoded twice."""
    path = tmp_path / "keys.db"
    with Saver.from_conn_string(str(path)) as saver:
        config = put_values(
            saver, "t", {"messages": [f"message {i}: " + "words " * 40 for i in range(40)]}
        )
        before = list(saver.documents())
    conn = apsw.Connection(str(path))
    try:
        conn.execute("ALTER TABLE vals RENAME COLUMN ref_key TO ref")
    finally:
        conn.close()
    with Saver.from_conn_string(str(path)) as saver:
        assert list(saver.documents()) == before
        assert saver.get_tuple(config) is not None
        assert verify(saver.file).sound
