"""Each item's text digest (format 13, `store_items.text_digest`): a put of the text an
item's text entry holds leaves the entry as it is, and every other put writes it."""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import apsw
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.data.format12.make import NAMESPACE, QUERIES, answers, index
from tests.engine._fixtures import copied
from threadloom import Store
from threadloom.engine.checks.verify import verify
from threadloom.engine.format.schema import FORMAT_VERSION, TEXT_DIGEST_FORMAT

FORMAT12 = Path(__file__).resolve().parents[1] / "data" / "format12"


@contextmanager
def text_statements() -> Iterator[Counter[str]]:
    """Count the statements that write `store_text` on connections opened meanwhile."""
    counted: Counter[str] = Counter()

    def trace(_cursor: Any, sql: str, _bindings: Any) -> bool:
        for verb in ("INSERT INTO store_text", "DELETE FROM store_text"):
            if sql.startswith(verb):
                counted[verb] += 1
        return True

    def hook(conn: apsw.Connection) -> None:
        conn.exec_trace = trace

    apsw.connection_hooks.append(hook)
    try:
        yield counted
    finally:
        apsw.connection_hooks.remove(hook)


def _digests(path: Path) -> dict[str, bytes | None]:
    conn = apsw.Connection(str(path))
    try:
        rows = conn.execute("SELECT key, text_digest FROM store_items").fetchall()
    finally:
        conn.close()
    return {str(key): digest for key, digest in rows}


def test_a_format_12_store_upgrades_and_answers_the_same(tmp_path: Path) -> None:
    """tests/data/format12/make.py (written by the last format-12 commit). The upgrade
    adds the column, NULL in every row: the same items and text answers, a sound verify,
    and the first put of each item writes its text entry again and records the digest."""
    path = copied(FORMAT12, tmp_path)
    conn = apsw.Connection(str(path))
    try:
        assert conn.execute("PRAGMA user_version").fetchall() == [(TEXT_DIGEST_FORMAT - 1,)]
        columns = {r[1] for r in conn.execute("PRAGMA table_info(store_items)")}
        assert "text_digest" not in columns and "terms" in columns
    finally:
        conn.close()
    expected = json.loads((FORMAT12 / "answers.json").read_text())
    with Store(path, index=index()) as store:
        assert json.loads(json.dumps(answers(store))) == expected
        assert verify(store.file).sound
    assert set(_digests(path).values()) == {None}
    with text_statements() as counted, Store(path, index=index()) as store:
        for key in ("a", "b", "c"):  # put with the config's fields, as the file's were
            store.put(NAMESPACE, key, expected["items"][key])
        assert counted["INSERT INTO store_text"] == 3  # no digest yet: written again
        assert json.loads(json.dumps(answers(store))) == expected
        counted.clear()
        for key in ("a", "b", "c"):
            store.put(NAMESPACE, key, expected["items"][key])
        assert counted == Counter()
        assert json.loads(json.dumps(answers(store))) == expected
        assert verify(store.file).sound
    digests = _digests(path)
    assert all(digests[key] is not None and len(digests[key] or b"") == 8 for key in "abc")
    assert digests["d"] is None and digests["e"] is None
    conn = apsw.Connection(str(path))
    try:
        assert conn.execute("PRAGMA user_version").fetchall() == [(FORMAT_VERSION,)]
    finally:
        conn.close()


