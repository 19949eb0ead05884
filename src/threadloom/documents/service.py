"""The document operations over a threadloom file: one implementation, two front ends.

Adapter layer over the engine. `threadloom serve` (NATS, protobuf, tokens and grants)
and the naas document adapter (`threadloom.naas`, naas's own types, in process) both
answer the document service's operations for the LangGraph collections with this class:
`ensure_collection`, `collections`, `collection_fields`, `namespaces`, `put`, `get`,
`delete`, `find` (every operator of SPEC §7.7, ordering, pages, cursors, a byte budget)
and `count`, with the versions of §7.8. Values are the decoded Python values of §7.5;
refusals are `DocumentServiceError`s with the codes of §7.9.

Where it differs from the engine's service, on purpose (the file's invariants):

- only the five LangGraph schema-2 collections exist (`drop_collection` and other
  collections are INVALID_ARGUMENT; the schema-1 collections are COLLECTION_NOT_FOUND,
  which the savers read as empty);
- a document's id must be the key its fields define (SPEC §3.3);
- values and checkpoints are create-only: an upsert or compare-and-swap that would change
  one is INVALID_ARGUMENT (an identical one is accepted); pending writes are replaced and
  versioned as on the engine.

Thread-safe: one lock serializes the operations of one instance (the file's own
transactions order them against other processes).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from threadloom.core.lru import Lru
from threadloom.documents import query
from threadloom.documents.ids import IdIndex
from threadloom.engine import CheckpointStore, File
from threadloom.engine.checkpoints import StoredDocument, agent_ids, namespaces
from threadloom.errors import CheckpointConflictError, DocumentServiceError, ProtocolError
from threadloom.protocol import BLOBS, CHECKPOINTS, COLLECTIONS, ITEMS, PARTS, WRITES
from threadloom.protocol.refs import collection_of, key_of

#: Longest namespace name (UTF-8 bytes) by default; naas sets none, PostgreSQL and most
#: file systems stop at about this much.
MAX_NAMESPACE_BYTES = 255


@dataclass(frozen=True)
class Limits:
    """What bounds the operations' memory whatever their callers send (docs/cli.md, serve)."""

    #: Longest namespace name, in UTF-8 bytes (longer: INVALID_ARGUMENT).
    namespace_bytes: int = MAX_NAMESPACE_BYTES
    #: Namespaces ensured but not yet holding a document, remembered at once (more:
    #: INVALID_ARGUMENT until documents go into them).
    empty_namespaces: int = 1024
    #: Scopes (namespace + agent id) held open at once (least recently used closed).
    stores: int = 64
    #: Document keys held in the id indexes of all namespaces (about 500 bytes each; the
    #: index in use is kept whatever its size).
    index_keys: int = 200_000


