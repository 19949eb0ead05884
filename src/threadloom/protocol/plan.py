"""Write planning: checkpoints and pending writes to schema-2 Puts (SPEC §4).

The plan shapes and `Serialization` live in `shapes.py`.

No I/O. A plan is the exact list of documents the released planner sends, in
its order, with its `if_version` / `on_conflict`; stores apply it.
Invariants: an unchanged channel (same version as the parent's remembered
entry) is reused verbatim without being serialized; a ref already known or
already planned produces no document; a list that grew is planned from its last
encoding (`_extend`) only once its old elements are proven unchanged, so every plan
is exactly the plan a fresh planner makes.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from typing import Any

from threadloom.core import CHUNK_SIZE, ListRefs, array_spans, list_refs
from threadloom.core.lru import Budget, Lru
from threadloom.core.room import PROBE_FROM, ensure_room
from threadloom.errors import ProtocolError, SerializationError
from threadloom.protocol._fingerprint import Fingerprint, Views, array_header, fingerprint, views
from threadloom.protocol._list_memo import ListMemo, kept_encoding, new_memo
from threadloom.protocol.constants import (
    BLOBS,
    CHECKPOINTS,
    INLINE_LIMIT,
    ITEMS,
    PART_SIZE,
    PARTS,
    SCHEMA_VERSION,
    WRITES,
    WRITES_IDX_MAP,
)
from threadloom.protocol.decoded import DECODED_BYTES, DecodedChunks
from threadloom.protocol.redact import RedactingSerializer, redact_secrets
from threadloom.protocol.refs import (
    chunk_ref,
    document_key,
    element_ref,
    list_blob_ref,
    part_refs,
    value_blob_ref,
)
from threadloom.protocol.restore import RawList
from threadloom.protocol.shapes import (
    NOTHING_KNOWN,
    CheckpointPlan,
    Known,
    Put,
    Serialization,
    Typed,
    WritePlan,
    _NoSerializer,
    configurable,
)

#: Bytes of list encodings a planner keeps to extend lists instead of redoing them.
LIST_MEMO_BYTES = 32 * 1024 * 1024


class _Buckets:
    """Accumulates a plan's documents in the protocol's put order."""

    def __init__(
        self, agent_id: str, thread_id: str, known: Container[str], keyed: bool = True
    ) -> None:
        self.agent_id = agent_id
        self.keyed = keyed
        self.thread_id = thread_id
        self.known = known
        self.planned: set[str] = set()
        self.referenced: set[str] = set()
        self.parts: list[Put] = []
        self.elements: list[Put] = []
        self.chunks: list[Put] = []
        self.blobs: list[Put] = []

    def wanted(self, ref: str) -> bool:
        """Count `ref` as referenced; return True when a document must be planned for it."""
        self.referenced.add(ref)
        if ref in self.planned or ref in self.known:
            return False
        self.planned.add(ref)
        return True

    def wanted_many(self, refs: Sequence[str]) -> list[int]:
        """`wanted` of each of `refs` in order; return the indices it answered True for.

        When the known refs hold them all (a grown list: its old elements are stored),
        this is two set operations in C instead of a Python call per ref.
        """
        known = self.known
        if isinstance(known, (set, frozenset)) and known.issuperset(refs):
            self.referenced.update(refs)
            return []
        return [index for index, ref in enumerate(refs) if self.wanted(ref)]

    def add(self, bucket: list[Put], collection: str, ref: str, fields: dict[str, Any]) -> None:
        data = {
            "agent_id": self.agent_id,
            "thread_id": self.thread_id,
            "ref": ref,
            "_schema": SCHEMA_VERSION,
            **fields,
        }
        key = document_key(self.agent_id, self.thread_id, ref) if self.keyed else ""
        bucket.append(Put(collection, key, data, 0, "keep"))

    def stored(self, typed: Typed) -> dict[str, Any]:
        """Return the stored form of a typed payload, planning parts above PART_SIZE."""
        kind, payload = typed
        if len(payload) <= PART_SIZE:
            return {"kind": kind, "payload": payload}
        refs = part_refs(payload)
        for index, ref in enumerate(refs):
            if self.wanted(ref):
                part = payload[index * PART_SIZE : (index + 1) * PART_SIZE]
                self.add(self.parts, PARTS, ref, {"payload": part})
        return {"kind": kind, "size": len(payload), "parts": refs}

    def ordered(self) -> list[Put]:
        return [*self.parts, *self.elements, *self.chunks, *self.blobs]


class Planner:
    """Plans schema-2 documents for one agent id, exactly as the released planner does.

    Args:
        agent_id: the `agent_id` field and key prefix of every document.
        serialization: the serializer and its traits (see `Serialization`); None plans
            keys only (every serialization raises a ProtocolError).
        memo_bytes: most estimated bytes of list encodings kept (default LIST_MEMO_BYTES).
        decoded_bytes: most bytes of decoded list chunks kept (`decoded`; default
            DECODED_BYTES, 0 keeps none; none either unless the serialization names
            its `kept_classes`).
        budget: the byte budget the list memo and the decoded chunks also draw on (None:
            their own capacities alone).
        keyed: give each Put its document key (SPEC §3.3). A store that keys its rows by
            their own columns (the engine) passes False: every `Put.key` is then "" and
            no key is hashed (about 25 a turn of a chat agent).
    """

    def __init__(
        self,
        agent_id: str,
        serialization: Serialization | None = None,
        *,
        memo_bytes: int | None = None,
        decoded_bytes: int | None = None,
        budget: Budget | None = None,
        keyed: bool = True,
    ) -> None:
        if not isinstance(agent_id, str) or not agent_id:
            raise ProtocolError(f"agent_id must be a non-empty string, got {agent_id!r}")
        self.agent_id = agent_id
        self.keyed = keyed
        given = serialization or Serialization(_NoSerializer())
        base = given.serde
        self.serde = base if isinstance(base, RedactingSerializer) else RedactingSerializer(base)
        self._merge_metadata = given.merge_metadata
        self._whole_lists = given.whole_lists
        fingerprints = given.model_fingerprints
        self._fingerprints = given.whole_lists and fingerprints is not False
        #: Bytes of list encodings (and their fingerprints) kept to extend lists from.
        self.memo_bytes = LIST_MEMO_BYTES if memo_bytes is None else memo_bytes
        self._lists: Lru[tuple[str, str | None, str], ListMemo] = Lru(
            self.memo_bytes, lambda memo: memo.size, budget=budget
        )
        #: List chunks as the serializer decoded them, kept to be read again.
        kept = DECODED_BYTES if decoded_bytes is None else decoded_bytes
        classes = given.kept_classes
        self.decoded = DecodedChunks(
            self.serde.loads_typed,
            kept if classes is not None and not given.encrypts else 0,
            budget,
            classes or frozenset(),
        )

    @property
    def memo_size(self) -> int:
        """Estimated bytes of list encodings kept now."""
        return self._lists.weight

    def forget_lists(self, thread_id: str | None = None) -> None:
        """Forget the list encodings kept of `thread_id`, or of every thread (plans stay
        exact: lists are redone in full)."""
        if thread_id is None:
            self._lists.clear()
        else:
            self._lists.drop_where(lambda key: key[0] == thread_id)

    def planned_list(
        self, thread_id: str, ns: str | None, channel: str, ref: str
    ) -> RawList | None:
        """The stored elements of list blob `ref` as the last plan of `channel` encoded
        them, or None unless that plan's list is `ref` and kept every encoding.

        A reader of a checkpoint just put takes its list from here instead of fetching
        the blob, chunk and element documents: the refs are digests of exactly these
        encodings in these chunks (the memo's elements are msgpack, as `_extend` plans
        them). The payloads are bytes, never decoded objects: each read still builds
        its own.
        """
        memo = self._lists.get((thread_id, ns, channel))
        if memo is None or memo.refs.list_ref != ref or not memo.whole:
            return None
        items = [("msgpack", payload) for payload in memo.payloads if payload is not None]
        if len(items) != len(memo.refs.element_refs):
            return None
        counts = map(len, memo.refs.chunks)
        return RawList(items, tuple(zip(memo.refs.chunk_refs, counts, strict=True)))

    def loads(self, typed: Typed) -> Any:
        """Deserialize a typed payload with this planner's serializer."""
        return self.serde.loads_typed(typed)

    def key(self, *parts: str | int | None) -> str:
        """Return the document key of `parts` under this planner's agent id."""
        return document_key(self.agent_id, *parts)

    def plan_checkpoint(
        self,
        config: Mapping[str, Any],
        checkpoint: Mapping[str, Any],
        metadata: Mapping[str, Any],
        known: Known = NOTHING_KNOWN,
    ) -> CheckpointPlan:
        """Plan the puts of `put(config, checkpoint, metadata, ...)`.

        Args:
            config: the put's config; its `checkpoint_id`, if any, is the parent.
            checkpoint: the LangGraph checkpoint.
            metadata: the checkpoint metadata (merged with the config's as LangGraph does).
            known: refs the store holds and the parent's channel entries.

        Raises:
            ProtocolError: the config or checkpoint is malformed.
        """
        conf = configurable(config)
        thread_id: str = conf["thread_id"]
        ns: str | None = conf.get("checkpoint_ns", "")
        checkpoint_id = checkpoint.get("id") if isinstance(checkpoint, Mapping) else None
        if not isinstance(checkpoint_id, str) or not checkpoint_id:
            raise ProtocolError("checkpoint['id'] must be a non-empty string")
        if not isinstance(metadata, Mapping):
            raise ProtocolError(f"metadata must be a mapping, got {type(metadata).__name__}")
        values = checkpoint.get("channel_values")
        if not isinstance(values, Mapping):
            raise ProtocolError("checkpoint['channel_values'] must be a mapping")
        versions = checkpoint.get("channel_versions") or {}
        buckets = _Buckets(self.agent_id, thread_id, known.refs, self.keyed)

        channels: dict[str, dict[str, Any]] = {}
        entries: dict[str, tuple[Any, dict[str, Any]]] = {}
        for channel, value in values.items():
            version = versions.get(channel)
            previous = known.entries.get(channel)
            if version is not None and previous is not None and previous[0] == version:
                entry = previous[1]
            else:
                entry = self._entry(buckets, value, channel, (thread_id, ns, channel))
            channels[channel] = entry
            if version is not None:
                entries[channel] = (version, entry)

        rest = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        stored_checkpoint = buckets.stored(self.dumps(rest, "the checkpoint"))
        merged = self._merge_metadata(config, metadata)
        stored_metadata = buckets.stored(self.dumps(merged, "the metadata"))
        data = {
            "agent_id": self.agent_id,
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "_schema": SCHEMA_VERSION,
            "checkpoint_id": checkpoint_id,
            "parent_id": conf.get("checkpoint_id"),
            "checkpoint": stored_checkpoint,
            "metadata": stored_metadata,
            "channels": channels,
        }
        key = self.key(thread_id, ns, checkpoint_id) if self.keyed else ""
        puts = [*buckets.ordered(), Put(CHECKPOINTS, key, data, 0, "compare")]
        returned = {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint_id,
            }
        }
        return CheckpointPlan(puts, returned, buckets.referenced, entries, buckets.planned, merged)

    def dumps(self, value: Any, what: str) -> Typed:
        """Serialize `value` (secrets redacted), naming `what` if it cannot be serialized.

        Raises:
            SerializationError: the serializer refused the value.
        """
        kind = type(value)
        if (kind is str or kind is bytes) and len(value) >= PROBE_FROM:
            ensure_room(len(value), what)  # the serializer's encoder aborts when out of memory
        try:
            typed = self.serde.dumps_typed(value)
        except Exception as exc:
            raise SerializationError(
                f"cannot serialize {what}: {exc}; store only values the checkpoint "
                "serializer supports (or pass a serde that handles this type)"
            ) from exc
        if len(typed[1]) >= PROBE_FROM:
            ensure_room(len(typed[1]), what)  # the body that will hold it is encoded next
        return typed

    def dump_elements(self, items: list[Any], what: str) -> list[Typed]:
        """Serialize each element of a list, as `dumps` on each would.

        With a serializer of `whole_lists` (LangGraph's JsonPlusSerializer) the list is
        redacted and encoded once and cut into its elements' encodings
        (`core.msgpack.array_spans`), which is byte-identical to encoding them one by one
        and several times faster.
        """
        base = self.serde.serde
        if self._plain_list(items):
            redacted = redact_secrets(items)
            try:
                kind, payload = base.dumps_typed(redacted)
            except Exception:
                kind, payload = "", b""  # the per-element path names the failing value
            spans = array_spans(payload) if kind == "msgpack" else None
            if spans is not None and len(spans) == len(items):
                return [("msgpack", payload[start:end]) for start, end in spans]
        return [self.dumps(item, what) for item in items]

    def _entry(
        self,
        buckets: _Buckets,
        value: Any,
        channel: str,
        memo: tuple[str, str | None, str] | None = None,
    ) -> dict[str, Any]:
        what = f"channel {channel!r}"
        if type(value) is list:
            seen = views(value) if memo and self._fingerprints and len(value) > 1 else None
            plain = memo is not None and (seen is not None or self._plain_list(value))
            extended, proof = None, None
            if memo and plain:
                extended, proof = self._extend(buckets, value, what, memo, seen)
            if extended is not None:
                return {"blob": extended}
            if proof is None and seen is not None:
                proof = fingerprint(seen)  # before anything is encoded (protocol._fingerprint)
            elements = self.dump_elements(value, what)
            if sum(len(payload) for _, payload in elements) > INLINE_LIMIT:
                refs = self._list(buckets, elements)
                if memo and plain and not all(kind == "msgpack" for kind, _ in elements):
                    self._lists.pop(memo)  # a pickled element: the memo keeps msgpack only
                elif memo and plain:
                    payloads = [kept_encoding(bytes(payload)) for _, payload in elements]
                    sizes = [len(payload) for _, payload in elements]
                    self._keep_list(memo, new_memo(payloads, sizes, refs, proof))
                return {"blob": refs.list_ref}
        kind, payload = self.dumps(value, what)
        if len(payload) <= INLINE_LIMIT:
            return {"value": {"kind": kind, "payload": payload}}
        ref = value_blob_ref(kind, payload)
        if buckets.wanted(ref):
            buckets.add(buckets.blobs, BLOBS, ref, {"value": buckets.stored((kind, payload))})
        return {"blob": ref}

    def _plain_list(self, items: list[Any]) -> bool:
        """True when `dump_elements` encodes `items` as one msgpack array, cut in spans:
        no element is None, bytes or a bytearray (the serializer has other kinds for them).
        """
        if len(items) <= 1 or not self._whole_lists:
            return False
        kinds = set(map(type, items))  # a few classes, however long the list
        if any(_overrides_class(kind) for kind in kinds):
            # isinstance() asks such an object's own __class__: test each element.
            return not any(item is None or isinstance(item, (bytes, bytearray)) for item in items)
        return not any(kind is _NONE or issubclass(kind, (bytes, bytearray)) for kind in kinds)

    def _keep_list(self, key: tuple[str, str | None, str], memo: ListMemo) -> None:
        # One list may take half of the budget at most.
        if memo.size > self.memo_bytes // 2 and memo.proof is not None:
            memo = memo._replace(proof=None)  # a long list keeps its encodings, as before
        if memo.size > self.memo_bytes // 2:
            self._lists.pop(key)
            return
        self._lists.put(key, memo)

    def _extend(
        self,
        buckets: _Buckets,
        items: list[Any],
        what: str,
        key: tuple[str, str | None, str],
        seen: Views | None = None,
    ) -> tuple[str | None, Fingerprint | None]:
        """Plan a list that extends the one last planned for this channel.

        The previous elements must be proven unchanged first, in one of two ways:

        - the memo's fingerprint `holds` for the list's first elements (`seen`, see
          `protocol._fingerprint`): they are the same values, whose stored (redacted)
          encodings the memo holds (a large one only as its length and ref: it is not
          planned again, its ref being known). A few native calls, no serializer call;
        - else the list is encoded once without redaction, and the stored encodings of
          the previous elements must be a byte prefix of it: those elements are the
          same values (msgpack is self-delimiting) and hold no secret (their redacted
          bytes are their plain bytes).

        Then only the new tail is redacted, encoded, hashed and chunked. The documents
        planned are exactly those of the full path: every element ref still goes
        through `wanted`, so nothing the store lacks is skipped.

        Args:
            seen: the fingerprint views of `items`, or None (no fingerprint applies).

        Returns:
            The list's blob ref, or None for the full path; and the fingerprint of
            `items` when one was taken (before anything was encoded), to keep.
        """
        memo = self._lists.get(key)
        if memo is None:
            return None, None
        old = memo.refs.element_refs
        if len(items) < len(old):
            return None, None
        proof = None
        if seen is not None and memo.proof is not None and memo.proof.holds(seen):
            proof = memo.proof.grown(seen)
        else:
            if seen is not None:
                proof = fingerprint(seen)
            if not memo.whole:
                return None, proof  # the byte proof needs every old encoding
            try:
                kind, payload = self.serde.serde.dumps_typed(items)
            except Exception:
                return None, proof
            start = array_header(payload) if kind == "msgpack" else None
            before = b"".join([p for p in memo.payloads if p is not None])  # all: whole
            if start is None or not payload.startswith(before, start):
                return None, proof
        if not memo.whole and not self._still_known(buckets, memo):
            return None, proof
        tail = self.dump_elements(items[len(old) :], what) if len(items) > len(old) else []
        if any(kind != "msgpack" for kind, _ in tail):
            return None, proof  # the memo keeps msgpack encodings only (`planned_list`)
        new_payloads = [kept_encoding(bytes(p)) for _, p in tail]
        new_sizes = [len(p) for _, p in tail]
        total = memo.total + sum(new_sizes)
        if total <= INLINE_LIMIT:
            return None, proof
        payloads = [*memo.payloads, *new_payloads]
        sizes = [*memo.sizes, *new_sizes]
        kept = memo.kept + sum(len(p) for p in new_payloads if p is not None)
        element_refs = [*old, *(element_ref(k, bytes(p)) for k, p in tail)]
        clean = len(old) // CHUNK_SIZE  # chunks made only of old elements keep their refs
        chunks = memo.refs.chunks[:clean]
        chunk_refs = memo.refs.chunk_refs[:clean]
        for first in range(clean * CHUNK_SIZE, len(element_refs), CHUNK_SIZE):
            last = min(first + CHUNK_SIZE, len(element_refs))
            entries: list[list[str | int]] = [
                [element_refs[index], sizes[index]] for index in range(first, last)
            ]
            chunks.append(entries)
            chunk_refs.append(chunk_ref(entries))
        refs = ListRefs(element_refs, chunks, chunk_refs, list_blob_ref(chunk_refs))
        for index in buckets.wanted_many(old):
            payload_bytes = payloads[index]
            assert payload_bytes is not None  # `_still_known`: every dropped one is known
            buckets.add(
                buckets.elements,
                ITEMS,
                old[index],
                {"value": buckets.stored(("msgpack", payload_bytes))},
            )
        self._plan_list(buckets, tail, refs, skip=len(old))
        self._keep_list(key, ListMemo(payloads, sizes, total, kept, refs, proof))
        return refs.list_ref, proof

    @staticmethod
    def _still_known(buckets: _Buckets, memo: ListMemo) -> bool:
        """True when every old element whose encoding the memo did not keep needs no
        document (its ref is known or already planned), so it is never encoded again."""
        old = memo.refs.element_refs
        known, planned = buckets.known, buckets.planned
        return all(
            old[index] in planned or old[index] in known
            for index, payload in enumerate(memo.payloads)
            if payload is None
        )

    @staticmethod
    def _list(buckets: _Buckets, elements: Sequence[Typed]) -> ListRefs:
        # One call computes every e-, c- and the list b- ref (native core when built).
        refs = list_refs(elements)
        Planner._plan_list(buckets, elements, refs)
        return refs

    @staticmethod
    def _plan_list(
        buckets: _Buckets, elements: Sequence[Typed], refs: ListRefs, skip: int = 0
    ) -> None:
        """Plan the documents of a list: `elements` are those from index `skip` on."""
        for (kind, payload), ref in zip(elements, refs.element_refs[skip:], strict=True):
            if buckets.wanted(ref):
                buckets.add(
                    buckets.elements, ITEMS, ref, {"value": buckets.stored((kind, payload))}
                )
        for chunk, ref in zip(refs.chunks, refs.chunk_refs, strict=True):
            if buckets.wanted(ref):
                buckets.add(buckets.chunks, ITEMS, ref, {"elements": chunk})
        ref = refs.list_ref
        if buckets.wanted(ref):
            buckets.add(
                buckets.blobs,
                BLOBS,
                ref,
                {"chunks": refs.chunk_refs, "length": len(refs.element_refs)},
            )

    def plan_writes(
        self,
        config: Mapping[str, Any],
        writes: Iterable[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> WritePlan:
        """Plan the puts of `put_writes(config, writes, task_id, task_path)`.

        Raises:
            ProtocolError: the config has no `checkpoint_id`, or a write is malformed.
        """
        conf = configurable(config)
        checkpoint_id = conf.get("checkpoint_id")
        if not isinstance(checkpoint_id, str) or not checkpoint_id:
            raise ProtocolError(
                "put_writes needs config['configurable']['checkpoint_id']: "
                "pass the config returned by put()"
            )
        if not isinstance(task_id, str):
            raise ProtocolError(f"task_id must be a string, got {type(task_id).__name__}")
        thread_id: str = conf["thread_id"]
        ns: str | None = conf.get("checkpoint_ns", "")
        buckets = _Buckets(self.agent_id, thread_id, frozenset(), self.keyed)
        documents = []
        for position, write in enumerate(writes):
            channel, value = _pair(write)
            index = WRITES_IDX_MAP.get(channel, position)
            data = {
                "agent_id": self.agent_id,
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "_schema": SCHEMA_VERSION,
                "checkpoint_id": checkpoint_id,
                "task_id": task_id,
                "task_path": task_path,
                "index": index,
                "channel": channel,
                "value": buckets.stored(self.dumps(value, f"the write to {channel!r}")),
            }
            key = self.key(thread_id, ns, checkpoint_id, task_id, index) if self.keyed else ""
            documents.append(Put(WRITES, key, data, 0 if index >= 0 else None, "keep"))
        return WritePlan([*buckets.parts, *documents])


_NONE = type(None)
_class_overrides: dict[type, bool] = {}


def _overrides_class(kind: type) -> bool:
    """True when `kind` (or a base but object) defines `__class__`, which isinstance() asks."""
    found = _class_overrides.get(kind)
    if found is None:
        found = any("__class__" in vars(base) for base in kind.__mro__[:-1])
        _class_overrides[kind] = found
    return found


def _pair(write: Any) -> tuple[str, Any]:
    try:
        channel, value = write
    except (TypeError, ValueError):
        raise ProtocolError(
            f"each write must be a (channel, value) pair, got {write!r:.80}"
        ) from None
    if not isinstance(channel, str):
        raise ProtocolError(f"a write's channel must be a string, got {type(channel).__name__}")
    return channel, value
