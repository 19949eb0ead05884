"""`FileDocuments`, the document operations both front ends answer with, on a real file.

Every `find` is checked against the query language applied to every document of the
collection (what the operations must answer whatever the file narrows first), including
the newest-first read of a saver's latest checkpoint, which reads only the rows it needs.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from threadloom import Saver
from threadloom.documents import FileDocuments, query
from threadloom.engine.checkpoint_store import StoredDocument
from threadloom.errors import DocumentServiceError, ProtocolError
from threadloom.protocol import BLOBS, CHECKPOINTS, DEFAULT_AGENT_ID, DEFAULT_NAMESPACE, WRITES
from threadloom.protocol.refs import key_of

NS = DEFAULT_NAMESPACE


def _checkpoint(saver: Saver, thread: str, ns: str, checkpoint_id: str, parent: str | None) -> None:
    checkpoint = empty_checkpoint()
    checkpoint["id"] = checkpoint_id
    configurable: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if parent is not None:
        configurable["checkpoint_id"] = parent
    saver.put({"configurable": configurable}, checkpoint, {"step": 0}, {})
    saver.put_writes(
        {
            "configurable": {
                "thread_id": thread,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint_id,
            }
        },
        [("channel", checkpoint_id)],
        task_id=f"task-{checkpoint_id}",
    )


@pytest.fixture
def documents(tmp_path: Path) -> Iterator[FileDocuments]:
    """Two threads under two agent ids; thread `a` has root and subgraph checkpoints,
    three of them sharing an id across namespaces (a tie the newest-first read must not
    cut: of three tied rows, `limit + 1` holds two)."""
    path = tmp_path / "ops.db"
    with (
        Saver.from_conn_string(str(path)) as saver,
        Saver.from_conn_string(str(path), agent_id="other") as other,
    ):
        parent = None
        for n in range(12):
            checkpoint_id = f"1f0{n:03}-{uuid.UUID(int=n).hex[:8]}"
            _checkpoint(saver, "a", "", checkpoint_id, parent)
            parent = checkpoint_id
            if n % 3 == 0:
                _checkpoint(saver, "a", "sub:1", checkpoint_id, None)
                _checkpoint(saver, "a", "sub:2", checkpoint_id, None)
        for n in range(4):
            _checkpoint(saver, "b", "", f"1f1{n:03}", None)
            _checkpoint(other, "a", "", f"1f2{n:03}", None)
        opened = FileDocuments(saver.file)
        try:
            yield opened
        finally:
            opened.close()


def _every(documents: FileDocuments, collection: str) -> list[StoredDocument]:
    return documents._matching(NS, collection, [])


def _expected(
    documents: FileDocuments,
    collection: str,
    where: list[query.Predicate],
    order: query.Order,
    limit: int,
) -> tuple[list[str], bool]:
    every = [d for d in _every(documents, collection) if query.matches_all(d.data, where)]
    bound = query.fingerprint(NS, collection, where, order)
    items, cursor = query.page(every, order, limit=limit, budget=None, bound=bound)
    return [d.key for d in items], cursor is not None


WHERES: list[list[query.Predicate]] = [
    [],
    [("agent_id", "eq", DEFAULT_AGENT_ID)],
    [("agent_id", "eq", DEFAULT_AGENT_ID), ("thread_id", "eq", "a")],
    [("agent_id", "eq", DEFAULT_AGENT_ID), ("thread_id", "eq", "a"), ("checkpoint_ns", "eq", "")],
    [("thread_id", "eq", "a"), ("checkpoint_ns", "eq", "sub:1")],
    [("thread_id", "eq", "a"), ("checkpoint_id", "lt", "1f0006")],
    [("thread_id", "eq", "a"), ("thread_id", "eq", "b")],
    [("agent_id", "eq", DEFAULT_AGENT_ID), ("agent_id", "eq", "other")],
    [("thread_id", "eq", "a"), ("parent_id", "exists", True)],
    [("thread_id", "in", ["a", "b"]), ("checkpoint_ns", "ne", "sub:1")],
    [("checkpoint_id", "in", ["1f0003-00000000", "1f1002"])],
]


@pytest.mark.parametrize("where", WHERES, ids=lambda w: " & ".join(f"{f} {o}" for f, o, _ in w))
@pytest.mark.parametrize("order", [("checkpoint_id", "desc"), ("checkpoint_id", "asc"), None])
def test_a_first_page_of_checkpoints_is_what_the_query_language_answers(
    documents: FileDocuments, where: list[query.Predicate], order: query.Order
) -> None:
    """Pages of 1 to 30 under every order, narrowed or not: the items and whether a next
    page exists are those of the query applied to every checkpoint (the newest-first
    read stops early only where that cannot change them: ties at the cut, predicates the
    file cannot apply)."""
    for limit in (1, 2, 3, 4, 5, 30):
        items, cursor = documents.find(NS, CHECKPOINTS, where, order, limit)
        assert ([d.key for d in items], cursor is not None) == _expected(
            documents, CHECKPOINTS, where, order, limit
        ), limit


def test_following_cursors_from_a_newest_first_page_reaches_every_checkpoint(
    documents: FileDocuments,
) -> None:
    """A newest-first first page (read short) carries a cursor the next pages continue
    from; together they are every checkpoint once, in order."""
    where: list[query.Predicate] = [("agent_id", "eq", DEFAULT_AGENT_ID), ("thread_id", "eq", "a")]
    seen: list[str] = []
    cursor = None
    for _ in itertools.count():
        items, cursor = documents.find(NS, CHECKPOINTS, where, ("checkpoint_id", "desc"), 2, cursor)
        seen.extend(d.data["checkpoint_id"] for d in items)
        if cursor is None:
            break
    assert seen == sorted(seen, reverse=True) and len(seen) == 12 + 4 + 4


def _rows_read(documents: FileDocuments) -> list[int]:
    """From now on, the rows each read of the default agent's store returns."""
    store = documents._store(NS, DEFAULT_AGENT_ID)
    read: list[int] = []
    original = store.view.find

    def counting(collection: str, **fields: Any) -> list[StoredDocument]:
        found = original(collection, **fields)
        read.append(len(found))
        return found

    store.view.find = counting  # type: ignore[method-assign]
    return read


