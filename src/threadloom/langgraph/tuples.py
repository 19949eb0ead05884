"""The LangGraph side of the adapters: serializers and tuples LangGraph defines.

Adapter layer: the only modules that import `langgraph` are this one and the
adapters built on it (`saver.py`). The protocol and the engine below see a
`Serialization` and `Restored` tuples, never a LangGraph class.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple, get_checkpoint_metadata
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from threadloom.protocol import RedactingSerializer, Restored, Serialization, Serializer


def _merge_metadata(config: Mapping[str, Any], metadata: Mapping[str, Any]) -> Any:
    return get_checkpoint_metadata(config, metadata)  # type: ignore[arg-type]


class _MergeDropping:
    """LangGraph's metadata merge, without the keys a checkpoint must not keep."""

    def __init__(self, dropped: frozenset[str]) -> None:
        self.dropped = dropped

    def __call__(self, config: Mapping[str, Any], metadata: Mapping[str, Any]) -> Any:
        merged = _merge_metadata(config, metadata)
        return {k: v for k, v in merged.items() if k not in self.dropped}


def serialization(
    serde: Serializer | None = None, *, dropped_metadata: frozenset[str] = frozenset()
) -> Serialization:
    """Describe `serde` (default `JsonPlusSerializer()`) for the protocol's planner;
    `dropped_metadata` names metadata keys never stored (the config's or the caller's)."""
    chosen: Serializer = serde if serde is not None else JsonPlusSerializer()
    base = chosen.serde if isinstance(chosen, RedactingSerializer) else chosen
    return Serialization(
        chosen,
        merge_metadata=_MergeDropping(dropped_metadata) if dropped_metadata else _merge_metadata,
        whole_lists=type(base).dumps_typed is JsonPlusSerializer.dumps_typed,
        encrypts=encrypts(base),
        kept_classes=KEPT_CLASSES if decodes_purely(base) else None,
    )


#: The classes whose decoded objects a read may keep (as pickles) and copy for later
#: reads: LangChain's messages and documents, LangGraph's own types and the standard
#: library's values, which JsonPlusSerializer builds with no side effect and no event.
#: An application's own classes are decoded on every read (their constructors and
#: validators may do more), as is a class that moved module since this list was made.
KEPT_CLASSES: frozenset[tuple[str, str]] = frozenset(
    [
        *(
            (f"langchain_core.messages.{module}", f"{name}{chunk}")
            for module, name in (
                ("ai", "AIMessage"),
                ("human", "HumanMessage"),
                ("system", "SystemMessage"),
                ("tool", "ToolMessage"),
                ("chat", "ChatMessage"),
                ("function", "FunctionMessage"),
            )
            for chunk in ("", "Chunk")
        ),
        ("langchain_core.messages.modifier", "RemoveMessage"),
        ("langchain_core.documents.base", "Document"),
        ("langgraph.types", "Send"),
        ("langgraph.types", "Interrupt"),
        ("langgraph.types", "Command"),
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("collections", "deque"),
        ("datetime", "date"),
        ("datetime", "datetime"),
        ("datetime", "time"),
        ("datetime", "timedelta"),
        ("datetime", "timezone"),
        ("decimal", "Decimal"),
        ("uuid", "UUID"),
    ]
)


def decodes_purely(serde: Serializer) -> bool:
    """Whether `serde` is LangGraph's JsonPlusSerializer decoding as it comes: its own
    `loads_typed`, JSON reviver and msgpack ext hook (not one given to it or set by a
    subclass or on the instance). Anything else may do more than decode."""
    if type(serde).loads_typed is not JsonPlusSerializer.loads_typed:
        return False
    if "loads_typed" in vars(serde) or getattr(serde, "_custom_unpack_ext_hook", True):
        return False
    if getattr(type(serde), "_reviver", None) is not getattr(JsonPlusSerializer, "_reviver", None):
        return False
    hook = getattr(serde, "_unpack_ext_hook", None)
    return str(getattr(hook, "__qualname__", "")).startswith("_create_msgpack_ext_hook")


def encrypts(serde: Serializer) -> bool:
    """Whether `serde` encrypts: LangGraph's `EncryptedSerializer`, or a serializer whose
    type names carry a cipher as LangGraph's do (`msgpack+aes`)."""
    if isinstance(serde, EncryptedSerializer):
        return True
    try:
        kind, _ = serde.dumps_typed("threadloom")
    except Exception:  # a serializer that cannot write a str says nothing about ciphers
        return False
    return isinstance(kind, str) and "+" in kind


def checkpoint_tuple(restored: Restored) -> CheckpointTuple:
    """The LangGraph `CheckpointTuple` of a restored checkpoint."""
    return CheckpointTuple._make(restored)
