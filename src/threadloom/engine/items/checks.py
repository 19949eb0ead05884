"""The Store's checks for `threadloom verify` (engine layer; reads only).

Every item's body is decoded against its seal, its filter index rows are compared with
the rows its value gives, namespace counts with their items; index rows that belong to
no item are counted; the vector index has its own checks (`vector_checks.py`).
"""

from __future__ import annotations

import apsw

from threadloom.engine.items import fieldkeys
from threadloom.engine.items.reads import ITEM_COLUMNS
from threadloom.engine.items.rows import Items
from threadloom.engine.sql import fetchall


def problems(items: Items, conn: apsw.Connection) -> list[str]:
    """What `verify` finds wrong with the Store's tables (bodies are checked by decoding)."""
    found: list[str] = []
    for name, key, count in fetchall(
        conn,
        "SELECT n.name, n.items, (SELECT count(*) FROM store_items x WHERE x.ns = n.id) "
        "FROM store_namespaces n",
    ):
        if int(key) != int(count):
            found.append(f"store namespace {name!r} counts {key} items but holds {count}")
    orphans = fetchall(
        conn,
        "SELECT count(*) FROM store_items x WHERE NOT EXISTS "
        "(SELECT 1 FROM store_namespaces n WHERE n.id = x.ns)",
    )[0][0]
    if orphans:
        found.append(f"{orphans} store items belong to no namespace row")
    indexed: dict[int, set[tuple[str, bytes]]] = {}
    for item, path, value in conn.execute(
        "SELECT f.item, p.path, f.value FROM store_fields f "
        "LEFT JOIN store_paths p ON p.id = f.path"
    ):
        indexed.setdefault(int(item), set()).add((str(path), bytes(value)))
    rows = fetchall(
        conn,
        f"SELECT {ITEM_COLUMNS}, x.partial FROM store_items x "
        "JOIN store_namespaces n ON n.id = x.ns",
    )
    for row in rows:
        held = indexed.pop(int(row[0]), set())
        try:
            (item,) = items.decode(conn, [row[:9]])
        except Exception as exc:  # noqa: BLE001 - verify reports, never raises
            found.append(f"store item {row[1]}/{row[2]}: {exc}")
            continue
        expected, complete = fieldkeys.fields(item.value)
        if held != set(expected) or bool(row[9]) == complete:
            found.append(
                f"store item {row[1]}/{row[2]}: its filter index rows differ from "
                "its value (filters would decide on them)"
            )
    if indexed:
        found.append(
            f"{sum(map(len, indexed.values()))} filter index rows belong to no item "
            "(left by a damaged item; harmless, item ids are never reused)"
        )
    if items.vectors is not None:
        found.extend(items.vectors.problems(conn))
    return found
