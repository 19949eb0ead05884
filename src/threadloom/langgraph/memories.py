"""Memory helpers for any LangGraph `BaseStore`: content keys, the profile rule, an owner's view.

Adapter layer (imports `langgraph.store`). Nothing here knows which store it runs on; the
same helpers serve `InMemoryStore` and threadloom's Store. Invariants:

- `memory_key` is a pure function of the normalized text, stable across processes and
  versions (a test pins a value); saving a fact twice upserts one item.
- `merge_profile` follows one written rule and never mutates its inputs.
- `OwnerStore` never reads, writes or lists outside its owner's root: every namespace it
  sends down starts with the root, every one it hands back had it and has it stripped.
"""

from __future__ import annotations

import copy
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from blake3 import blake3
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
    validate_op_namespace,
)

from threadloom.errors import InvalidArgumentError, ThreadloomError
from threadloom.protocol.labels import decode_label, encode_label

__all__ = [
    "OutsideOwnerError",
    "OwnerStore",
    "aupdate_profile",
    "decode_label",
    "encode_label",
    "memory_key",
    "merge_profile",
    "normalize_memory_text",
    "update_profile",
]

#: Bytes of the blake3 digest kept in a memory key (128 bits, 32 hex digits).
KEY_BYTES = 16
#: Items read per page when erasing through a store that has no `purge`.
_PAGE = 500


# --- content-addressed keys ---------------------------------------------------------------


def normalize_memory_text(text: str) -> str:
    """The text `memory_key` hashes: NFKC, casefolded, whitespace runs as one space, stripped.

    NFKC folds compatibility forms (full-width letters, ligatures, superscripts, the
    no-break space) into their plain characters, casefolding removes case (``ß`` is
    ``ss``), NFKC runs again because casefolding can leave unnormalized text, and every
    run of characters for which `str.isspace` holds becomes one space, none at the ends.
    Punctuation, word order, accents (``é`` stays ``é``), quote styles and zero-width
    characters are kept: they can change what a fact says, and an exact key must not
    merge two facts that differ.

    Example:
        >>> normalize_memory_text("  Likes ＴＥＡ\\tin the\\u00a0MORNING ")
        'likes tea in the morning'
    """
    if not isinstance(text, str):
        raise InvalidArgumentError(f"memory text must be a str, got {type(text).__name__}")
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    return " ".join(folded.split())


def memory_key(text: str) -> str:
    """A content-addressed item key: saving the same fact twice upserts one item.

    The key is the first 128 bits of the blake3 digest of the UTF-8 of
    `normalize_memory_text(text)`, as 32 lowercase hex digits (what
    ``printf %s "$normalized" | b3sum --length 16`` prints). 128 bits keep the chance
    that any two of a billion distinct facts share a key below 1e-20, and keys only
    need to differ within one namespace.

    Raises:
        InvalidArgumentError: `text` is not a str.
        ValueError: `text` is empty once normalized (only whitespace).

    Example:
        >>> from langgraph.store.memory import InMemoryStore
        >>> store = InMemoryStore()
        >>> for fact in ("Prefers tea", "  prefers  TEA "):
        ...     store.put(("acme", "user", "u-1", "facts"), memory_key(fact), {"text": fact})
        >>> len(store.search(("acme", "user", "u-1", "facts")))
        1
        >>> memory_key("Prefers tea")
        '2683be0326bf330448a57871973c10a4'
    """
    normalized = normalize_memory_text(text)
    if not normalized:
        raise ValueError("memory text is empty once whitespace is collapsed; nothing to key")
    return blake3(normalized.encode("utf-8")).hexdigest(length=KEY_BYTES)


# --- the profile merge rule ---------------------------------------------------------------


