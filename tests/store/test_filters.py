"""Filters decided in SQL, exactly: numbers as numbers, strings as strings, objects by
containment; stable pages; list_namespaces as InMemoryStore answers it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.store.base import ListNamespacesOp, MatchCondition
from langgraph.store.memory import InMemoryStore

from threadloom import Store
from threadloom.engine.items import fieldkeys
from threadloom.engine.items.fieldkeys import FilterError


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    with Store.from_conn_string(tmp_path_factory.mktemp("filters") / "f.db") as opened:
        yield opened


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.from_conn_string(tmp_path / "f.db") as opened:
        yield opened


def keys(store: Store, filter: dict[str, Any], prefix: tuple[str, ...] = ("n",)) -> set[str]:
    return {i.key for i in store.search(prefix, filter=filter, limit=1000)}


def test_ranges_compare_numbers_as_numbers(store: Store) -> None:
    """`{"$gte": 10}` does not match 2 and 9 (PostgresStore compares as text)."""
    for n in (2, 9, 10, 11.5, 100, -3, 2**53, 2**53 + 1, 2**64 + 7):
        store.put(("n",), str(n), {"n": n})
    store.put(("n",), "text", {"n": "10"})
    store.put(("n",), "bool", {"n": True})
    assert keys(store, {"n": {"$gte": 10}}) == {"10", "11.5", "100"} | {
        str(2**53),
        str(2**53 + 1),
        str(2**64 + 7),
    }
    assert keys(store, {"n": {"$lt": 10}}) == {"2", "9", "-3"}
    assert keys(store, {"n": {"$gt": 2**53}}) == {str(2**53 + 1), str(2**64 + 7)}
    assert keys(store, {"n": 2**53 + 1}) == {str(2**53 + 1)}  # SqliteStore casts to REAL
    assert keys(store, {"n": float(2**53)}) == {str(2**53)}
    assert keys(store, {"n": {"$gt": 9.999999999999998, "$lt": 10.000000000000002}}) == {"10"}
    assert keys(store, {"n": {"$gte": "10"}}) == {"text"}  # strings with strings
    assert keys(store, {"n": True}) == {"bool"}  # a boolean is not the number 1
    assert keys(store, {"n": {"$ne": 10}}) == keys(store, {}) - {"10"}


def test_strings_compare_by_code_point(store: Store) -> None:
    words = ["apple", "Apple", "äpple", "b", "ba", "", "日本", "z"]
    for w in words:
        store.put(("n",), f"k{words.index(w)}", {"w": w})
    got = {i.value["w"] for i in store.search(("n",), filter={"w": {"$gt": "b"}})}
    assert got == {w for w in words if w > "b"}


def test_nested_objects_match_by_containment(store: Store) -> None:
    store.put(("n",), "a", {"user": {"name": "ada", "langs": ["py"], "meta": {"x": 1}}})
    store.put(("n",), "b", {"user": {"name": "bob"}})
    store.put(("n",), "c", {"user": "ada"})
    assert keys(store, {"user": {"name": "ada"}}) == {"a"}
    assert keys(store, {"user": {"meta": {"x": 1}}}) == {"a"}
    assert keys(store, {"user": {"langs": ["py"]}}) == {"a"}
    assert keys(store, {"user": {"$eq": {"name": "bob"}}}) == {"b"}  # $eq is whole-value
    assert keys(store, {"user": {"name": None}}) == set()
    assert keys(store, {"user": {"missing": None}}) == {"a", "b"}
    assert keys(store, {"missing": None}) == {"a", "b", "c"}


def test_bad_filters_say_what_is_wrong(store: Store) -> None:
    store.put(("n",), "a", {"n": 1})
    with pytest.raises(FilterError, match=r"\$regex"):
        store.search(("n",), filter={"n": {"$regex": "x"}})
    with pytest.raises(FilterError, match="number or a string"):
        store.search(("n",), filter={"n": {"$gt": [1]}})


#: Strings around the filter index's 32-byte cut, sharing long starts.
LONG_TEXTS = st.sampled_from(
    [
        "x" * 31,
        "x" * 32,
        "x" * 33,
        "x" * 40 + "a",
        "x" * 40 + "b",
        "x" * 32 + "é",
        "y" * 50,
        "x" * 31 + "z" * 9,
    ]
)
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0, 1, -1, 2**53, 2**53 + 1, 0.5, 1.0, "", "a", "b", "ab", "é"]),
    st.text(max_size=3),
    LONG_TEXTS,
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.sampled_from(["a", "b", "c"]), children, max_size=3),
    ),
    max_leaves=6,
)
documents = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), json_values, max_size=4)
operators = st.sampled_from(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"])
comparable = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=3),
    LONG_TEXTS,
)
filters = st.dictionaries(
    st.sampled_from(["a", "b", "c", "d"]),
    st.one_of(
        json_values,
        st.dictionaries(operators, comparable, min_size=1, max_size=2),
    ),
    max_size=2,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(docs=st.lists(documents, min_size=1, max_size=8), filter=filters)
def test_sql_decides_filters_as_the_python_specification_does(
    shared: Store, docs: list[dict[str, Any]], filter: dict[str, Any]
) -> None:
    """Whatever the values and the filter, SQL keeps exactly the items `matches` keeps."""
    shared.purge(("p",))
    for i, doc in enumerate(docs):
        shared.put(("p",), str(i), doc)
    try:
        expected = {str(i) for i, doc in enumerate(docs) if fieldkeys.matches(doc, filter)}
    except FilterError:
        with pytest.raises(FilterError):
            keys(shared, filter, ("p",))
        return
    assert keys(shared, filter, ("p",)) == expected


def test_values_with_more_fields_than_the_index_holds_are_checked_on_their_value(
    store: Store,
) -> None:
    wide = {f"f{i}": i for i in range(fieldkeys.MAX_FIELDS + 10)}
    store.put(("n",), "wide", wide)
    store.put(("n",), "small", {"f300": 1})
    assert keys(store, {f"f{fieldkeys.MAX_FIELDS + 5}": fieldkeys.MAX_FIELDS + 5}) == {"wide"}
    assert keys(store, {"f1": 1}) == {"wide"}
    assert keys(store, {"f300": {"$ne": 1}}) == {"wide"}


def test_pages_are_stable_and_complete(store: Store) -> None:
    for i in range(57):
        store.put(("n", str(i % 3)), f"k{i}", {"i": i, "even": i % 2 == 0})
    for filter in ({}, {"even": True}):
        pages = [store.search(("n",), filter=filter, limit=10, offset=o) for o in range(0, 70, 10)]
        seen = [i.key for page in pages for i in page]
        assert len(seen) == len(set(seen))
        assert set(seen) == keys(store, filter)
    assert store.search(("n",), limit=10, offset=200) == []
    assert len(store.search(("n",), limit=10, offset=50)) == 7


namespaces = st.lists(
    st.lists(st.sampled_from(["a", "b", "c", "users", "x-y"]), min_size=1, max_size=4).map(tuple),
    min_size=1,
    max_size=10,
)
conditions = st.lists(
    st.builds(
        MatchCondition,
        match_type=st.sampled_from(["prefix", "suffix"]),
        path=st.lists(st.sampled_from(["a", "b", "c", "*", "users"]), max_size=3).map(tuple),
    ),
    max_size=2,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    spaces=namespaces,
    match=conditions,
    depth=st.one_of(st.none(), st.integers(1, 4)),
    limit=st.integers(1, 12),
    offset=st.integers(0, 5),
)
def test_list_namespaces_answers_as_in_memory_store(
    shared: Store,
    spaces: list[tuple[str, ...]],
    match: list[MatchCondition],
    depth: int | None,
    limit: int,
    offset: int,
) -> None:
    for ns in shared.list_namespaces(limit=10_000):
        shared.purge(ns)
    reference = InMemoryStore()
    for ns in spaces:
        shared.put(ns, "k", {"v": 1})
        reference.put(ns, "k", {"v": 1})
    op = ListNamespacesOp(tuple(match) or None, depth, limit, offset)
    assert shared.batch([op]) == reference.batch([op])


def test_long_strings_filter_exactly(store: Store) -> None:
    """Strings past the index's 32-byte cut are indexed by their start and a hash:
    equality and ranges still answer exactly, also between strings sharing 32 bytes."""
    base = "the quick brown fox jumps over t"  # 32 bytes
    texts = [base, base + "a", base + "b", base + "he lazy dog", "short", base[:-1]]
    for i, t in enumerate(texts):
        store.put(("n",), str(i), {"t": t})
    for operand in (base, base + "a", base + "az", "short", base[:10]):
        for op, test in (
            ("$gt", str.__gt__),
            ("$gte", str.__ge__),
            ("$lt", str.__lt__),
            ("$lte", str.__le__),
        ):
            want = {str(i) for i, t in enumerate(texts) if test(t, operand)}
            assert keys(store, {"t": {op: operand}}) == want, (op, operand)
        assert keys(store, {"t": operand}) == {str(i) for i, t in enumerate(texts) if t == operand}
    rows = store.file.content  # the index holds no long text
    with store.file.connection() as conn:
        longest = conn.execute("SELECT max(length(value)) FROM store_fields").fetchall()[0][0]
    assert rows is not None and longest <= 1 + 32 + 8


@settings(max_examples=200, deadline=None)
@given(
    doc=st.one_of(
        documents,
        st.dictionaries(st.text(max_size=4), json_scalars, max_size=6),
        st.integers(fieldkeys.MAX_FIELDS - 1, fieldkeys.MAX_FIELDS + 1).map(
            lambda n: {f"f{i}": i for i in range(n)}
        ),
    )
)
def test_flat_values_get_the_keys_the_walk_gives(doc: dict[str, Any]) -> None:
    """The index rows of a flat value, keyed without the walk, are the walk's, in order."""
    assert fieldkeys.fields(doc) == fieldkeys._fields(doc)
