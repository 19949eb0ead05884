"""The checkpoint pages' data: a checkpoint's channel values and what changed from its
parent, and the raw protocol documents behind it.

Outer layer. Documents come from `CheckpointStore.view.find`, the reads `serve`
answers the document service's `find` with: what a page shows is what the engine's
service would send, byte for byte, here in tagged JSON (`values.tagged`) beside their
class-free decoding (`protocol.plain`). A page reads the checkpoint, its parent, the
documents they reference directly and, for a list channel, its tail; deeper documents
are one link away (`document`), so a page never walks a whole conversation. A value
split into parts (over `PART_SIZE`) decodes only whole, so the pages show it by its
size (`{"$split": parts, "bytes": size}`) and read its parts only with `?whole=1`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

from threadloom.engine.checkpoints import StoredDocument
from threadloom.errors import InvalidArgumentError
from threadloom.protocol import BLOBS, CHECKPOINTS, ITEMS, PARTS, WRITES, collection_of, references
from threadloom.viewer.pages import flag, number, pending, plain_items, thread_info
from threadloom.viewer.source import BadRequest, NotFound, Source
from threadloom.viewer.values import (
    decoded,
    iso,
    shorten,
    split,
    split_summary,
    stored_size,
    stored_values,
    tagged,
)

#: Elements of a list channel a checkpoint page shows (its tail).
LIST_TAIL: Final = 10
#: References one document page lists.
REFS_PAGE: Final = 100
_FIND: Final = {"b": BLOBS, "c": ITEMS, "e": ITEMS, "p": PARTS}


def _values(source: Source, thread_id: str, refs: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Value documents' data by ref (one find per collection)."""
    return {d.data["ref"]: d.data for d in _stored(source, thread_id, list(dict.fromkeys(refs)))}


def _checkpoint(source: Source, thread_id: str, ns: str, checkpoint_id: str) -> StoredDocument:
    found = source.store.view.find(
        CHECKPOINTS, thread_id=thread_id, checkpoint_ns=ns, checkpoint_ids=[checkpoint_id]
    )
    if not found:
        raise NotFound(
            f"thread {thread_id!r} has no schema-2 checkpoint {checkpoint_id!r} in namespace {ns!r}"
        )
    return found[0]


def _parts(datas: Iterable[Any]) -> list[str]:
    """The parts of the split values these documents' data hold."""
    return [ref for data in datas for stored in stored_values(data) for ref in split(stored)]


def _channel(
    source: Source,
    thread_id: str,
    ns: str,
    checkpoint_id: str,
    name: str,
    entry: Mapping[str, Any],
    fetched: Mapping[str, Any],
    *,
    tail: bool = True,
) -> dict[str, Any]:
    """One channel's entry: how it is stored, its size and its value (a list: its tail,
    unless `tail` is False: then its length only)."""
    if "value" in entry:
        stored = entry["value"]
        return {
            "stored": "inline",
            "kind": stored.get("kind"),
            "bytes": stored_size(stored),
            "value": shorten(decoded(stored, fetched)),
        }
    ref = entry["blob"]
    blob = fetched.get(ref)
    if blob is None:
        return {"stored": "blob", "ref": ref, "value": {"$unreadable": "missing document"}}
    if "chunks" not in blob:
        stored = blob["value"]
        return {
            "stored": "blob",
            "ref": ref,
            "kind": stored.get("kind"),
            "bytes": stored_size(stored),
            "value": shorten(decoded(stored, fetched)),
        }
    shown: dict[str, Any] = {"stored": "list", "ref": ref, "length": int(blob["length"])}
    if ns == "" and tail:
        try:
            last = source.store.tail(
                thread_id, limit=LIST_TAIL, checkpoint_id=checkpoint_id, channel=name
            )
        except InvalidArgumentError:
            return shown
        shown["tail_start"] = last.start
        shown["value"] = shorten([value for value, _ in plain_items(last)])
    return shown


def checkpoint(
    source: Source, thread_id: str, checkpoint_id: str, params: Mapping[str, str]
) -> dict[str, Any]:
    """A checkpoint: metadata, channel values, what changed from its parent, pending
    writes; split values by their size unless `whole=1`."""
    thread_info(source, thread_id)
    ns = params.get("ns", "")
    whole = flag(params, "whole")
    doc = _checkpoint(source, thread_id, ns, checkpoint_id).data
    parent_id = doc.get("parent_id")
    parent: dict[str, Any] | None = None
    if parent_id:
        found = source.store.view.find(
            CHECKPOINTS, thread_id=thread_id, checkpoint_ns=ns, checkpoint_ids=[parent_id]
        )
        parent = found[0].data if found else None
    mine = doc.get("channels") or {}
    theirs = (parent or {}).get("channels") or {}
    changed = {n for n, e in mine.items() if theirs.get(n) != e}
    blobs = [e["blob"] for e in mine.values() if "blob" in e]
    blobs += [theirs[n]["blob"] for n in changed if n in theirs and "blob" in theirs[n]]
    fetched = _values(source, thread_id, blobs)
    held = [doc, *([parent] if parent is not None else []), *fetched.values()]
    if whole:
        fetched.update(_values(source, thread_id, _parts(held)))
    channels = []
    for name in sorted(mine):
        row = {
            "channel": name,
            **_channel(source, thread_id, ns, checkpoint_id, name, mine[name], fetched),
        }
        if parent is None or name not in theirs:
            row["change"] = "added" if parent is not None else "first"
        elif name in changed:
            row["change"] = "changed"
            before = _channel(
                source, thread_id, ns, parent_id or "", name, theirs[name], fetched, tail=False
            )
            row["parent"] = {
                k: before.get(k) for k in ("stored", "bytes", "length", "value") if k in before
            }
        else:
            row["change"] = "unchanged"
        channels.append(row)
    state = decoded(doc.get("checkpoint"), fetched)
    versions = state.get("channel_versions") if isinstance(state, dict) else None
    earlier = decoded(parent.get("checkpoint"), fetched) if parent is not None else {}
    old = earlier.get("channel_versions") if isinstance(earlier, dict) else None
    moved = {}
    if isinstance(versions, dict):
        old = old if isinstance(old, dict) else {}
        moved = {k: [old.get(k), v] for k, v in versions.items() if old.get(k) != v}
    writes = pending(source, thread_id, ns, checkpoint_id, whole=whole)
    values = (v for d in held for v in stored_values(d))
    return {
        "page": "checkpoint",
        "thread_id": thread_id,
        "checkpoint_ns": ns,
        "checkpoint_id": checkpoint_id,
        "parent_id": parent_id,
        "metadata": shorten(decoded(doc.get("metadata"), fetched)),
        "checkpoint": shorten(state),
        "channels": channels,
        "removed": sorted(set(theirs) - set(mine)) if parent is not None else [],
        "versions": moved,
        "pending": writes,
        "whole": whole,
        "split": None if whole else split_summary(values, (writes or {}).get("split")),
    }


