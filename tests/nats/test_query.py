"""The query language of `threadloom serve` (SPEC §7.7), alone: no broker, no file."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, NamedTuple

import pytest

from threadloom.documents import query
from threadloom.documents.query import QueryError


class Doc(NamedTuple):
    key: str
    data: dict[str, Any]


def test_operators_compare_structurally_and_by_kind() -> None:
    """1 == 1.0, a bool is not a number, `ne`/`nin` exclude missing fields, ranges need
    one kind, strings compare by UTF-8 bytes."""
    data = {"n": 1, "b": True, "s": "é", "l": [1, "x"], "z": None}
    assert query.matches(data, ("n", "eq", 1.0))
    assert not query.matches(data, ("b", "eq", 1))
    assert not query.matches(data, ("missing", "ne", 1))
    assert not query.matches(data, ("missing", "nin", [1]))
    assert query.matches(data, ("z", "eq", None)) and not query.matches(data, ("n", "eq", None))
    assert query.matches(data, ("l", "contains", "x"))
    assert query.matches(data, ("s", "gt", "z"))  # b"\xc3\xa9" > b"z"
    assert not query.matches(data, ("n", "lt", "2"))
    assert query.matches(data, ("n", "in", [3, 1.0]))
    assert query.matches(data, ("missing", "exists", False))


def test_bad_predicates_are_refused_with_the_services_messages() -> None:
    """An unknown operator, an `in` of more than 500 values, a non-boolean `exists`."""
    with pytest.raises(QueryError, match="Unsupported predicate operator: like"):
        query.predicates([("ref", "like", "b-%")])
    with pytest.raises(QueryError, match="at most 500"):
        query.predicates([("ref", "in", list(range(501)))])
    with pytest.raises(QueryError, match="exists needs a boolean"):
        query.predicates([("ref", "exists", 1)])
    with pytest.raises(QueryError, match="between 1 and 1000"):
        query.page_size(0)
    with pytest.raises(QueryError, match="asc or desc"):
        query.ordering("x", "up")
    assert query.page_size(None) == query.DEFAULT_PAGE
    assert isinstance(QueryError("x"), ValueError)


def test_order_ranks_kinds_then_ids() -> None:
    """Missing < bool < number < string < datetime < bytes < list, ties broken by id."""
    when = datetime(2026, 1, 1, tzinfo=timezone.utc)
    docs = [
        Doc("g", {"v": [1]}),
        Doc("f", {"v": b"\x00"}),
        Doc("e", {"v": when}),
        Doc("d", {"v": "a"}),
        Doc("c", {"v": 2}),
        Doc("b", {"v": False}),
        Doc("a2", {}),
        Doc("a1", {}),
    ]
    found, cursor = query.page(docs, ("v", "asc"), limit=100, budget=10**6, bound="q")
    assert [d.key for d in found] == ["a1", "a2", "b", "c", "d", "e", "f", "g"]
    assert cursor is None
    found, _ = query.page(docs, ("v", "desc"), limit=100, budget=10**6, bound="q")
    assert [d.key for d in found] == ["g", "f", "e", "d", "c", "b", "a2", "a1"]


def test_pages_follow_cursors_within_the_byte_budget() -> None:
    """Every document once across pages cut by limit and budget; a page holds at least
    one item even above the budget; a cursor of another query is refused."""
    docs = [Doc(f"k{i:02}", {"n": i, "pad": "x" * (i * 10)}) for i in range(30)]
    bound = query.fingerprint("ns", "c", [("n", "gte", 0)], ("n", "desc"))
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        found, cursor = query.page(
            docs, ("n", "desc"), limit=7, budget=600, bound=bound, cursor=cursor
        )
        assert found and len(found) <= 7
        pages += 1
        seen.extend(d.key for d in found)
        if cursor is None:
            break
    assert seen == [f"k{i:02}" for i in reversed(range(30))] and pages > 5
    huge, more = query.page(docs, ("n", "desc"), limit=7, budget=1, bound=bound)
    assert len(huge) == 1 and more is not None
    other = query.fingerprint("ns", "c", [("n", "gte", 1)], ("n", "desc"))
    with pytest.raises(QueryError, match="Invalid cursor"):
        query.page(docs, ("n", "desc"), limit=7, budget=600, bound=other, cursor=more)
    with pytest.raises(QueryError, match="Invalid cursor"):
        query.page(docs, None, limit=7, budget=600, bound=bound, cursor="W10=")  # "[]"


def test_fingerprints_ignore_predicate_order_only() -> None:
    """The same predicates in another order are the same query; another order is not."""
    a = query.fingerprint("ns", "c", [("x", "eq", 1), ("y", "eq", b"\x01")], None)
    b = query.fingerprint("ns", "c", [("y", "eq", b"\x01"), ("x", "eq", 1)], None)
    assert a == b
    assert a != query.fingerprint("ns", "c", [("x", "eq", 1), ("y", "eq", b"\x01")], ("x", "asc"))
    assert a != query.fingerprint("other", "c", [("x", "eq", 1), ("y", "eq", b"\x01")], None)


def test_the_estimate_counts_base64_bytes_the_id_and_the_overhead() -> None:
    """The SQL backend's estimate: canonical JSON, bytes as base64, + len(id) + 64."""
    assert query.estimate("id", {"b": b"\x00\x00\x00"}) == len('{"b":"AAAA"}') + 2 + 64


def test_a_page_without_a_budget_is_cut_by_its_limit_only() -> None:
    """`budget=None` (the in-process adapter without `max_bytes`): pages of `limit` items
    whatever their size, every document once, the last page without a cursor."""
    docs = [Doc(f"k{i:02}", {"n": i, "pad": "x" * 100_000}) for i in range(10)]
    bound = query.fingerprint("ns", "c", [], ("n", "asc"))
    first, cursor = query.page(docs, ("n", "asc"), limit=4, budget=None, bound=bound)
    assert [d.key for d in first] == ["k00", "k01", "k02", "k03"] and cursor is not None
    second, cursor = query.page(
        docs, ("n", "asc"), limit=4, budget=None, bound=bound, cursor=cursor
    )
    last, end = query.page(docs, ("n", "asc"), limit=4, budget=None, bound=bound, cursor=cursor)
    assert [d.key for d in second + last] == [f"k{i:02}" for i in range(4, 10)]
    assert end is None


def test_a_cursor_position_must_have_the_shape_pages_write() -> None:
    """Positions `page` writes read back, in id order (empty key) and under an order;
    forged ones of another shape are refused as invalid cursors."""
    bound = "q"
    for position in (((), "k1"), ((3, 0.0, "6162"), "k2"), ((2, 1.5, ""), "k3")):
        assert query.read_cursor(query.write_cursor(position, bound), bound) == position
    for forged in ((("a", "b", "c"), "k"), ((3, True, ""), "k"), ((3, 0.0), "k"), ((), 7)):
        with pytest.raises(QueryError):
            query.read_cursor(query.write_cursor(forged, bound), bound)  # type: ignore[arg-type]
