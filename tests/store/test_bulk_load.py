"""Bulk loads: a batch of many puts is one transaction whatever its items, its new items
are written in one statement and its vectors checked at once, and the result is what
the same puts one at a time give."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import PutOp

from tests.store._hashing_embedder import HashingEmbedder
from threadloom import Store
from threadloom.engine.checks.verify import verify
from threadloom.engine.items import rows, vector_values
from threadloom.engine.items.jsontext import check_json
from threadloom.errors import InvalidValueError

DIMS = 16
NS = ("bulk", "user-1")
LATE = {"n": {"$gte": 40}}


class Poisoned(HashingEmbedder):
    """The hashing embedder, but a text holding "poison" embeds as `bad`."""

    def __init__(self, bad: list[Any]) -> None:
        super().__init__(DIMS)
        self.bad = bad

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        made = super().embed_documents(texts)
        return [self.bad if "poison" in t else v for t, v in zip(texts, made, strict=True)]


def _index(embedder: Any) -> Any:
    return {"dims": DIMS, "embed": embedder, "fields": ["text"]}


def _value(i: int, text: str = "") -> dict[str, Any]:
    return {"text": text or f"memory {i} about topic {i % 7} and word{i % 11}", "n": i}


def _loaded(store: Store) -> list[tuple[str, dict[str, Any]]]:
    return sorted((it.key, it.value) for it in store.search(NS, limit=10_000))


@pytest.mark.parametrize(
    "bad",
    [
        [math.nan] + [0.0] * (DIMS - 1),
        [0.0] * (DIMS - 1) + [math.inf],
        [1e300] + [0.0] * (DIMS - 1),
        [0.0] * (DIMS - 1),
        ["x"] + [0.0] * (DIMS - 1),
    ],
    ids=["nan", "inf", "overflow", "short", "text"],
)
def test_a_bad_vector_in_a_batch_leaves_nothing_of_the_batch(tmp_path: Path, bad: Any) -> None:
    """A batch of new and replaced items whose last item's vector is bad raises, and
    leaves the file as it was: no new item, the replaced ones unchanged, verify sound."""
    path = tmp_path / "s.db"
    with Store.from_conn_string(path, index=_index(Poisoned(bad))) as store:
        store.batch([PutOp(NS, f"k{i}", _value(i)) for i in range(20)])
        before = _loaded(store)
        ops = [PutOp(NS, f"k{i}", _value(i, f"changed {i}")) for i in range(0, 40, 2)]
        ops.append(PutOp(NS, "last", _value(99, "poison")))
        with pytest.raises(InvalidValueError, match="the vector of field 'text'"):
            store.batch(ops)
        assert _loaded(store) == before
        assert [r.key for r in store.search(NS, query="changed", limit=50)] == [
            r.key for r in store.search(NS, query="changed", limit=50)
        ]
        assert verify(store.file).sound


def test_a_batch_gives_what_the_same_puts_one_at_a_time_give(tmp_path: Path) -> None:
    """A batch mixing new items, replaced items (some with unchanged texts, kept
    vectors; some with the very value stored, kept filter rows) and deletes stores the
    same items, filter rows, texts and search results as the same puts sent one by one."""
    first = [PutOp(NS, f"k{i}", _value(i)) for i in range(60)]
    second = [PutOp(NS, f"k{i}", _value(i, f"new words {i}")) for i in range(0, 60, 3)]
    second += [PutOp(NS, f"k{i}", {**_value(i), "seen": True}) for i in range(1, 60, 3)]
    second += [PutOp(NS, f"k{i}", None) for i in range(2, 30, 3)]
    second += [PutOp(NS, f"k{i}", _value(i)) for i in range(32, 60, 3)]  # the same values
    second += [PutOp(("bulk", "other"), f"n{i}", _value(i)) for i in range(30)]
    found = {}
    for name, batched in (("batched", True), ("single", False)):
        with Store.from_conn_string(
            tmp_path / f"{name}.db", index=_index(HashingEmbedder(DIMS))
        ) as store:
            for ops in (first, second):
                if batched:
                    store.batch(ops)
                else:
                    for op in ops:
                        store.batch([op])
            found[name] = (
                _loaded(store),
                [(r.key, r.score) for r in store.search(("bulk",), query="topic 3", limit=20)],
                # Newest first: the batch's items share one time; compare them as sets.
                sorted(r.key for r in store.search(("bulk",), filter=LATE, limit=99)),
                sorted(r.key for r in store.search(NS, filter={"seen": True}, limit=99)),
                [r.key for r in store.search_text(("bulk",), "word4", limit=50)],
            )
            assert verify(store.file).sound
    assert found["batched"] == found["single"]
    assert len(found["batched"][0]) == 60 - 10


def test_the_batch_check_decides_as_the_check_of_each_vector() -> None:
    """`pack_many` accepts exactly what `pack_one` accepts, in the same bytes, and
    refuses with `pack_one`'s message (whatever the backend)."""
    top = vector_values.largest(DIMS)
    good = [[float(i) / 7 - 1 for i in range(DIMS)], [0.0] * DIMS, [top] * DIMS]
    entries = [(n, [("text", v)]) for n, v in enumerate(good)]
    flat, matrix, _ = vector_values.pack_many(entries, DIMS)
    assert [blob for _, _, blob in flat] == [vector_values.pack_one(v, DIMS, "v") for v in good]
    assert matrix == b"".join(blob for _, _, blob in flat)
    bad: list[Any] = [
        [math.nan] * DIMS,
        [-math.inf] + [0.0] * (DIMS - 1),
        [top * 1.01] + [0.0] * (DIMS - 1),
        [1e39] + [0.0] * (DIMS - 1),
        [0.0] * (DIMS + 1),
        "text",
        [None] * DIMS,
    ]
    for vector in bad:
        with pytest.raises(InvalidValueError) as one:
            vector_values.pack_one(vector, DIMS, "the vector of field 'text'")
        with pytest.raises(InvalidValueError) as many:
            vector_values.pack_many([*entries, (9, [("text", vector)])], DIMS)
        assert str(many.value) == str(one.value)
    with pytest.raises(InvalidValueError, match="given twice"):
        vector_values.pack_many([(1, [("a", good[0]), ("a", good[1])])], DIMS)