def _shown(doc: StoredDocument, fetched: Mapping[str, Any]) -> dict[str, Any]:
    """One document as the raw pages show it: its data in tagged JSON (payloads not as
    bytes), each stored value decoded class-free, and what it references."""
    data = doc.data
    values: dict[str, Any] = {}
    for field in ("checkpoint", "metadata", "value"):
        if isinstance(data.get(field), Mapping):
            values[field] = shorten(decoded(data[field], fetched))
    for name, entry in (data.get("channels") or {}).items():
        if "value" in entry:
            values[f"channels.{name}"] = shorten(decoded(entry["value"], fetched))
    return {
        "collection": doc.collection,
        "key": doc.key,
        "ref": data.get("ref"),
        "version": doc.version,
        "created_at": iso(doc.created_at),
        "data": shorten(tagged(data, decoded_bytes=doc.collection == PARTS)),
        "decoded": values,
        "references": [
            {"ref": ref, "collection": collection_of(ref)} for ref, _ in references(data)
        ],
    }


def raw(
    source: Source, thread_id: str, checkpoint_id: str, params: Mapping[str, str]
) -> dict[str, Any]:
    """The protocol documents of a checkpoint: the checkpoint document, its pending
    writes and the value documents they reference directly (parts are listed among
    their references; `whole=1` reads them to decode the split values)."""
    thread_info(source, thread_id)
    ns = params.get("ns", "")
    whole = flag(params, "whole")
    doc = _checkpoint(source, thread_id, ns, checkpoint_id)
    writes = source.store.view.find(
        WRITES, thread_id=thread_id, checkpoint_ns=ns, checkpoint_ids=[checkpoint_id]
    )
    refs = [ref for d in (doc, *writes) for ref, _ in references(d.data) if ref[:2] != "p-"]
    values = _stored(source, thread_id, list(dict.fromkeys(refs)))
    shown = [doc, *writes, *values]
    fetched = _values(source, thread_id, _parts(d.data for d in shown)) if whole else {}
    return {
        "page": "raw",
        "thread_id": thread_id,
        "checkpoint_ns": ns,
        "checkpoint_id": checkpoint_id,
        "documents": [_shown(d, fetched) for d in shown],
        "whole": whole,
        "split": None if whole else split_summary(_held(shown)),
    }


def _held(docs: Iterable[StoredDocument]) -> Iterator[Mapping[str, Any]]:
    return (v for d in docs for v in stored_values(d.data))


def _stored(source: Source, thread_id: str, refs: list[str]) -> list[StoredDocument]:
    by_collection: dict[str, list[str]] = {}
    for ref in refs:
        found = _FIND.get(ref[:1])
        if found is not None:
            by_collection.setdefault(found, []).append(ref)
    out: list[StoredDocument] = []
    for collection, wanted in by_collection.items():
        out += source.store.view.find(collection, thread_id=thread_id, refs=wanted)
    return out


def document(source: Source, thread_id: str, ref: str, params: Mapping[str, str]) -> dict[str, Any]:
    """One value document and a page of the documents it references; its value, if
    split, by its size unless `whole=1`."""
    thread_info(source, thread_id)
    whole = flag(params, "whole")
    if ref[:1] not in _FIND:
        raise BadRequest(f"{ref!r} is not a value document ref (b-, c-, e-, p-)")
    found = _stored(source, thread_id, [ref])
    if not found:
        raise NotFound(f"thread {thread_id!r} holds no document {ref!r}")
    doc = found[0]
    offset = number(params, "offset", 0, 0, 2**62)
    data = doc.data
    refs: list[tuple[str, int | None]] = (
        [(r, int(size)) for r, size in data["elements"]]
        if "elements" in data
        else [(r, None) for r, _ in references(data)]
    )
    fetched = _values(source, thread_id, _parts([data])) if whole else {}
    shown = _shown(doc, fetched)
    page = refs[offset : offset + REFS_PAGE]
    shown["references"] = [
        {"ref": r, "collection": collection_of(r), "bytes": size} for r, size in page
    ]
    return {
        "page": "document",
        "thread_id": thread_id,
        "document": shown,
        "references_total": len(refs),
        "offset": offset,
        "next_offset": offset + REFS_PAGE if offset + REFS_PAGE < len(refs) else None,
        "whole": whole,
        "split": None if whole else split_summary(_held([doc])),
    }
