"""Thread bundles: threads of a file as one self-describing, compressed, verifiable file.

A bundle is two parts:

1. one line of JSON (sorted keys, ASCII) that says what the file is and holds:
   `format` ("threadloom-bundle"), `version` (1), `schema` (2), `compression` ("zstd"),
   `encoding` ("msgpack"), the source scope (`namespace`, `agent_id`), the `threads`,
   the number of `documents`, and `content_bytes` and `content_blake3`, the size and
   blake3 digest of the uncompressed content;
2. the content, one zstd frame (level 10): a msgpack array of `[collection, key, data]`
   records, thread by thread (sorted by id), each thread's documents in put order
   (values, then checkpoints oldest first, each followed by its pending writes); then,
   when asked for (`store_prefixes` in the header), the Store items under those
   prefixes, sorted by namespace and key, as `["threadloom_store_items", "", {"namespace",
   "key", "value", "created_at", "updated_at"}]` (times in microseconds since the epoch).

`data` is the schema-2 document exactly as `threadloom export` puts it to the document
service (the dict its protobuf is encoded from; bytes stay bytes), so a bundle's
documents can be sent to the engine unchanged. Nothing in a bundle depends on when or
where it was written: the same threads give the same bytes, and a file that imported a
bundle gives the same bundle again.

Reading checks the content's size and digest, then every record's key and every value's
ref against its content (`protocol.digests`) and every Store item's shape, before
anything is stored. The Store items are read and written by the caller (the LangGraph
Store, which indexes them with its own config): this module only carries them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import blake3
import ormsgpack
import zstandard

from threadloom.engine import CheckpointStore
from threadloom.errors import CheckpointConflictError, EngineError, ProtocolError
from threadloom.protocol import CHECKPOINTS, WRITES
from threadloom.protocol.digests import problems
from threadloom.protocol.lineage import VALUES, diverged, put_order
from threadloom.protocol.refs import key_of

FORMAT = "threadloom-bundle"
VERSION = 1
LEVEL = 10
#: The collections a bundle holds (schema 2; a thread's schema-1 rows are left out).
COLLECTIONS = (*VALUES, CHECKPOINTS, WRITES)
#: The record collection of a Store item (not a protocol collection: never sent).
STORE_ITEMS = "threadloom_store_items"
#: The most bytes of a header line read before a file is called no bundle.
_HEADER_LIMIT = 1 << 20

Record = tuple[str, str, dict[str, Any]]


@dataclass
class Bundle:
    """A bundle read and verified: its header, its documents and its Store items."""

    header: dict[str, Any]
    records: list[Record]
    items: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ThreadReport:
    """What moving a thread's documents found (and did): importing a bundle, or an export
    or import over NATS (`threadloom.nats.transfer`)."""

    thread_id: str
    checkpoints: int = 0
    writes: int = 0
    values: int = 0
    present: int = 0
    missing: int = 0
    copied: int = 0
    documents_copied: int = 0
    diverged: bool = False
    skipped: bool = False
    conflicts: list[str] = field(default_factory=list)


def pack(
    store: CheckpointStore,
    threads: Sequence[str] | None = None,
    *,
    items: Sequence[Mapping[str, Any]] | None = None,
    prefixes: Sequence[Sequence[str]] = (),
) -> bytes:
    """The bundle of `threads` of `store` (default: every thread of the scope).

    Args:
        items: Store items to carry (`{"namespace", "key", "value", "created_at",
            "updated_at"}`, times in microseconds), read by the caller under `prefixes`.
        prefixes: the Store namespace prefixes `items` were read under (the header
            records them; none and no items: the bundle holds no Store items).

    Raises:
        EngineError: a thread the scope does not hold.
    """
    names = sorted(set(threads)) if threads else store.scope.thread_ids()
    known = set(store.scope.thread_ids())
    missing = [name for name in names if name not in known]
    if missing:
        raise EngineError(
            f"no thread {missing[0]!r} in {store.file.path} (scope {store.namespace} / "
            f"{store.agent_id}); `threadloom threads {store.file.path}` lists its threads"
        )
    records: list[list[Any]] = []
    for thread_id in names:
        docs = [(c, d) for c, _, d in store.view.documents(thread_id) if c in COLLECTIONS]
        for collection, data in put_order(docs):
            records.append([collection, key_of(collection, data), data])
    for item in sorted(items or (), key=lambda i: (list(i["namespace"]), i["key"])):
        records.append([STORE_ITEMS, "", _item(item)])
    content = ormsgpack.packb(records)
    header: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "schema": 2,
        "compression": "zstd",
        "encoding": "msgpack",
        "namespace": store.namespace,
        "agent_id": store.agent_id,
        "threads": names,
        "documents": len(records),
        "content_bytes": len(content),
        "content_blake3": blake3.blake3(content).hexdigest(),
    }
    if prefixes or items:
        header["store_prefixes"] = sorted(".".join(p) for p in prefixes)
        header["store_items"] = len(items or ())
        header["documents"] = len(records) - len(items or ())
    frame = zstandard.ZstdCompressor(level=LEVEL, write_content_size=True).compress(content)
    return _header_line(header) + frame


def write(path: str | os.PathLike[str], data: bytes) -> None:
    """Write a bundle to `path` through a temporary name beside it; an existing file that
    is not a bundle is refused and left untouched.

    Raises:
        EngineError: `path` exists and is not a bundle, or its folder is missing.
    """
    target = Path(path)
    if not target.parent.is_dir():
        raise EngineError(f"the folder of {str(target)!r} does not exist; create it first")
    if target.exists() and not _is_bundle(target):
        raise EngineError(
            f"{str(target)!r} exists and is not a thread bundle; it was left untouched: "
            "give a new path, or move that file away first"
        )
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        with open(partial, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def read(path: str | os.PathLike[str]) -> Bundle:
    """Read and verify a bundle: its header, its content's size and digest, every record's
    key and every value's ref.

    Raises:
        EngineError: the file cannot be read.
        ProtocolError: it is not a bundle, of a newer version, or its content does not
            verify (the message names the first problems).
    """
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise EngineError(f"cannot read {str(path)!r}: {exc.strerror}; check the path") from None
    line, newline, frame = raw.partition(b"\n")
    header = _parse_header(line if newline else b"", str(path))
    if header.get("version") != VERSION or header.get("compression") != "zstd":
        raise ProtocolError(
            f"{str(path)!r} is a bundle of version {header.get('version')!r}; this threadloom "
            f"reads version {VERSION}: upgrade threadloom"
        )
    try:
        content = zstandard.ZstdDecompressor().decompress(
            frame, max_output_size=int(header["content_bytes"])
        )
    except (zstandard.ZstdError, KeyError, ValueError, TypeError) as exc:
        raise _damaged(path, f"its content does not decompress ({exc})") from None
    if len(content) != header["content_bytes"] or (
        blake3.blake3(content).hexdigest() != header.get("content_blake3")
    ):
        raise _damaged(path, "its content does not match the digest in its header")
    try:
        records = [(str(c), str(k), dict(d)) for c, k, d in ormsgpack.unpackb(content)]
    except (ormsgpack.MsgpackDecodeError, ValueError, TypeError) as exc:
        raise _damaged(path, f"its content is not a list of documents ({exc})") from None
    items = [d for c, _, d in records if c == STORE_ITEMS]
    records = [r for r in records if r[0] != STORE_ITEMS]
    wrong = problems(records) + [
        f"store item: {_item_problem(i)}" for i in items if _item_problem(i)
    ]
    if wrong:
        raise _damaged(path, f"{len(wrong)} documents do not verify, first: {wrong[0]}")
    return Bundle(header, records, items)


def load(
    store: CheckpointStore | None,
    bundle: Bundle,
    *,
    apply: bool = False,
    include_diverged: bool = False,
) -> list[ThreadReport]:
    """Import a verified bundle's threads into `store`, one transaction per thread
    (create-only: documents present are kept; a checkpoint present must be identical).
    Documents of another agent id are re-keyed to the store's. A dry run unless `apply`;
    a thread whose history in the file diverged from the bundle's is skipped unless
    `include_diverged`. `store` None reports against a file that holds nothing (the dry
    run of an import into a new file)."""
    agent_id = store.agent_id if store is not None else str(bundle.header["agent_id"])
    threads: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for collection, _, data in bundle.records:
        if data.get("agent_id") != agent_id:
            data = {**data, "agent_id": agent_id}
        threads.setdefault(str(data["thread_id"]), []).append((collection, data))
    found = []
    for thread_id, docs in threads.items():
        entry = ThreadReport(thread_id)
        found.append(entry)
        ours = [d for c, d in docs if c == CHECKPOINTS]
        local = (
            [doc.data for doc in store.view.find(CHECKPOINTS, thread_id=thread_id)]
            if store is not None
            else []
        )
        held = {(d["checkpoint_ns"], d["checkpoint_id"]) for d in local}
        entry.checkpoints = len(ours)
        entry.writes = sum(1 for c, _ in docs if c == WRITES)
        entry.values = sum(1 for c, _ in docs if c in VALUES)
        entry.present = sum(1 for d in ours if (d["checkpoint_ns"], d["checkpoint_id"]) in held)
        entry.missing = entry.checkpoints - entry.present
        entry.diverged = diverged(ours, local)
        if entry.diverged and not include_diverged:
            entry.skipped = apply
            continue
        if not apply or store is None:
            continue
        try:
            counted = store.view.import_documents(docs)
        except CheckpointConflictError as conflict:  # the thread's transaction rolled back
            entry.conflicts.append(f"{thread_id}: {conflict}")
            continue
        entry.documents_copied = counted.stored
        entry.copied = entry.missing
        if counted.stored:
            store.restamp([thread_id])  # dated by the checkpoints' own times
    return found


def summary(entries: Sequence[ThreadReport]) -> dict[str, Any]:
    """Totals over the threads of an import, with each thread's figures (`per_thread`)."""
    out: dict[str, Any] = {"threads": len(entries)}
    for name in ("checkpoints", "writes", "values", "present", "missing", "copied"):
        out[name] = sum(getattr(t, name) for t in entries)
    out["documents_copied"] = sum(t.documents_copied for t in entries)
    out["diverged"] = [t.thread_id for t in entries if t.diverged]
    out["skipped"] = [t.thread_id for t in entries if t.skipped]
    out["conflicts"] = [c for t in entries for c in t.conflicts]
    out["per_thread"] = [asdict(t) for t in entries]
    return out


