"""OwnerStore: one owner's view of a store, rooted, stripped and isolated."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

from threadloom.errors import InvalidArgumentError
from threadloom.langgraph import memories
from threadloom.langgraph.memories import OutsideOwnerError, OwnerStore

FIXTURE_OK = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
ADA = ("acme", "user", "ada")
BOB = ("acme", "user", "bob")


def seed(view: BaseStore, *, who: str) -> None:
    """Write one profile and two facts, each carrying `who`."""
    view.put(("profile",), "profile", {"who": who})
    view.put(("facts",), "f1", {"who": who, "n": 1})
    view.put(("facts", "old"), "f2", {"who": who, "n": 2})


# --- the view as the caller sees it --------------------------------------------------------


def test_items_are_stored_under_the_root_and_come_back_stripped(store: BaseStore) -> None:
    """A put lands under the owner's root; get and search answer the caller's namespace."""
    view = OwnerStore(store, *ADA)
    view.put(("facts",), "f1", {"text": "tea"})
    raw = store.get((*ADA, "facts"), "f1")
    assert raw is not None and raw.value == {"text": "tea"}
    got = view.get(("facts",), "f1")
    assert got is not None and type(got) is Item
    assert (got.namespace, got.key, got.value) == (("facts",), "f1", {"text": "tea"})
    assert (got.created_at, got.updated_at) == (raw.created_at, raw.updated_at)
    found = view.search(("facts",))
    assert [(type(i), i.namespace, i.key) for i in found] == [(SearchItem, ("facts",), "f1")]
    assert view.list_namespaces() == [("facts",)]
    view.delete(("facts",), "f1")
    assert view.get(("facts",), "f1") is None and store.get((*ADA, "facts"), "f1") is None


def test_search_filters_and_pages_inside_the_root(store: BaseStore) -> None:
    """Filters, limit and offset apply to the owner's items only."""
    ada, bob = OwnerStore(store, *ADA), OwnerStore(store, *BOB)
    for n in range(5):
        ada.put(("facts",), f"a{n}", {"n": n, "kind": "x" if n % 2 else "y"})
        bob.put(("facts",), f"b{n}", {"n": n, "kind": "x"})
    assert sorted(i.key for i in ada.search((), filter={"kind": "x"})) == ["a1", "a3"]
    assert len(ada.search(("facts",), limit=2)) == 2
    keys = {i.key for off in range(0, 6, 2) for i in ada.search((), limit=2, offset=off)}
    assert keys == {f"a{n}" for n in range(5)}


def test_the_owner_and_root_are_visible(store: BaseStore) -> None:
    """`owner` is what was given, `root` its encoding, `store` the wrapped store."""
    view = OwnerStore(store, "acme", "user", "ada@example.com")
    assert view.owner == ("acme", "user", "ada@example.com")
    assert view.root == ("acme", "user", "~ada@example%2Ecom")
    assert view.store is store
    assert view.supports_ttl == store.supports_ttl and "ada@example.com" in repr(view)


def test_a_view_of_a_view_nests_the_roots(store: BaseStore) -> None:
    """An OwnerStore over an OwnerStore roots under both owners, in order."""
    tenant = OwnerStore(store, "acme")
    user = OwnerStore(tenant, "user", "ada")
    user.put(("facts",), "f1", {"x": 1})
    assert store.get(("acme", "user", "ada", "facts"), "f1") is not None
    assert tenant.list_namespaces() == [("user", "ada", "facts")]
    assert user.erase() == 1 and tenant.search(()) == []


# --- isolation -----------------------------------------------------------------------------


