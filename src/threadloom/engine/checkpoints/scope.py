"""A scope (namespace + agent id) of a file: its row, its threads, its memory, its epoch.

Engine layer. Everything the writer, reader, document view and maintenance of one
scope share: the planner, the remembered refs, the decoded-value cache, thread row
ids, and the GC epoch that tells a writer when its memory may name deleted rows.

Every cache of a scope is bounded by its own capacity (below, in estimated bytes; the
remembered refs count refs, as the protocol does) and draws on one byte budget shared
by every scope of the process (`core.lru.process_budget()`, THREADLOOM_MEMORY_BUDGET),
so their total does not grow with the number of savers, threads or values.

Remembered refs let a put skip values the file holds. Only a deletion of values
(delete, prune, GC, in any process) can make that memory wrong, and each one bumps
`meta.gc_epoch` in its transaction. A put reads the epoch inside its own write
transaction and plans again from the file if it moved (`retrying`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar, cast

import apsw

from threadloom.core.lru import Budget, Lru, MiB, process_budget
from threadloom.engine.checkpoints.cache import DEFAULT_CAPACITY, ValueCache, closure_cost, weight
from threadloom.engine.content.blocks import bump_gc_epoch, held
from threadloom.engine.content.content_store import Packed
from threadloom.engine.file import File
from threadloom.engine.format import features, heads
from threadloom.engine.format.codec import DeltaCompressor
from threadloom.engine.format.seal import Sealer
from threadloom.engine.format.tables import (
    CHECKPOINT_ROWS,
    WRITE_ROWS,
    BodyTable,
    CheckpointRow,
    PendingRow,
)
from threadloom.engine.sql import fetchall
from threadloom.engine.threads import threadfacts, threadindex
from threadloom.errors import EngineError, InvalidArgumentError, ProtocolError
from threadloom.protocol import KnownReferences, Planner, Serialization
from threadloom.protocol.constants import RETENTION_GRACE_SECONDS

T = TypeVar("T")

log = logging.getLogger("threadloom.engine")

#: Attempts of a write whose memory went stale (other processes deleting meanwhile).
RETRIES = 3
#: Estimated bytes of resolved checkpoints (decoded document, values, raw channels) kept
#: per scope: a get_tuple of a checkpoint read lately then reads only its pending writes.
CLOSURE_BYTES = 2 * MiB
#: Estimated bytes of decoded pending-write documents kept per scope (each verified once).
PENDING_BYTES = 1 * MiB
#: What `Scope.chunk_bases` may hold: a base of up to ~2.3 KiB per list of a thread in use.
CHUNK_BASE_BYTES = 256 * 1024
#: Bytes of zstd compressors kept per scope for the chunk bases in use (`delta_compressors`):
#: 100-160 KiB each (`memory_size`), so the bases of three or four lists at once: a
#: thread's turns frame against one base per list; 1 MiB held 0.4 MiB more peak RSS over
#: 200 short threads for no CPU measurable (bench/README.md, "Peak RSS, 2026-12-03").
DELTA_COMPRESSOR_BYTES = 512 * 1024
#: Refs remembered per scope (the protocol's default of 200,000 holds far more than the
#: threads a process works on at once, at ~100 bytes each).
MEMORY_REFS = 20_000
#: Estimated bytes of list encodings (and fingerprints) the planner keeps per scope.
LIST_MEMO_BYTES = 4 * MiB
#: Bytes of list chunks kept as the serializer decoded them (pickles), per scope: a read
#: of a chunk met before unpickles it instead of running the serializer again.
DECODED_BYTES = 4 * MiB
#: Estimated bytes of remembered thread row ids per scope (~200 bytes each).
THREAD_ROW_BYTES = 512 * 1024
#: Threads whose cached values, list encodings, remembered refs, resolved checkpoints and
#: pending writes a scope keeps: a thread that this many others were written or read
#: since is forgotten whole. One long thread keeps every cache's capacity; many short
#: ones stop holding the caches full of threads that are done (peak RSS on 200 threads,
#: bench/README.md).
ACTIVE_THREADS = 8


#: The thread index's fields of user text: with an encrypting serializer none is written
#: in the clear unless the application names it (`Scope(plaintext=...)`).
TEXT_FIELDS = ("title", "summary", "tags")


class Reserved(NamedTuple):
    """What `Scope.reserve` reserved: the thread's row, its first sequence number, and
    whether the thread index has no title for it yet (the writer then derives one)."""

    thread: int
    seq: int
    untitled: bool


@dataclasses.dataclass(frozen=True, slots=True)
class KeptCompressor:
    """A delta compressor kept for a chunk base (`Scope.delta_compressors`): the base's
    msgpack it was made from, and the lock its one user at a time holds."""

    compressor: DeltaCompressor
    base: bytes
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, compare=False)


class StaleMemory(Exception):
    """Values were deleted since the memory a plan relied on was built."""

    def __init__(self, epoch: int) -> None:
        super().__init__(epoch)
        self.epoch = epoch


class Scope:
    """One scope of a file.

    Args:
        file: the open file.
        namespace: document namespace of the scope.
        agent_id: agent id of the scope (prefix of every document key).
        serialization: the serializer (from the adapter); None opens the scope for its
            documents only (serve, export, import).
        cache_bytes: size of the decoded-value cache (0 disables it).
        budget: the byte budget every cache of the scope draws on (default: the
            process's, `core.lru.process_budget()`).
        owner_keys: the `configurable` keys a thread's owner is taken from (index).
        messages_channel: the list channel the thread index counts and titles from.
        plaintext: the thread index fields (`TEXT_FIELDS`) the application allows in the
            clear when the serializer encrypts (`keeps_text`).
    """

    def __init__(
        self,
        file: File,
        *,
        namespace: str,
        agent_id: str,
        serialization: Serialization | None = None,
        cache_bytes: int = DEFAULT_CAPACITY,
        budget: Budget | None = None,
        owner_keys: Sequence[str] = threadindex.OWNER_KEYS,
        messages_channel: str = threadindex.MESSAGES,
        plaintext: Sequence[str] = (),
    ) -> None:
        if isinstance(plaintext, str) or not set(plaintext) <= set(TEXT_FIELDS):
            raise InvalidArgumentError(
                f"plaintext names thread index fields among {list(TEXT_FIELDS)}, not {plaintext!r}"
            )
        if not isinstance(namespace, str) or not namespace or "\0" in namespace:
            raise ProtocolError("namespace must be a non-empty string without NUL")
        self.file = file
        self.content = file.content
        self.namespace = namespace
        self.agent_id = agent_id
        self._sealer = Sealer(namespace, agent_id)
        self.serialization = serialization
        self.budget = budget if budget is not None else process_budget()
        self.planner = Planner(
            agent_id,
            serialization,
            memo_bytes=LIST_MEMO_BYTES,
            decoded_bytes=DECODED_BYTES,
            budget=self.budget,
            keyed=False,  # rows are keyed by their columns; `Planner.key` serves the views
        )
        self.memory = KnownReferences(MEMORY_REFS, self.budget)
        self.cache = ValueCache(cache_bytes, self.budget)
        self.closures: Lru[tuple[Any, ...], tuple[dict[str, Any], Any]] = Lru(
            CLOSURE_BYTES, closure_cost, budget=self.budget, group=0
        )
        #: Decoded pending writes by their row's identity and stored digest (`Reader.load`).
        self.pending: Lru[tuple[Any, ...], dict[str, Any]] = Lru(
            PENDING_BYTES, weight, budget=self.budget, group=1
        )
        #: The chunk version each list's later versions are stored as deltas of
        #: (`Writer._deltas`): (thread id, first element ref) -> (its ref, its msgpack).
        #: Only refs this scope stored whole since its epoch last moved.
        self.chunk_bases: Lru[tuple[str, str], tuple[str, bytes]] = Lru(
            CHUNK_BASE_BYTES, _chunk_base_cost, budget=self.budget, group=0
        )
        #: A compressor per chunk base that framed a delta (`codec.delta_compressor`),
        #: to frame the next versions of its list with: (thread id, base ref) -> it.
        self.delta_compressors: Lru[tuple[str, str], KeptCompressor] = Lru(
            DELTA_COMPRESSOR_BYTES, _compressor_cost, budget=self.budget, group=0
        )
        #: Seconds a value document is safe from collection after it is written (SPEC §6).
        self.grace = RETENTION_GRACE_SECONDS
        #: The `configurable` keys a new thread's owner is taken from (thread index).
        self.owner_keys: tuple[str, ...] = tuple(owner_keys)
        #: The channel the thread index counts messages of and takes titles from.
        self.messages_channel = messages_channel
        self.plaintext = frozenset(plaintext)
        self._thread_rows: Lru[str, int] = Lru(
            THREAD_ROW_BYTES, budget=self.budget, weigh=_thread_row_cost
        )
        #: The threads used lately, least recently first: thread id -> row id (`touch`).
        self._active: OrderedDict[str, int] = OrderedDict()
        self._active_lock = threading.Lock()
        self._epoch = 0
        #: The threads were checked against the scope's census (once per scope object).
        self._threads_checked = False
        self._id: int | None = None
        with file.read() as conn:
            self._id = self._find(conn)
            self._epoch = self.read_epoch(conn)
            pending = not file.readonly and threadfacts.pending(conn)
        if not pending:
            return
        with file.write() as conn:
            if threadfacts.pending(conn):
                # The format-6 upgrade left the index to fill from the rows (schema.py),
                # read with this scope's owner keys and messages channel.
                count = threadfacts.build(
                    conn, self.content, owner_keys=self.owner_keys, channel=messages_channel
                )
                log.info("%s: thread index built for %d threads", file.path, count)

    def ensure_id(self, conn: apsw.Connection) -> int:
        """The scope's row id, its row (and the file's checkpoint tables) made first if
        needed, inside the caller's write transaction: a scope that only ever read
        leaves nothing in the file (format 8)."""
        if self._id is None:
            self.file.ensure(conn, features.CHECKPOINTS)
            self._id = self._find(conn)
            if self._id is None:
                conn.execute(
                    "INSERT INTO scopes(namespace, agent_id) VALUES(?, ?)",
                    (self.namespace, self.agent_id),
                )
                self._id = self._find(conn)
                self.file.if_rolled_back(self._forget_id)
            assert self._id is not None
        return self._id

    def _forget_id(self) -> None:
        self._id = None

    @property
    def id(self) -> int | None:
        """The scope's row id; None while no write made it (this object's or another's:
        until then each use looks for it again)."""
        if self._id is None:
            with self.file.connection() as conn:
                self._id = self._find(conn)
        return self._id

    def _find(self, conn: apsw.Connection) -> int | None:
        # A file holds a handful of scopes: scanning them keeps a damaged unique index
        # from hiding one (the insert beside it would then make a second, empty scope),
        # and every scope row's seal is checked first.
        heads.check_scopes(conn)
        rows = fetchall(
            conn,
            "SELECT id FROM scopes NOT INDEXED WHERE namespace = ? AND agent_id = ?",
            (self.namespace, self.agent_id),
        )
        return int(rows[0][0]) if rows else None

    # -- threads ---------------------------------------------------------------------------

    def thread(self, conn: apsw.Connection, thread_id: str) -> int | None:
        """The row id of `thread_id` in this scope, or None."""
        rows = fetchall(
            conn,
            "SELECT id FROM threads WHERE scope = ? AND thread_id = ?",
            (self.id, thread_id),
        )
        return rows[0][0] if rows else None

    def check_threads(self, conn: apsw.Connection) -> None:
        """Once per scope object, before answering that a thread does not exist (or
        creating it): check the scope's threads against its census (`heads.py`)."""
        if self._threads_checked or self.id is None:
            return
        heads.check_threads(conn, self.id, f"{self.namespace}/{self.agent_id}")
        self._threads_checked = True

    def ensure_thread(self, conn: apsw.Connection, thread_id: str, now: float) -> int:
        """The row id of `thread_id`, created if needed (inside a write)."""
        scope = self.ensure_id(conn)
        self.check_threads(conn)
        conn.execute(
            "INSERT INTO threads(scope, thread_id, created_at, updated_at) VALUES(?, ?, ?, ?) "
            "ON CONFLICT DO NOTHING",
            (scope, thread_id, now, now),
        )
        found = self.thread(conn, thread_id)
        assert found is not None
        self._thread_rows.put(thread_id, found)
        return found

    def seal(
        self, table: BodyTable, digest: bytes, thread_id: str, *columns: str | int | None
    ) -> bytes:
        """The digest to store for a row of `table` in thread `thread_id` of this scope."""
        if len(columns) != len(table.sealed):
            raise ValueError(f"{table.name} rows seal {table.sealed}, got {len(columns)} columns")
        return self._sealer.seal(table.name, digest, thread_id, *columns)

    def body_digest(self, row: CheckpointRow | PendingRow) -> bytes:
        """The body digest a checkpoint or pending-write row must decode to: its stored
        digest with this scope's identity of the row removed (`seal.py`)."""
        if isinstance(row, CheckpointRow):
            columns: tuple[str | int | None, ...] = (
                row.checkpoint_ns,
                row.checkpoint_id,
                row.parent_id,
                row.schema,
                row.keyed,
            )
            return self.seal(CHECKPOINT_ROWS, bytes(row.digest), row.thread_id, *columns)
        columns = (
            row.checkpoint_ns,
            row.checkpoint_id,
            row.task_id,
            row.idx,
            row.task_path,
            row.channel,
            row.schema,
        )
        return self.seal(WRITE_ROWS, bytes(row.digest), row.thread_id, *columns)

    def thread_name(self, conn: apsw.Connection, thread: int) -> str:
        """The thread id of row `thread`."""
        return str(fetchall(conn, "SELECT thread_id FROM threads WHERE id = ?", (thread,))[0][0])

    def forget_thread(self, thread_id: str, thread: int | None = None) -> None:
        """Forget what this process remembers of a thread (after deleting from it)."""
        self.memory.forget(thread_id)
        self._thread_rows.pop(thread_id)
        self.chunk_bases.drop_group(thread_id)
        self.delta_compressors.drop_group(thread_id)
        self.planner.decoded.forget(thread_id)
        if thread is not None:
            self.cache.drop(thread)

    def touch(self, thread_id: str, thread: int) -> None:
        """Note that a put or a read used thread `thread_id` (row `thread`); once more than
        ACTIVE_THREADS threads were, forget what the caches hold of the one used longest
        ago (`idle`). Forgetting never changes a result: what is gone is read again."""
        with self._active_lock:
            active = self._active
            if thread_id in active:
                active.move_to_end(thread_id)
                active[thread_id] = thread
                return
            active[thread_id] = thread
            if len(active) <= ACTIVE_THREADS:
                return
            idle, row = active.popitem(last=False)
        self.idle(idle, row)

    def idle(self, thread_id: str, thread: int) -> None:
        """Forget what every cache of the scope holds of a thread no longer in use (its
        thread row id stays known)."""
        self.memory.forget(thread_id)
        self.cache.drop(thread)
        self.closures.drop_group(thread)
        self.pending.drop_group(thread_id)
        self.chunk_bases.drop_group(thread_id)
        self.delta_compressors.drop_group(thread_id)
        self.planner.forget_lists(thread_id)
        # The decoded chunks stay: content-addressed, bounded by their own capacity and
        # the budget, and what a thread coming back after others ran reads again.

    def thread_ids(self) -> list[str]:
        """Return the thread ids of this scope that hold checkpoints, sorted."""
        with self.file.read() as conn:
            rows = fetchall(
                conn,
                "SELECT thread_id FROM threads t WHERE scope = ? AND EXISTS "
                "(SELECT 1 FROM checkpoints c WHERE c.thread = t.id) ORDER BY thread_id",
                (self.id,),
            )
        return [r[0] for r in rows]

    def reserve(
        self,
        conn: apsw.Connection,
        thread_id: str,
        count: int,
        now: float,
        packs: Sequence[Packed] = (),
        planned: int | None = None,
    ) -> Reserved:
        """Check the GC epoch, then reserve `count` sequence numbers of a thread (created
        if needed), in one statement when the thread's row id is remembered; the thread's
        last activity becomes `now` and its bytes grow by what `packs` take (a row that
        turns out to be stored already is taken back with `unheld`).

        Returns:
            The thread's row id, the first reserved number, and whether the thread has
            no title yet. Row ids are never reused (AUTOINCREMENT), so a remembered id is
            checked by the update itself.

        Raises:
            StaleMemory: see `check_epoch`, against the epoch the caller `planned` from
                (the caller's transaction rolls back).
        """
        sql = (
            "UPDATE threads SET seq = seq + ?, updated_at = ?, bytes = bytes + ? WHERE id = ? "
            "RETURNING seq, (SELECT value FROM meta WHERE key = 'gc_epoch'), "
            "title IS NULL AND titled = 0"
        )
        grown = held(packs)
        thread = self._thread_rows.get(thread_id)
        rows = fetchall(conn, sql, (count, now, grown, thread)) if thread is not None else []
        if not rows:
            thread = self.ensure_thread(conn, thread_id, now)
            rows = fetchall(conn, sql, (count, now, grown, thread))
        end, epoch, untitled = rows[0]
        self.check_epoch(conn, packs, int(epoch or 0), planned)
        return Reserved(cast(int, thread), int(end) - count + 1, bool(untitled))

    def reindex(self, conn: apsw.Connection, thread: int, *, recount: bool = True) -> None:
        """Read a thread's index facts again from its rows (`threadfacts.refresh`)."""
        threadfacts.refresh(
            conn,
            self.content,
            thread,
            owner_keys=self.owner_keys,
            channel=self.messages_channel,
            recount=recount,
        )

    def restamp(self, conn: apsw.Connection, thread: int) -> bool:
        """Give a thread copied from elsewhere its checkpoints' times (`threadfacts.restamp`)."""
        return threadfacts.restamp(conn, self.content, thread)

    def unheld(self, conn: apsw.Connection, thread: int, packs: Sequence[Packed]) -> None:
        """Take back the bytes `reserve` counted for rows that were stored already."""
        if packs:
            threadindex.shrink(conn, thread, held(packs))

    # -- collection epoch ------------------------------------------------------------------

    def read_epoch(self, conn: apsw.Connection) -> int:
        """The file's GC epoch."""
        rows = fetchall(conn, "SELECT value FROM meta WHERE key = 'gc_epoch'")
        return int(rows[0][0]) if rows else 0

    def keeps_text(self, field: str) -> bool:
        """Whether the thread index may hold `field` (`TEXT_FIELDS`) in the clear: yes
        unless the serializer encrypts and the application did not allow the field."""
        serialization = self.serialization
        return serialization is None or not serialization.encrypts or field in self.plaintext

    def bump_epoch(self, conn: apsw.Connection) -> None:
        """Record a deletion of values (inside the deleting transaction).

        The scope's own epoch stays behind: its next write plans again from the file.
        (Moving it along here, to keep the memory of other threads warm, let a put that
        recalled refs before the deleting thread forgot them commit references to
        deleted values.)
        """
        bump_gc_epoch(conn)

    def planned(self) -> int:
        """The epoch the memory a write is about to plan from belongs to: taken before the
        plan, checked by `reserve` inside the write's transaction."""
        return self._epoch

    def check_epoch(
        self,
        conn: apsw.Connection,
        packs: Sequence[Packed] = (),
        epoch: int | None = None,
        planned: int | None = None,
    ) -> None:
        """Raise StaleMemory when values were deleted, or the dictionary retired, since
        the memory the write planned from (`planned`, by default the scope's now) or its
        packed bodies were made."""
        if epoch is None:
            epoch = self.read_epoch(conn)
        content = self.content
        if content.epoch != epoch:
            content.reload(conn)
        current = content.current.ident if content.current else None
        if epoch != (self._epoch if planned is None else planned) or any(
            p.dictionary is not None and p.dictionary != current for p in packs
        ):
            # A retraining retired the dictionary these bodies were packed with, or
            # values were deleted: plan and pack again.
            raise StaleMemory(epoch)

    def refresh(self, epoch: int) -> None:
        """Forget everything remembered about the file: it may name deleted rows.

        The threads in use stay noted (`touch`): the planner's list memos, which name
        no row and stay, are still forgotten with their thread once it goes idle.
        """
        self.memory.clear()
        self.cache.clear()
        self.closures.clear()
        self.pending.clear()
        self.chunk_bases.clear()
        self.delta_compressors.clear()
        self._thread_rows.clear()
        self._epoch = epoch

    def release(self) -> None:
        """Empty every cache of the scope (it is closing): their bytes go back to the budget."""
        self.memory.clear()
        self.cache.clear()
        self.closures.clear()
        self.pending.clear()
        self.chunk_bases.clear()
        self.delta_compressors.clear()
        self._thread_rows.clear()
        self.planner.forget_lists()
        self.planner.decoded.forget()
        with self._active_lock:
            self._active.clear()

    def retrying(self, attempt: Callable[[], T], what: str) -> T:
        """Run a write planned from memory, planning again while that memory went stale."""
        for _ in range(RETRIES):
            try:
                return attempt()
            except StaleMemory as stale:
                log.debug(
                    "%s: values deleted meanwhile (epoch %d), planning again", what, stale.epoch
                )
                self.refresh(stale.epoch)
        raise EngineError(f"other processes keep deleting values while {what} runs; retry it")