def _item(item: Mapping[str, Any]) -> dict[str, Any]:
    """A Store item as a bundle holds it (its fields in one order)."""
    return {
        "namespace": [str(label) for label in item["namespace"]],
        "key": str(item["key"]),
        "value": item["value"],
        "created_at": int(item["created_at"]),
        "updated_at": int(item["updated_at"]),
    }


def _item_problem(item: Mapping[str, Any]) -> str:
    """Why a Store item record is malformed ("" when it is not)."""
    namespace = item.get("namespace")
    if not isinstance(namespace, list) or not all(isinstance(x, str) for x in namespace):
        return "its namespace is not a list of labels"
    if not isinstance(item.get("key"), str) or not isinstance(item.get("value"), dict):
        return f"{'.'.join(namespace)}: its key is not text or its value not a mapping"
    if not all(isinstance(item.get(t), int) for t in ("created_at", "updated_at")):
        return f"{'.'.join(namespace)}/{item.get('key')}: its times are not microseconds"
    return ""


def _header_line(header: dict[str, Any]) -> bytes:
    return json.dumps(header, sort_keys=True, separators=(",", ":")).encode("ascii") + b"\n"


def _parse_header(line: bytes, path: str) -> dict[str, Any]:
    try:
        header = json.loads(line) if line and len(line) < _HEADER_LIMIT else None
    except (UnicodeDecodeError, ValueError):
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ProtocolError(
            f"{path!r} is not a thread bundle (its first line is not a bundle header); give "
            "a file `threadloom bundle` wrote"
        )
    return header


def _is_bundle(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            _parse_header(handle.readline(_HEADER_LIMIT).rstrip(b"\n"), str(path))
    except (OSError, ProtocolError):
        return False
    return True


def _damaged(path: str | os.PathLike[str], what: str) -> ProtocolError:
    return ProtocolError(
        f"{str(path)!r} is a damaged thread bundle: {what}; nothing was imported: write "
        "the bundle again from its source"
    )