def merge_profile(current: Mapping[str, Any] | None, patch: Mapping[str, Any]) -> dict[str, Any]:
    """Merge `patch` into the profile `current` by the one profile rule; return a new dict.

    The rule is shallow, key by key over `patch`:

    - ``None`` deletes the key;
    - an array (list or tuple) is unioned with the current array at that key (a missing
      or non-array current value counts as empty): the current elements first, in their
      order, then each patch element not already present. Equality is by JSON value:
      ``{"a": 1}`` equals ``{"a": 1}`` whatever the key order, ``1`` equals ``1.0``,
      ``true`` is not ``1``;
    - anything else, nested objects included, replaces the current value (objects are
      not merged).

    Keys not in `patch` keep their values. Neither input is mutated and the result
    shares no container with them (values are copied into plain dicts and lists).

    Example:
        >>> merge_profile(
        ...     {"name": "Ada", "langs": ["en"], "tz": "UTC", "prefs": {"tea": True}},
        ...     {"langs": ["fr", "en"], "tz": None, "prefs": {"coffee": True}},
        ... )
        {'name': 'Ada', 'langs': ['en', 'fr'], 'prefs': {'coffee': True}}
    """
    merged = {key: _plain(value) for key, value in (current or {}).items()}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif _is_array(value):
            present = merged.get(key)
            union = list(present) if isinstance(present, list) else []
            for element in value:
                if not any(_same(element, kept) for kept in union):
                    union.append(_plain(element))
            merged[key] = union
        else:
            merged[key] = _plain(value)
    return merged


def update_profile(
    store: BaseStore,
    namespace: tuple[str, ...],
    patch: Mapping[str, Any],
    key: str = "profile",
) -> dict[str, Any]:
    """Read the profile item, `merge_profile` the patch into it, write it back; return it.

    `BaseStore` has no compare-and-swap, so two writers updating one profile at once are
    last-writer-wins: the later put can drop the earlier patch. Serialize updates per
    profile (one background job per user) when that matters.

    Example:
        >>> from langgraph.store.memory import InMemoryStore
        >>> store = InMemoryStore()
        >>> ns = ("acme", "user", "u-1")
        >>> update_profile(store, ns, {"name": "Ada", "langs": ["en"]})
        {'name': 'Ada', 'langs': ['en']}
        >>> update_profile(store, ns, {"langs": ["fr"]})
        {'name': 'Ada', 'langs': ['en', 'fr']}
    """
    item = store.get(namespace, key)
    merged = merge_profile(item.value if item is not None else None, patch)
    store.put(namespace, key, merged)
    return copy.deepcopy(merged)


async def aupdate_profile(
    store: BaseStore,
    namespace: tuple[str, ...],
    patch: Mapping[str, Any],
    key: str = "profile",
) -> dict[str, Any]:
    """Async `update_profile` (through `aget`/`aput`); last-writer-wins as well.

    Example:
        >>> import asyncio
        >>> from langgraph.store.memory import InMemoryStore
        >>> asyncio.run(aupdate_profile(InMemoryStore(), ("acme", "user", "u-1"), {"a": 1}))
        {'a': 1}
    """
    item = await store.aget(namespace, key)
    merged = merge_profile(item.value if item is not None else None, patch)
    await store.aput(namespace, key, merged)
    return copy.deepcopy(merged)


def _is_array(value: object) -> bool:
    return isinstance(value, (list, tuple))


def _plain(value: Any) -> Any:
    """A copy of `value` with every mapping a dict and every array a list."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if _is_array(value):
        return [_plain(item) for item in value]
    return copy.deepcopy(value)


def _same(a: Any, b: Any) -> bool:
    """Equality of JSON values: booleans are not numbers, mappings compare unordered."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if _is_array(a) and _is_array(b):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (Mapping, list, tuple)) or isinstance(b, (Mapping, list, tuple)):
        return False
    return bool(a == b)


# --- the owner's view --------------------------------------------------------------------


class OutsideOwnerError(ThreadloomError, InvalidNamespaceError):
    """An operation the owner's view cannot keep inside the owner's root; nothing was sent."""


