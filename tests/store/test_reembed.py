"""Word search beside vectors, the text fill of older files, and re-embedding
(`Store.reembed`, `reembed_file`, `threadloom reembed`)."""

from __future__ import annotations

import asyncio
import json
import warnings
from pathlib import Path
from typing import Any

import apsw
import pytest

from tests.store._hashing_embedder import HashingEmbedder
from threadloom import AsyncStore, Store
from threadloom.cli import main
from threadloom.engine.checks.verify import verify
from threadloom.errors import (
    EmbedderError,
    InvalidArgumentError,
    UnembeddedItemsWarning,
    VectorConfigError,
)
from threadloom.langgraph.reembed import reembed_file

DIMS = 64
FACTS = {
    "tea": "Ada prefers green tea",
    "city": "Ada lives in Lisbon",
    "bike": "Bob rides a bicycle to work",
}


def index(embedder: Any, dims: int = DIMS, **more: Any) -> Any:
    return {"dims": dims, "embed": embedder, "fields": ["text"], **more}


def put_plain(path: Path) -> None:
    """Items as `threadloom migrate --store` writes them: by a Store without embeddings."""
    with Store.from_conn_string(path) as store:
        for key, text in FACTS.items():
            store.put(("acme", "facts"), key, {"text": text})
        store.put(("acme", "facts"), "hidden", {"text": "never embed me"}, index=False)


def raw(path: Path, sql: str) -> list[Any]:
    conn = apsw.Connection(str(path))
    try:
        return list(conn.execute(sql))
    finally:
        conn.close()


def test_items_put_with_vectors_are_found_by_words(tmp_path: Path) -> None:
    """A Store with an index keeps the text of the indexed fields too: `search_text`
    (what the viewer's search runs) finds items put with vectors."""
    path = tmp_path / "v.db"
    with Store.from_conn_string(path, index=index(HashingEmbedder(DIMS))) as store:
        store.put(("acme", "facts"), "tea", {"text": "Ada prefers tea", "secret": "Lisbon"})
        hits = store.search_text(("acme",), "tea Lisbon")
        assert [h.key for h in hits] == ["tea"] and hits[0].score == pytest.approx(1 / 6**0.5)
        assert store.search_text(("acme",), "Lisbon") == []  # not an indexed field
        assert store.search(("acme",), query="prefers tea")[0].key == "tea"


def test_an_older_file_gets_its_text_entries_at_the_first_writable_open(tmp_path: Path) -> None:
    """Items an older version put with vectors and no text entry are given one by the
    first writable open of a Store (once), so word search finds them; a read-only open
    changes nothing."""
    path = tmp_path / "old.db"
    embedder = HashingEmbedder(DIMS)
    with Store.from_conn_string(path, index=index(embedder), text=False) as store:
        for key, text in FACTS.items():
            store.put(("acme", "facts"), key, {"text": text})
    # What 0.8 left: vectors, no text entries, and no mark of the fill.
    conn = apsw.Connection(str(path))
    conn.execute("DELETE FROM meta WHERE key = 'store_text_filled'")
    conn.close()
    assert raw(path, "SELECT count(*) FROM store_items WHERE text_terms IS NULL") == [(3,)]
    with Store(path, readonly=True) as reader:
        assert reader.search_text(("acme",), "Lisbon") == []
    with Store.from_conn_string(path, index=index(embedder)) as store:
        assert [h.key for h in store.search_text(("acme",), "Lisbon")] == ["city"]
        assert verify(store.file).sound
    assert raw(path, "SELECT count(*) FROM store_items WHERE text_terms IS NULL") == [(0,)]
    assert raw(path, "SELECT value FROM meta WHERE key = 'store_text_filled'") == [("1",)]


