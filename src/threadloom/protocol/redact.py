"""Secret redaction before serialization (SPEC §4.7).

Invariant: a value with a callable `get_secret_value` is never serialized; it is
replaced by the same secret type holding `REDACTED_SECRET`. Containers that hold
no secret are returned as the very same object, so redaction costs no copies on
the common path.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from threadloom.protocol.constants import REDACTED_SECRET

_MAX_DEPTH = 64


def redact_secrets(value: Any) -> Any:
    """Return `value` with every secret replaced by a redacted secret of the same type."""
    return _redact(value, 0)


def _is_secret(value: Any) -> bool:
    return not isinstance(value, type) and callable(getattr(value, "get_secret_value", None))


def _redacted(secret: Any) -> Any:
    try:
        raw = secret.get_secret_value()
    except Exception:
        raw = None
    marker: str | bytes = REDACTED_SECRET.encode() if isinstance(raw, bytes) else REDACTED_SECRET
    try:
        return type(secret)(marker)
    except Exception:
        return REDACTED_SECRET


def _redact(value: Any, depth: int) -> Any:
    if depth > _MAX_DEPTH or value is None or isinstance(value, (str, bytes, int, float)):
        return value
    if _is_secret(value):
        return _redacted(value)
    deeper = depth + 1
    if isinstance(value, dict):
        items = {key: _redact(item, deeper) for key, item in value.items()}
        if all(items[key] is item for key, item in value.items()):
            return value
        return type(value)(items) if type(value) is not dict else items
    if isinstance(value, (list, tuple, set, frozenset)):
        new = [_redact(item, deeper) for item in value]
        if all(a is b for a, b in zip(new, value, strict=False)):
            return value
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            return type(value)(*new)
        return type(value)(new)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for field in dataclasses.fields(value):
            if field.init:
                old = getattr(value, field.name)
                new_item = _redact(old, deeper)
                if new_item is not old:
                    changes[field.name] = new_item
        return dataclasses.replace(value, **changes) if changes else value
    declared = getattr(type(value), "model_fields", None)
    if isinstance(declared, dict) and callable(getattr(value, "model_copy", None)):
        names = [*declared, *(getattr(value, "model_extra", None) or {})]
        update = {}
        for name in names:
            old = getattr(value, name, None)
            new_item = _redact(old, deeper)
            if new_item is not old:
                update[name] = new_item
        return value.model_copy(update=update) if update else value
    return value


class RedactingSerializer:
    """A serializer that redacts secrets before delegating to `serde`.

    Loading is plain `serde.loads_typed`: redaction is one-way.

    Args:
        serde: LangGraph serializer to wrap (`JsonPlusSerializer` in the savers).
    """

    def __init__(self, serde: SerializerProtocol) -> None:
        self.serde = serde

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        """Serialize `obj` with its secrets redacted."""
        return self.serde.dumps_typed(redact_secrets(obj))

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        """Deserialize with the wrapped serializer."""
        return self.serde.loads_typed(data)