def test_two_owners_never_see_each_other(store: BaseStore) -> None:
    """Through get, search, list_namespaces and batch each owner sees only its own items."""
    ada, bob = OwnerStore(store, *ADA), OwnerStore(store, *BOB)
    seed(ada, who="ada")
    seed(bob, who="bob")
    for view, who in ((ada, "ada"), (bob, "bob")):
        item = view.get(("profile",), "profile")
        assert item is not None and item.value == {"who": who}
        assert {i.value["who"] for i in view.search(())} == {who}
        assert len(view.search((), limit=100)) == 3
        assert view.list_namespaces() == [("facts",), ("facts", "old"), ("profile",)]
        listed, searched, got = view.batch(
            [ListNamespacesOp(), SearchOp((), limit=100), GetOp(("facts",), "f1")]
        )
        assert listed == [("facts",), ("facts", "old"), ("profile",)]
        assert isinstance(searched, list) and len(searched) == 3
        assert isinstance(got, Item) and got.value["who"] == who


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (("acme", "a.b"), ("acme", "a", "b")),
        (("acme", "a.b"), ("acme", "~a%2Eb")),
        (("acme", ""), ("acme", "~")),
        (("acme", "*"), ("acme", "x")),
        (("acme", "%2E"), ("acme", ".")),
    ],
)
def test_encoded_owner_labels_never_collide(
    store: BaseStore, first: tuple[str, ...], second: tuple[str, ...]
) -> None:
    """Owners whose labels hold '.', are empty, are '*' or look encoded stay apart."""
    one, two = OwnerStore(store, *first), OwnerStore(store, *second)
    assert one.root != two.root
    seed(one, who="one")
    seed(two, who="two")
    assert {i.value["who"] for i in one.search((), limit=100)} == {"one"}
    assert {i.value["who"] for i in two.search((), limit=100)} == {"two"}
    assert (
        one.list_namespaces()
        == two.list_namespaces()
        == [
            ("facts",),
            ("facts", "old"),
            ("profile",),
        ]
    )
    assert one.erase() == 3 and len(two.search((), limit=100)) == 3


def test_an_owner_label_star_is_not_a_wildcard(store: BaseStore) -> None:
    """An owner labelled '*' does not list other owners' namespaces by wildcard."""
    OwnerStore(store, "acme", "bob").put(("facts",), "f", {"x": 1})
    star = OwnerStore(store, "acme", "*")
    assert star.list_namespaces() == []
    assert star.list_namespaces(prefix=("facts",)) == []
    assert star.search(()) == []


def test_langgraph_is_refused_only_at_a_true_or_view_root(store: BaseStore) -> None:
    """'langgraph' as a view's first label is refused like on any store; elsewhere it is a label."""
    view = OwnerStore(store, "acme", "langgraph")
    view.put(("notes", "langgraph"), "k", {"x": 1})
    assert view.list_namespaces() == [("notes", "langgraph")]
    with pytest.raises(InvalidNamespaceError, match="langgraph"):
        view.put(("langgraph", "notes"), "k", {"x": 1})
    with pytest.raises(InvalidNamespaceError, match="langgraph"):
        view.batch([PutOp(("langgraph",), "k", {"x": 1})])
    with pytest.raises(InvalidNamespaceError, match="langgraph"):
        OwnerStore(store, "langgraph", "user", "ada")
    assert store.search(("acme", "langgraph", "langgraph")) == []


def test_a_view_needs_owner_labels_as_strings(store: BaseStore) -> None:
    """No owner, or an owner passed as one tuple, is refused with a hint."""
    with pytest.raises(InvalidNamespaceError, match="owner's labels"):
        OwnerStore(store)
    with pytest.raises(InvalidArgumentError, match=r"\*owner"):
        OwnerStore(store, ADA)  # type: ignore[arg-type]


# --- ops passed straight to batch ----------------------------------------------------------