def test_the_newest_first_read_does_not_read_the_history(documents: FileDocuments) -> None:
    """The latest checkpoint of a thread comes from `limit + 1` rows per agent id, not
    from every checkpoint of the thread (the engine's narrowing is exact here)."""
    read = _rows_read(documents)
    where: list[query.Predicate] = [
        ("agent_id", "eq", DEFAULT_AGENT_ID),
        ("thread_id", "eq", "a"),
        ("checkpoint_ns", "eq", ""),
    ]
    items, cursor = documents.find(NS, CHECKPOINTS, where, ("checkpoint_id", "desc"), 1)
    assert [d.data["checkpoint_id"] for d in items] == ["1f0011-00000000"]
    assert cursor is not None and read == [2]


def test_writes_and_refusals_carry_the_service_codes(documents: FileDocuments) -> None:
    """Unknown collections and namespaces, bad queries and ids: the §7.9 codes."""
    with pytest.raises(DocumentServiceError) as missing:
        documents.find("nobody", CHECKPOINTS)
    assert missing.value.code == "COLLECTION_NOT_FOUND"
    with pytest.raises(DocumentServiceError) as other:
        documents.find(NS, "jobs")
    assert other.value.code == "COLLECTION_NOT_FOUND"
    with pytest.raises(DocumentServiceError) as bad:
        documents.find(NS, WRITES, [("thread_id", "like", "a")])
    assert bad.value.code == "INVALID_ARGUMENT"
    with pytest.raises(DocumentServiceError) as page:
        documents.find(NS, WRITES, [], None, 1001)
    assert page.value.code == "INVALID_ARGUMENT"
    with pytest.raises(DocumentServiceError) as cursor:
        documents.find(NS, WRITES, [], None, 1, "garbled")
    assert cursor.value.code == "INVALID_ARGUMENT"
    with pytest.raises(DocumentServiceError) as first:  # arguments before the collection, as naas
        documents.find("nobody", CHECKPOINTS, [], None, 0)
    assert first.value.code == "INVALID_ARGUMENT"
    with pytest.raises(DocumentServiceError) as version:
        documents.delete("nobody", WRITES, "0" * 64, -1)
    assert version.value.code == "INVALID_ARGUMENT"
    with pytest.raises(DocumentServiceError) as gone:
        documents.get(NS, WRITES, "0" * 64)
    assert gone.value.code == "DOCUMENT_NOT_FOUND"
    assert documents.count(NS, WRITES, [("thread_id", "eq", "a")]) == 12 + 4 + 4 + 4


def _malformed(documents: FileDocuments) -> list[tuple[str, str, dict[str, Any]]]:
    """Documents no saver writes, each one field away from a stored one."""
    checkpoint = documents.find(NS, CHECKPOINTS, [("thread_id", "eq", "b")], None, 1)[0][0].data
    write = documents.find(NS, WRITES, [("thread_id", "eq", "b")], None, 1)[0][0].data
    fresh = {**checkpoint, "checkpoint_id": "1f9000"}
    cases = [
        ("namespace as a number", CHECKPOINTS, {**fresh, "checkpoint_ns": 3}),
        ("parent as a number", CHECKPOINTS, {**fresh, "parent_id": 7}),
        ("id as a number", CHECKPOINTS, {**fresh, "checkpoint_id": 1}),
        ("no schema", CHECKPOINTS, {k: v for k, v in fresh.items() if k != "_schema"}),
        ("schema 1 in v2", CHECKPOINTS, {**fresh, "_schema": 1}),
        ("schema as text", CHECKPOINTS, {**fresh, "_schema": "x"}),
        ("empty thread", CHECKPOINTS, {**fresh, "thread_id": ""}),
        ("a NUL in an id", CHECKPOINTS, {**fresh, "checkpoint_id": "1f\x009"}),
        ("index as text", WRITES, {**write, "index": "0", "task_id": "t-new"}),
        ("index as a bool", WRITES, {**write, "index": True, "task_id": "t-new"}),
        ("no channel", WRITES, {k: v for k, v in write.items() if k != "channel"}),
        (
            "a ref of another collection",
            BLOBS,
            {"agent_id": DEFAULT_AGENT_ID, "thread_id": "b", "ref": "zz", "_schema": 2},
        ),
    ]
    return cases