class FileDocuments:
    """The LangGraph collections of one threadloom file, as the document service has them.

    Args:
        file: the open file.
        limits: the memory bounds.

    Close it (`close`) before the file.
    """

    def __init__(self, file: File, *, limits: Limits | None = None) -> None:
        self.file = file
        self.limits = limits or Limits()
        self._stores: Lru[tuple[str, str], CheckpointStore] = Lru(self.limits.stores)
        #: Namespaces ensured before the file held a scope of them, oldest first.
        self._ensured: dict[str, None] = {}
        self.ids = IdIndex(file, self._store, self.limits.index_keys)
        self._lock = threading.RLock()

    def close(self) -> None:
        """Release what the operations hold of the file (before closing the file)."""
        with self._lock:
            self.ids.close()
            self._stores.clear()

    def check_namespace(self, namespace: str) -> None:
        """Refuse a namespace name no operation takes (INVALID_ARGUMENT)."""
        if not isinstance(namespace, str) or not namespace or "\0" in namespace:
            raise DocumentServiceError(
                "INVALID_ARGUMENT", "Names must be nonempty strings without NUL characters"
            )
        if len(namespace.encode()) > self.limits.namespace_bytes:
            raise DocumentServiceError(
                "INVALID_ARGUMENT",
                f"namespace names are at most {self.limits.namespace_bytes} bytes (UTF-8)",
            )

    # -- collections -----------------------------------------------------------------------

    def namespaces(self) -> list[str]:
        """Namespaces holding a LangGraph collection (in the file, or ensured), sorted."""
        with self._lock:
            return sorted(set(namespaces(self.file)) | set(self._ensured))

    def ensure_collection(
        self, namespace: str, name: str, fields: Iterable[tuple[str, str]] = ()
    ) -> None:
        """Declare a LangGraph collection of `namespace`; `fields` are (name, type) pairs
        and every declared field is a string field."""
        self.check_namespace(namespace)
        if name not in COLLECTIONS:
            raise DocumentServiceError(
                "INVALID_ARGUMENT",
                f"a threadloom file holds only the LangGraph collections, not {name!r}",
            )
        for field, kind in fields:
            if kind and kind != "string":
                raise DocumentServiceError(
                    "INVALID_ARGUMENT", f"field {field!r} of {name} is a string field"
                )
        with self._lock:
            if namespace in self._ensured or self._in_file(namespace):
                return
            if len(self._ensured) >= self.limits.empty_namespaces:
                # Those that received documents meanwhile are the file's now.
                for held in [n for n in self._ensured if self._in_file(n)]:
                    del self._ensured[held]
            if len(self._ensured) >= self.limits.empty_namespaces:
                raise DocumentServiceError(
                    "INVALID_ARGUMENT",
                    f"{self.limits.empty_namespaces} namespaces are ensured but hold no "
                    "document yet; put documents into them first (or restart the service)",
                )
            self._ensured[namespace] = None

    def drop_collection(self, namespace: str, name: str) -> None:
        """Refused: a thread's documents go with the thread (delete or prune it)."""
        raise DocumentServiceError(
            "INVALID_ARGUMENT",
            "a threadloom file does not drop collections; delete or prune threads instead",
        )

    def collections(self, namespace: str) -> list[str]:
        """The LangGraph collections of `namespace` (all five once it exists), sorted."""
        self.check_namespace(namespace)
        with self._lock:
            return sorted(COLLECTIONS) if self._exists(namespace) else []

    def collection_fields(self, namespace: str, collection: str) -> tuple[str, ...]:
        """The declared (indexed, string) fields of a collection of `namespace`."""
        self.check_namespace(namespace)
        with self._lock:
            return COLLECTIONS[self._collection(namespace, collection)]

    # -- documents -------------------------------------------------------------------------

    def put(
        self,
        namespace: str,
        collection: str,
        id: str,
        data: Mapping[str, Any],
        if_version: int | None = None,
    ) -> StoredDocument:
        """Store a document: `if_version` None is an upsert, 0 create-only, n > 0 a
        compare-and-swap on version n (VERSION_CONFLICT when it does not hold)."""
        self.check_namespace(namespace)
        if if_version is not None and if_version < 0:
            raise DocumentServiceError("INVALID_ARGUMENT", "if_version must not be negative")
        with self._lock:
            collection = self._collection(namespace, collection)
            _check_fields(collection, data)
            key = key_of(collection, data)
            agent_id = data["agent_id"]
            if id != key:
                raise DocumentServiceError(
                    "INVALID_ARGUMENT",
                    f"document id {id!r} is not the key its fields define ({key}, SPEC §3.3)",
                )
            store = self._store(namespace, agent_id)
            existing = self._find_one(store, collection, data)
            if existing is None:
                if if_version:
                    raise DocumentServiceError("VERSION_CONFLICT")
                try:
                    store.view.import_documents([(collection, data)])
                except CheckpointConflictError:
                    raise DocumentServiceError("VERSION_CONFLICT") from None
                except (ProtocolError, KeyError, TypeError, ValueError) as exc:
                    # The body is not one a saver writes (rolled back, nothing stored).
                    raise DocumentServiceError(
                        "INVALID_ARGUMENT", f"not a {collection} document: {exc}"
                    ) from None
                self.ids.remember(namespace, key, agent_id, collection, data)
                # What was just stored, without reading it back.
                return StoredDocument(collection, key, dict(data), time.time(), 1)
            if if_version == 0 or (if_version is not None and if_version != existing.version):
                raise DocumentServiceError("VERSION_CONFLICT")
            if collection == WRITES:
                version = store.view.replace_write(data)
                return StoredDocument(collection, key, dict(data), existing.created_at, version)
            if existing.data != data:
                raise DocumentServiceError(
                    "INVALID_ARGUMENT",
                    f"{collection} documents are create-only in a threadloom file; "
                    "this one exists with other content",
                )
            return existing

    def get(self, namespace: str, collection: str, id: str) -> StoredDocument:
        """The document `id` of the collection (DOCUMENT_NOT_FOUND without one)."""
        self.check_namespace(namespace)
        with self._lock:
            self._collection(namespace, collection)
            found = self._by_id(namespace, collection, id)
        if found is None:
            raise DocumentServiceError("DOCUMENT_NOT_FOUND")
        return found

    def delete(
        self, namespace: str, collection: str, id: str, if_version: int | None = None
    ) -> None:
        """Delete the document `id` (a missing one is fine unless `if_version` is given)."""
        self.check_namespace(namespace)
        if if_version is not None and if_version < 0:
            raise DocumentServiceError("INVALID_ARGUMENT", "if_version must not be negative")
        with self._lock:
            self._collection(namespace, collection)
            found = self._by_id(namespace, collection, id)
            if found is None:
                if if_version is not None:
                    raise DocumentServiceError("VERSION_CONFLICT")
                return
            if if_version is not None and if_version != found.version:
                raise DocumentServiceError("VERSION_CONFLICT")
            store = self._store(namespace, found.data["agent_id"])
            store.view.delete(collection, found.data)
            self.ids.forget(namespace, id)

    def find(
        self,
        namespace: str,
        collection: str,
        where: Iterable[tuple[str, str, Any]] = (),
        order: query.Order = None,
        limit: int | None = None,
        cursor: str | None = None,
        *,
        budget: int | None = None,
    ) -> tuple[list[StoredDocument], str | None]:
        """One page of the matching documents and the cursor of the next (None at the end).

        `limit` None is the default page; `budget` bounds the page's estimated bytes
        (always one item at least); None leaves it unbounded.
        """
        self.check_namespace(namespace)
        checked = self._predicates(where)
        size = self._page_size(limit)
        with self._lock:
            collection = self._collection(namespace, collection)
            bound = query.fingerprint(namespace, collection, checked, order)
            newest = after = None
            if collection == CHECKPOINTS and order == NEWEST_FIRST:
                newest = size + 1  # one more tells whether a next page exists
                after = _cursor_id(cursor, bound)
                if cursor is not None and after is None:
                    newest = None  # not a cursor of this order: `page` says what is wrong
            try:
                return query.page(
                    self._matching(namespace, collection, checked, newest=newest, after=after),
                    order,
                    limit=size,
                    budget=budget,
                    bound=bound,
                    cursor=cursor,
                )
            except query.QueryError as exc:
                raise DocumentServiceError("INVALID_ARGUMENT", str(exc)) from None

    def count(
        self, namespace: str, collection: str, where: Iterable[tuple[str, str, Any]] = ()
    ) -> int:
        """How many documents of the collection match every predicate."""
        self.check_namespace(namespace)
        checked = self._predicates(where)
        with self._lock:
            collection = self._collection(namespace, collection)
            return len(self._matching(namespace, collection, checked))

    # -- the file --------------------------------------------------------------------------

    @staticmethod
    def _predicates(where: Iterable[tuple[str, str, Any]]) -> list[query.Predicate]:
        try:
            return query.predicates(where)
        except query.QueryError as exc:
            raise DocumentServiceError("INVALID_ARGUMENT", str(exc)) from None

    @staticmethod
    def _page_size(limit: int | None) -> int:
        try:
            return query.page_size(limit)
        except query.QueryError as exc:
            raise DocumentServiceError("INVALID_ARGUMENT", str(exc)) from None

    def _in_file(self, namespace: str) -> bool:
        return bool(agent_ids(self.file, namespace))

    def _exists(self, namespace: str) -> bool:
        return namespace in self._ensured or self._in_file(namespace)

    def _collection(self, namespace: str, name: str) -> str:
        if name not in COLLECTIONS or not self._exists(namespace):
            raise DocumentServiceError("COLLECTION_NOT_FOUND")
        return name

    def _store(self, namespace: str, agent_id: str) -> CheckpointStore:
        store = self._stores.get((namespace, agent_id))
        if store is None:
            # The operations never read through the decoded-value cache: no cache.
            store = CheckpointStore(
                self.file, namespace=namespace, agent_id=agent_id, cache_bytes=0
            )
            self._stores.put((namespace, agent_id), store)
        return store

    def _find_one(
        self, store: CheckpointStore, collection: str, data: Mapping[str, Any]
    ) -> StoredDocument | None:
        key = key_of(collection, data)
        if collection in (BLOBS, ITEMS, PARTS):
            found = store.view.find(collection, thread_id=data["thread_id"], refs=[data["ref"]])
        else:
            found = store.view.find(
                collection,
                thread_id=data["thread_id"],
                checkpoint_ns=data["checkpoint_ns"],
                checkpoint_ids=[data["checkpoint_id"]],
            )
        return next((d for d in found if d.key == key), None)

    def _by_id(self, namespace: str, collection: str, id: str) -> StoredDocument | None:
        """The document `id` of the collection, found through the id index."""
        entry = self.ids.lookup(namespace, id)
        if entry is None or entry.collection != collection:
            return None
        found = self._find_one(
            self._store(namespace, entry.agent_id),
            collection,
            {"agent_id": entry.agent_id, **entry.fields},
        )
        if found is None:
            # Deleted since it was indexed (deletions do not move thread seqs).
            self.ids.forget(namespace, id)
        return found

    def _matching(
        self,
        namespace: str,
        collection: str,
        where: Sequence[query.Predicate],
        *,
        newest: int | None = None,
        after: str | None = None,
    ) -> list[StoredDocument]:
        """Documents of the collection matching every predicate (the file narrows first).

        With `newest` (checkpoints ordered by id, newest first, the page after a cursor
        standing at checkpoint id `after` if given), a superset of the next `newest - 1`
        of that order and of whether more follow: when the file's narrowing is exact (no
        predicate left to apply), each agent's `newest` highest ids below `after` (no tie
        at the cut) and those at `after`; else every match.
        """
        narrow, exact = _narrowing(collection, where)
        agents = agent_ids(self.file, namespace)
        if "agent_id" in narrow:
            wanted = narrow.pop("agent_id")
            agents = [a for a in agents if a == wanted]
        found: list[StoredDocument] = []
        for agent_id in agents:
            store = self._store(namespace, agent_id)
            if newest is not None and exact:
                some = self._newest(store, narrow, newest, after)
                if some is not None:
                    found.extend(some)
                    continue
            for item in store.view.find(collection, **narrow):
                if query.matches_all(item.data, where):
                    found.append(item)
        return found

    @staticmethod
    def _newest(
        store: CheckpointStore, narrow: dict[str, Any], newest: int, after: str | None
    ) -> list[StoredDocument] | None:
        """The `newest` highest checkpoint ids the narrowing matches below `after`, and those
        at `after`; None when a tie at the cut leaves the order to the caller."""
        if after is not None and "checkpoint_ids" in narrow:
            return None
        below = dict(narrow)
        if after is not None:
            below["before"] = min(after, narrow.get("before", after))
        some = store.view.find(CHECKPOINTS, **below, newest=newest)
        cut = [d.data["checkpoint_id"] for d in some[-2:]]
        if len(some) == newest and cut[0] == cut[-1]:
            return None
        if after is not None and ("before" not in narrow or after < narrow["before"]):
            some += store.view.find(CHECKPOINTS, **narrow, checkpoint_ids=[after])
        return some


