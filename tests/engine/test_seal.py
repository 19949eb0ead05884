"""Row seals (format 4): every body row's digest binds its identity; `verify` finds what
reads depend on. The damage suite in tests/integrity/ measures the same on many copies."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import apsw
import ormsgpack
import pytest
import zstandard

from threadloom import Saver
from threadloom.engine.checks.verify import verify
from threadloom.engine.file import File
from threadloom.engine.format import refkeys
from threadloom.engine.format.schema import FORMAT_VERSION
from threadloom.engine.format.seal import identity, seal, sql_seal
from threadloom.errors import CorruptionError

FORMAT3 = Path(__file__).resolve().parents[1] / "data" / "format3"
ALPHA = {"configurable": {"thread_id": "alpha", "checkpoint_ns": ""}}


def test_a_seal_is_its_own_inverse_and_binds_every_part() -> None:
    digest = bytes(range(16))
    sealed = seal(digest, "vals", "ns", "agent", "t0", "b-1")
    assert sealed != digest and seal(sealed, "vals", "ns", "agent", "t0", "b-1") == digest
    variants = [
        ("vals", "ns", "agent", "t0", "b-2"),
        ("vals", "ns", "agent", "t1", "b-1"),
        ("vals", "nt", "agent", "t0", "b-1"),
        ("writes", "ns", "agent", "t0", "b-1"),
        ("vals", "ns", "agent", "t0b-1", ""),  # no two part lists encode alike
        ("vals", "ns", "agent", "t0", None),
    ]
    base = identity("vals", "ns", "agent", "t0", "b-1")
    assert len({identity(*v) for v in variants} | {base}) == 7
    assert identity("c", 0) != identity("c", "0") != identity("c", None)


def test_the_sql_function_turns_damaged_types_into_a_failing_digest() -> None:
    assert sql_seal(None, "vals") is None
    assert sql_seal(b"short", "vals") == b""
    assert sql_seal(bytes(16), "vals", b"bytes where text was") == b""
    assert sql_seal(bytes(16), "vals", 1.5) == b""
    # A ref as `vals` stores it (format 11) is sealed as its text.
    ref = "c-" + "0f" * 32
    assert sql_seal(bytes(16), "vals", refkeys.key(ref)) == sql_seal(bytes(16), "vals", ref)
    assert sql_seal(bytes(16), "vals", refkeys.key(ref)[:20]) == b""


def _upgraded(tmp_path: Path, *, upgrade: bool = True) -> Path:
    path = tmp_path / "old.db"
    shutil.copy(FORMAT3 / "format3.db", path)
    if upgrade:
        Saver(path).close()
    return path


def test_a_format_3_file_upgrades_reads_back_equal_and_verifies_sound(tmp_path: Path) -> None:
    """A format-3 file holding real threads (messages, special writes, an interrupt, a
    subgraph) is sealed by the upgrade without decoding: same documents, sound verify."""
    path = _upgraded(tmp_path, upgrade=False)
    raw = zstandard.ZstdDecompressor().decompress((FORMAT3 / "documents.msgpack.zst").read_bytes())
    with Saver.from_conn_string(str(path)) as saver:
        assert ormsgpack.packb([list(d) for d in saver.documents()]) == ormsgpack.packb(
            ormsgpack.unpackb(raw)
        )
        head = saver.get_tuple(ALPHA)
        assert head is not None and len(head.checkpoint["channel_values"]["messages"]) == 25
        assert {w[1] for w in head.pending_writes} == {"messages", "__error__", "__interrupt__"}
        assert [w[2] for w in head.pending_writes if w[1] == "__error__"] == ["boom again"]
        assert len(list(saver.list(ALPHA, filter={"user": "ada"}))) == 12
        report = verify(saver.file)
        assert report.problems == [] and report.sound
        assert report.checks == ["sqlite", "owners", "heads", "rows", "index", "store", "blocks"]
        assert report.threads == 2 and report.rows > 50
    assert apsw.Connection(str(path)).execute("PRAGMA user_version").fetchall() == [
        (FORMAT_VERSION,)
    ]


EDITS = [
    ("checkpoints", "parent_id = substr(parent_id, 1, 35) || 'f'", "parent_id IS NOT NULL"),
    ("checkpoints", "checkpoint_ns = 'sub:2'", "checkpoint_ns = 'sub:1'"),
    ("checkpoints", "schema = 1", "1"),
    ("checkpoints", "keyed = 1 - keyed", "1"),
    ("writes", "channel = 'messagez'", "channel = 'messages'"),
    ("writes", "idx = idx + 7", "1"),
    ("writes", "task_path = 'elsewhere'", "1"),
    ("writes", "task_key = CAST(task_key || 'x' AS BLOB)", "1"),
    # Another UUID in the key's shape: a well-formed id, but not the one sealed.
    ("writes", "task_key = x'01' || randomblob(16)", "1"),
    ("writes", "task_key = 'another task'", "1"),
    ("vals", "ref_key = CAST(ref_key || 'x' AS BLOB)", "1"),
    ("threads", "thread_id = 'gamma'", "thread_id = 'beta'"),
    ("scopes", "agent_id = 'other'", "1"),
]


@pytest.mark.parametrize(("table", "change", "where"), EDITS, ids=[e[1] for e in EDITS])
def test_a_changed_identity_column_never_reads_as_another_row(
    tmp_path: Path, table: str, change: str, where: str
) -> None:
    """Every row of `table` matching `where` gets `change`: each read of the changed rows
    raises (or finds nothing under the old identity), and verify names the damage."""
    path = _upgraded(tmp_path)
    with Saver.from_conn_string(str(path)) as saver:
        before = {
            t: [
                (c.config, c.parent_config, c.checkpoint, c.metadata, c.pending_writes)
                for c in saver.list({"configurable": {"thread_id": t}})
            ]
            for t in ("alpha", "beta")
        }
    conn = apsw.Connection(str(path))
    key = "ref_key" if table == "vals" else "task_key, idx" if table == "writes" else "rowid"
    first = conn.execute(
        f"SELECT {key} FROM {table} WHERE {where} ORDER BY {key} LIMIT 1"
    ).fetchall()
    assert first
    names = key.split(", ")
    conn.execute(
        f"UPDATE {table} SET {change} WHERE " + " AND ".join(f"{n} = ?" for n in names),
        first[0],
    )
    conn.close()
    try:
        with Saver.from_conn_string(str(path)) as saver:
            for thread, wanted in before.items():
                try:
                    got = [
                        (c.config, c.parent_config, c.checkpoint, c.metadata, c.pending_writes)
                        for c in saver.list({"configurable": {"thread_id": thread}})
                    ]
                except CorruptionError:
                    continue
                except Exception as exc:  # a missing value names itself
                    assert "missing" in str(exc)
                    continue
                # a row moved away from its identity is never read as other data
                assert got == wanted, thread
    except CorruptionError:
        pass  # a damaged scope row is refused when the scope is opened
    db = File(path, readonly=True)
    try:
        assert not verify(db).sound
    finally:
        db.close()
    found = subprocess.run(
        [sys.executable, "-m", "threadloom", "verify", "--db", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert found.returncode == 3, found.stderr
    assert "problem: [rows]" in found.stdout and "Traceback" not in found.stderr


def test_reads_of_a_file_sqlite_finds_damaged_raise_corruption_error(tmp_path: Path) -> None:
    """A damaged page reached by a read raises CorruptionError naming the file, not a raw
    SQLite error."""
    path = _upgraded(tmp_path)
    conn = apsw.Connection(str(path))
    (page,) = conn.execute(
        "SELECT pageno FROM dbstat WHERE name = 'checkpoints' AND pagetype = 'leaf' LIMIT 1"
    ).fetchone()
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    data = bytearray(path.read_bytes())
    data[(page - 1) * size : (page - 1) * size + 8] = b"\xff" * 8  # the b-tree page header
    path.write_bytes(bytes(data))
    with (
        pytest.raises(CorruptionError, match="threadloom verify"),
        Saver.from_conn_string(str(path)) as saver,
    ):
        list(saver.list(ALPHA))
    db = File(path, readonly=True)
    try:
        report = verify(db)
    finally:
        db.close()
    assert any(p.check == "sqlite" for p in report.problems)


@pytest.mark.parametrize("newest", [True, False], ids=["newest", "older"])
def test_a_checkpoint_moved_away_from_its_id_is_not_read_as_absent(
    tmp_path: Path, newest: bool
) -> None:
    """A checkpoint whose id changed (to sort below every other id) is missed by the
    lookups of its old id; the namespace's head and census turn both misses into
    CorruptionError, and verify reports the head row."""
    path = _upgraded(tmp_path)
    with Saver.from_conn_string(str(path)) as saver:
        ids = [c.config["configurable"]["checkpoint_id"] for c in saver.list(ALPHA)]
    victim = ids[0] if newest else ids[5]
    conn = apsw.Connection(str(path))
    conn.execute(
        "UPDATE checkpoints SET checkpoint_id = '0' || substr(checkpoint_id, 2) "
        "WHERE checkpoint_id = ? AND checkpoint_ns = ''",
        (victim,),
    )
    conn.close()
    with Saver.from_conn_string(str(path)) as saver:
        named = {"configurable": {**ALPHA["configurable"], "checkpoint_id": victim}}
        with pytest.raises(CorruptionError, match="census"):
            saver.get_tuple(named)
        if newest:
            with pytest.raises(CorruptionError, match="head"):
                saver.get_tuple(ALPHA)
        else:
            assert saver.get_tuple(ALPHA) is not None
        with pytest.raises(CorruptionError):
            list(saver.list(ALPHA))
        checks = {p.check for p in verify(saver.file).problems}
    # A moved head leaves its `__error__` write behind: the index's status is no longer
    # what the rows say (format 7), so verify's index check reports the thread too.
    assert checks == ({"heads", "rows", "index"} if newest else {"heads", "rows"})


def test_a_missing_checkpoint_id_reads_as_absent_on_a_sound_file(tmp_path: Path) -> None:
    path = _upgraded(tmp_path)
    with Saver.from_conn_string(str(path)) as saver:
        missing = {"configurable": {**ALPHA["configurable"], "checkpoint_id": "1f0d-none"}}
        assert saver.get_tuple(missing) is None
        assert saver.get_tuple({"configurable": {"thread_id": "nobody"}}) is None
        saver.delete_thread("beta")
        saver.prune(["alpha"])
        assert verify(saver.file).sound
        assert len(list(saver.list(ALPHA))) == 1


def test_the_scope_sealer_encodes_exactly_as_seal() -> None:
    from threadloom.engine.format.seal import Sealer

    digest = bytes(range(16))
    parts = ("t\u00e9", "", "1f0d", None, 2, -1, "x\x1fy")
    assert Sealer("ns", "agent").seal("writes", digest, *parts) == seal(
        digest, "writes", "ns", "agent", *parts
    )


def test_retraining_compacting_copying_and_pruning_keep_the_file_sound(tmp_path: Path) -> None:
    """Every path that deletes and inserts rows again (dictionary retraining, compact,
    copy_thread, prune, delete_thread, a replaced special write) keeps the seals, the
    heads and the pending censuses exact."""
    path = _upgraded(tmp_path)
    with Saver.from_conn_string(str(path)) as saver:
        head = saver.get_tuple(ALPHA)
        assert head is not None
        saver.put_writes(head.config, [("__error__", "third time")], "task-err")
        saver.copy_thread("alpha", "gamma")
        saver.file.content.compact()
        assert verify(saver.file).sound
        saver.prune(["gamma"])
        saver.delete_thread("beta")
        report = verify(saver.file)
        assert report.sound, [str(p) for p in report.problems]
        copied = saver.get_tuple({"configurable": {"thread_id": "gamma"}})
        assert copied is not None and copied.checkpoint == head.checkpoint
        assert [w[2] for w in copied.pending_writes if w[1] == "__error__"] == ["third time"]
        assert len(list(saver.list({"configurable": {"thread_id": "alpha"}}))) == 13


def test_a_metadata_key_row_changed_to_match_a_filter_raises(tmp_path: Path) -> None:
    """A key row damaged so that a checkpoint matches a filter it does not match raises
    (the metadata is decoded for the tuple anyway); one damaged so that it no longer
    matches is what filtered lists trust, and verify reports it."""
    path = _upgraded(tmp_path)
    with Saver.from_conn_string(str(path)) as saver:
        head = saver.get_tuple(ALPHA)
        assert head is not None
        saver.put(
            head.config,
            {**head.checkpoint, "id": "1f0d0000-0000-6000-8000-00000000abcd"},
            {"source": "loop", "step": 99, "user": "ada"},
            {},
        )
    conn = apsw.Connection(str(path))
    conn.execute(
        "UPDATE checkpoint_keys SET value = 'bob' WHERE key = 'user' AND checkpoint = "
        "(SELECT id FROM checkpoints WHERE checkpoint_id = '1f0d0000-0000-6000-8000-00000000abcd')"
    )
    conn.close()
    with Saver.from_conn_string(str(path)) as saver:
        with pytest.raises(CorruptionError, match="matched filter"):
            list(saver.list(None, filter={"user": "bob"}))
        assert {p.check for p in verify(saver.file).problems} == {"keys"}


def test_an_identity_from_a_shared_prefix_is_the_same_identity() -> None:
    from threadloom.engine.format.seal import identity_after, prefix

    cases = [
        (("store_items", "a.b", ""), ("k",)),
        # One text part takes a path of its own (a Store item's key, read by every get).
        (("store_items", "a.b", ""), ("",)),
        (("store_items", "é.b", ""), ("ключ \x1f s3:abc 🦜 \udc80",)),
        (("vals", "ns", "agent"), (1, None)),
        (("vals", "ns", "agent"), (7,)),
        (("vals", "ns", "agent"), (None,)),
        (("vals", "ns", "agent"), ("a", "b")),
    ]
    for first, rest in cases:
        assert identity_after(prefix(*first), *rest) == identity(*first, *rest)
    assert identity_after(prefix("t"), "ab") != identity_after(prefix("t"), "a", "b")