def test_documents_no_saver_writes_are_refused_before_anything_is_stored(
    documents: FileDocuments, tmp_path: Path
) -> None:
    """Wrong types, missing or empty identifying fields, another schema, a ref of another
    collection: INVALID_ARGUMENT, nothing stored, and the file still reads and verifies
    (a coerced column would have broken its row's seal)."""
    before = documents.count(NS, CHECKPOINTS) + documents.count(NS, WRITES)
    for name, collection, data in _malformed(documents):
        try:  # the id its fields define, so that only the fields are wrong
            key = key_of(collection, data)
        except ProtocolError:
            key = "0" * 64
        with pytest.raises(DocumentServiceError) as refused:
            documents.put(NS, collection, key, data)
            pytest.fail(f"{name}: stored")
        assert refused.value.code == "INVALID_ARGUMENT", name
        assert "is not the key" not in refused.value.detail, name
    assert documents.count(NS, CHECKPOINTS) + documents.count(NS, WRITES) == before
    found = documents.find(NS, CHECKPOINTS, [("thread_id", "eq", "b")], None, 100)[0]
    assert len(found) == 4
    done = subprocess.run(
        [sys.executable, "-m", "threadloom", "verify", "--db", str(documents.file.path), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout


@pytest.mark.parametrize("where", WHERES, ids=lambda w: " & ".join(f"{f} {o}" for f, o, _ in w))
def test_every_newest_first_page_after_a_cursor_is_the_query_language_s(
    documents: FileDocuments, where: list[query.Predicate]
) -> None:
    """Following cursors newest first, pages of 1 to 5: each page and its cursor are
    those of the query language over every checkpoint (the read after a cursor stops
    early only where that cannot change them)."""
    order: query.Order = ("checkpoint_id", "desc")
    every = [d for d in _every(documents, CHECKPOINTS) if query.matches_all(d.data, where)]
    bound = query.fingerprint(NS, CHECKPOINTS, where, order)
    for limit in (1, 2, 3, 5):
        cursor = None
        while True:
            items, following = documents.find(NS, CHECKPOINTS, where, order, limit, cursor)
            expected, then = query.page(
                every, order, limit=limit, budget=None, bound=bound, cursor=cursor
            )
            assert [d.key for d in items] == [d.key for d in expected], (limit, cursor)
            assert following == then
            if following is None:
                break
            cursor = following


def test_a_page_after_a_cursor_reads_only_what_it_needs(documents: FileDocuments) -> None:
    """The second newest-first page of a namespace reads `limit + 1` rows below the
    cursor and the rows at it, not the history."""
    where: list[query.Predicate] = [
        ("agent_id", "eq", DEFAULT_AGENT_ID),
        ("thread_id", "eq", "a"),
        ("checkpoint_ns", "eq", ""),
    ]
    order: query.Order = ("checkpoint_id", "desc")
    _, cursor = documents.find(NS, CHECKPOINTS, where, order, 2)
    read = _rows_read(documents)
    items, _ = documents.find(NS, CHECKPOINTS, where, order, 2, cursor)
    assert [d.data["checkpoint_id"] for d in items] == ["1f0009-00000000", "1f0008-00000000"]
    assert read == [3, 1]


def test_hand_made_cursors_and_nul_in_predicates_are_answered_not_crashed(
    documents: FileDocuments,
) -> None:
    """Cursors are opaque but can be forged: a position of another shape is
    INVALID_ARGUMENT; a well-formed one at an id holding a NUL (no stored id has one) pages
    as the query language does; a NUL in a predicate matches nothing."""
    where: list[query.Predicate] = [("thread_id", "eq", "a")]
    order: query.Order = ("checkpoint_id", "desc")
    bound = query.fingerprint(NS, CHECKPOINTS, where, order)
    for key in (("a", "b", "c"), (3, True, "00"), (3, 0.0)):
        forged = query.write_cursor((key, "x"), bound)  # type: ignore[arg-type]
        with pytest.raises(DocumentServiceError) as refused:
            documents.find(NS, CHECKPOINTS, where, order, 2, forged)
        assert refused.value.code == "INVALID_ARGUMENT", key
    at_nul = query.write_cursor(((3, 0.0, b"1f0005\x00".hex()), "x"), bound)
    items, _ = documents.find(NS, CHECKPOINTS, where, order, 2, at_nul)
    every = [d for d in _every(documents, CHECKPOINTS) if query.matches_all(d.data, where)]
    expected, _ = query.page(every, order, limit=2, budget=None, bound=bound, cursor=at_nul)
    assert [d.key for d in items] == [d.key for d in expected] and items
    assert documents.find(NS, CHECKPOINTS, [("checkpoint_id", "eq", "a\x00")])[0] == []
    assert documents.count(NS, WRITES, [("thread_id", "in", ["a\x00", "b"])]) == 4