def test_a_vector_search_warns_once_of_items_without_vectors(tmp_path: Path) -> None:
    """After items were written without embeddings, a vector search that cannot see them
    warns once (naming reembed); items put with index=False are not counted."""
    path = tmp_path / "m.db"
    put_plain(path)
    with Store.from_conn_string(path, index=index(HashingEmbedder(DIMS))) as store:
        with pytest.warns(UnembeddedItemsWarning, match="3 items under acme have no vector"):
            assert store.search(("acme",), query="green tea") == []
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert store.search(("acme",), query="bicycle") == []  # warned once already


def test_reembed_fills_vectors_of_items_written_without(tmp_path: Path) -> None:
    """`Store.reembed` embeds the indexed items without vectors (a dry run first), keeps
    their values and times, leaves index=False items alone, and a rerun has nothing to do."""
    path = tmp_path / "m.db"
    put_plain(path)
    embedder = HashingEmbedder(DIMS)
    with Store.from_conn_string(path, index=index(embedder)) as store:
        before = {i.key: i for i in store.search(("acme",), limit=10)}
        dry = store.reembed(apply=False)
        assert (dry.items, dry.unembedded, dry.embedded, dry.applied) == (4, 3, 3, False)
        assert embedder.calls == []
        done = store.reembed()
        assert (done.embedded, done.vectors, done.applied) == (3, 3, True)
        assert sorted(embedder.documents_embedded()) == sorted(FACTS.values())
        hits = store.search(("acme",), query="who rides a bicycle")
        assert hits[0].key == "bike" and hits[0].score is not None and hits[0].score > 0.3
        after = {i.key: i for i in store.search(("acme",), limit=10)}
        assert after == before  # values and times unchanged
        assert "hidden" not in {h.key for h in store.search(("acme",), query="never embed")}
        assert store.reembed().embedded == 0
        assert verify(store.file).sound
    with Store.from_conn_string(path) as plain, pytest.raises(InvalidArgumentError, match="index"):
        plain.reembed()


def test_reembed_every_item_with_another_embedder(tmp_path: Path) -> None:
    """`every=True` re-embeds every indexed item; an embedder of other dims replaces the
    file's vectors only through `reembed_file(..., every=True)` without a prefix."""
    path = tmp_path / "e.db"
    with Store.from_conn_string(path, index=index(HashingEmbedder(DIMS))) as store:
        for key, text in FACTS.items():
            store.put(("acme", "facts"), key, {"text": text})
    same = HashingEmbedder(DIMS)  # the same embedder again: its vectors are the file's
    with Store.from_conn_string(path, index=index(same)) as store:
        assert store.reembed(("acme",), every=True).embedded == 3
        assert same.documents_embedded() == []
    other = HashingEmbedder(DIMS)  # named as another embedder: nothing cached is reused
    with Store.from_conn_string(path, index=index(other, embed_id="hashing-v2")) as store:
        assert store.reembed(("acme",), every=True).embedded == 3
        assert len(other.documents_embedded()) == 3
    bigger = HashingEmbedder(2 * DIMS)
    with pytest.raises(VectorConfigError, match="reembed FILE --all"):
        reembed_file(path, index(bigger, 2 * DIMS))
    with pytest.raises(VectorConfigError):
        reembed_file(path, index(bigger, 2 * DIMS), every=True, prefix=("acme",))
    dry = reembed_file(path, index(bigger, 2 * DIMS), every=True, apply=False)
    assert (dry.dropped, dry.embedded, dry.applied) == (3, 3, False)
    done = reembed_file(path, index(bigger, 2 * DIMS), every=True)
    assert (done.dropped, done.embedded, done.vectors) == (3, 3, 3)
    with Store.from_conn_string(path, index=index(bigger, 2 * DIMS)) as store:
        assert store.search(("acme",), query="Lisbon")[0].key == "city"
        assert verify(store.file).sound


def test_an_embedder_failure_is_an_embedder_error_and_writes_nothing(tmp_path: Path) -> None:
    """An embedder that raises stops the run with EmbedderError; nothing half-written."""
    path = tmp_path / "f.db"
    put_plain(path)

    class Broken(HashingEmbedder):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            raise ConnectionError("model server down")

    with Store.from_conn_string(path, index=index(Broken(DIMS))) as store:
        with pytest.raises(EmbedderError, match="model server down"):
            store.reembed()
        assert store.reembed(apply=False).unembedded == 3