def test_the_codes_a_load_keeps_are_those_a_reload_reads(tmp_path: Path) -> None:
    """The exact scan's codes, grown batch by batch from each batch's own check, equal
    the codes read back from the file."""
    with Store.from_conn_string(tmp_path / "s.db", index=_index(HashingEmbedder(DIMS))) as store:
        store.batch([PutOp(NS, f"k{i}", _value(i)) for i in range(10)])
        vectors = store.items.vectors
        assert vectors is not None
        with store.file.read() as conn:
            assert vectors.scan.codes(conn, 10) is not None  # held from now on
        for start in range(10, 70, 20):
            store.batch([PutOp(NS, f"k{i}", _value(i)) for i in range(start, start + 20)])
        held = vectors.scan.held()
        assert held is not None
        with store.file.read() as conn:
            loaded = vectors.scan._load(conn, held.version, with_tops=True)
        grown = sorted(zip(held.ids, _planes(held), _params(held), strict=True))
        read = sorted(zip(loaded.ids, _planes(loaded), _params(loaded), strict=True))
        assert grown == read
        assert len(read) == 70


def _planes(codes: Any) -> list[tuple[bytes, bytes, float, bytes, float]]:
    """Each entry's high and low plane (`half(DIMS)` bytes each), spread, top bits (32
    bytes per 256 dims) and their spread."""
    high, low, tops = b"".join(codes.high), b"".join(codes.low), b"".join(codes.tops)
    width, bits = (DIMS + 1) // 2, 32 * ((DIMS + 255) // 256)
    spread = [x for part in codes.spread for x in part]
    tight = [x for part in codes.tight for x in part]
    return [
        (
            high[at * width : (at + 1) * width],
            low[at * width : (at + 1) * width],
            spread[at],
            tops[at * bits : (at + 1) * bits],
            tight[at],
        )
        for at in range(len(spread))
    ]


def _params(codes: Any) -> list[tuple[float, ...]]:
    joined = [x for part in codes.params for x in part]
    return [tuple(joined[at : at + 3]) for at in range(0, len(joined), 3)]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"a": [1, {"b": (1, 2)}]}, r"\$\.a\[1\]\.b is a tuple"),
        ({"a": {"x": {1: 2}}}, r"the key 1 at \$\.a\.x is a int"),
        ({"a": ["ok", "x\udc00"]}, r"the text at \$\.a\[1\] holds"),
        ({"k\ud800": 1}, r"the text at \$ \(a key\) holds"),
        ({"n": [[10**5000]]}, r"the integer at \$\.n\[0\]\[0\] has more than"),
        ({"deep": [[[{"x": {1}}]]]}, r"\$\.deep\[0\]\[0\]\[0\]\.x is a set"),
    ],
)
def test_a_refused_value_is_named_by_its_place(value: Any, message: str) -> None:
    """The JSON check names the place of what it refuses, written out only then."""
    with pytest.raises((TypeError, InvalidValueError), match=message):
        check_json(value)


@pytest.mark.parametrize("order", ["as-returned", "reversed"])
def test_a_batchs_new_items_get_their_own_rows_in_every_namespace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, order: str
) -> None:
    """New items sharing keys across namespaces, in a batch whose size is no power of
    two, each get their own row id: filters, text and vector searches find each item
    under its own namespace and key. SQLite does not promise the order of RETURNING
    rows: with them handed back reversed, every item still gets its own id."""
    if order == "reversed":
        plain = rows.insert_values

        def reversed_rows(*args: Any, **kwargs: Any) -> list[Any]:
            return list(reversed(plain(*args, **kwargs)))

        monkeypatch.setattr(rows, "insert_values", reversed_rows)
    spaces = [("bulk", "a"), ("bulk", "b"), ("bulk", "c")]
    ops = [
        PutOp(ns, f"k{i}", {"text": f"word{s} item{i}", "n": 1000 * s + i})
        for i in range(111)
        for s, ns in enumerate(spaces)
    ]
    with Store.from_conn_string(tmp_path / "s.db", index=_index(HashingEmbedder(DIMS))) as store:
        store.batch(ops)
        for s, ns in enumerate(spaces):
            for i in (0, 57, 110):
                (hit,) = store.search(ns, filter={"n": 1000 * s + i})
                assert (hit.namespace, hit.key) == (ns, f"k{i}")
                # Its vector is its own text's: the same text's query scores it 1.
                (own,) = store.search(ns, query=f"word{s} item{i}", filter={"n": 1000 * s + i})
                assert own.key == f"k{i}" and own.score == pytest.approx(1.0, abs=1e-5)
            texts = store.search_text(("bulk",), f"word{s}", limit=1000)
            assert {(r.namespace, r.key) for r in texts} == {(ns, f"k{i}") for i in range(111)}
        assert verify(store.file).sound