def _cursor_id(cursor: str | None, bound: str) -> str | None:
    """The checkpoint id a newest-first cursor of the query `bound` stands at (None
    without one, or for one that is not: `query.page` refuses it)."""
    if cursor is None:
        return None
    try:
        key, _ = query.read_cursor(cursor, bound)
        found = bytes.fromhex(key[2]).decode()
    except (query.QueryError, ValueError):
        return None
    # Only the position `order_key` writes for a string (anything else: the full read,
    # where `page` compares it as given).
    return found if key == (3, 0.0, found.encode().hex()) and "\0" not in found else None


#: The identifying fields of each collection's documents and the types they must have:
#: what the file stores in typed columns and seals (a wrong type would be coerced there
#: and break the seal, so it is refused before anything is written).
_TEXT = (str,)
_FIELDS: dict[str, tuple[tuple[str, tuple[type, ...]], ...]] = {
    CHECKPOINTS: (
        ("agent_id", _TEXT),
        ("thread_id", _TEXT),
        ("checkpoint_ns", _TEXT),
        ("checkpoint_id", _TEXT),
        ("parent_id", (str, type(None))),
    ),
    WRITES: (
        ("agent_id", _TEXT),
        ("thread_id", _TEXT),
        ("checkpoint_ns", _TEXT),
        ("checkpoint_id", _TEXT),
        ("task_id", _TEXT),
        ("task_path", _TEXT),
        ("index", (int,)),
        ("channel", _TEXT),
    ),
    BLOBS: (("agent_id", _TEXT), ("thread_id", _TEXT), ("ref", _TEXT)),
}
_FIELDS[ITEMS] = _FIELDS[PARTS] = _FIELDS[BLOBS]
#: Identifying text fields that must not be empty.
_NONEMPTY = ("agent_id", "thread_id", "checkpoint_id", "task_id", "ref")