@pytest.mark.parametrize(
    "op",
    [
        GetOp("facts", "k"),  # type: ignore[arg-type]
        PutOp("facts", "k", {"x": 1}),  # type: ignore[arg-type]
        SearchOp("facts"),  # type: ignore[arg-type]
        SearchOp(None),  # type: ignore[arg-type]
        ListNamespacesOp(match_conditions=(MatchCondition("prefix", "facts"),)),  # type: ignore[arg-type]
        ListNamespacesOp(match_conditions=(MatchCondition("infix", ("a",)),)),  # type: ignore[arg-type]
        ListNamespacesOp(match_conditions=("prefix",)),  # type: ignore[arg-type]
        ListNamespacesOp(max_depth=-1),
        ("get", ("facts",), "k"),
    ],
)
def test_ops_the_view_cannot_root_are_refused(store: BaseStore, op: Any) -> None:
    """A str namespace, an unknown op or match type, a negative depth: OutsideOwnerError."""
    view = OwnerStore(store, *ADA)
    with pytest.raises(OutsideOwnerError):
        view.batch([PutOp(("facts",), "before", {"x": 1}), op])
    with pytest.raises(OutsideOwnerError):
        asyncio.run(view.abatch([op]))
    assert store.search((), limit=100) == []  # nothing of the batch was sent


@pytest.mark.parametrize(
    "op",
    [
        GetOp(("a.b",), "k"),
        PutOp(("facts", ""), "k", {"x": 1}),
        PutOp((), "k", {"x": 1}),
        SearchOp(("fa\x00cts",)),
        SearchOp((7,)),  # type: ignore[arg-type]
        ListNamespacesOp(match_conditions=(MatchCondition("suffix", ("a.b",)),)),
    ],
)
def test_namespaces_inside_the_view_follow_basestore_rules(store: BaseStore, op: Op) -> None:
    """Labels with '.', NUL, empty or non-str labels and empty put namespaces are refused."""
    view = OwnerStore(store, *ADA)
    with pytest.raises(InvalidNamespaceError):
        view.batch([op])
    assert store.search((), limit=100) == []


def test_batch_answers_each_op_in_order(store: BaseStore) -> None:
    """Mixed ops, including a listing whose conditions exclude each other, answer in order."""
    view = OwnerStore(store, *ADA)
    answers = view.batch(
        [
            PutOp(("a", "b"), "k", {"x": 1}),
            ListNamespacesOp(
                match_conditions=(
                    MatchCondition("prefix", ("a",)),
                    MatchCondition("prefix", ("b",)),
                )
            ),
            GetOp(("a", "b"), "missing"),
        ]
    )
    assert answers == [None, [], None]
    got, listed, searched = view.batch(
        [GetOp(("a", "b"), "k"), ListNamespacesOp(), SearchOp(("a",))]
    )
    assert isinstance(got, Item) and got.namespace == ("a", "b")
    assert listed == [("a", "b")]
    assert isinstance(searched, list)
    assert [i.namespace for i in searched if isinstance(i, SearchItem)] == [("a", "b")]


class LeakyStore(InMemoryStore):
    """A broken store that answers every search with an item of another owner."""

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        results = super().batch(ops)
        return [
            [*r, SearchItem(BOB, "leak", {}, i.created_at, i.updated_at)]
            if isinstance(r, list) and r and isinstance((i := r[0]), SearchItem)
            else r
            for r in results
        ]


def test_answers_from_outside_the_root_are_refused() -> None:
    """An item the wrapped store returns from outside the root raises instead of leaking."""
    view = OwnerStore(LeakyStore(), *ADA)
    view.put(("facts",), "f", {"x": 1})
    with pytest.raises(OutsideOwnerError, match="outside"):
        view.search(())
    with pytest.raises(OutsideOwnerError):
        view.erase()


# --- list_namespaces equals the store's answer on un-rooted data ---------------------------

DATA = [
    ("a",),
    ("a", "b"),
    ("a", "b", "c"),
    ("a", "user", "b"),
    ("b", "a"),
    ("b", "b", "a", "c"),
    ("c", "*"),
    ("user", "ada"),
    ("ada", "x"),
    ("x", "y", "z", "w"),
]
OWNER = ("a", "user", "ada")  # shares labels with DATA, so a suffix reaching into it would show