def _chunk_base_cost(base: tuple[str, bytes]) -> int:
    return len(base[1]) + 200


def _compressor_cost(kept: KeptCompressor) -> int:
    # Its zstd context (with the base loaded as its dictionary), the base and the objects.
    return int(kept.compressor.memory_size()) + len(kept.base) + 1024


def _thread_row_cost(row: int) -> int:
    # The key (a thread id string), the int, the map's and the budget's entries.
    return 200


def namespaces(file: File) -> list[str]:
    """Every document namespace the file holds a scope of, sorted."""
    with file.read() as conn:
        return sorted({r[0] for r in fetchall(conn, "SELECT DISTINCT namespace FROM scopes")})


def agent_ids(file: File, namespace: str) -> list[str]:
    """The agent ids of the file's scopes in `namespace`."""
    with file.read() as conn:
        rows = fetchall(conn, "SELECT agent_id FROM scopes WHERE namespace = ?", (namespace,))
    return [r[0] for r in rows]


class ThreadSeq(NamedTuple):
    """A thread of a namespace and its sequence number (moves on every insert into it)."""

    thread: int
    agent_id: str
    thread_id: str
    seq: int


def thread_seqs(file: File, namespace: str) -> list[ThreadSeq]:
    """Every thread of the scopes in `namespace` with its `seq`, by row id.

    A thread's `seq` grows with every document stored in it (values, checkpoints, pending
    writes, copies), and row ids are never reused: a reader that remembers the seqs sees
    which threads gained documents without reading their documents.
    """
    with file.read() as conn:
        rows = fetchall(
            conn,
            "SELECT t.id, s.agent_id, t.thread_id, t.seq FROM threads t "
            "JOIN scopes s ON t.scope = s.id WHERE s.namespace = ? ORDER BY t.id",
            (namespace,),
        )
    return [ThreadSeq(int(r[0]), str(r[1]), str(r[2]), int(r[3])) for r in rows]
