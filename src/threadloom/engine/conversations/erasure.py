"""Erasing an owner: every thread the index gives them, and their Store namespaces.

Engine layer. One write transaction removes the owner's threads (checkpoints, pending
writes, values, metadata keys, index rows, leases) and every Store item under the given
namespace prefixes, so a crash leaves either all of it or none of it. Blocks no other
row references are released by the deletion and swept once the grace period has passed
(docs/FORMAT.md, format 2): the blocks of an erased owner leave the file by the next
collection after the grace, or at once with `threadloom compact`; deleted rows are
overwritten in place (`PRAGMA secure_delete` during the erasure). The Store's text index
is merged (FTS5 `optimize`: a deleted item's terms otherwise stay in its segments) and
the filter index's paths no item uses any more are deleted (`paths.sweep`: object keys
are user text), so after `threadloom compact` no byte of the owner's rows remains in the
file; the embedding cache's rows of the erased items (their texts' hashes) go with the
items (a trigger, engine/items/embedded.py). `Erased.digest` is a receipt of what went (`_receipt`).

The Store's room (`engine.items`, 22 modules) is imported by the functions that use it:
a process that only checkpoints never erases, and would hold its code for nothing
(bench/README.md, "Peak RSS").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import apsw
import blake3

from threadloom.engine.checkpoints.maintenance import Maintenance
from threadloom.engine.checkpoints.scope import Scope
from threadloom.engine.conversations.leases import Leases
from threadloom.engine.format import seal
from threadloom.engine.sql import fetchall, ids
from threadloom.errors import InvalidArgumentError
from threadloom.protocol.labels import encode_label


@dataclass
class Erased:
    """What an erasure removed (or, in a dry run, would remove)."""

    owner: str
    threads: list[str] = field(default_factory=list)
    checkpoints: int = 0
    writes: int = 0
    values: int = 0
    items: int = 0
    namespaces: list[list[str]] = field(default_factory=list)
    applied: bool = True
    #: Store namespaces holding the owner's label that no prefix covered: left as they are.
    kept: list[list[str]] = field(default_factory=list)
    #: Field paths (object keys) of the filter index no remaining item uses (applied only).
    paths: int = 0
    #: The receipt: blake3 (hex) of the removed rows' identities, sorted (`receipt`).
    digest: str = ""

    def as_json(self) -> dict[str, object]:
        """A JSON-ready dict."""
        return {
            "owner": self.owner,
            "applied": self.applied,
            "threads": list(self.threads),
            "checkpoints": self.checkpoints,
            "writes": self.writes,
            "values": self.values,
            "items": self.items,
            "namespaces": [list(n) for n in self.namespaces],
            "kept_namespaces": [list(n) for n in self.kept],
            "paths": self.paths,
            "digest": self.digest,
        }


def erase(
    scope: Scope,
    maintenance: Maintenance,
    owner: str,
    prefixes: Sequence[Sequence[str]],
    *,
    apply: bool = True,
    force: bool = False,
) -> Erased:
    """Remove every thread of `owner` in the scope and the Store items under `prefixes`.

    A thread a run holds the lease of (engine/conversations/leases.py) would be written
    again by that run: the erasure is refused, nothing changed, unless `force` (the run
    then loses its lease at its next renewal). Deleted rows are overwritten in the file's pages
    (`secure_delete`), so the bytes of an erased owner do not linger in free pages.

    Raises:
        InvalidArgumentError: an empty owner, an empty prefix (it names every item) or a
            label a namespace cannot hold.
        ThreadBusyError: a thread of the owner is leased by a live run (and not `force`).
    """
    from threadloom.engine.items import paths
    from threadloom.engine.items.records import now_us
    from threadloom.engine.items.rows import Items
    from threadloom.engine.items.vectors import stored_index

    if not isinstance(owner, str) or not owner:
        raise InvalidArgumentError("owner must be a non-empty str")
    checked = [_prefix(p) for p in prefixes]
    report = Erased(owner, namespaces=[list(p) for p in checked], applied=apply)
    file = scope.file
    with file.read() if not apply else file.write() as conn:
        threads = fetchall(
            conn,
            "SELECT id, thread_id FROM threads WHERE scope = ? AND owner = ?",
            (scope.id, owner),
        )
        threads.sort(key=lambda row: str(row[1]))
        report.threads = [str(name) for _, name in threads]
        numbers = [int(row) for row, _ in threads]
        report.kept = _kept(conn, owner, checked)
        report.digest = _receipt(conn, numbers, checked)
        if not force:
            leases = Leases(file, scope)
            for name in report.threads:
                leases.refuse_if_held(conn, name, "stop that run and erase again (or force=True)")
        if not apply:
            for table in ("checkpoints", "writes", "vals"):
                count = fetchall(
                    conn, f"SELECT count(*) FROM {table} WHERE thread IN carray(?)", (ids(numbers),)
                )[0][0]
                setattr(report, _FIELD[table], int(count))
            doomed = [item for p in checked for item in _items_under(conn, p)]
            report.items = len(doomed)
            report.paths = paths.unused_without(conn, doomed) if doomed else 0
            return report
        conn.execute("PRAGMA secure_delete = ON")
        for row in numbers:
            gone = maintenance.delete_rows(conn, row)
            report.checkpoints += gone["checkpoints"]
            report.writes += gone["writes"]
            report.values += gone["vals"]
        if report.threads:
            conn.execute(
                "DELETE FROM leases WHERE scope = ? AND thread_id IN carray(?)",
                (scope.id, ids(report.threads)),
            )
            # The sync state names threads too (threadloom sync): no id of an erased
            # thread stays in the file.
            conn.execute(
                "DELETE FROM sync_threads WHERE scope = ? AND thread_id IN carray(?)",
                (scope.id, ids(report.threads)),
            )
        if checked:
            store = Items(file, stored_index(conn))
            now = now_us()
            report.items = sum(store.purge_in(conn, p, now) for p in checked)
        if report.items:
            # The text index keeps a deleted item's terms in its segments (marked
            # deleted) until they merge, and the filter index keeps the paths (object
            # keys) it numbered: merge the one, sweep the other.
            conn.execute("INSERT INTO store_text(store_text) VALUES('optimize')")
            report.paths = paths.sweep(conn)
        if numbers or report.items:
            scope.bump_epoch(conn)
            scope.content.sweep(conn, scope.grace)
    if apply:
        with file.connection() as conn:
            conn.execute("PRAGMA secure_delete = OFF")
    for row, name in threads:
        scope.forget_thread(str(name), int(row))
    return report


_FIELD = {"checkpoints": "checkpoints", "writes": "writes", "vals": "values"}


def _prefix(prefix: Sequence[str]) -> tuple[str, ...]:
    if isinstance(prefix, str) or not all(isinstance(label, str) for label in prefix):
        raise InvalidArgumentError(f"a Store namespace prefix is a tuple of labels, not {prefix!r}")
    if not prefix:
        raise InvalidArgumentError(
            "an empty Store namespace prefix names every item of every owner; name the "
            "owner's namespaces, e.g. (owner,) or (tenant, 'user', owner)"
        )
    for label in prefix:
        if not label or "." in label or "\0" in label:
            raise InvalidArgumentError(
                f"the Store namespace prefix {prefix!r} holds the label {label!r}, which no "
                "namespace can hold (empty, '.' or NUL); encode identities with "
                "threadloom.langgraph.memories.encode_label, as OwnerStore does (or pass "
                "threadloom.langgraph.conversations.OWNER in the owner's place)"
            )
    return tuple(prefix)


def _kept(conn: apsw.Connection, owner: str, prefixes: Sequence[Sequence[str]]) -> list[list[str]]:
    """The Store namespaces holding the owner's label (as given or as `OwnerStore` encodes
    it) anywhere that none of `prefixes` covers: an erasure keeps their items."""
    labels = {encode_label(owner)}
    if "." not in owner and "\0" not in owner and owner:
        labels.add(owner)
    names = [
        str(row[0])
        for row in fetchall(
            conn,
            "SELECT name FROM store_namespaces WHERE EXISTS (SELECT 1 FROM carray(?) l "
            "WHERE instr('.' || name || '.', '.' || l.value || '.') > 0) ORDER BY name",
            (ids(sorted(labels)),),
        )
    ]
    covered = [".".join(p) for p in prefixes]
    return [
        name.split(".")
        for name in names
        if not any(name == c or name.startswith(c + ".") for c in covered)
    ]


def _receipt(
    conn: apsw.Connection, threads: Sequence[int], prefixes: Sequence[Sequence[str]]
) -> str:
    """The blake3 (hex) of the sorted identity digests of what the erasure removes: each
    thread, each checkpoint (thread id, namespace, checkpoint id) and each Store item
    (namespace, key). The same rows give the same receipt, in a dry run and applied, and
    the receipt holds nothing of them that can be read back."""
    from threadloom.engine.items.records import prefix_clause

    found = [
        seal.identity("thread", str(name))
        for (name,) in fetchall(
            conn, "SELECT thread_id FROM threads WHERE id IN carray(?)", (ids(list(threads)),)
        )
    ]
    found += [
        seal.identity("checkpoint", str(name), str(ns), str(checkpoint))
        for name, ns, checkpoint in fetchall(
            conn,
            "SELECT t.thread_id, c.checkpoint_ns, c.checkpoint_id FROM checkpoints c "
            "JOIN threads t ON t.id = c.thread WHERE c.thread IN carray(?)",
            (ids(list(threads)),),
        )
    ]
    for prefix in prefixes:
        clause, args = prefix_clause(prefix)
        found += [
            seal.identity("item", str(name), str(key))
            for name, key in fetchall(
                conn,
                "SELECT n.name, x.key FROM store_items x "
                f"JOIN store_namespaces n ON n.id = x.ns WHERE {clause}",
                args,
            )
        ]
    return blake3.blake3(b"".join(sorted(found))).hexdigest()


def _items_under(conn: apsw.Connection, prefix: Sequence[str]) -> list[int]:
    from threadloom.engine.items.records import prefix_clause

    clause, args = prefix_clause(prefix)
    rows = fetchall(
        conn,
        f"SELECT x.id FROM store_items x JOIN store_namespaces n ON n.id = x.ns WHERE {clause}",
        args,
    )
    return [int(row[0]) for row in rows]