def views(store: BaseStore) -> tuple[OwnerStore, InMemoryStore]:
    """The view over `store` and the oracle, both holding DATA, plus other owners' noise."""
    view, oracle = OwnerStore(store, *OWNER), InMemoryStore()
    for ns in DATA:
        view.put(ns, "k", {"ns": list(ns)})
        oracle.put(ns, "k", {"ns": list(ns)})
        OwnerStore(store, "a", "user", "bob").put(ns, "k", {})
        store.put(("a", "user", "adam", *ns), "k", {})  # a root that only starts like it
        store.put(("user", "ada", *ns), "k", {})  # the root's tail, elsewhere
    store.put(("a", "user"), "k", {})  # above the root
    store.put(OWNER, "k", {})  # at the root itself, written outside the view
    return view, oracle


@pytest.mark.parametrize(
    "query",
    [
        {},
        {"prefix": ("a",)},
        {"prefix": ("*", "b")},
        {"prefix": ("a", "*", "*")},
        {"suffix": ("a",)},
        {"suffix": ("ada", "a")},
        {"suffix": ("user", "ada", "x")},
        {"suffix": ("*", "*")},
        {"suffix": ("ada", "*", "a")},
        {"prefix": ("b",), "suffix": ("a",)},
        {"prefix": ("*",), "suffix": ("*", "*", "*", "*")},
        {"max_depth": 0},
        {"max_depth": 1},
        {"max_depth": 2, "prefix": ("a",)},
        {"max_depth": 1, "suffix": ("c",)},
        {"limit": 3},
        {"limit": 3, "offset": 2},
        {"offset": 20},
        {"prefix": ("nothing",)},
    ],
)
def test_list_namespaces_answers_as_if_unrooted(store: BaseStore, query: dict[str, Any]) -> None:
    """Each listing equals InMemoryStore's answer on the same data without the root."""
    view, oracle = views(store)
    assert view.list_namespaces(**query) == oracle.list_namespaces(**query)
    assert asyncio.run(view.alist_namespaces(**query)) == oracle.list_namespaces(**query)


LABEL = st.sampled_from(["a", "b", "c", "user", "ada", "x", "*"])
PATH = st.lists(LABEL, max_size=4).map(tuple)
CONDITION = st.builds(MatchCondition, st.sampled_from(["prefix", "suffix"]), PATH)


@FIXTURE_OK
@given(
    st.lists(CONDITION, max_size=3).map(tuple),
    st.none() | st.integers(0, 5),
    st.integers(1, 12),
    st.integers(0, 12),
)
def test_list_namespaces_ops_answer_as_if_unrooted(
    store: BaseStore,
    conditions: tuple[MatchCondition, ...],
    max_depth: int | None,
    limit: int,
    offset: int,
) -> None:
    """Any ListNamespacesOp (several conditions, '*', depth, paging) answers as without root."""
    view, oracle = views(store)
    op = ListNamespacesOp(conditions, max_depth=max_depth, limit=limit, offset=offset)
    assert view.batch([op]) == oracle.batch([op])


# --- erase ---------------------------------------------------------------------------------


def test_erase_deletes_the_owner_only_and_counts(store: BaseStore) -> None:
    """erase removes every item under the root, returns the count and leaves others alone."""
    ada, bob = OwnerStore(store, *ADA), OwnerStore(store, *BOB)
    seed(ada, who="ada")
    seed(bob, who="bob")
    store.put(("acme", "user", "adam"), "k", {"x": 1})
    assert ada.erase() == 3
    assert ada.search((), limit=100) == [] and ada.get(("profile",), "profile") is None
    assert len(bob.search((), limit=100)) == 3
    assert store.get(("acme", "user", "adam"), "k") is not None
    assert ada.erase() == 0


def test_erase_pages_through_many_items(monkeypatch: Any) -> None:
    """Without a purge (InMemoryStore has none), erase deletes page by page until nothing
    is left."""
    store = InMemoryStore()
    monkeypatch.setattr(memories, "_PAGE", 3)
    view = OwnerStore(store, *ADA)
    for n in range(10):
        view.put(("facts", str(n % 3)), f"k{n}", {"n": n})
    assert view.erase() == 10 and view.search((), limit=100) == []


