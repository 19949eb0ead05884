"""The embedding cache: a text is embedded once per embedder, across puts, batches and
re-opens; another embedder reuses nothing; erased texts leave no hash behind."""

from __future__ import annotations

from array import array
from pathlib import Path
from typing import Any

import apsw
import blake3
from langgraph.store.base import PutOp

from tests.store._hashing_embedder import HashingEmbedder
from threadloom import Saver, Store
from threadloom.core.similarity import pack
from threadloom.engine.checks.verify import verify
from threadloom.engine.items import cached_vectors, embedding_key
from threadloom.langgraph.store_embed import identity

DIMS = 32


def index(embedder: Any, **more: Any) -> Any:
    return {"dims": DIMS, "embed": embedder, "fields": ["text"], **more}


def hashed(texts: list[str]) -> list[list[float]]:
    """A module-level embedding function: it has an identity."""
    return [HashingEmbedder(DIMS).vector(t) for t in texts]


def rows(path: Path, sql: str) -> list[Any]:
    conn = apsw.Connection(str(path))
    try:
        return list(conn.execute(sql))
    finally:
        conn.close()


def test_repeated_text_is_embedded_once_across_puts_and_reopens(tmp_path: Path) -> None:
    """The same text put again (same item, another item, another batch, after a re-open)
    is not embedded again; a new text is."""
    path = tmp_path / "c.db"
    embedder = HashingEmbedder(DIMS)
    with Store.from_conn_string(path, index=index(embedder)) as store:
        store.put(("a",), "1", {"text": "Ada prefers green tea"})
        store.put(("a",), "1", {"text": "Ada prefers green tea", "seen": 2})
        store.put(("b",), "2", {"text": "Ada prefers green tea"})
        store.batch([])  # nothing to embed, nothing called
    assert embedder.documents_embedded() == ["Ada prefers green tea"]
    again = HashingEmbedder(DIMS)
    with Store.from_conn_string(path, index=index(again)) as store:
        store.put(("c",), "3", {"text": "Ada prefers green tea"})
        store.put(("c",), "4", {"text": "Bob rides a bicycle"})
        assert store.search(("c",), query="green tea")[0].key == "3"
        assert verify(store.file).sound
    assert again.documents_embedded() == ["Bob rides a bicycle"]


def test_a_vector_from_the_cache_is_written_bit_for_bit(tmp_path: Path) -> None:
    """A cached vector comes back as float32 and is written again by a copy of its bytes:
    the second item's row is the first's, which is the embedder's vector packed."""
    path = tmp_path / "v.db"
    embedder = HashingEmbedder(DIMS)
    with Store.from_conn_string(path, index=index(embedder)) as store:
        store.put(("a",), "1", {"text": "Ada prefers green tea"})
        store.put(("b",), "2", {"text": "Ada prefers green tea"})
        store.batch([PutOp(("c",), str(n), {"text": "Ada prefers green tea"}) for n in range(3)])
        assert verify(store.file).sound
    assert embedder.documents_embedded() == ["Ada prefers green tea"]
    blobs = [bytes(r[0]) for r in rows(path, "SELECT vector FROM store_vectors ORDER BY item")]
    assert len(blobs) == 5
    assert set(blobs) == {pack(HashingEmbedder(DIMS).vector("Ada prefers green tea"))}
    conn = apsw.Connection(str(path))
    try:
        keys = [bytes(r[0]) for r in conn.execute("SELECT key FROM store_embedded")]
        found = cached_vectors(conn, keys)
    finally:
        conn.close()
    assert len(found) == 1  # one text, one key
    for vector in found.values():  # float32 as stored, no list of Python floats
        assert isinstance(vector, array) and vector.typecode == "f"
        assert pack(vector) == blobs[0]


def test_a_batch_embeds_each_distinct_text_once(tmp_path: Path) -> None:
    """Texts repeated within one batch go to the embedder once, and every item gets the
    vector."""
    embedder = HashingEmbedder(DIMS)
    with Store.from_conn_string(tmp_path / "b.db", index=index(embedder)) as store:
        store.batch([PutOp(("a",), f"k{i}", {"text": f"fact {i % 3}"}) for i in range(9)])
        assert sorted(embedder.documents_embedded()) == ["fact 0", "fact 1", "fact 2"]
        found = store.search(("a",), query="fact 1", limit=9)
        assert {i.key for i in found if i.score and i.score > 0.999} == {"k1", "k4", "k7"}


def test_another_embedder_identity_reuses_nothing(tmp_path: Path) -> None:
    """An embedder named otherwise (`embed_id`), or with other settings, embeds again."""
    path = tmp_path / "i.db"
    with Store.from_conn_string(path, index=index(HashingEmbedder(DIMS))) as store:
        store.put(("a",), "1", {"text": "Ada lives in Lisbon"})
    named = HashingEmbedder(DIMS)
    with Store.from_conn_string(path, index=index(named, embed_id="v2")) as store:
        store.put(("a",), "2", {"text": "Ada lives in Lisbon"})
    assert named.documents_embedded() == ["Ada lives in Lisbon"]
    setting = HashingEmbedder(DIMS)
    setting.dims = DIMS + 0  # the same settings: the same identity
    assert identity(index(setting), setting) == identity(index(named), named)
    setting.model = "hashing-large"  # type: ignore[attr-defined]
    assert identity(index(setting), setting) != identity(index(named), named)