def _check_fields(collection: str, data: Mapping[str, Any]) -> None:
    """Refuse (INVALID_ARGUMENT) a document whose identifying fields a saver never writes:
    missing, of another type, empty ids, schema other than 2, a ref of another collection."""
    for field, types in _FIELDS[collection]:
        if field not in data:
            raise DocumentServiceError(
                "INVALID_ARGUMENT", f"a {collection} document needs {field!r}"
            )
        value = data[field]
        if isinstance(value, bool) or not isinstance(value, types):
            raise DocumentServiceError(
                "INVALID_ARGUMENT",
                f"{field!r} of a {collection} document must be "
                + " or ".join("null" if t is type(None) else t.__name__ for t in types),
            )
        if field in _NONEMPTY and not value:
            raise DocumentServiceError(
                "INVALID_ARGUMENT", f"{field!r} of a {collection} document is empty"
            )
        if isinstance(value, str) and "\0" in value:
            raise DocumentServiceError(
                "INVALID_ARGUMENT", f"{field!r} of a {collection} document holds a NUL"
            )
    if data.get("_schema") != 2:
        raise DocumentServiceError(
            "INVALID_ARGUMENT", f"{collection} holds schema-2 documents (_schema: 2)"
        )
    if "ref" in data:
        try:
            belongs = collection_of(data["ref"]) == collection
        except ProtocolError:
            belongs = False
        if not belongs:
            raise DocumentServiceError(
                "INVALID_ARGUMENT", f"ref {data['ref']!r} is not one of {collection}"
            )


