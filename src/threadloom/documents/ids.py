"""The id index of the document operations: document key -> where it is, per namespace.

Adapter layer; reads through engine APIs only. Keys are hashes (SPEC §3.3), so a get
or delete by id needs an index. It is kept valid cheaply while other processes write the
file: nothing is read while the file's data version stands still (one PRAGMA); after a
commit only the thread seqs of the namespace are read, and only threads whose seq moved
(a document was stored into them) are read again. Deletions do not move seqs: an entry
may name a deleted document, so a caller that finds nothing behind one `forget`s it.

Bounded: indexes are held in an LRU by number of keys (the newest is kept whatever its
size, so a namespace larger than the bound still works, re-read when it comes back).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from threadloom.core.lru import Lru
from threadloom.engine import Changes, CheckpointStore, File
from threadloom.engine.checkpoints import ThreadSeq, thread_seqs

#: Threads of one agent id that, changed at once, are read in one query per table rather
#: than one per thread (a first read, or a burst of writes).
BATCH_THREADS = 16
#: The fields that identify a document in its collection (the rest is its body).
IDENTIFYING = ("thread_id", "ref", "checkpoint_ns", "checkpoint_id", "task_id", "index")


class Entry(NamedTuple):
    """Where a document is: its scope's agent id, collection and identifying fields."""

    agent_id: str
    collection: str
    fields: dict[str, Any]
    #: The thread's row id; -1 for a document this process just stored.
    thread: int


class _Thread(NamedTuple):
    seq: int
    keys: frozenset[str]


class _Namespace:
    """The index of one namespace and the data version and thread seqs it reflects."""

    def __init__(self) -> None:
        self.keys: dict[str, Entry] = {}
        self.threads: dict[int, _Thread] = {}
        self.version: int | None = None


class IdIndex:
    """The id indexes of a file's namespaces.

    Args:
        file: the open file.
        store: the service's store of a scope (namespace, agent id).
        capacity: most keys held over all namespaces (about 500 bytes each).
    """

    def __init__(
        self,
        file: File,
        store: Callable[[str, str], CheckpointStore],
        capacity: int,
    ) -> None:
        self.file = file
        self._store = store
        self._changes = Changes(file)
        self._held: Lru[str, _Namespace] = Lru(
            capacity, lambda index: max(1, len(index.keys)), keep_newest=True
        )
        #: Threads whose keys were read (what the index costs; for tests and benchmarks).
        self.threads_read = 0

    @property
    def keys_held(self) -> int:
        """Keys held over all namespaces."""
        return self._held.weight

    def __len__(self) -> int:
        """Namespaces held."""
        return len(self._held)

    def close(self) -> None:
        """Close the change watcher (before the file)."""
        self._changes.close()

    def lookup(self, namespace: str, key: str) -> Entry | None:
        """Where the document `key` of `namespace` is, or None (also for a deleted one
        whose entry is still held: check what it names)."""
        version = self._changes.version()
        index = self._held.get(namespace)
        if index is None:
            index = _Namespace()
        if index.version != version:
            self._sync(namespace, index)
            index.version = version
            self._held.put(namespace, index)  # weighs it again
        return index.keys.get(key)

    def remember(
        self, namespace: str, key: str, agent_id: str, collection: str, data: Mapping[str, Any]
    ) -> None:
        """Note a document this process just stored (until its thread is read again)."""
        index = self._held.get(namespace)
        if index is not None:
            fields = {k: data[k] for k in IDENTIFYING if k in data}
            index.keys[key] = Entry(agent_id, collection, fields, -1)
            self._held.put(namespace, index)  # weighs it again

    def forget(self, namespace: str, key: str) -> None:
        """Drop an entry whose document is gone."""
        index = self._held.get(namespace)
        if index is None:
            return
        entry = index.keys.pop(key, None)
        if entry is None:
            return
        held = index.threads.get(entry.thread)
        if held is not None:
            index.threads[entry.thread] = held._replace(keys=held.keys - {key})

    def _sync(self, namespace: str, index: _Namespace) -> None:
        """Bring `index` up to the file: threads gone, new, or with a moved seq."""
        current = {t.thread: t for t in thread_seqs(self.file, namespace)}
        for row in [row for row in index.threads if row not in current]:
            for key in index.threads.pop(row).keys:
                index.keys.pop(key, None)
        changed: dict[str, list[ThreadSeq]] = defaultdict(list)
        for row, thread in current.items():
            held = index.threads.get(row)
            if held is None or held.seq != thread.seq:
                changed[thread.agent_id].append(thread)
        for agent_id, threads in changed.items():
            self.threads_read += len(threads)
            store = self._store(namespace, agent_id)
            if len(threads) > BATCH_THREADS:
                every = store.view.keys()
                by_thread: dict[str, dict[str, tuple[str, dict[str, Any]]]] = defaultdict(dict)
                for key, (collection, fields) in every.items():
                    by_thread[fields["thread_id"]][key] = (collection, fields)
                found = {t.thread: by_thread.get(t.thread_id, {}) for t in threads}
            else:
                found = {t.thread: store.view.keys(t.thread_id) for t in threads}
            for thread in threads:
                old = index.threads.get(thread.thread)
                keys = found[thread.thread]
                if old is not None:
                    for key in old.keys - keys.keys():
                        index.keys.pop(key, None)
                for key, (collection, fields) in keys.items():
                    index.keys[key] = Entry(agent_id, collection, fields, thread.thread)
                index.threads[thread.thread] = _Thread(thread.seq, frozenset(keys))
