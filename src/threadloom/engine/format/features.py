"""Tables made when a feature first writes (format 8).

A file made by this format holds one table, `meta`, until something is written: the
checkpoint tables come with the first scope, the Store's with its first item, the
lease table with the first lease. An unused feature costs no page.

What a feature's tables look like is not written twice: the ordered migrations
(schema.py) are replayed once per process on an in-memory database, and a feature is
made from that database's `sqlite_schema` (its tables, virtual tables, indexes and
triggers, in creation order) and the rows the migrations put in them (the Store's list
0, the `meta` settings). So a table made late is the table an upgraded file has; a test
compares the two.

A connection to a file with features not made yet attaches an in-memory database named
`absent` holding empty copies of the tables (and their indexes), so every read
finds them empty without knowing about features: SQLite looks a name up in `main` before
an attached database, and once another connection makes the feature, `main`'s table wins
(statements are prepared again on a schema change). Each copied table refuses inserts (a
trigger that raises), so a write path that forgot `ensure` fails loudly instead of
writing into memory. Virtual tables cannot have triggers: the Store's text index is only
written beside `store_items` rows, whose copy refuses.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable
from typing import Final, NamedTuple

import apsw

from threadloom.engine.format import functions
from threadloom.engine.sql import fetchall

#: The features, each a set of tables made together. Every table belongs to one:
#: `meta` is always there; the others are named by `feature_of`.
META: Final = "meta"
CONTENT: Final = "content"
CHECKPOINTS: Final = "checkpoints"
STORE: Final = "store"
LEASES: Final = "leases"
SYNC: Final = "sync"
SERVER: Final = "server"
#: The vector index's codes (`store_codes`): a feature of its own, so that the migration
#: adding the table to a file without the Store's tables leaves the Store's to be made.
CODES: Final = "codes"
#: Every feature but `meta` (which every file has).
ALL: Final = (CONTENT, CHECKPOINTS, STORE, LEASES, SYNC, SERVER, CODES)

#: Content tables the checkpoints and the Store both write (bodies' shared blocks and
#: the compression dictionaries).
_CONTENT_TABLES: Final = frozenset({"blocks", "blocks_released", "dicts", "extents"})

#: What a feature needs made before it (its triggers or writes reach those tables).
NEEDS: Final[dict[str, tuple[str, ...]]] = {
    CHECKPOINTS: (CONTENT,),
    STORE: (CONTENT, CODES),
    SYNC: (CHECKPOINTS,),
    SERVER: (CHECKPOINTS,),
}

#: The name of the attached database of empty copies.
ABSENT: Final = "absent"

#: The `meta` key naming a threadloom file (set by format 8; `recognize` reads it).
KIND_KEY: Final = "file_kind"
KIND: Final = "threadloom"


def feature_of(table: str) -> str:
    """The feature a table (or the table an index or trigger is on) belongs to."""
    if table == "meta":
        return META
    if table in _CONTENT_TABLES:
        return CONTENT
    if table == "store_codes":
        return CODES
    if table.startswith("store_"):
        return STORE
    if table == "leases":
        return LEASES
    if table.startswith("sync_"):
        return SYNC
    if table.startswith("server_"):
        return SERVER
    return CHECKPOINTS


def _feature(item: _Object) -> str:
    """The feature an object is made with: its table's, but a trigger named for another
    feature's table (`server_records_thread_delete` on `threads`) comes with that feature,
    as its body writes that feature's table."""
    if item.kind == "trigger" and feature_of(item.name) != CHECKPOINTS:
        return feature_of(item.name)
    return feature_of(item.table)


class _Object(NamedTuple):
    kind: str  # 'table', 'index' or 'trigger'
    name: str
    table: str
    sql: str
    virtual: bool


class _Schema(NamedTuple):
    objects: tuple[_Object, ...]
    #: Rows the migrations leave in each table: (insert statement, rows).
    rows: dict[str, tuple[str, list[tuple[object, ...]]]]


_schema: _Schema | None = None
_schema_lock = threading.Lock()


def _replayed() -> _Schema:
    """The schema and rows every migration leaves in a new database (cached)."""
    global _schema
    with _schema_lock:
        if _schema is not None:
            return _schema
        from threadloom.engine.format.schema import MIGRATIONS

        conn = apsw.Connection(":memory:")
        try:
            functions.install(conn)
            for step in MIGRATIONS:
                conn.execute(step)
            listed = conn.execute(
                "SELECT type, name, tbl_name, sql FROM sqlite_schema "
                "WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
            ).fetchall()
            virtual = {
                str(name)
                for kind, name, _, sql in listed
                if kind == "table" and str(sql).upper().startswith("CREATE VIRTUAL")
            }
            objects = tuple(
                _Object(str(kind), str(name), str(table), str(sql), str(name) in virtual)
                for kind, name, table, sql in listed
                if not _shadow(str(name), virtual)
            )
            rows: dict[str, tuple[str, list[tuple[object, ...]]]] = {}
            for item in objects:
                if item.kind != "table" or item.virtual:
                    continue
                columns = [
                    str(c[1])
                    for c in conn.execute(f"PRAGMA table_xinfo({_quote(item.name)})")
                    if int(c[6]) == 0
                ]
                names = ", ".join(_quote(c) for c in columns)
                found = conn.execute(f"SELECT {names} FROM {_quote(item.name)}").fetchall()
                if found:
                    marks = ", ".join("?" for _ in columns)
                    insert = f"INSERT INTO {_quote(item.name)}({names}) VALUES({marks})"
                    rows[item.name] = (insert, [tuple(r) for r in found])
        finally:
            conn.close()
        _schema = _Schema(objects, rows)
        return _schema


def _shadow(name: str, virtual: set[str]) -> bool:
    """A virtual table's shadow table (made by the virtual table itself)."""
    return any(name.startswith(v + "_") for v in virtual)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _closure(features: Iterable[str]) -> list[str]:
    """The features with those they need, each after what it needs."""
    ordered: list[str] = []

    def add(feature: str) -> None:
        for need in NEEDS.get(feature, ()):
            add(need)
        if feature not in ordered:
            ordered.append(feature)

    for feature in features:
        add(feature)
    return ordered


def needed(feature: str) -> frozenset[str]:
    """`feature` and the features it needs: the tables its statements may read."""
    return frozenset(_closure([feature]))


def present(conn: apsw.Connection) -> set[str]:
    """The features whose tables the file (`main`) holds."""
    tables = {
        str(r[0]) for r in conn.execute("SELECT name FROM main.sqlite_schema WHERE type = 'table'")
    }
    made: set[str] = set()
    for item in _replayed().objects:
        if item.kind == "table" and item.name in tables:
            made.add(feature_of(item.name))
    return made


def create(conn: apsw.Connection) -> None:
    """Make a new file's `meta` and its rows (inside the caller's write transaction)."""
    _make(conn, [META])


def ensure(conn: apsw.Connection, feature: str) -> bool:
    """Make `feature`'s tables (and those it needs) if the file lacks them, inside the
    caller's write transaction; True if anything was made."""
    missing = [f for f in _closure([feature]) if not _made(conn, f)]
    if missing:
        _make(conn, missing)
    return bool(missing)


def _made(conn: apsw.Connection, feature: str) -> bool:
    first = next(
        item.name
        for item in _replayed().objects
        if item.kind == "table" and feature_of(item.name) == feature
    )
    return bool(
        conn.execute(
            "SELECT 1 FROM main.sqlite_schema WHERE type = 'table' AND name = ?", (first,)
        ).fetchall()
    )


def _make(conn: apsw.Connection, features: list[str]) -> None:
    schema = _replayed()
    wanted = set(features)
    for item in schema.objects:
        if _feature(item) in wanted:
            conn.execute(item.sql)
    for item in schema.objects:
        if item.kind == "table" and feature_of(item.name) in wanted and item.name in schema.rows:
            insert, rows = schema.rows[item.name]
            if item.name == "meta":
                insert = insert.replace("INSERT INTO", "INSERT OR IGNORE INTO", 1)
            conn.executemany(insert, rows)


def attach_absent(conn: apsw.Connection) -> bool:
    """Attach the empty copies of the missing features' tables; True if they are attached
    now (False when the file lacks no feature).

    The copies are of the missing features' tables and of the tables their foreign keys
    name (`leases` -> `scopes`): a copied table's foreign key names its parent in the same
    database. A copy of a table `main` holds is never reached by name, so it is left out:
    each connection holds only what it may read (a Saver's file: the Store's tables, not
    the checkpoints')."""
    attached = {str(r[1]) for r in conn.execute("PRAGMA database_list")}
    if ABSENT in attached:
        return True
    lacking = missing(conn)
    if not lacking:
        return False
    conn.execute(f"ATTACH ':memory:' AS {ABSENT}")
    conn.deserialize(ABSENT, _template(frozenset(lacking)))
    return True


class Copies:
    """The connections of one file that have the empty copies attached, with `main`'s
    schema version when they were attached.

    A statement prepared against a copy reads only the `absent` database, so SQLite
    would not prepare it again when another connection makes the feature in `main`:
    a connection is checked when it is taken from the pool and after a write begins,
    and made to see `main` again (`refresh`) when `main`'s schema moved on.

    A write skips the check (a statement) when nothing changed `main` since its
    connection's own last commit: SQLite's data version of `main` (a file control, no
    statement), read inside the transaction, counts every commit of any connection or
    process the connection has seen, and its own. A commit that made tables through
    this connection (`ensure`, a migration: `changed`) does not count as checked, as
    SQLite does not prepare again the statements its own connection cached on the copies.
    """

    def __init__(self, version: int) -> None:
        self._version = version
        self._attached: dict[int, int] = {}
        #: The features `main` held when each connection's copies were attached or last
        #: refreshed: its statements on their tables read `main`'s, whatever comes later.
        self._seen: dict[int, frozenset[str]] = {}
        #: Features the file was seen to hold (tables are never dropped).
        self._made: set[str] = set()
        #: `main`'s data version at which each connection's copies were last known
        #: current, inside a write (`current(fresh=True)`) or after its commit.
        self._clean: dict[int, int] = {}
        #: Connections whose write transaction made tables in `main` (`changed`).
        self._changed: set[int] = set()

    def ensure(
        self,
        conn: apsw.Connection,
        feature: str,
        if_rolled_back: Callable[[Callable[[], None]], None],
    ) -> None:
        """`ensure`, without looking again once the file was seen to hold `feature` (a
        Store batch or a lease asks on every write). What a transaction makes is only
        remembered if it commits: `if_rolled_back` forgets it otherwise."""
        if feature in self._made:
            return
        if ensure(conn, feature):
            self.changed(conn)
            if_rolled_back(self._made.clear)
        else:
            self._made.add(feature)

    def attach(self, conn: apsw.Connection) -> None:
        """Attach the copies to a connection of a current-format file that lacks a feature."""
        if _int(conn, "PRAGMA user_version") != self._version:
            return
        # Read first: a feature made between this and the attach is then seen as a change.
        version = _int(conn, "PRAGMA main.schema_version")
        self._clean.pop(id(conn), None)
        if attach_absent(conn):
            self._attached[id(conn)] = version
            self._seen[id(conn)] = frozenset(present(conn))

    def current(
        self, conn: apsw.Connection, needs: Collection[str] = (), fresh: bool = False
    ) -> bool:
        """False if `main`'s schema changed since `conn`'s copies were attached, unless
        `main` held every feature of `needs` then: `main`'s tables are never dropped, so
        statements reading only those (a Store's get, say) need no check of the schema.
        `fresh`: `conn` is in a transaction that reads `main` (a write's `BEGIN
        IMMEDIATE`), so its data version is up to date: unchanged since the connection
        was last known current, nothing is read."""
        key = id(conn)
        attached = self._attached.get(key)
        if attached is None:
            return True
        if needs and self._seen.get(key, frozenset()).issuperset(needs):
            if fresh:  # not checked: a commit of this transaction proves nothing
                self._clean.pop(key, None)
            return True
        if not fresh:
            return attached == _int(conn, "PRAGMA main.schema_version")
        version = conn.data_version("main")
        if self._clean.get(key) == version:
            return True
        if attached != _int(conn, "PRAGMA main.schema_version"):
            return False
        self._clean[key] = version
        return True

    def changed(self, conn: apsw.Connection) -> None:
        """`conn`'s write transaction made tables in `main`: its statements cached on the
        copies still read them, so its next write checks the schema again."""
        self._changed.add(id(conn))
        self._clean.pop(id(conn), None)

    def committed(self, conn: apsw.Connection) -> None:
        """After `conn`'s write committed: if its copies were known current when the
        write began and it made no tables, they are current at its new data version."""
        key = id(conn)
        if key in self._changed:
            self._changed.discard(key)
            self._clean.pop(key, None)
        elif key in self._clean:
            self._clean[key] = conn.data_version("main")

    def refresh(
        self, conn: apsw.Connection, needs: Collection[str] = (), fresh: bool = False
    ) -> None:
        """Make `conn` see the tables `main` gained since it looked (inside a transaction
        or not). Two things keep a connection on the copies: its cached schema of `main`,
        which SQLite reloads only when a statement reads `main`; and its prepared
        statements, which SQLite prepares again only when the schema of a database they
        read changes. So read a table of `main` (the schema reloads), then change the
        `absent` database's schema (every prepared statement expires). `needs`, `fresh`:
        as `current` takes them."""
        if self.current(conn, needs, fresh):
            return
        version = _int(conn, "PRAGMA main.schema_version")
        fetchall(conn, "SELECT count(*) FROM main.meta")
        quiet = _int(conn, "PRAGMA query_only")
        if quiet:
            conn.execute("PRAGMA query_only=0")  # the in-memory `absent` only
        try:
            conn.execute(f"CREATE TABLE {ABSENT}.tl_expire(x); DROP TABLE {ABSENT}.tl_expire")
        finally:
            if quiet:
                conn.execute("PRAGMA query_only=1")
        self._attached[id(conn)] = version
        self._seen[id(conn)] = frozenset(present(conn))
        if fresh:
            self._clean[id(conn)] = conn.data_version("main")

    def forget(self, conn: apsw.Connection) -> None:
        """Drop what is noted of a connection about to close (its id may be reused)."""
        self._attached.pop(id(conn), None)
        self._seen.pop(id(conn), None)
        self._clean.pop(id(conn), None)
        self._changed.discard(id(conn))


def _int(conn: apsw.Connection, sql: str) -> int:
    return int(fetchall(conn, sql)[0][0])


def missing(conn: apsw.Connection) -> set[str]:
    """The features the file (`main`) has no tables of yet."""
    every = {feature_of(item.name) for item in _replayed().objects if item.kind == "table"}
    return every - present(conn)


#: Bytes per page of the empty copies' image (SQLite's smallest).
_COPY_PAGE_SIZE: Final = 512
#: The images of the empty copies, by the set of features they stand in for.
_template_images: dict[frozenset[str], bytes] = {}


def _template(lacking: frozenset[str]) -> bytes:
    """The image of an in-memory database holding empty copies of the tables of the
    features `lacking`, of the tables their foreign keys name, and of those tables'
    indexes, each table refusing inserts (built once per process and set of features)."""
    with _schema_lock:
        image = _template_images.get(lacking)
    if image is not None:
        return image
    objects = _replayed().objects
    tables = {item.name: item for item in objects if item.kind == "table"}
    conn = apsw.Connection(":memory:")
    try:
        # Every copy is an empty b-tree of one page: the smallest pages make the image,
        # which each connection holds a copy of, 1/8 of its size at the default 4 KiB.
        conn.execute(f"PRAGMA page_size={_COPY_PAGE_SIZE}")
        wanted = [name for name, item in tables.items() if feature_of(name) in lacking]
        made: set[str] = set()
        while wanted:
            name = wanted.pop()
            if name in made:
                continue
            made.add(name)
            item = tables[name]
            conn.execute(item.sql)
            if item.virtual:
                continue
            conn.execute(
                f"CREATE TRIGGER {_quote('refuse_' + name)} BEFORE INSERT ON {_quote(name)} "
                f"BEGIN SELECT RAISE(ABORT, 'threadloom: {name} was written before its "
                f"feature was made (a bug: report it)'); END"
            )
            for key in conn.execute(f"PRAGMA foreign_key_list({_quote(name)})"):
                parent = str(key[2])
                if feature_of(parent) != META:
                    wanted.append(parent)
        for item in objects:
            if item.kind == "index" and item.table in made:
                conn.execute(item.sql)
        image = conn.serialize("main")
    finally:
        conn.close()
    with _schema_lock:
        _template_images[lacking] = image
    return image
