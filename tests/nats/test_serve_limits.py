"""`threadloom serve` stays bounded: names, empty namespaces, scopes, id indexes; and a
get of a missing id does not re-read the namespace."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.nats._service import SECRET, blob, call, put_blob
from threadloom.engine.checkpoint_store import CheckpointStore
from threadloom.engine.file import File
from threadloom.errors import DocumentServiceError
from threadloom.nats.access import Grants
from threadloom.nats.serve import FileDocumentService, Limits
from threadloom.protocol import BLOBS
from threadloom.protocol.refs import key_of


@pytest.fixture
def served(db: File) -> Iterator[FileDocumentService]:
    found = FileDocumentService(db, SECRET)
    try:
        yield found
    finally:
        found.close()


def code(error: pytest.ExceptionInfo[DocumentServiceError]) -> str:
    return error.value.code


def test_namespace_names_are_at_most_255_bytes(served: FileDocumentService) -> None:
    """255 bytes (also of multi-byte characters) pass; 256 are INVALID_ARGUMENT on every
    operation, before anything is remembered."""
    call(served, "ensure_collection", ns="n" * 255)
    call(served, "ensure_collection", ns="é" * 127)  # 254 bytes
    for ns in ("n" * 256, "é" * 128, "n" * (1024 * 1024)):
        for op, fields in [("ensure_collection", {}), ("count", {"collection": BLOBS})]:
            with pytest.raises(DocumentServiceError, match="at most 255 bytes") as refused:
                call(served, op, ns=ns, **fields)
            assert code(refused) == "INVALID_ARGUMENT"
    assert max(len(n.encode()) for n in served.documents._ensured) == 255


def test_many_long_empty_namespaces_are_bounded_in_count(db: File) -> None:
    """2,000 ensures of distinct 255-byte names hold at most `empty_namespaces` of them;
    the others are refused until documents go into the ones ensured."""
    served = FileDocumentService(db, SECRET, limits=Limits(empty_namespaces=100))
    names = [f"{i:05}".ljust(255, "x") for i in range(2000)]
    refused = 0
    for name in names:
        try:
            call(served, "ensure_collection", ns=name)
        except DocumentServiceError as exc:
            assert exc.code == "INVALID_ARGUMENT" and "hold no document" in str(exc)
            refused += 1
    assert refused == 1900 and len(served.documents._ensured) == 100
    assert len(call(served, "namespaces").namespaces) == 100
    put_blob(served, blob("t", 1), ns=names[0])  # the file holds it now
    call(served, "ensure_collection", ns=names[100])
    assert len(served.documents._ensured) == 100 and names[0] not in served.documents._ensured
    served.close()


def test_scopes_and_indexes_are_held_in_bounded_lrus(db: File) -> None:
    """Documents in 40 namespaces: at most `stores` scopes and `index_keys` keys (plus
    the index in use) are held, and every document is still found afterwards."""
    limits = Limits(stores=8, index_keys=50)
    served = FileDocumentService(db, SECRET, limits=limits)
    keys = {}
    for n in range(40):
        ns = f"ns-{n}"
        call(served, "ensure_collection", ns=ns)
        keys[ns] = [put_blob(served, blob(f"t{i}", i), ns=ns) for i in range(10)]
        call(served, "get", ns=ns, collection=BLOBS, id=keys[ns][0])
        assert len(served.documents._stores) <= limits.stores
        assert served.documents.ids.keys_held <= limits.index_keys + 10
    assert len(served.documents.ids) <= 6
    for ns, held in keys.items():
        for key in held[::3]:
            assert call(served, "get", ns=ns, collection=BLOBS, id=key).document.id == key
    served.close()


def test_misses_do_not_read_the_namespace_again(served: FileDocumentService) -> None:
    """After the first lookup, gets and deletes of missing ids read no thread's keys
    while the file is unchanged; a write reads only the thread it went into."""
    call(served, "ensure_collection")
    for i in range(200):
        put_blob(served, blob(f"t{i % 20}", i))
    with pytest.raises(DocumentServiceError):
        call(served, "get", collection=BLOBS, id="0" * 64)
    first = served.documents.ids.threads_read
    assert first == 20
    for n in range(100):
        with pytest.raises(DocumentServiceError) as missing:
            call(served, "get", collection=BLOBS, id=f"{n:064x}")
        assert code(missing) == "DOCUMENT_NOT_FOUND"
        call(served, "delete", collection=BLOBS, id=f"{n:064x}")
    assert served.documents.ids.threads_read == first
    put_blob(served, blob("t3", 1000))
    with pytest.raises(DocumentServiceError):
        call(served, "get", collection=BLOBS, id="0" * 64)
    assert served.documents.ids.threads_read == first + 1


def test_the_index_follows_other_processes(db: File, tmp_path: Path) -> None:
    """Documents stored, deleted, stored again and copied by another process (a private
    file object, as another process has) are found or missed as the file says."""
    served = FileDocumentService(db, SECRET, grants=Grants.platform())
    call(served, "ensure_collection")
    mine = put_blob(served, blob("t", 1))
    other = File(tmp_path / "served.db")
    try:
        store = CheckpointStore(other, namespace="ns", agent_id="a")
        with pytest.raises(DocumentServiceError):
            call(served, "get", collection=BLOBS, id=key_of(BLOBS, blob("t", 2)))
        store.view.import_documents([(BLOBS, blob("t", 2)), (BLOBS, blob("u", 3))])
        for data in (blob("t", 2), blob("u", 3)):
            assert call(served, "get", collection=BLOBS, id=key_of(BLOBS, data)).document
        store.view.delete(BLOBS, blob("t", 1))
        with pytest.raises(DocumentServiceError) as gone:
            call(served, "get", collection=BLOBS, id=mine)
        assert code(gone) == "DOCUMENT_NOT_FOUND"
        store.view.import_documents([(BLOBS, blob("t", 1))])
        assert call(served, "get", collection=BLOBS, id=mine).document.id == mine
        store.view.import_documents([(BLOBS, blob("v", n)) for n in range(10, 20)])
        copied = key_of(BLOBS, blob("v", 1))
        with pytest.raises(DocumentServiceError):
            call(served, "get", collection=BLOBS, id=copied)
        store.maintenance.copy_thread("t", "v")  # v is ahead of t
        assert call(served, "get", collection=BLOBS, id=copied).document.id == copied
        store.maintenance.delete_thread("u")
        with pytest.raises(DocumentServiceError):
            call(served, "get", collection=BLOBS, id=key_of(BLOBS, blob("u", 3)))
    finally:
        other.close()
        served.close()


def test_checkpoints_above_an_id_are_narrowed_in_the_file(db: File) -> None:
    """`checkpoint_id gt` (what `threadloom sync` asks) is answered from the file's
    columns, exactly: no predicate is left to apply on decoded bodies."""
    from tests.engine.test_durability import put
    from threadloom import Saver
    from threadloom.documents.service import _narrowing
    from threadloom.protocol import CHECKPOINTS

    assert _narrowing(CHECKPOINTS, [("checkpoint_id", "gt", "b")]) == ({"after": "b"}, True)
    with Saver.from_conn_string(db.path) as saver:
        first = put(saver, {"x": 1}, number=1)["configurable"]["checkpoint_id"]
        put(saver, {"x": 2}, number=2, parent=first)
        found = saver.checkpoints.view.find(CHECKPOINTS, after=first)
        assert [d.data["parent_id"] for d in found] == [first]