def test_purge_inside_the_view_takes_a_prefix(store: BaseStore) -> None:
    """purge(prefix) deletes the view's items under that prefix only."""
    view = OwnerStore(store, *ADA)
    seed(view, who="ada")
    assert view.purge(("facts",)) == 2
    assert [i.namespace for i in view.search(())] == [("profile",)]
    with pytest.raises(OutsideOwnerError):
        view.purge("facts")  # type: ignore[arg-type]


class PurgingStore(InMemoryStore):
    """An InMemoryStore with a `purge`/`apurge` like threadloom's Store, recording its calls."""

    def __init__(self) -> None:
        super().__init__()
        self.purged: list[tuple[str, ...]] = []

    def purge(self, namespace_prefix: tuple[str, ...]) -> int:
        self.purged.append(namespace_prefix)
        doomed = self.search(namespace_prefix, limit=10_000)
        self.batch([PutOp(i.namespace, i.key, None) for i in doomed])
        return len(doomed)

    async def apurge(self, namespace_prefix: tuple[str, ...]) -> int:
        return self.purge(namespace_prefix)


def test_erase_uses_the_stores_purge_when_it_has_one() -> None:
    """A wrapped store with purge erases in one call with the encoded root as prefix."""
    store = PurgingStore()
    view = OwnerStore(store, "acme", "user", "a.b")
    seed(view, who="ab")
    assert view.erase() == 3 and store.purged == [("acme", "user", "~a%2Eb")]
    seed(view, who="ab")
    assert asyncio.run(view.aerase()) == 3 and len(store.purged) == 2


# --- async ---------------------------------------------------------------------------------


def test_async_calls_go_through_abatch_rooted(store: BaseStore) -> None:
    """aput, aget, asearch, alist_namespaces, adelete and aerase keep to the root."""
    ada, bob = OwnerStore(store, *ADA), OwnerStore(store, *BOB)

    async def run() -> tuple[Any, ...]:
        await ada.aput(("facts",), "f1", {"x": 1})
        await ada.aput(("facts",), "f2", {"x": 2})
        await bob.aput(("facts",), "f1", {"x": 9})
        got = await ada.aget(("facts",), "f1")
        found = await ada.asearch(("facts",), filter={"x": 2})
        listed = await bob.alist_namespaces()
        await ada.adelete(("facts",), "f2")
        erased = await ada.aerase()
        return got, found, listed, erased, await bob.asearch(())

    got, found, listed, erased, left = asyncio.run(run())
    assert got.namespace == ("facts",) and got.value == {"x": 1}
    assert [(i.namespace, i.key) for i in found] == [(("facts",), "f2")]
    assert listed == [("facts",)] and erased == 1
    assert [i.value for i in left] == [{"x": 9}]


def test_async_erase_pages_without_purge(monkeypatch: Any) -> None:
    """aerase without an apurge (InMemoryStore has none) pages through asearch and abatch
    deletes."""
    store = InMemoryStore()
    monkeypatch.setattr(memories, "_PAGE", 2)
    view = OwnerStore(store, *ADA)
    for n in range(5):
        view.put(("facts",), f"k{n}", {"n": n})
    assert asyncio.run(view.aerase()) == 5 and view.search(()) == []


def test_search_text_searches_words_under_the_owner_only(tmp_path: Any) -> None:
    """`OwnerStore.search_text` runs the wrapped Store's word search inside the owner's
    root and strips it; a store without `search_text` is refused with what to use."""
    from threadloom import Store

    with Store.from_conn_string(tmp_path / "o.db") as store:
        ada, bob = OwnerStore(store, "ada"), OwnerStore(store, "bob")
        ada.put(("facts",), "k1", {"text": "Ada prefers tea"})
        bob.put(("facts",), "k1", {"text": "Bob prefers tea too"})
        hits = ada.search_text(("facts",), "prefers tea")
        assert [(h.namespace, h.key) for h in hits] == [(("facts",), "k1")]
        assert hits[0].value == {"text": "Ada prefers tea"} and hits[0].score is not None
    with pytest.raises(InvalidArgumentError, match="search_text"):
        OwnerStore(InMemoryStore(), "ada").search_text((), "tea")
