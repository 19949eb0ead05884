"""Damage cases: byte flips, truncations, flips aimed at each b-tree, identity-column edits.

Each case is a named, deterministic edit of a copy of the fixture file. Cases are
derived from the original file (its size, its pages as SQLite's `dbstat` virtual table
reports them, its rows), with fixed seeds, so a failure names a case that replays.
`run` damages a copy, runs `threadloom verify` on it (in this process, see
`_damage.verify`) and reads it back; `failures` says which of the suite's promises the
result breaks, and that verify closed every file it opened.

`dbstat` needs SQLite built with `SQLITE_ENABLE_DBSTAT_VTAB`; apsw's bundled SQLite is
(`PRAGMA compile_options` lists `ENABLE_DBSTAT_VTAB`), and `btree_flips` fails loudly if not.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw

from tests.integrity._damage import (
    IDENTICAL,
    RAISED_OTHER,
    UNREACHABLE,
    WRONG,
    Original,
    Outcome,
    Verdict,
    judge,
    snapshot,
    verify,
)

SEED = 7411

#: The identity columns an edit must never turn into a wrong read, per table.
IDENTITY: dict[str, tuple[str, ...]] = {
    "threads": ("id", "scope", "thread_id"),
    "scopes": ("id", "namespace", "agent_id"),
    "checkpoints": ("thread", "checkpoint_ns", "checkpoint_id", "parent_id", "schema"),
    "writes": (
        "thread",
        "checkpoint_ns",
        "checkpoint_id",
        "task_key",
        "idx",
        "task_path",
        "channel",
    ),
    "vals": ("thread", "ref_key"),
    "blocks": ("key", "refs"),
    "checkpoint_keys": ("checkpoint", "key", "value"),
}
#: Which rows an edit picks (default: any row), so that the edit reaches a read.
ROWS = {
    ("checkpoints", "parent_id"): "parent_id IS NOT NULL",
    ("writes", "idx"): "idx < 0",
    ("checkpoint_keys", "key"): "key = 'run_id'",
    ("checkpoint_keys", "value"): "key = 'run_id'",
}


@dataclass(frozen=True)
class Case:
    """One named damage of a copy.

    Attributes:
        kind: the family (`flip`, `truncate`, `btree`, `edit`), a row of the report.
        name: unique within the suite; the pytest id.
        damage: edits the copy in place.
        names: strings a `verify --json` report that finds problems must mention
            (the damaged row's thread id and checkpoint id), empty when unknown.
    """

    kind: str
    name: str
    damage: Callable[[Path], None]
    names: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.name


def _flip(offset: int, mask: int) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        with path.open("r+b") as file:
            file.seek(offset)
            byte = file.read(1)[0]
            file.seek(offset)
            file.write(bytes([byte ^ mask]))

    return damage


def _truncate(size: int) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        with path.open("r+b") as file:
            file.truncate(size)

    return damage


def random_flips(path: Path, count: int) -> list[Case]:
    """`count` single-byte flips at seeded offsets over the whole file."""
    rng = random.Random(SEED)
    size = path.stat().st_size
    cases = []
    for i in range(count):
        offset, mask = rng.randrange(size), rng.randrange(1, 256)
        cases.append(Case("flip", f"flip-{i:03d}@{offset}^{mask:02x}", _flip(offset, mask)))
    return cases


def truncations(path: Path, count: int) -> list[Case]:
    """`count` truncations spread over the file, half on page boundaries, half inside pages.

    Never to 0 bytes: an empty file is a new file (docs/FORMAT.md), not a damaged one.
    """
    rng = random.Random(SEED + 1)
    size, page = path.stat().st_size, _page_size(path)
    points = []
    for i in range(count):
        at = size * (i + 1) // (count + 1)
        points.append(at - at % page if i % 2 == 0 else max(1, at + rng.randrange(1, page)))
    return [Case("truncate", f"truncate-{i:02d}@{n}", _truncate(n)) for i, n in enumerate(points)]


def _page_size(path: Path) -> int:
    with path.open("rb") as file:
        header = file.read(100)
    size = int.from_bytes(header[16:18], "big")
    return 65536 if size == 1 else size


def _pages(path: Path) -> dict[str, list[tuple[int, str]]]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        options = {row[0] for row in conn.execute("PRAGMA compile_options")}
        assert "ENABLE_DBSTAT_VTAB" in options, "apsw's SQLite lacks dbstat: cannot aim flips"
        pages: dict[str, list[tuple[int, str]]] = {}
        for name, pageno, pagetype in conn.execute("SELECT name, pageno, pagetype FROM dbstat"):
            pages.setdefault(name, []).append((pageno, pagetype))
        return pages
    finally:
        conn.close()


def _cell_offset(data: bytes, pageno: int, pagetype: str, rng: random.Random) -> int:
    """An offset inside the cell content of a page (past the next-page link of overflow)."""
    size = len(data)
    if pagetype == "overflow":
        return rng.randrange(4, size)
    header = 100 if pageno == 1 else 0
    start = int.from_bytes(data[header + 5 : header + 7], "big") or 65536
    if start >= size:  # an empty page: its header is all there is to damage
        return rng.randrange(header, header + 8)
    return rng.randrange(start, size)


def btree_flips(path: Path, per_tree: int) -> list[Case]:
    """`per_tree` flips inside cell content of every table's and index's b-tree pages."""
    rng = random.Random(SEED + 2)
    page = _page_size(path)
    data = path.read_bytes()
    cases = []
    for name, pages in sorted(_pages(path).items()):
        # One leaf and one interior or overflow page when there are, then any pages.
        kinds = {kind: [p for p in pages if p[1] == kind] for kind in ("leaf", "internal")}
        others = [p for p in pages if p[1] != "leaf"]
        picks = [rng.choice(kinds["leaf"] or pages), rng.choice(others or pages)]
        picks += [rng.choice(pages) for _ in range(per_tree - len(picks))]
        for j, (pageno, pagetype) in enumerate(picks[:per_tree]):
            start = (pageno - 1) * page
            offset = start + _cell_offset(data[start : start + page], pageno, pagetype, rng)
            mask = rng.randrange(1, 256)
            label = f"btree-{name}-{j}-{pagetype}{pageno}@{offset}^{mask:02x}"
            cases.append(Case("btree", label, _flip(offset, mask)))
    return cases


# -- identity edits --------------------------------------------------------------------


def columns(conn: apsw.Connection, table: str) -> list[tuple[str, int]]:
    """(name, pk position) of each column of `table`, from `PRAGMA table_info`."""
    return [(row[1], row[5]) for row in conn.execute(f"PRAGMA table_info({table})")]


def _changed(value: Any) -> Any:
    if isinstance(value, bytes):
        return value[:-1] + bytes([value[-1] ^ 1]) if value else b"\x00"
    if isinstance(value, str):
        return value[:-1] + ("1" if value.endswith("0") else "0") if value else "x"
    if isinstance(value, (int, float)):
        return value + 1
    return "x"


def _edit(table: str, column: str) -> Callable[[Path], None]:
    """Set `column` of one row to another row's value, or failing that to a changed value."""

    def damage(path: Path) -> None:
        conn = apsw.Connection(str(path))
        try:
            row, key = _row(conn, table, column)
            where = " AND ".join(f"{name} IS ?" for name in key)
            others = [
                r[0]
                for r in conn.execute(
                    f"SELECT DISTINCT {column} FROM {table} WHERE {column} IS NOT ? "
                    f"ORDER BY {column} LIMIT 3",
                    (row[column],),
                )
            ]
            values = [*others, _changed(row[column])]
            if isinstance(row[column], int):  # every nearby id is taken: one no row uses
                values.append(conn.execute(f"SELECT max({column}) + 1 FROM {table}").fetchone()[0])
            for value in values:
                try:
                    conn.execute(
                        f"UPDATE {table} SET {column} = ? WHERE {where}",
                        (value, *(row[name] for name in key)),
                    )
                except apsw.ConstraintError:
                    continue  # that value is another row's key: try the next one
                assert conn.changes() == 1, f"edit of {table}.{column} changed {conn.changes()}"
                return
            raise AssertionError(f"no value could be written to {table}.{column}")
        finally:
            conn.close()

    return damage


def _row(conn: apsw.Connection, table: str, column: str) -> tuple[dict[str, Any], list[str]]:
    """The middle row of `table` (among those ROWS allows) and the columns that key it."""
    names = [name for name, _ in columns(conn, table)]
    key = [name for name, pk in sorted(columns(conn, table), key=lambda c: c[1]) if pk]
    select = "rowid, *" if not key else "*"
    if not key:
        names, key = ["rowid", *names], ["rowid"]
    where = ROWS.get((table, column), "1")
    order = ", ".join(key)
    rows = conn.execute(f"SELECT {select} FROM {table} WHERE {where} ORDER BY {order}").fetchall()
    assert rows, f"the fixture has no {table} row to edit for {column}"
    return dict(zip(names, rows[len(rows) // 2], strict=True)), key


def _names(path: Path, table: str, column: str) -> tuple[str, ...]:
    """The thread id and checkpoint id (when the table has one) of the row `_edit` picks."""
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        row, _ = _row(conn, table, column)
        thread = {"threads": row.get("id"), "checkpoint_keys": None}.get(table, row.get("thread"))
        checkpoint = row.get("checkpoint_id")
        if table == "checkpoint_keys":
            thread, checkpoint = conn.execute(
                "SELECT thread, checkpoint_id FROM checkpoints WHERE id = ?", (row["checkpoint"],)
            ).fetchone()
        # An edit of the name itself may be reported under the old or the new name.
        if column in ("id", "thread", "thread_id"):
            thread = None
        if column in ("checkpoint_id", "checkpoint"):
            checkpoint = None
        found = [] if thread is None else [_thread_id(conn, thread)]
        return tuple(found) if checkpoint is None else (*found, checkpoint)
    finally:
        conn.close()


def _thread_id(conn: apsw.Connection, thread: int) -> str:
    (thread_id,) = conn.execute("SELECT thread_id FROM threads WHERE id = ?", (thread,)).fetchone()
    return str(thread_id)


def identity_edits(path: Path) -> list[Case]:
    """One edit per identity column, each failing loudly if the column no longer exists."""
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        for table, wanted in IDENTITY.items():
            present = {name for name, _ in columns(conn, table)}
            missing = set(wanted) - present
            assert not missing, f"{table} has no column {sorted(missing)}: update IDENTITY"
    finally:
        conn.close()
    return [
        Case("edit", f"edit-{table}.{column}", _edit(table, column), _names(path, table, column))
        for table, wanted in IDENTITY.items()
        for column in wanted
    ]


#: The damage kinds in report order, with the suite's counts: flips over the whole file,
#: truncation points, flips per b-tree (the identity edits are one per column).
KINDS = ("flip", "truncate", "btree", "edit")
FLIPS, TRUNCATIONS, PER_TREE = 160, 20, 3


def cases(path: Path, kind: str, *, flips: int = FLIPS, per_tree: int = PER_TREE) -> list[Case]:
    """The cases of one damage kind, derived from the fixture file at `path`."""
    if kind == "flip":
        return random_flips(path, flips)
    if kind == "truncate":
        return truncations(path, TRUNCATIONS)
    if kind == "btree":
        return btree_flips(path, per_tree)
    assert kind == "edit", kind
    return identity_edits(path)


# -- running a case --------------------------------------------------------------------


@dataclass
class Result:
    """A case's outcome (its reads against the original) and verify's verdict on it."""

    case: Case
    outcome: Outcome
    verdict: Verdict


def run(case: Case, original: Original, directory: Path) -> Result:
    """Damage a fresh copy, verify it, then read it back through the public API."""
    path = original.copy(directory, "copy")
    case.damage(path)
    verdict = verify(path)
    outcome = judge(original.snapshot, snapshot(path, original.inventory))
    return Result(case, outcome, verdict)


def failures(result: Result) -> list[str]:
    """Every promise of the issue this result breaks (empty when it keeps them all)."""
    outcome, verdict = result.outcome, result.verdict
    found = []
    if outcome.kind in (WRONG, RAISED_OTHER, UNREACHABLE):
        found.append(f"read {outcome}")
    if verdict.traceback:
        found.append(f"verify printed a traceback: {verdict.stderr[-600:]}")
    if verdict.left_open:
        found.append(f"verify left {', '.join(verdict.left_open)} open")
    if outcome.kind != IDENTICAL and verdict.codes != (3, 3):
        said = " | ".join(verdict.stderr.strip().splitlines()[-2:])
        found.append(
            f"reads {outcome.kind} but verify exited {verdict.codes}, not (3, 3); stderr: {said}"
        )
    if verdict.codes[0] == 3 and verdict.report is None:
        found.append(f"verify --json found problems but printed no JSON: {verdict.json_out[:200]}")
    missing = [name for name in result.case.names if name not in verdict.json_out]
    if verdict.codes[0] == 3 and missing:
        found.append(f"verify --json found problems without naming {missing}")
    return found
