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
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.store.base import PutOp

from tests.data.format12.make import NAMESPACE, QUERIES, answers, index
from tests.engine._fixtures import copied
from threadloom import Store
from threadloom.engine.checks.verify import verify
from threadloom.engine.format.schema import FORMAT_VERSION, TEXT_DIGEST_FORMAT
from threadloom.engine.format.text import digest as text_digest
from threadloom.engine.items.fieldkeys import MAX_FIELDS

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
        assert "text_digest" not in columns and "terms" in columns and "text_terms" not in columns
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


def test_a_statement_of_an_older_threadloom_fails_instead_of_leaving_a_stale_digest(
    tmp_path: Path,
) -> None:
    """An older threadloom still holding the file writes `terms`, which format 13 renamed:
    its statements that write a text entry fail loudly, instead of replacing the text
    and leaving the digest of the one before (a later put of that text would keep the
    wrong entry)."""
    path = copied(FORMAT12, tmp_path)
    older = apsw.Connection(str(path))
    try:
        assert older.execute("SELECT count(*) FROM store_items WHERE terms > 0").fetchall()
        with Store(path, index=index()) as store:
            store.put(NAMESPACE, "a", {"text": "the amber fox crossed the road", "title": "a"})
        for sql in (
            "UPDATE store_items SET terms = 3 WHERE key = 'a'",
            "SELECT count(*) FROM store_items WHERE terms > 0",
        ):
            with pytest.raises(apsw.SQLError, match="no such column: terms"):
                older.execute(sql).fetchall()
    finally:
        older.close()


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


def test_reembed_records_the_digest_of_the_text_it_writes(tmp_path: Path) -> None:
    """After reembed rewrote an entry, a put of the entry's former text writes it again."""
    path = tmp_path / "d.db"
    with Store(path, index=index()) as store:
        store.put(NAMESPACE, "b", {"text": "a low orbit", "title": "two"}, index=["title"])
    with Store(path, index={**index(), "embed_id": "v2"}) as store:
        store.reembed(NAMESPACE, every=True)  # the config's fields: the entry is the text
        assert _digests(path)["b"] == text_digest("a low orbit")
        store.put(NAMESPACE, "b", {"text": "a low orbit", "title": "two"}, index=["title"])
        assert [i.key for i in store.search(NAMESPACE, query="two", mode="text")] == ["b"]
        assert store.search(NAMESPACE, query="orbit", mode="text") == []


def test_a_put_of_the_same_value_keeps_it_partial(tmp_path: Path) -> None:
    """A value with more fields than the filter index holds stays `partial` when put
    again unchanged, so a filter on a field past the index still checks the value."""
    value = {f"f{n:03d}": n for n in range(MAX_FIELDS + 40)}
    last = f"f{MAX_FIELDS + 39:03d}"
    with Store(tmp_path / "p.db", index=index()) as store:
        store.put(NAMESPACE, "wide", value, index=False)
        store.put(NAMESPACE, "wide", value, index=False)
        found = store.search(NAMESPACE, filter={last: MAX_FIELDS + 39})
        assert [i.key for i in found] == ["wide"]


_TEXTS = st.sampled_from(["amber fox", "amber kettle note", "orbit", "", "quiet harbor fox"])
_INDEX = st.sampled_from([None, False, ["title"], ["text"], ["text", "title"]])
_VALUE = st.one_of(st.none(), st.fixed_dictionaries({"text": _TEXTS, "title": _TEXTS}))
#: (key, [values put in one batch, the last one wins], index fields, text index on).
_OP = st.tuples(
    st.sampled_from(["a", "b", "c"]),
    st.lists(_VALUE, min_size=1, max_size=2),
    _INDEX,
    st.booleans(),
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


@settings(max_examples=60, deadline=None)
@given(st.lists(_OP, min_size=1, max_size=12))
def test_text_answers_are_those_of_the_last_puts_alone(
    ops: list[tuple[str, list[dict[str, Any] | None], Any, bool]],
) -> None:
    """Whatever puts came before (same values, same texts, other fields, no index, a
    Store without the text index, deletes, several puts of a key in one batch), the text
    search answers what a store holding only each key's last put answers."""
    with tempfile.TemporaryDirectory() as folder:
        last: dict[str, tuple[dict[str, Any] | None, Any, bool]] = {}
        path = Path(folder) / "t.db"
        with Store(path, index=index()) as store, Store(path, index=index(), text=False) as bare:
            for key, values, fields, text in ops:
                (store if text else bare).batch(
                    [PutOp(NAMESPACE, key, value, index=fields) for value in values]
                )
                last[key] = (values[-1], fields, text)
            got = _text_answers(store)
            assert verify(store.file).sound
        fresh_path = Path(folder) / "fresh.db"
        with (
            Store(fresh_path, index=index()) as fresh,
            Store(fresh_path, index=index(), text=False) as fresh_bare,
        ):
            for key, (value, fields, text) in last.items():
                if value is not None:
                    (fresh if text else fresh_bare).put(NAMESPACE, key, value, index=fields)
            assert got == _text_answers(fresh)
