"""What indexes an item: the Store's index config turned into texts and embeddings.

Adapter layer, beside `store.py`. From LangGraph's `IndexConfig` (`dims`, `embed`,
`fields`, plus `distance_type`) and the `text` switch, `Indexing` gives each value its
text-index texts (every string for `$`, else the strings at the fields) and the
(field path, text) pairs to embed, for puts (`prepare`) and for items already stored
(`entries`: `Store.reembed` and the text fill of older files).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, cast

from langgraph.store.base import (
    IndexConfig,
    PutOp,
    SearchOp,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
)

from threadloom.engine.items import Entry, Stored, VectorIndex, Write
from threadloom.errors import InvalidArgumentError
from threadloom.langgraph.store_embed import Embedder, identity
from threadloom.langgraph.store_ops import Prepared, check_mode, search_mode, strings, validate

Metric = Literal["cosine", "l2", "inner_product"]
Fields = list[tuple[str, list[str] | str]]


def _fields(paths: Iterable[str]) -> Fields:
    return [(p, tokenize_path(p) if p != "$" else "$") for p in paths]


class Indexing:
    """A Store's index settings.

    Args:
        index: LangGraph's `IndexConfig` plus `distance_type` and `search_mode` (how
            `search(query=)` ranks by default: "vector", the default, "text" or
            "hybrid"), or None (no embeddings).
        text: keep indexed text in the full-text index (None: yes).

    Raises:
        InvalidArgumentError: `index` lacks `dims` or `embed`, or names an unknown metric
            or search mode; `text` is not a bool.
    """

    def __init__(self, index: IndexConfig | None, text: bool | None) -> None:
        if text is not None and not isinstance(text, bool):
            raise InvalidArgumentError(f"text is True, False or None, not {text!r}")
        #: Items' indexed text goes to the full-text index.
        self.text = True if text is None else text
        self.config = dict(index) if index else None
        self.embeddings: Any = None
        #: The embedder through the file's embedding cache (None without `index`).
        self.embedder: Embedder | None = None
        self.fields: Fields = [("$", "$")]
        self.vectors: VectorIndex | None = None
        #: How `search(query=)` ranks unless the call says (store_ops.MODES).
        self.mode = check_mode(dict(index or {}).get("search_mode", "vector"))
        if not index:
            return
        if "dims" not in index or "embed" not in index:
            raise InvalidArgumentError(
                "index needs 'dims' (the embedding size) and 'embed' (an Embeddings, or "
                "a function from texts to vectors)"
            )
        metric = cast(Metric, dict(index).get("distance_type", "cosine"))
        if metric not in ("cosine", "l2", "inner_product"):
            raise InvalidArgumentError(
                f"distance_type {metric!r} is not one of cosine, l2, inner_product"
            )
        self.vectors = VectorIndex(index["dims"], metric)  # checks dims: an int, 1 or more
        self.embeddings = ensure_embeddings(index["embed"])
        self.embedder = Embedder(self.embeddings, identity(index, self.embeddings))
        self.fields = _fields(_index_fields(index))

    def texts(
        self, value: Mapping[str, Any], index: Sequence[str] | None = None
    ) -> tuple[list[str] | None, list[tuple[str, str]]]:
        """A value's text-index texts (None: not text-indexed), and the (field path, text)
        pairs to embed; `index`: the put's own fields instead of the config's."""
        if not self.text and self.embeddings is None:
            return None, []
        fields = self.fields if index is None else _fields(index)
        texts: list[str] = []
        embedded: list[tuple[str, str]] = []
        for path, tokens in fields:
            if path == "$":
                texts.extend(strings(value))
                found = get_text_at_path(value, "$") if self.embeddings is not None else []
            else:
                found = _text_at(value, tokens)
                texts.extend(found)
            if len(found) > 1:
                embedded.extend((f"{path}.{i}", text) for i, text in enumerate(found))
            elif found:
                embedded.append((path, found[0]))
        return (texts if self.text else None), embedded

    def prepare(self, ops: Iterable[Any]) -> Prepared:
        """A batch checked, its writes built and the texts it needs embedded listed."""
        listed = list(ops)
        for op in listed:
            validate(op)
        writes: list[Write] = []
        embed: list[str] = []
        slots: list[tuple[int, str]] = []
        for op in listed:
            if not isinstance(op, PutOp):
                continue
            if op.value is None:
                writes.append(Write(op.namespace, op.key, None))
                continue
            ttl = op.ttl  # `validate` checked it: minutes or None
            texts, fields = (None, []) if op.index is False else self.texts(op.value, op.index)
            if self.embeddings is not None and op.index is not False:
                for path, text in fields:
                    slots.append((len(writes), path))
                    embed.append(text)
            # `validate` checked the value is JSON (before its texts were read).
            writes.append(Write(op.namespace, op.key, op.value, ttl, texts, [], checked=True))
        queries: dict[str, list[float]] = {}
        if self.embeddings is not None:
            queries = {
                op.query: []
                for op in listed
                if isinstance(op, SearchOp) and op.query and search_mode(op, self.mode) != "text"
            }
        return Prepared(listed, writes, queries, embed, slots)

    def attach(
        self,
        prepared: Prepared,
        vectors: Sequence[Sequence[float]],
        keys: Sequence[bytes] | None = None,
    ) -> None:
        """Give each write of `prepared` the embeddings of its texts (and their embedding
        cache keys, when the embedder has an identity)."""
        check_count(len(vectors), len(prepared.slots))
        writes = prepared.writes
        for n, ((at, path), vector) in enumerate(zip(prepared.slots, vectors, strict=True)):
            write = writes[at]
            assert write.vectors is not None
            write.vectors.append((path, vector))
            if keys is not None:
                if write.keys is None:
                    write.keys = [keys[n]]
                else:
                    write.keys.append(keys[n])

    def entries(
        self, stored: Sequence[Stored], *, embed: bool
    ) -> tuple[list[Entry], list[str], list[tuple[int, str]]]:
        """Index entries for stored items: their texts, and (`embed`) the texts to embed
        with (entry index, field path) slots, as `prepare` gives a put of each."""
        entries: list[Entry] = []
        embedded: list[str] = []
        slots: list[tuple[int, str]] = []
        for item in stored:
            texts, fields = self.texts(item.value)
            vectors: list[tuple[str, Sequence[float]]] | None = None
            if embed and self.embeddings is not None:
                vectors = []
                for path, text in fields:
                    slots.append((len(entries), path))
                    embedded.append(text)
            entries.append(Entry(item, texts, vectors))
        return entries, embedded, slots


def _text_at(value: Mapping[str, Any], tokens: list[str] | str) -> list[str]:
    """`get_text_at_path`, without its general walk for the common case of a path of
    plain keys that ends at a string (a bulk load spent 4% of its time in that walk)."""
    if isinstance(tokens, list) and all(t and t[0] not in "[{" and t != "*" for t in tokens):
        found: Any = value
        for token in tokens:
            if not isinstance(found, dict) or token not in found:
                return []
            found = found[token]
        if isinstance(found, str):
            return [found]
    return get_text_at_path(value, tokens)


def _index_fields(index: IndexConfig) -> list[str]:
    """The paths an index embeds: `fields`, or `text_fields` as SqliteStore and
    PostgresStore spell it; the whole value (`$`) when neither is given."""
    given = index.get("fields") or dict(index).get("text_fields") or ["$"]
    if isinstance(given, str):
        given = [given]
    if not isinstance(given, list) or not all(isinstance(p, str) for p in given):
        raise InvalidArgumentError(f"index fields are a list of paths, not {given!r}")
    return given


def check_count(got: int, wanted: int) -> None:
    """The embedder returned one vector per text."""
    if got != wanted:
        raise InvalidArgumentError(f"the embedder returned {got} vectors for {wanted} texts")