def test_areembed_on_an_async_store(tmp_path: Path) -> None:
    """`AsyncStore.areembed` embeds on a worker thread, as `reembed` does."""
    path = tmp_path / "a.db"
    put_plain(path)

    async def main() -> None:
        async with AsyncStore.from_conn_string(path, index=index(HashingEmbedder(DIMS))) as store:
            assert (await store.areembed(apply=False)).embedded == 3
            assert (await store.areembed()).embedded == 3
            assert (await store.asearch(("acme",), query="Lisbon"))[0].key == "city"

    asyncio.run(main())


# -- the command line --------------------------------------------------------------------

EMBED = "tests.store._hashing_embedder:HashingEmbedder"


def test_the_reembed_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`threadloom reembed FILE --embed MODULE:NAME --dims N`: a dry run that changes no
    byte, then --apply, then nothing left; --json gives the report."""
    path = tmp_path / "c.db"
    put_plain(path)
    args = ["reembed", str(path), "--embed", EMBED, "--dims", "512", "--field", "text"]
    before = path.read_bytes()
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [
        "4 items in the Store, 3 without a vector; would embed 3 items",
        "run again with --apply to embed them",
    ]
    assert path.read_bytes() == before
    assert main([*args, "--apply", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report == {
        "prefix": [],
        "applied": True,
        "every": False,
        "items": 4,
        "unembedded": 3,
        "embedded": 3,
        "vectors": 3,
        "dropped": 0,
    }
    docs = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    section = docs.split("## `threadloom reembed", 1)[1].split("\n## ", 1)[0]
    example = json.loads(section.split("```json\n", 1)[1].split("```", 1)[0])
    assert list(example) == list(report)  # docs/cli.md gives the report's fields
    assert main([*args[:-4], "--dims", "8", "--apply"]) == 1  # the file's vectors are 512
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: the file's vector index holds vectors of 512 dim")
    assert err[1].startswith("hint: open the Store with dims=512, or re-embed every item")
    assert main([*args, "--prefix", "acme.facts"]) == 0
    assert capsys.readouterr().out == (
        "4 items under acme.facts, 0 without a vector; would embed 0 items\n"
    )
    with Store.from_conn_string(path, index=index(HashingEmbedder(512), 512)) as store:
        assert store.search(("acme",), query="Lisbon")[0].key == "city"


@pytest.mark.parametrize(
    ("embed", "said"),
    [
        ("nocolon", "is not MODULE:NAME"),
        ("no_such_module_xyz:f", "no module 'no_such_module_xyz'"),
        ("tests.store._hashing_embedder:nope", "has no 'nope'"),
        ("tests.store._hashing_embedder:DIMS", "is a int"),
    ],
)
def test_a_bad_embedder_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], embed: str, said: str
) -> None:
    """A wrong --embed is an `error:` and a `hint:`, and the file is not touched."""
    path = tmp_path / "b.db"
    put_plain(path)
    before = path.read_bytes()
    assert main(["reembed", str(path), "--embed", embed, "--dims", "8", "--apply"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: ") and said in err[0] and err[1].startswith("hint: ")
    assert path.read_bytes() == before


def test_a_bad_prefix_or_a_failing_import_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty label in --prefix, or an embedder module whose import raises, is an
    `error:` and a `hint:`, not a traceback."""
    path = tmp_path / "p.db"
    put_plain(path)
    (tmp_path / "broken_embedder_mod.py").write_text("raise RuntimeError('no API key')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for argv, said in (
        (["--embed", EMBED, "--prefix", "acme..facts"], "empty label"),
        (["--embed", "broken_embedder_mod:f"], "RuntimeError: no API key"),
    ):
        assert main(["reembed", str(path), "--dims", "8", *argv]) == 1
        err = capsys.readouterr().err.splitlines()
        assert said in err[0] and err[1].startswith("hint: ")
