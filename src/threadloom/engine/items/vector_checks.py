"""The vector index's checks for `threadloom verify` (engine layer; reads only).

Each check is one query over `store_lists` / `store_vectors` (see engine/items/vectors.py for the
layout: a vector's id is `list << 32 | n`); a damaged index is reported, never repaired.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import apsw

from threadloom.engine.sql import fetchall

__all__ = ["problems"]

#: Problems of one kind listed before they are only counted.
MOST = 20


def problems(conn: apsw.Connection, dims: int, recorded: int | None) -> list[str]:
    """What is wrong with the vector index, one line each; [] when it is sound.

    Checks: a recorded dims other than `dims` (the Store's config); vectors and centroids
    of the wrong size; a missing list 0; a training in progress whose new lists are
    missing; vectors in lists that do not exist; list sizes other than their members;
    vectors whose item does not exist.
    """
    found: list[str] = []
    size = 4 * dims
    if recorded is not None and recorded != dims:
        found.append(f"the index records {recorded} dimensions, the Store's config {dims}")

    def report(kind: str, rows: list[tuple[Any, ...]], line: Callable[..., str]) -> None:
        found.extend(line(*row) for row in rows[:MOST])
        if len(rows) > MOST:
            found.append(f"... and {len(rows) - MOST} more {kind}")

    report(
        "vectors of the wrong size",
        fetchall(
            conn,
            "SELECT id, item, field, length(vector) FROM store_vectors "
            "WHERE length(vector) != ? ORDER BY id",
            (size,),
        ),
        lambda vid, item, field, length: (
            f"vector {vid} (item {item}, field {field!r}) has {length} bytes, not {size}"
        ),
    )
    report(
        "centroids of the wrong size",
        fetchall(
            conn,
            "SELECT id, length(centroid) FROM store_lists "
            "WHERE id != 0 AND length(centroid) != ? ORDER BY id",
            (size,),
        ),
        lambda lid, length: f"vector list {lid} has a centroid of {length} bytes, not {size}",
    )
    if not fetchall(conn, "SELECT 1 FROM store_lists WHERE id = 0"):
        found.append("vector list 0 (vectors not trained yet) is missing")
    moving = fetchall(conn, "SELECT value FROM meta WHERE key = 'vector_moving'")
    if moving:
        first = str(moving[0][0]).split()[0]
        if not first.isdigit() or not fetchall(
            conn, "SELECT 1 FROM store_lists WHERE id >= ? AND id != 0", (int(first),)
        ):
            found.append(
                f"the training in progress (meta vector_moving {str(moving[0][0])!r}) names "
                "new lists that do not exist"
            )
    report(
        "vectors in missing lists",
        fetchall(
            conn,
            "SELECT v.id, v.item, v.id >> 32 FROM store_vectors v "
            "WHERE NOT EXISTS (SELECT 1 FROM store_lists l WHERE l.id = v.id >> 32) "
            "ORDER BY v.id",
        ),
        lambda vid, item, lid: f"vector {vid} (item {item}) is in list {lid}, which does not exist",
    )
    report(
        "lists of the wrong size",
        fetchall(
            conn,
            "SELECT l.id, l.size, (SELECT count(*) FROM store_vectors v "
            "WHERE v.id >= l.id << 32 AND v.id < (l.id + 1) << 32) AS members "
            "FROM store_lists l WHERE l.size != members ORDER BY l.id",
        ),
        lambda lid, recorded, members: (
            f"vector list {lid} records size {recorded} but holds {members} vectors"
        ),
    )
    report(
        "vectors of missing items",
        fetchall(
            conn,
            "SELECT v.id, v.item FROM store_vectors v "
            "WHERE NOT EXISTS (SELECT 1 FROM store_items i WHERE i.id = v.item) ORDER BY v.id",
        ),
        lambda vid, item: f"vector {vid} belongs to item {item}, which does not exist",
    )
    return found