class OwnerStore(BaseStore):
    """One owner's view of a store: every namespace is rooted under the owner's labels.

    `owner` must come from a server-side identity (the authenticated tenant and user),
    never from model output or request parameters: ``prefix`` and ``filter`` select, the
    root isolates. Owner labels are encoded with `encode_label`, so an email or an empty
    label is fine; the encoded root is `root`. Namespaces inside the view follow
    BaseStore's rules as on any store (non-empty labels without ``.`` or NUL; a put's
    first label is not ``"langgraph"``); only the root's first label is the wrapped
    store's true root, and an owner whose first label is ``"langgraph"`` is refused.

    Reads come back as the caller sees them: items' namespaces and listed namespaces have
    the root stripped, and `list_namespaces` answers exactly what the wrapped store would
    answer holding the same data without the root (prefix, suffix, ``*``, `max_depth`,
    `limit`, `offset`). A root that is a prefix of another root sees that root's data,
    so give every owner the same shape, e.g. ``(tenant_id, "user", user_id)``.

    Items written outside the view exactly at the root namespace appear in the view's
    searches with namespace ``()``. Async calls go through the wrapped store's `abatch`.

    Args:
        store: the store to wrap (any `BaseStore`, another `OwnerStore` included).
        *owner: the owner's labels, tenant first.

    Raises:
        InvalidNamespaceError: no owner labels, or the first is ``"langgraph"``.
        InvalidArgumentError: an owner label is not a str.

    Example:
        >>> from langgraph.store.memory import InMemoryStore
        >>> shared = InMemoryStore()
        >>> ada = OwnerStore(shared, "acme", "user", "ada@example.com")
        >>> ada.put(("facts",), "k1", {"text": "prefers tea"})
        >>> [item.namespace for item in ada.search(("facts",))]
        [('facts',)]
        >>> shared.list_namespaces()
        [('acme', 'user', '~ada@example%2Ecom', 'facts')]
        >>> OwnerStore(shared, "acme", "user", "bob").search(())
        []
    """

    def __init__(self, store: BaseStore, *owner: str) -> None:
        if not owner:
            raise InvalidNamespaceError(
                "OwnerStore needs the owner's labels: OwnerStore(store, tenant_id, 'user', user_id)"
            )
        for label in owner:
            if not isinstance(label, str):
                raise InvalidArgumentError(
                    f"owner labels must be str, got {type(label).__name__}; pass them as "
                    "separate arguments: OwnerStore(store, *owner)"
                )
        root = tuple(encode_label(label) for label in owner)
        if root[0] == "langgraph":
            raise InvalidNamespaceError('an owner\'s first label cannot be "langgraph"')
        self._store = store
        self._owner = tuple(owner)
        self._root = root
        self.supports_ttl = store.supports_ttl
        self.ttl_config = store.ttl_config

    @property
    def store(self) -> BaseStore:
        """The wrapped store."""
        return self._store

    @property
    def owner(self) -> tuple[str, ...]:
        """The owner's labels as given."""
        return self._owner

    @property
    def root(self) -> tuple[str, ...]:
        """The encoded owner labels: the namespace prefix every item of the view has."""
        return self._root

    def __repr__(self) -> str:
        return f"OwnerStore({type(self._store).__name__}, owner={self._owner!r})"

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run `ops` on the wrapped store inside the root, in one wrapped `batch` call.

        Raises:
            OutsideOwnerError: an op the view cannot root (see `OutsideOwnerError`).
            InvalidNamespaceError: a namespace breaks BaseStore's rules.
        """
        given = list(ops)
        planned = [self._rooted(op) for op in given]
        sent = [op for op in planned if op is not None]
        answers = iter(self._store.batch(sent) if sent else [])
        return [
            self._unrooted(op, next(answers)) if p is not None else []
            for op, p in zip(given, planned, strict=True)
        ]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Async `batch`, through the wrapped store's `abatch`."""
        given = list(ops)
        planned = [self._rooted(op) for op in given]
        sent = [op for op in planned if op is not None]
        answers = iter(await self._store.abatch(sent) if sent else [])
        return [
            self._unrooted(op, next(answers)) if p is not None else []
            for op, p in zip(given, planned, strict=True)
        ]

    def purge(self, namespace_prefix: tuple[str, ...] = ()) -> int:
        """Delete every item whose namespace starts with `namespace_prefix`; return how many.

        Uses the wrapped store's `purge(namespace_prefix) -> int` when it has one (one
        transaction on threadloom's Store); otherwise pages through `search` and deletes
        page by page, which is not atomic: a failure part-way leaves the rest, and items
        written meanwhile may survive. Namespaces a store keeps after their last item is
        gone (InMemoryStore does) may still be listed.
        """
        prefix = self._root + self._namespace(namespace_prefix, "namespace_prefix")
        purge = getattr(self._store, "purge", None)
        if callable(purge):
            return int(purge(prefix))
        deleted = 0
        while page := self._store.search(prefix, limit=_PAGE, refresh_ttl=False):
            self._store.batch(self._deletes(prefix, page))
            deleted += len(page)
        return deleted

    async def apurge(self, namespace_prefix: tuple[str, ...] = ()) -> int:
        """Async `purge`: the wrapped store's `apurge` if it has one, else paged `abatch`."""
        prefix = self._root + self._namespace(namespace_prefix, "namespace_prefix")
        apurge = getattr(self._store, "apurge", None)
        if callable(apurge):
            return int(await apurge(prefix))
        deleted = 0
        while page := await self._store.asearch(prefix, limit=_PAGE, refresh_ttl=False):
            await self._store.abatch(self._deletes(prefix, page))
            deleted += len(page)
        return deleted

    def search_text(
        self,
        namespace_prefix: tuple[str, ...],
        /,
        query: str,
        *,
        filter: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[SearchItem]:
        """Word search under the owner's root, through the wrapped store's `search_text`
        (threadloom's Store: ranked by the token-set cosine, docs/store.md).

        Raises:
            InvalidArgumentError: the wrapped store has no `search_text`.
        """
        prefix = self._root + self._namespace(namespace_prefix, "namespace_prefix")
        found = getattr(self._store, "search_text", None)
        if not callable(found):
            raise InvalidArgumentError(
                f"{type(self._store).__name__} has no word search (search_text); use "
                "search(query=...) with the store's index, or threadloom's Store"
            )
        hits = found(prefix, query, filter=filter, limit=limit, offset=offset)
        return [cast(SearchItem, self._item(hit)) for hit in hits]

    def erase(self) -> int:
        """Erase everything under the owner's root; return how many items (see `purge`).

        Example:
            >>> from langgraph.store.memory import InMemoryStore
            >>> view = OwnerStore(InMemoryStore(), "acme", "user", "u-1")
            >>> view.put(("facts",), "k1", {"text": "prefers tea"})
            >>> view.erase(), view.search(())
            (1, [])
        """
        return self.purge(())

    async def aerase(self) -> int:
        """Async `erase`."""
        return await self.apurge(())

    # The view's rules, op by op.

    def _namespace(self, namespace: object, what: str) -> tuple[str, ...]:
        """`namespace` as a tuple; a str would be split into one-letter labels, so refuse it."""
        if not isinstance(namespace, (tuple, list)):
            raise OutsideOwnerError(
                f"{what} must be a tuple of labels, got {type(namespace).__name__} "
                f"{namespace!r}; the owner's view cannot root it"
            )
        return tuple(namespace)

    def _rooted(self, op: Op) -> Op | None:
        """`op` inside the root, or None when its answer is known to be empty."""
        if isinstance(op, (GetOp, PutOp)):
            namespace = self._namespace(op.namespace, "namespace")
            validate_op_namespace(op._replace(namespace=namespace))
            if isinstance(op, PutOp):
                if not namespace:
                    raise InvalidNamespaceError("Namespace cannot be empty.")
                if namespace[0] == "langgraph":
                    raise InvalidNamespaceError(
                        f'Root label for namespace cannot be "langgraph". Got: {namespace}'
                    )
            return op._replace(namespace=self._root + namespace)
        if isinstance(op, SearchOp):
            prefix = self._namespace(op.namespace_prefix, "namespace_prefix")
            validate_op_namespace(op._replace(namespace_prefix=prefix))
            return op._replace(namespace_prefix=self._root + prefix)
        if isinstance(op, ListNamespacesOp):
            return self._rooted_listing(op)
        raise OutsideOwnerError(f"the owner's view cannot root an op of type {type(op).__name__}")

    def _rooted_listing(self, op: ListNamespacesOp) -> ListNamespacesOp | None:
        """The listing inside the root that answers what `op` answers without it.

        Prefixes (and suffixes) are merged label by label into one path; the prefix goes
        under the root, padded with ``*`` to the suffix's length so that a suffix can
        never reach into the root (the un-rooted namespace must be at least as long).
        """
        prefixes: list[tuple[str, ...]] = []
        suffixes: list[tuple[str, ...]] = []
        for condition in op.match_conditions or ():
            if not (isinstance(condition, tuple) and len(condition) == 2):
                raise OutsideOwnerError(f"not a MatchCondition: {condition!r}")
            match_type, path = condition
            path = self._namespace(path, f"a {match_type} path")
            if match_type == "prefix":
                prefixes.append(path)
            elif match_type == "suffix":
                suffixes.append(path)
            else:
                raise OutsideOwnerError(f"unknown match type {match_type!r}")
        validate_op_namespace(
            op._replace(match_conditions=tuple(MatchCondition("prefix", p) for p in prefixes))
        )
        validate_op_namespace(
            op._replace(match_conditions=tuple(MatchCondition("suffix", p) for p in suffixes))
        )
        prefix = _merged(prefixes, from_end=False)
        suffix = _merged(suffixes, from_end=True)
        if prefix is None or suffix is None:
            return None  # two conditions disagree on a label: nothing matches
        depth = op.max_depth
        if depth is not None and (not isinstance(depth, int) or depth < 0):
            raise OutsideOwnerError(f"max_depth must be an int >= 0, got {depth!r}")
        padded = prefix + ("*",) * max(1 - len(prefix), len(suffix) - len(prefix), 0)
        conditions = [MatchCondition("prefix", self._root + padded)]
        if suffix:
            conditions.append(MatchCondition("suffix", suffix))
        return op._replace(
            match_conditions=tuple(conditions),
            max_depth=None if depth is None else len(self._root) + depth,
        )

    def _strip(self, namespace: tuple[str, ...]) -> tuple[str, ...]:
        size = len(self._root)
        if tuple(namespace[:size]) != self._root:
            raise OutsideOwnerError(
                f"the wrapped store answered with namespace {namespace!r}, outside the "
                f"owner's root {self._root!r}; refusing to pass it on"
            )
        return tuple(namespace[size:])

    def _item(self, item: Item) -> Item:
        namespace = self._strip(item.namespace)
        if isinstance(item, SearchItem):
            return SearchItem(
                namespace,
                item.key,
                item.value,
                item.created_at,
                item.updated_at,
                score=item.score,
            )
        return Item(
            value=item.value,
            key=item.key,
            namespace=namespace,
            created_at=item.created_at,
            updated_at=item.updated_at,
        )

    def _unrooted(self, op: Op, answer: Result) -> Result:
        """The wrapped store's `answer` to the rooted `op`, as the caller sees it."""
        if isinstance(op, GetOp):
            return None if answer is None else self._item(cast(Item, answer))
        if isinstance(op, SearchOp):
            return [self._item(item) for item in cast("list[SearchItem]", answer)]
        if isinstance(op, ListNamespacesOp):
            return [self._strip(ns) for ns in cast("list[tuple[str, ...]]", answer)]
        return answer

    def _deletes(self, prefix: tuple[str, ...], page: Sequence[Item]) -> list[Op]:
        size = len(prefix)
        for item in page:
            if tuple(item.namespace[:size]) != prefix:
                raise OutsideOwnerError(
                    f"search under {prefix!r} answered {item.namespace!r}; nothing deleted"
                )
        return [PutOp(item.namespace, item.key, None) for item in page]


def _merged(paths: list[tuple[str, ...]], *, from_end: bool) -> tuple[str, ...] | None:
    """One path matching exactly what all `paths` match (``*`` = any label), or None."""
    size = max((len(path) for path in paths), default=0)
    merged = ["*"] * size
    for path in paths:
        offset = size - len(path) if from_end else 0
        for index, label in enumerate(path):
            if label == "*":
                continue
            if merged[offset + index] not in ("*", label):
                return None
            merged[offset + index] = label
    return tuple(merged)