#: The order naas's savers read a thread's latest checkpoints in.
NEWEST_FIRST = ("checkpoint_id", "desc")


def _narrowing(collection: str, where: Sequence[query.Predicate]) -> tuple[dict[str, Any], bool]:
    """The fields the file narrows `where` by, and whether they are all of it (then every
    row the file returns matches every predicate). A field narrows once; a second
    predicate on it is left to the caller."""
    narrow: dict[str, Any] = {}
    exact = True
    lists = collection in (WRITES, CHECKPOINTS)
    for field, op, value in where:
        values = [value] if op == "eq" else value
        if any(
            isinstance(v, str) and "\0" in v
            for v in (values if isinstance(values, list) else [values])
        ):
            exact = False  # the file's id columns hold no NUL: left to the caller
            continue
        if field == "agent_id" and op == "eq" and isinstance(value, str):
            key = "agent_id"
        elif field == "thread_id" and op == "eq" and isinstance(value, str):
            key = "thread_id"
        elif lists and field == "checkpoint_ns" and op == "eq" and isinstance(value, str):
            key = "checkpoint_ns"
        elif lists and field == "checkpoint_id" and op == "lt" and isinstance(value, str):
            key = "before"
        elif lists and field == "checkpoint_id" and op == "gt" and isinstance(value, str):
            key = "after"  # what `threadloom sync` asks: checkpoints above its high-water mark
        elif (
            field == ("checkpoint_id" if lists else "ref")
            and op in ("eq", "in")
            and all(isinstance(v, str) for v in values)
        ):
            key, value = ("checkpoint_ids" if lists else "refs"), values
        else:
            exact = False
            continue
        if key in narrow:
            exact = False
        else:
            narrow[key] = value
    return narrow, exact