def test_functions_have_an_identity_and_lambdas_none(tmp_path: Path) -> None:
    """A module-level function is cached (its identity survives a restart); a lambda is
    embedded every time; a secret setting never enters an identity."""
    from langgraph.store.base import ensure_embeddings

    assert identity(index(hashed), ensure_embeddings(hashed)) is not None
    anonymous = ensure_embeddings(lambda texts: hashed(texts))
    assert identity(index(anonymous), anonymous) is None
    keyed = HashingEmbedder(DIMS)
    keyed.api_key = "sk-123"  # type: ignore[attr-defined]
    assert "sk-123" not in (identity(index(keyed), keyed) or "")
    calls: list[str] = []

    def counting(texts: list[str]) -> list[list[float]]:  # a closure: no identity
        calls.extend(texts)
        return hashed(texts)

    with Store.from_conn_string(tmp_path / "l.db", index=index(counting)) as store:
        store.put(("a",), "1", {"text": "tea"})
        store.put(("a",), "2", {"text": "tea"})
    assert calls == ["tea", "tea"]


def test_a_replaced_text_is_forgotten(tmp_path: Path) -> None:
    """When an item's text changes, the cache forgets the old text (no stale row: the
    next put of the old text embeds it again)."""
    path = tmp_path / "r.db"
    embedder = HashingEmbedder(DIMS)
    with Store.from_conn_string(path, index=index(embedder)) as store:
        store.put(("a",), "1", {"text": "old words"})
        store.put(("a",), "1", {"text": "new words"})
        store.put(("a",), "2", {"text": "old words"})
        store.delete(("a",), "2")
        store.delete(("a",), "1")
    assert embedder.documents_embedded() == ["old words", "new words", "old words"]
    assert rows(path, "SELECT count(*) FROM store_embedded") == [(0,)]


def test_erasure_removes_the_cached_hashes_of_erased_texts(tmp_path: Path) -> None:
    """`erase` takes the cache rows of the owner's items with them: the keys of their
    texts are nowhere in the file; another owner's stay."""
    path = tmp_path / "e.db"
    embedder = HashingEmbedder(DIMS)
    with Store.from_conn_string(path, index=index(embedder)) as store:
        store.put(("ada", "facts"), "1", {"text": "Ada's secret plan"})
        store.put(("bob", "facts"), "1", {"text": "Bob's public note"})
        name = store.indexing.embedder.identity if store.indexing.embedder else None
    assert name is not None
    with Saver.from_conn_string(path) as saver:
        assert saver.erase("ada", store=[("ada",)]).items == 1
    keys = {bytes(r[0]) for r in rows(path, "SELECT key FROM store_embedded")}
    assert keys == {embedding_key(name, "Bob's public note")}
    assert embedding_key(name, "Ada's secret plan") not in path.read_bytes()


def test_keys_bind_the_identity_and_the_text() -> None:
    """A key is blake3 of the identity and the text, framed so that no other pair of
    identity and text gives the same bytes."""
    assert embedding_key("ab", "c") != embedding_key("a", "bc")
    assert len(embedding_key("x", "y")) == 16
    assert embedding_key("x", "y") != blake3.blake3(b"xy").digest(length=16)


def test_plain_field_paths_read_as_langgraph_reads_them() -> None:
    """The fast path for plain keys gives what LangGraph's `get_text_at_path` gives."""
    from langgraph.store.base import get_text_at_path, tokenize_path

    from threadloom.langgraph.store_index import _text_at

    value = {"a": {"b": "deep", "n": 3, "l": ["x", {"y": "z"}]}, "t": "top", "none": None}
    for path in ["t", "a.b", "a.n", "a.l", "a.l[1].y", "a.l[*]", "a.*", "none", "missing", "a"]:
        tokens = tokenize_path(path)
        assert _text_at(value, tokens) == get_text_at_path(value, tokens), path


def test_an_unchanged_put_keeps_its_vectors_and_a_changed_one_replaces_them(
    tmp_path: Path,
) -> None:
    """Putting an item again with the same indexed text leaves its vector rows as they
    are (nothing to pack, place or rewrite); a new text replaces them."""
    path = tmp_path / "u.db"
    with Store.from_conn_string(path, index=index(HashingEmbedder(DIMS))) as store:
        store.put(("a",), "1", {"text": "Ada prefers green tea", "n": 1})
        store.put(("a",), "2", {"text": "Bob rides a bicycle"})
        before = rows(path, "SELECT id, item, field FROM store_vectors ORDER BY item")
        store.put(("a",), "1", {"text": "Ada prefers green tea", "n": 2})
        assert rows(path, "SELECT id, item, field FROM store_vectors ORDER BY item") == before
        store.put(("a",), "1", {"text": "Ada prefers black tea"})
        after = rows(path, "SELECT id, item, field FROM store_vectors ORDER BY item")
        assert after[1] == before[1] and after[0] != before[0]
        assert store.search(("a",), query="black tea")[0].key == "1"
        assert verify(store.file).sound
