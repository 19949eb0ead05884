"""What every migration source offers the copier, how a kind declares itself, and what
the LangGraph savers share.

Adapter layer. A source reads one kind of store through its producer's public API or its
documented format, never guessed, and never writes (each is opened read-only); it yields
each thread's history oldest first. Each kind is one module beside this one that
declares a `SourceKind` (`KIND`): its name, how a path or URL is recognized as it, how
it opens, and its Store source where it has one.

Importing these modules loads no LangGraph (the command line reads the kinds' names for
every command, `threadloom doctor` included): each kind imports its driver when it opens.
A driver that is not installed (PostgresSaver's and PostgresStore's, SqliteStore's: the
`migrate` extra) is named in a one-line refusal (`needs_extra`), never a traceback.

LangGraph's `pending_writes` leave out each write's task path, which orders a step's
writes (`writes_sort_key`) and names the node that wrote them; the PostgreSQL source
reads it with the saver's own statement, the SQLite source with the writes themselves,
and each keeps it only when the writes those rows give are, in order, the pending writes
returned (else the path stays "", as in naas's migration): `SaverSource` holds that
loop, `paths_if_same` the comparison.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from threadloom.errors import MigrationError

if TYPE_CHECKING:
    from langgraph.checkpoint.base import CheckpointTuple
    from langgraph.checkpoint.serde.base import SerializerProtocol
    from langgraph.store.base import BaseStore

    from threadloom.engine.format import Found

#: Task paths of one checkpoint's pending writes: task id -> task path.
TaskPaths = dict[str, str]
#: A LangGraph Store open for reading: the store, how to close it, how the report names it.
OpenedStore = tuple["BaseStore", Callable[[], None], dict[str, Any]]


#: The distributions that provide the modules the migrate extra brings, by top module.
_DISTRIBUTIONS = {
    "psycopg": "psycopg",
    "langgraph.checkpoint.postgres": "langgraph-checkpoint-postgres",
    "langgraph.store.postgres": "langgraph-checkpoint-postgres",
    "langgraph.store.sqlite": "langgraph-checkpoint-sqlite",
    "langgraph.checkpoint.sqlite": "langgraph-checkpoint-sqlite",
}
#: How a refusal says to install them (threadloom is installed from its clone).
EXTRA_HINT = "install the migrate extra: pip install '.[migrate]' in threadloom's clone"


def needs_extra(what: str, error: ImportError, *, doing: str = "reading") -> MigrationError:
    """The refusal when reading `what` ("a PostgresSaver database"), or `doing` something
    else with it ("writing"), lacks a driver of the `migrate` extra: names the missing
    package and how to install it."""
    name = error.name or ""
    package = next(
        (
            dist
            for module, dist in _DISTRIBUTIONS.items()
            if name == module or name.startswith(module + ".")
        ),
        name.split(".")[0] or "a driver",
    )
    return MigrationError(f"{doing} {what} needs {package}, which is not installed; {EXTRA_HINT}")


@dataclass
class ThreadHistory:
    """One thread of a source.

    Attributes:
        thread_id: the thread.
        checkpoints: checkpoint tuples (every namespace) oldest first, as the source's
            API returns them (schema-1 documents restored).
        task_paths: per `(checkpoint_ns, checkpoint_id)`, the task path of each task
            that has pending writes there, where the source knows it.
        documents: schema-2 documents to store as they are, `(collection, data)`.
    """

    thread_id: str
    checkpoints: list[CheckpointTuple] = field(default_factory=list)
    task_paths: dict[tuple[str, str], TaskPaths] = field(default_factory=dict)
    documents: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


class Source:
    """What every source offers the copier."""

    kind = ""

    def describe(self) -> dict[str, Any]:
        """The report's `source`: the kind, and the path or the URL (password redacted)."""
        raise NotImplementedError

    def thread_ids(self) -> list[str]:
        """Every thread of the source, sorted."""
        raise NotImplementedError

    def histories(self, thread_ids: Sequence[str]) -> Iterator[ThreadHistory]:
        """The histories of `thread_ids` that exist in the source, one at a time."""
        raise NotImplementedError

    def close(self) -> None:
        """Let go of the source."""


@dataclass(frozen=True)
class Options:
    """What `threadloom.migrate` gives every source it opens.

    Attributes:
        namespace, agent_id: the scope (a naas file's scope to read).
        serde: the serializer of the source's values (None: LangGraph's default).
    """

    namespace: str
    agent_id: str
    serde: SerializerProtocol | None = None


@dataclass(frozen=True)
class SourceKind:
    """One kind of source, as its module declares it (`KIND`); `sources/__init__.py`
    registers it, and `threadloom.migrate` recognizes and opens sources through it.

    Attributes:
        name: what `--from`, `kind=` and the report call it ("sqlite").
        wanted: what a refusal says a source of this kind is ("a PostgreSQL URL").
        opens: the source read from a path or URL recognized as this kind.
        found: what `engine.format.identify` finds in a file of this kind (None: no file).
        schemes: the URL schemes of this kind (the first is the one messages name).
        env: where its URL is read from when none is given (None: it must be given).
        unset: the refusal when neither a URL nor `env` is given.
        store: the LangGraph Store read from a source of this kind (`store=True`), where it
            has one; a file's Store is read by the file kind that has one.
        by_cli: read by the command line, not by `migrate` (its `opens` says so): left out
            of `KINDS`, still recognized.
    """

    name: str
    wanted: str
    opens: Callable[[str, Options], Source]
    found: Found | None = None
    schemes: tuple[str, ...] = ()
    env: str | None = None
    unset: str = ""
    store: Callable[[str], OpenedStore] | None = None
    by_cli: bool = False


def paths_if_same(
    public: Sequence[tuple[str, str, Any]], rows: Sequence[tuple[str, str, str, int]]
) -> TaskPaths:
    """Task paths from `(task_id, channel, task_path, idx)` rows, when those rows sorted as
    the saver sorts them are the writes the public API returned (same tasks, channels,
    order); otherwise none."""
    from langgraph.checkpoint.base import writes_sort_key

    ordered = sorted(rows, key=lambda r: writes_sort_key(r[2], r[0], r[3]))
    if [(r[0], r[1]) for r in ordered] != [(w[0], w[1]) for w in public]:
        return {}
    paths: TaskPaths = {}
    for task_id, _, path, _ in ordered:
        if paths.setdefault(task_id, path) != path:
            return {}  # one task, two paths: not what LangGraph writes; keep none
    return {t: p for t, p in paths.items() if p}


class SaverSource(Source):
    """A LangGraph saver read through its own `list`, with the task paths `list` drops
    looked up per checkpoint (kept only when they match the writes `list` returned)."""

    def _read(self, thread_id: str) -> list[CheckpointTuple]:
        """The thread's checkpoint tuples, newest first (MigrationError on failure)."""
        raise NotImplementedError

    def _task_paths(self, item: CheckpointTuple, thread_id: str, key: tuple[str, str]) -> TaskPaths:
        """The task path of each task of the checkpoint's pending writes ({}: none kept)."""
        raise NotImplementedError

    def histories(self, thread_ids: Sequence[str]) -> Iterator[ThreadHistory]:
        for thread_id in thread_ids:
            found = self._read(thread_id)
            if not found:
                continue
            history = ThreadHistory(thread_id, found[::-1])
            for item in found:
                if not item.pending_writes:
                    continue
                conf = item.config["configurable"]
                key = (conf["checkpoint_ns"], conf["checkpoint_id"])
                paths = self._task_paths(item, thread_id, key)
                if paths:
                    history.task_paths[key] = paths
            yield history
