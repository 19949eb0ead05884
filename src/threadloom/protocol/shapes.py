"""The shapes a plan is made of, and how an adapter describes its serializer (SPEC §4).

No I/O. `Put` is one document to put; `Known` what a store holds for a thread;
`CheckpointPlan` and `WritePlan` what the planner (`plan.py`) returns; `Serialization`
what the adapter that owns the serializer tells the planner about it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Set
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from threadloom.errors import ProtocolError
from threadloom.protocol.redact import Serializer

OnConflict = Literal["keep", "compare"]
Typed = tuple[str, bytes]


class Put(NamedTuple):
    """One planned document write.

    Attributes:
        collection: target collection.
        key: document id ("" from a planner made with `keyed=False`).
        data: document data (a map; bytes stay bytes).
        if_version: 0 for create-only, None for an unconditional replace.
        on_conflict: on a version conflict, `keep` the stored document or
            `compare` it with `data` and fail when they differ.
    """

    collection: str
    key: str
    data: dict[str, Any]
    if_version: int | None
    on_conflict: OnConflict


class Known(NamedTuple):
    """What a store is known to hold for a checkpoint's thread.

    Attributes:
        refs: refs known to be stored (no document is planned for them).
        entries: the parent's channel entries, `channel -> (version, entry)`.
    """

    refs: Collection[str]
    entries: Mapping[str, tuple[Any, dict[str, Any]]]


NOTHING_KNOWN = Known(frozenset(), {})


class CheckpointPlan(NamedTuple):
    """The outcome of planning one checkpoint put.

    Attributes:
        puts: documents to put, in order (parts, elements, chunks, blobs, checkpoint).
        config: the config `put` returns.
        refs: every ref this plan referenced, planned or already known.
        entries: `channel -> (version, entry)` for channels with a version.
        metadata: the metadata as stored (merged with the config's), before encoding.
        planned: the refs this plan puts a document for: `refs` less the known ones
            (a handful per put, however long the history).
    """

    puts: list[Put]
    config: dict[str, Any]
    refs: set[str]
    entries: dict[str, tuple[Any, dict[str, Any]]]
    planned: Set[str] = frozenset()
    metadata: Mapping[str, Any] | None = None

    def known_refs(self, known: Known) -> frozenset[str]:
        """The refs a store holds for this checkpoint once its puts are applied: those of
        `known` (the `Known` this plan was made with) and this plan's own.

        Equal to `frozenset(known.refs) | self.refs` (every referenced ref is planned
        or known), at the cost of the planned refs, not of the history: the known set
        is shared when the plan adds nothing and copied once (in C) otherwise.
        """
        refs = known.refs
        if isinstance(refs, frozenset):
            return refs | self.planned if self.planned else refs
        return frozenset(refs).union(self.planned)

    @property
    def checkpoint(self) -> Put:
        """The checkpoint document's put (always last)."""
        return self.puts[-1]


class WritePlan(NamedTuple):
    """The outcome of planning one `put_writes` call.

    Attributes:
        puts: parts of every value first, then the write documents in `writes` order.
    """

    puts: list[Put]


def configurable(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """Return `config["configurable"]`, or raise a ProtocolError that says what is missing."""
    conf = config.get("configurable") if isinstance(config, Mapping) else None
    if not isinstance(conf, Mapping):
        raise ProtocolError(
            "config has no 'configurable' mapping: pass {'configurable': {'thread_id': ...}}"
        )
    thread_id = conf.get("thread_id")
    if not isinstance(thread_id, str) or not thread_id:
        raise ProtocolError(
            f"config['configurable']['thread_id'] must be a non-empty string, got {thread_id!r}"
        )
    ns = conf.get("checkpoint_ns", "")
    if ns is not None and not isinstance(ns, str):
        raise ProtocolError(f"checkpoint_ns must be a string, got {type(ns).__name__}")
    return conf


def _metadata_as_given(config: Mapping[str, Any], metadata: Mapping[str, Any]) -> Any:
    return metadata


@dataclass(frozen=True)
class Serialization:
    """How a planner serializes, as the adapter that owns the serializer describes it.

    The protocol knows no serializer class: the LangGraph adapters fill this in
    (`threadloom.langgraph.tuples.serialization`).

    Attributes:
        serde: the checkpoint serializer; wrapped in `RedactingSerializer` unless it is one.
        merge_metadata: `(config, metadata) -> metadata` as stored (LangGraph merges the
            config's scalar keys in); the identity by default.
        whole_lists: `serde.dumps_typed` of a list is one msgpack array whose element spans
            equal the elements' own encodings (LangGraph's JsonPlusSerializer), so a list
            channel is encoded once and cut.
        model_fingerprints: `serde` encodes a pydantic model as a function of its class
            and its field data (LangGraph's JsonPlusSerializer: `model_dump()` in an ext),
            so a grown list of models is proven unchanged by fingerprints
            (`protocol._fingerprint`) instead of being encoded again. None (the default)
            means the same as `whole_lists`.
        encrypts: `serde` encrypts what it writes (LangGraph's `EncryptedSerializer`):
            the engine then writes no text of a conversation outside it (no title read
            from the messages; no title, summary or tags set in the clear unless the
            adapter allows that field: `Scope.keeps_text`).
        kept_classes: `serde.loads_typed` makes equal objects of equal bytes and does
            nothing else when they hold only builtin containers, strings, numbers and
            instances of these classes (`(module, qualified name)`), so what it made of
            a stored chunk may be kept and copied for later reads (`protocol.decoded`).
            None (the default: a serializer not known to be pure) and a serializer
            that encrypts (its plaintext is not kept past a read) decode every read.
    """

    serde: Serializer
    merge_metadata: Callable[[Mapping[str, Any], Mapping[str, Any]], Any] = _metadata_as_given
    whole_lists: bool = False
    model_fingerprints: bool | None = None
    encrypts: bool = False
    kept_classes: frozenset[tuple[str, str]] | None = None


class _NoSerializer:
    """The serializer of a planner opened only to key and read documents (serve, export)."""

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        raise ProtocolError(
            "this scope was opened without a serializer; open the file through "
            "threadloom.Saver to write or read checkpoints"
        )

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        return self.dumps_typed(data)