def test_a_put_writes_the_text_entry_only_when_its_text_changes(tmp_path: Path) -> None:
    with text_statements() as counted, Store(tmp_path / "t.db", index=index()) as store:
        store.put(NAMESPACE, "k", {"text": "a copper kettle", "title": "one"})
        assert counted["INSERT INTO store_text"] == 1
        counted.clear()
        store.put(NAMESPACE, "k", {"text": "a copper kettle", "title": "one"})
        store.put(NAMESPACE, "k", {"text": "a copper kettle", "title": "two"})
        assert counted == Counter()  # the value changed, its indexed text did not
        assert [i.value["title"] for i in store.search(NAMESPACE, filter={"title": "two"})] == [
            "two"
        ]
        assert store.search(NAMESPACE, filter={"title": "one"}) == []
        store.put(NAMESPACE, "k", {"text": "a brass kettle", "title": "two"})
        assert counted == Counter({"DELETE FROM store_text": 1, "INSERT INTO store_text": 1})
        assert store.search(NAMESPACE, query="copper", mode="text") == []
        assert [i.key for i in store.search(NAMESPACE, query="brass", mode="text")] == ["k"]
        counted.clear()
        store.put(NAMESPACE, "k", {"text": "a brass kettle", "title": "two"}, index=["title"])
        assert counted == Counter({"DELETE FROM store_text": 1, "INSERT INTO store_text": 1})
        assert store.search(NAMESPACE, query="brass", mode="text") == []
        counted.clear()
        store.put(NAMESPACE, "k", {"text": "a brass kettle", "title": "two"}, index=False)
        assert counted == Counter({"DELETE FROM store_text": 1})
        assert store.search(NAMESPACE, query="two", mode="text") == []
        store.put(NAMESPACE, "k", {"text": "a brass kettle", "title": "two"})
        assert [i.key for i in store.search(NAMESPACE, query="brass", mode="text")] == ["k"]
        assert verify(store.file).sound


def test_reembed_leaves_the_text_entries_that_hold_their_text(tmp_path: Path) -> None:
    """Re-embedding every item with another embedder writes vectors, not the text index:
    each entry holds its item's text already. An entry of another text is written."""
    path = tmp_path / "r.db"
    with Store(path, index=index()) as store:
        store.put(NAMESPACE, "a", {"text": "the amber fox", "title": "one"})
        store.put(NAMESPACE, "b", {"text": "a low orbit", "title": "two"}, index=["title"])
    with text_statements() as counted, Store(path, index={**index(), "embed_id": "v2"}) as store:
        assert store.reembed(NAMESPACE, every=True).embedded == 2
        assert counted == Counter({"DELETE FROM store_text": 1, "INSERT INTO store_text": 1})
        assert [i.key for i in store.search(NAMESPACE, query="amber", mode="text")] == ["a"]
        assert [i.key for i in store.search(NAMESPACE, query="orbit", mode="text")] == ["b"]
        assert store.search(NAMESPACE, query="two", mode="text") == []
        assert verify(store.file).sound


_TEXTS = st.sampled_from(["amber fox", "amber kettle note", "orbit", "", "quiet harbor fox"])
_INDEX = st.sampled_from([None, False, ["title"], ["text"], ["text", "title"]])
_PUT = st.tuples(
    st.sampled_from(["a", "b", "c"]),
    st.one_of(st.none(), st.fixed_dictionaries({"text": _TEXTS, "title": _TEXTS})),
    _INDEX,
)


def _text_answers(store: Store) -> dict[str, list[tuple[str, float]]]:
    words = [*QUERIES, "title", "amber"]
    return {
        q: sorted(
            (i.key, round(i.score or 0.0, 12))
            for i in store.search(NAMESPACE, query=q, mode="text", limit=10)
        )
        for q in words
    }


@settings(max_examples=40, deadline=None)
@given(st.lists(_PUT, min_size=1, max_size=12))
def test_text_answers_are_those_of_the_last_puts_alone(
    puts: list[tuple[str, dict[str, Any] | None, Any]],
) -> None:
    """Whatever puts came before (same values, same texts, other fields, no index,
    deletes), the text search answers what a store holding only each key's last put
    answers."""
    with tempfile.TemporaryDirectory() as folder:
        last: dict[str, tuple[dict[str, Any] | None, Any]] = {}
        with Store(Path(folder) / "t.db", index=index()) as store:
            for key, value, fields in puts:
                if value is None:
                    store.delete(NAMESPACE, key)
                else:
                    store.put(NAMESPACE, key, value, index=fields)
                last[key] = (value, fields)
            got = _text_answers(store)
        with Store(Path(folder) / "fresh.db", index=index()) as fresh:
            for key, (value, fields) in last.items():
                if value is not None:
                    fresh.put(NAMESPACE, key, value, index=fields)
            assert got == _text_answers(fresh)
