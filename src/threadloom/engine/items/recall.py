"""The Store's searches: filtered listing, full-text, vector and hybrid search (format 5).

Engine layer. Every search is decided in SQL over the namespace range, the filter index
(`fieldkeys.compile_filter`) and the TTL; only the few values the filter index holds in
part (`store_items.partial`), and filters comparing arrays of objects by containment, are
checked again in Python with the same semantics (`fieldkeys.matches`). Pages are in a
total order (listing: newest update, then row id; text: score, then those; vector: the
index's tiers, `VectorIndex.search`; hybrid: fused score, then row id, over rankings read
to a depth that changes only in tiers, `fusion.depth`), so consecutive pages neither
repeat nor skip an item.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from typing import Any, Final

import apsw

from threadloom.engine.format import text
from threadloom.engine.items import fieldkeys, fusion
from threadloom.engine.items.fieldkeys import Compiled, Condition
from threadloom.engine.items.reads import ITEM_COLUMNS
from threadloom.engine.items.records import Stored, prefix_clause
from threadloom.engine.items.rows import Items
from threadloom.engine.sql import fetchall, ids

#: A vector search over at most this many filtered items computes them all, exactly.
EXACT_UP_TO: Final = 2048

_FROM: Final = " FROM store_items x JOIN store_namespaces n ON n.id = x.ns"
_NEWEST: Final = "x.updated_at DESC, x.id DESC"
_PATH: Final = "(SELECT id FROM store_paths WHERE path = ?)"
_BY_UPDATE: Final = _FROM.replace("store_items x", "store_items x INDEXED BY store_items_updated")


def _driving(c: Condition) -> tuple[str, list[Any]]:
    """The items a positive condition holds for, as a query (and its arguments)."""
    ranges = " OR ".join("(value >= ? AND value < ?)" for _ in c.ranges)
    inner = f"SELECT item FROM store_fields WHERE path = {_PATH} AND ({ranges})"
    return inner, [c.path, *(b for pair in c.ranges for b in pair)]


def _condition(c: Condition) -> tuple[str, list[Any]]:
    """The condition as a test of an item `x` (and its arguments)."""
    inner, args = _driving(c)
    inside = f"x.id IN ({inner})"
    if c.negate:
        inside = "NOT " + inside
    if c.or_missing:
        inside = f"({inside} OR x.id NOT IN (SELECT item FROM store_fields WHERE path = {_PATH}))"
        args.append(c.path)
    return inside, args


def where(
    prefix: Sequence[str],
    compiled: Compiled,
    live_at: int | None,
    skip: Condition | None = None,
) -> tuple[str, list[Any]]:
    """The WHERE clause (over `x` items and `n` namespaces) of a search, and its arguments
    (without the condition `skip`, which the caller's plan already applies)."""
    clause, args = prefix_clause(prefix)
    parts: list[str] = [clause]
    bound: list[Any] = list(args)
    kept = [c for c in compiled.conditions if c is not skip]
    if kept:
        decided = []
        for c in kept:
            sql, more = _condition(c)
            decided.append(sql)
            bound.extend(more)
        parts.append(f"(x.partial = 1 OR ({' AND '.join(decided)}))")
    if live_at is not None:
        parts.append("(x.expires_at IS NULL OR x.expires_at > ?)")
        bound.append(live_at)
    return " AND ".join(parts), bound


class Recall:
    """Searches over one file's items."""

    def __init__(self, items: Items) -> None:
        self.items = items

    def _page(
        self,
        conn: apsw.Connection,
        sql: str,
        args: Sequence[Any],
        compiled: Compiled,
        filter: Any,
        limit: int,
        offset: int,
    ) -> list[Stored]:
        """Rows of `sql` (ITEM_COLUMNS, score, partial) from `offset`, at most `limit`,
        re-checking in Python the ones the filter index cannot decide."""
        if limit <= 0:
            return []
        if not compiled.recheck and not _any_partial(conn, compiled):
            rows = fetchall(conn, sql + " LIMIT ? OFFSET ?", [*args, limit, max(offset, 0)])
            return self.items.decode(conn, [r[:10] for r in rows])
        kept: list[Stored] = []
        skipped = 0
        for batch in _batches(conn.execute(sql, args), 64):
            for stored, row in zip(
                self.items.decode(conn, [r[:10] for r in batch]), batch, strict=True
            ):
                if (compiled.recheck or row[10]) and not fieldkeys.matches(stored.value, filter):
                    continue
                if skipped < offset:
                    skipped += 1
                    continue
                kept.append(stored)
                if len(kept) == limit:
                    return kept
        return kept

    def listing(
        self,
        conn: apsw.Connection,
        prefix: Sequence[str],
        filter: Any,
        limit: int,
        offset: int,
        live_at: int | None,
    ) -> list[Stored]:
        """Items under `prefix` passing `filter`, newest update first.

        The plan is chosen from counts the file keeps or can count cheaply (SQLite has no
        statistics of a namespace range or of a filter): when the candidates (items under
        the prefix, or matching the filter's most selective condition) are many, walk the
        items newest first and stop after the page; when they are few, read just them and
        sort them.
        """
        compiled = fieldkeys.compile_filter(filter)
        plan, driver = self._plan(conn, prefix, compiled, offset + limit)
        clause, args = where(prefix, compiled, live_at, driver)
        columns = f"SELECT {ITEM_COLUMNS}, NULL, x.partial"
        order = f" WHERE {clause} ORDER BY {_NEWEST}"
        if plan == "newest":
            sql = f"{columns}{_BY_UPDATE}{order}"
        elif plan == "filter" and driver is not None:
            inner, more = _driving(driver)
            # Values the index holds in part are candidates too (checked on the value).
            sql = (
                f"WITH c(id) AS MATERIALIZED ({inner} UNION "
                f"SELECT id FROM store_items WHERE partial = 1) {columns} FROM c "
                # CROSS JOIN: SQLite keeps this order (the candidates drive).
                "CROSS JOIN store_items x ON x.id = c.id "
                "CROSS JOIN store_namespaces n ON n.id = x.ns" + order
            )
            args = [*more, *args]
        else:
            sql = columns + _FROM + order
        return self._page(conn, sql, args, compiled, filter, limit, offset)

    def _plan(
        self, conn: apsw.Connection, prefix: Sequence[str], compiled: Compiled, want: int
    ) -> tuple[str, Condition | None]:
        """("newest" | "filter" | "namespace", the condition driving a "filter" plan)."""
        clause, args = prefix_clause(prefix)
        total = float(fetchall(conn, "SELECT total(items) FROM store_namespaces")[0][0])
        under = total
        if prefix:
            sql = f"SELECT total(items) FROM store_namespaces n WHERE {clause}"
            under = float(fetchall(conn, sql, args)[0][0])
        candidates, driver = under, None
        for c in compiled.conditions:
            if c.negate or c.or_missing:
                continue
            inner, bounds = _driving(c)
            sql = f"SELECT count(*) FROM ({inner} LIMIT ?)"
            count = float(fetchall(conn, sql, [*bounds, int(candidates) + 1])[0][0])
            if count < candidates:
                candidates, driver = count, c
        # Walking newest first reads about want × total / candidates rows; reading the
        # candidates reads all of them (and sorts them).
        if candidates * candidates > want * max(total, 1.0):
            return "newest", None
        return ("filter" if driver is not None else "namespace"), driver

    def text(
        self,
        conn: apsw.Connection,
        prefix: Sequence[str],
        query: str,
        filter: Any,
        limit: int,
        offset: int,
        live_at: int | None,
    ) -> list[Stored]:
        """Items whose indexed text shares tokens with `query`, best score first
        (`engine/format/text.py` says what the score means)."""
        tokens = list(dict.fromkeys(self.items.tokens(query)))
        if not tokens:
            return []
        compiled = fieldkeys.compile_filter(filter)
        clause, args = where(prefix, compiled, live_at)
        # |Q ∩ D| counted in SQL: one FTS5 match per query token, grouped by item (no
        # Python call per matching item: a common word matches most of the file).
        sql = (
            f"SELECT {ITEM_COLUMNS}, h.hits / sqrt(? * x.text_terms) AS score, x.partial "
            "FROM (SELECT s.rowid AS item, count(*) * 1.0 AS hits FROM carray(?) q "
            "CROSS JOIN store_text s WHERE s.store_text MATCH q.value GROUP BY s.rowid) h "
            "JOIN store_items x ON x.id = h.item JOIN store_namespaces n ON n.id = x.ns "
            f"WHERE x.text_terms > 0 AND {clause} ORDER BY score DESC, {_NEWEST}"
        )
        bound = [len(tokens), ids(text.expression([t]) for t in tokens), *args]
        return self._page(conn, sql, bound, compiled, filter, limit, offset)

    def vector(
        self,
        conn: apsw.Connection,
        prefix: Sequence[str],
        query: Sequence[float],
        filter: Any,
        limit: int,
        offset: int,
        live_at: int | None,
    ) -> list[Stored]:
        """Items whose vectors are nearest `query`, best score (the metric's similarity)
        first; each item scored by its best field."""
        if self.items.vectors is None or limit <= 0:
            return []
        offset = max(offset, 0)
        compiled = fieldkeys.compile_filter(filter)
        ranked = self._nearest(conn, prefix, query, compiled, filter, offset + limit, live_at)
        return self._scored(conn, ranked[offset : offset + limit])

    def hybrid(
        self,
        conn: apsw.Connection,
        prefix: Sequence[str],
        query: str,
        vector: Sequence[float] | None,
        filter: Any,
        limit: int,
        offset: int,
        live_at: int | None,
    ) -> list[Stored]:
        """Items ranked by the vectors nearest `vector` and by the BM25 of `query`'s
        tokens in their text, fused (`fusion.py` says what the score means)."""
        if limit <= 0:
            return []
        offset = max(offset, 0)
        deep = fusion.depth(offset + limit)
        compiled = fieldkeys.compile_filter(filter)
        rankings: list[list[int]] = []
        if vector is not None and self.items.vectors is not None:
            near = self._nearest(conn, prefix, vector, compiled, filter, deep, live_at)
            rankings.append([item for item, _ in near])
        tokens = self.items.tokens(query)
        exact: list[int] = []
        if tokens:
            clause, args = where(prefix, compiled, live_at)
            recheck = compiled.recheck or _any_partial(conn, compiled)
            rankings.append(
                self._matching(
                    conn, text.expression(tokens), clause, args, compiled, filter, recheck, deep
                )
            )
            phrase = self._matching(
                conn,
                text.phrase(tokens),
                clause,
                args,
                compiled,
                filter,
                recheck,
                fusion.EXACT_AT_MOST + 1,
            )
            if len(phrase) <= fusion.EXACT_AT_MOST:
                exact = phrase
        fused = fusion.fuse(rankings, exact)
        return self._scored(conn, fused[offset : offset + limit])

    def _matching(
        self,
        conn: apsw.Connection,
        expression: str,
        clause: str,
        args: Sequence[Any],
        compiled: Compiled,
        filter: Any,
        recheck: bool,
        limit: int,
    ) -> list[int]:
        """Ids of the items under `clause` whose text matches the FTS5 `expression`, best
        BM25 first (then newest id), at most `limit`.

        A query word many items hold makes every one of them a match: the best
        `limit * 4` matches of the whole file are read first (FTS5 keeps only those while
        it scores), and only when the prefix, filter and TTL leave fewer than `limit` of
        them is every match joined and sorted (a third of the time at 10,000 items)."""
        if not recheck:
            ahead = fetchall(
                conn,
                "SELECT rowid FROM store_text WHERE store_text MATCH ? "
                "ORDER BY bm25(store_text), rowid DESC LIMIT ?",
                (expression, limit * 4),
            )
            first = [int(r[0]) for r in ahead]
            if not first:
                return []
            kept = {
                int(r[0])
                for r in fetchall(
                    conn,
                    f"SELECT x.id{_FROM} WHERE x.id IN carray(?) AND x.text_terms > 0 AND {clause}",
                    [ids(first), *args],
                )
            }
            early = [item for item in first if item in kept]
            if len(early) >= limit or len(first) < limit * 4:
                return early[:limit]
        sql = (
            f"SELECT x.id, x.partial FROM (SELECT rowid AS item, bm25(store_text) AS rank "
            "FROM store_text WHERE store_text MATCH ?) h "
            "JOIN store_items x ON x.id = h.item JOIN store_namespaces n ON n.id = x.ns "
            f"WHERE x.text_terms > 0 AND {clause} ORDER BY h.rank, x.id DESC"
        )
        if not recheck:
            rows = fetchall(conn, sql + " LIMIT ?", [expression, *args, limit])
            return [int(r[0]) for r in rows]
        found: list[int] = []
        for batch in _batches(conn.execute(sql, [expression, *args]), 64):
            kept = self._rechecked(conn, batch, compiled, filter)
            found.extend(int(r[0]) for r in batch if int(r[0]) in kept)
            if len(found) >= limit:
                break
        return found[:limit]

    def _nearest(
        self,
        conn: apsw.Connection,
        prefix: Sequence[str],
        query: Sequence[float],
        compiled: Compiled,
        filter: Any,
        want: int,
        live_at: int | None,
    ) -> list[tuple[int, float]]:
        """The `want` items nearest `query` under the prefix, filter and TTL: (id, score)."""
        index = self.items.vectors
        assert index is not None
        clause, args = where(prefix, compiled, live_at)
        narrowed = bool(prefix) or bool(compiled.conditions) or live_at is not None
        recheck = compiled.recheck or _any_partial(conn, compiled)

        def accept(candidates: Sequence[int]) -> Collection[int]:
            sql = f"SELECT x.id, x.partial{_FROM} WHERE x.id IN carray(?) AND {clause}"
            rows = fetchall(conn, sql, [ids(list(candidates)), *args])
            if not recheck:
                return {int(r[0]) for r in rows}
            return self._rechecked(conn, rows, compiled, filter)

        if not narrowed or (
            not compiled.conditions and live_at is None and _holds_every_item(conn, prefix)
        ):
            return index.search(conn, query, want, None)
        found = fetchall(
            conn, f"SELECT x.id{_FROM} WHERE {clause} LIMIT ?", [*args, EXACT_UP_TO + 1]
        )
        if len(found) > EXACT_UP_TO:
            return index.search(conn, query, want, accept)
        among = [int(r[0]) for r in found]
        if recheck:
            among = sorted(accept(among))
        return index.exact(conn, query, want, among) if among else []

    def _scored(self, conn: apsw.Connection, window: Sequence[tuple[int, float]]) -> list[Stored]:
        """The items of `window` (id, score) decoded, in its order, with their scores."""
        if not window:
            return []
        rows = fetchall(
            conn,
            f"SELECT {ITEM_COLUMNS}{_FROM} WHERE x.id IN carray(?)",
            (ids(i for i, _ in window),),
        )
        by_id = {int(r[0]): r for r in rows}
        ordered = [(*by_id[i], score) for i, score in window if i in by_id]
        return self.items.decode(conn, ordered)

    def _rechecked(
        self, conn: apsw.Connection, rows: Sequence[Sequence[Any]], compiled: Compiled, filter: Any
    ) -> set[int]:
        keep = {int(r[0]) for r in rows if not (compiled.recheck or r[1])}
        check = [int(r[0]) for r in rows if compiled.recheck or r[1]]
        if check:
            full = fetchall(
                conn, f"SELECT {ITEM_COLUMNS}{_FROM} WHERE x.id IN carray(?)", (ids(check),)
            )
            for stored in self.items.decode(conn, full):
                if fieldkeys.matches(stored.value, filter):
                    keep.add(stored.id)
        return keep


def _holds_every_item(conn: apsw.Connection, prefix: Sequence[str]) -> bool:
    """Whether no item of the file is outside `prefix` (the usual file: one namespace, or
    a search from the root of all of them), so a search under it needs no per-candidate
    check. Asked of the items themselves, one index probe per namespace outside the
    prefix, not of the namespaces' counts: the answer keeps other namespaces out."""
    clause, args = prefix_clause(prefix)
    outside = fetchall(
        conn,
        f"SELECT 1 FROM store_namespaces n WHERE NOT {clause} "
        "AND EXISTS (SELECT 1 FROM store_items x WHERE x.ns = n.id) LIMIT 1",
        args,
    )
    return not outside


def _any_partial(conn: apsw.Connection, compiled: Compiled) -> bool:
    if not compiled.conditions:
        return False
    return bool(fetchall(conn, "SELECT 1 FROM store_items WHERE partial = 1 LIMIT 1"))


def _batches(cursor: Iterator[Any], size: int) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for row in cursor:
        batch.append(row)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch
