"""`verify`: every check a read depends on, in one read transaction (engine layer).

Checks, in order (`--quick` runs those marked q):

1. `sqlite` (q): SQLite's own structure, `PRAGMA integrity_check` (`quick_check` when
   quick): every b-tree page, every index entry against its row, free lists.
2. `owners` (q): every body row belongs to a thread of the file, every thread to a
   scope, every scope row's seal holds and its threads are those its census records,
   every metadata key row belongs to a checkpoint; no row is newer than its thread's
   put counter (`threads.seq`).
3. `heads` (q): every namespace's head row (newest id, count, census of its ids) is what
   its checkpoints say (`heads.py`): a checkpoint hidden from reads, or a thread whose
   rows moved away, shows here.
4. `rows`: every body row of every thread decodes and its seal holds: the body's blake3
   after the row's identity (scope, thread id, the sealed columns) is removed from the
   stored digest (`seal.py`). A changed thread id, namespace, parent id, channel or
   index fails here, naming the thread and checkpoint.
5. `keys`: every metadata key row of a checkpoint is what its plain metadata holds (the
   rows `list(filter=...)` decides on).
6. `references`: every value a checkpoint, a pending write or another value names is
   stored in its thread.
7. `index`: every thread's `bytes` in the thread index is what its rows take, and the
   index was filled (format 6).
8. `store`: the Store's items (engine/items/checks.py).
9. `blocks` (q): every block a row lists exists, `blocks.refs` equals the references the
   rows hold, every extent's `live` equals its blocks (a count above what the rows
   hold is a `leak`: kept too long, never data lost).

A check that cannot finish on a damaged file reports that as a problem and the others
still run. Nothing here writes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import apsw
import ormsgpack

from threadloom.engine.checkpoints.values import children
from threadloom.engine.format import heads, idkeys, keys, refkeys
from threadloom.engine.format.tables import LEFT_OWNERS, BodyTable
from threadloom.engine.items import checks as item_checks
from threadloom.engine.items.rows import Items
from threadloom.engine.items.vectors import stored_index
from threadloom.engine.sql import fetchall
from threadloom.engine.threads import threadfacts
from threadloom.errors import CorruptionError, MissingDocumentsError
from threadloom.protocol import references

if TYPE_CHECKING:
    from threadloom.engine.file import File

#: Most problems one check lists before it only counts them.
MOST = 1000

_DAMAGE = (
    CorruptionError,
    MissingDocumentsError,
    apsw.Error,
    UnicodeDecodeError,
    ValueError,
    TypeError,
    KeyError,
)


@dataclass
class Problem:
    """One thing wrong with the file, named as precisely as the damage allows."""

    check: str
    detail: str
    scope: str | None = None
    thread: str | None = None
    checkpoint: str | None = None

    def __str__(self) -> str:
        where = []
        if self.scope is not None:
            where.append(f"scope {self.scope}")
        if self.thread is not None:
            where.append(f"thread {self.thread!r}")
        if self.checkpoint is not None:
            where.append(f"checkpoint {self.checkpoint}")
        return f"[{self.check}] " + (", ".join(where) + ": " if where else "") + self.detail


@dataclass
class Report:
    """What `verify` checked and found; the file is sound when `problems` is empty."""

    quick: bool
    checks: list[str] = field(default_factory=list)
    threads: int = 0
    rows: int = 0
    blocks: int = 0
    extents: int = 0
    problems: list[Problem] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)
    omitted: int = 0

    @property
    def sound(self) -> bool:
        return not self.problems and not self.omitted

    def add(self, problem: Problem) -> None:
        if len(self.problems) < MOST:
            self.problems.append(problem)
        else:
            self.omitted += 1

    def as_dict(self) -> dict[str, Any]:
        found = asdict(self)
        found["sound"] = self.sound
        found["problems"] = [{**asdict(p), "message": str(p)} for p in self.problems]
        return found


def verify(file: File, *, quick: bool = False) -> Report:
    """Check `file` (open read-only or not) and return the report."""
    report = Report(quick=quick)
    checks: list[tuple[str, Callable[[apsw.Connection, Report], None]]] = [
        ("sqlite", lambda conn, rep: _structure(conn, rep, quick)),
        ("owners", lambda conn, rep: _owners(file, conn, rep)),
        ("heads", _heads),
    ]
    if not quick:
        checks.append(("rows", lambda conn, rep: _rows(file, conn, rep)))
        checks.append(("index", lambda conn, rep: _index(file, conn, rep)))
        checks.append(("store", lambda conn, rep: _store(file, conn, rep)))
    checks.append(("blocks", lambda conn, rep: _blocks(file, rep)))
    with file.connection() as conn:
        for name, check in checks:
            report.checks.append(name)
            try:
                with file.read():
                    check(conn, report)
            except _DAMAGE as exc:
                report.add(Problem(name, f"the check could not finish: {_said(exc)}"))
    return report


def _said(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _threaded(file: File) -> dict[str, BodyTable]:
    return {name: table for name, table in file.body_tables.items() if table.threaded}


def _structure(conn: apsw.Connection, report: Report, quick: bool) -> None:
    pragma = "quick_check" if quick else "integrity_check"
    for (line,) in fetchall(conn, f"PRAGMA {pragma}({MOST})"):
        if line != "ok":
            report.add(Problem("sqlite", str(line)))


def _owners(file: File, conn: apsw.Connection, report: Report) -> None:
    for table in _threaded(file):
        for thread, count in conn.execute(
            f"SELECT x.thread, count(*) FROM {table} x WHERE NOT EXISTS "
            "(SELECT 1 FROM threads t WHERE t.id = x.thread) GROUP BY x.thread"
        ):
            report.add(
                Problem(
                    "owners",
                    f"{count} {table} rows belong to thread row {thread}, which the file does "
                    "not hold (a thread row was changed or lost)",
                )
            )
        for thread_id, seq, newest in conn.execute(
            f"SELECT t.thread_id, t.seq, max(x.seq) FROM {table} x JOIN threads t "
            "ON t.id = x.thread GROUP BY t.id HAVING max(x.seq) > t.seq"
        ):
            report.add(
                Problem(
                    "owners",
                    f"a {table} row has put number {newest}, past the thread's count {seq}",
                    thread=str(thread_id),
                )
            )
    for thread_id, scope in conn.execute(
        "SELECT thread_id, scope FROM threads t WHERE NOT EXISTS "
        "(SELECT 1 FROM scopes s WHERE s.id = t.scope)"
    ):
        report.add(
            Problem(
                "owners",
                f"the thread belongs to scope row {scope}, which the file does not hold",
                thread=str(thread_id),
            )
        )
    for what in heads.damaged_scopes(conn):
        report.add(Problem("owners", what))
    orphans = fetchall(
        conn,
        "SELECT count(*) FROM checkpoint_keys k WHERE NOT EXISTS "
        "(SELECT 1 FROM checkpoints c WHERE c.id = k.checkpoint)",
    )[0][0]
    if orphans:
        report.add(Problem("owners", f"{orphans} metadata key rows belong to no checkpoint"))


def _heads(conn: apsw.Connection, report: Report) -> None:
    for thread_id, ns, what in heads.mismatches(conn):
        report.add(Problem("heads", f"namespace {ns!r}: {what}", thread=str(thread_id)))


def _rows(file: File, conn: apsw.Connection, report: Report) -> None:
    """Decode every body row, thread by thread, and check what each references."""
    threads = fetchall(
        conn,
        "SELECT t.id, t.thread_id, s.namespace, s.agent_id FROM threads t "
        "LEFT JOIN scopes s ON s.id = t.scope ORDER BY t.id",
    )
    report.threads = len(threads)
    for thread, thread_id, namespace, agent_id in threads:
        where = {"scope": f"{namespace}/{agent_id}", "thread": str(thread_id)}
        stored: set[str] = set()
        wanted: list[tuple[str, str | None, str]] = []  # (ref, checkpoint, by whom)
        for table, described in _threaded(file).items():
            for row, data in _decoded(file, conn, table, described, thread, report, where):
                report.rows += 1
                if data is None:
                    continue
                checkpoint = row.get("checkpoint_id")
                name = described.name_row(row)
                try:
                    if table == "checkpoints" and row.get("keyed"):
                        _check_keys(conn, row, data, report, where)
                    if table == "vals":
                        ref = refkeys.text(row["ref_key"])
                        if refkeys.key(ref) != row["ref_key"]:
                            # Sealed to its ref's text, but no lookup of that ref finds it.
                            raise CorruptionError(
                                f"its key is not the one its ref {ref} is stored under"
                            )
                        stored.add(ref)
                        named = children(data)
                    else:
                        if table == "writes":
                            task_id = idkeys.text(row["task_key"])
                            if idkeys.key(task_id) != row["task_key"]:
                                # Sealed to its id's text, but no lookup of that id finds it.
                                raise CorruptionError(
                                    f"its key is not the one its task id {task_id} is stored under"
                                )
                        named = [ref for ref, _ in references(data)]
                except _DAMAGE as exc:  # one row the check cannot read: one problem
                    report.add(
                        Problem(
                            "rows",
                            f"{name} could not be checked: {_said(exc)}",
                            checkpoint=checkpoint if isinstance(checkpoint, str) else None,
                            **where,
                        )
                    )
                    continue
                wanted.extend((ref, checkpoint, name) for ref in named)
        for ref, checkpoint, name in wanted:
            if ref not in stored:
                report.add(
                    Problem(
                        "references",
                        f"{name} names value {ref}, which the thread does not hold",
                        checkpoint=checkpoint,
                        **where,
                    )
                )


class _Unknown:
    """A metadata value of an extension type: verify cannot rebuild its key row."""


def _check_keys(
    conn: apsw.Connection,
    row: dict[str, Any],
    data: dict[str, Any],
    report: Report,
    where: dict[str, str],
) -> None:
    """Compare a keyed checkpoint's metadata key rows with its stored metadata.

    Plain metadata (msgpack or JSON, inline) is decoded without the serializer: an
    extension-typed value cannot be rebuilt and is skipped; anything else must match.
    """
    stored = data.get("metadata") or {}
    if "payload" not in stored or stored.get("kind") not in keys.PLAIN_KINDS:
        return  # split metadata: its parts are checked as values
    payload = bytes(stored["payload"])
    if stored["kind"] == "json":
        metadata = json.loads(payload)
    else:
        metadata = ormsgpack.unpackb(
            payload,
            ext_hook=lambda _code, _data: _Unknown(),
            option=ormsgpack.OPT_NON_STR_KEYS,
        )
    expected = dict(keys.rows_of(metadata))
    found: dict[str, Any] = dict(
        fetchall(conn, "SELECT key, value FROM checkpoint_keys WHERE checkpoint = ?", (row["id"],))
    )
    wrong = sorted(
        key
        for key in expected.keys() | found.keys()
        if not isinstance(metadata.get(key), _Unknown)
        and (key not in found or key not in expected or not _same(expected[key], found[key]))
    )
    if wrong:
        report.add(
            Problem(
                "keys",
                f"its metadata key rows {wrong} differ from its metadata (filters would "
                "decide on them)",
                checkpoint=str(row["checkpoint_id"]),
                **where,
            )
        )


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b if not isinstance(a, bytes) else bytes(b) == a


def _decoded(
    file: File,
    conn: apsw.Connection,
    table: str,
    described: BodyTable,
    thread: int,
    report: Report,
    where: dict[str, str],
) -> Iterator[tuple[dict[str, Any], dict[str, Any] | None]]:
    """Each row of `thread` in `table` by column name, with its body (None if damaged)."""
    names = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
    cursor = conn.execute(
        f"SELECT x.*, {described.unsealed('x')} FROM {table} x{LEFT_OWNERS} WHERE x.thread = ?",
        (thread,),
    )
    for *values, digest in cursor:
        row = dict(zip(names, values, strict=True))
        try:
            data = file.content.unpack(
                conn,
                row["body"],
                digest,
                described.name_row(row),
                thread if table == "vals" else None,  # a delta's base: a row of the thread
            )
        except _DAMAGE as exc:
            checkpoint = row.get("checkpoint_id")
            detail = str(exc) if isinstance(exc, CorruptionError) else _said(exc)
            report.add(
                Problem(
                    "rows",
                    detail,
                    checkpoint=checkpoint if isinstance(checkpoint, str) else None,
                    **where,
                )
            )
            data = None
        yield row, data


def _index(file: File, conn: apsw.Connection, report: Report) -> None:
    """The thread index: each thread's bytes are what its rows take (threadindex.py)."""
    for scope, thread_id, detail in threadfacts.problems(conn, file.content):
        report.add(Problem("index", detail, scope or None, thread_id or None))


def _store(file: File, conn: apsw.Connection, report: Report) -> None:
    """The Store's items: each body decoded against its seal, its filter index rows,
    the namespace counts, and the vector index as the file records it."""
    for line in item_checks.problems(Items(file, stored_index(conn)), conn):
        report.add(Problem("store", line))


def _blocks(file: File, report: Report) -> None:
    found = file.content.verify()
    report.blocks, report.extents = found["blocks"], found["extents"]
    for line in found["problems"]:
        report.add(Problem("blocks", line))
    report.leaks.extend(found["leaks"])
