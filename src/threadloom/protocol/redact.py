"""Secret redaction before serialization (SPEC §4.7).

Invariant: a value with a callable `get_secret_value` is never serialized; it is
replaced by the same secret type holding `REDACTED_SECRET`. Containers that hold
no secret are returned as the very same object, so redaction costs no copies on
the common path.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from threadloom.protocol.constants import REDACTED_SECRET

_MAX_DEPTH = 64


def redact_secrets(value: Any) -> Any:
    """Return `value` with every secret replaced by a redacted secret of the same type."""
    if not _may_hold_secret(value):
        return value
    return _redact(value, 0)


_SCAN_LIMIT = 1_000_000


def _may_hold_secret(root: Any) -> bool:
    """Cheap first pass: False when nothing reachable from `root` is a secret.

    Flat and allocation-light (the common case is a state with no secret at all);
    it ignores the depth limit, so True only means "run the exact walk", which
    applies it. A scan longer than _SCAN_LIMIT items (a cycle) also answers True.
    """
    stack = [root]
    pop, push, push_all = stack.pop, stack.append, stack.extend
    strategies = _strategies
    seen = 0
    while stack:
        value = pop()
        kind = type(value)
        if kind in _ATOMIC:
            continue
        seen += 1
        if seen > _SCAN_LIMIT:
            return True
        strategy = strategies.get(kind)
        if strategy is None:
            strategy = _strategy(kind)
        if strategy == _DICT:
            push_all(value.values())
        elif strategy in (_SEQUENCE, _NAMEDTUPLE):
            push_all(value)
        elif strategy == _MODEL:
            push_all((getattr(value, "__dict__", None) or {}).values())
            extra = getattr(value, "__pydantic_extra__", None)
            if extra:
                push_all(extra.values())
        elif strategy == _DATACLASS:
            for field in dataclasses.fields(value):
                if field.init:
                    push(getattr(value, field.name))
        elif strategy == _SECRET or callable(getattr(value, "get_secret_value", None)):
            return True
    return False


_ATOMIC: frozenset[type] = frozenset({str, bytes, bytearray, int, float, bool, type(None), complex})
_PLAIN_CONTAINERS: frozenset[type] = frozenset({dict, list, tuple})

# How to walk a value, decided once per type (the walk runs on every serialized
# value, so the per-object cost must stay at a dict lookup and a loop).
_LEAF, _SECRET, _DICT, _SEQUENCE, _NAMEDTUPLE, _DATACLASS, _MODEL = range(7)
_strategies: dict[type, int] = {}


def _strategy(kind: type) -> int:
    found = _strategies.get(kind)
    if found is not None:
        return found
    if callable(getattr(kind, "get_secret_value", None)):
        found = _SECRET
    elif issubclass(kind, dict):
        found = _DICT
    elif issubclass(kind, tuple) and hasattr(kind, "_fields"):
        found = _NAMEDTUPLE
    elif issubclass(kind, (list, tuple, set, frozenset)):
        found = _SEQUENCE
    elif dataclasses.is_dataclass(kind):
        found = _DATACLASS
    elif isinstance(getattr(kind, "model_fields", None), dict) and callable(
        getattr(kind, "model_copy", None)
    ):
        found = _MODEL
    else:
        found = _LEAF
    _strategies[kind] = found
    return found


def walked_as_model(kind: type) -> bool:
    """True when redaction walks instances of `kind` as a model: its fields and extras."""
    return _strategy(kind) == _MODEL


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
    kind = type(value)
    if kind in _ATOMIC or depth > _MAX_DEPTH:
        return value
    strategy = _strategy(kind)
    if strategy == _LEAF:
        if callable(getattr(value, "get_secret_value", None)):  # set on the instance
            return _redacted(value)
        return value
    if strategy == _SECRET:
        return _redacted(value)
    deeper = depth + 1
    if strategy == _DICT:
        changed = None
        for key, item in value.items():
            if type(item) in _ATOMIC or (type(item) in _PLAIN_CONTAINERS and not item):
                continue
            new_item = _redact(item, deeper)
            if new_item is not item:
                changed = changed or {}
                changed[key] = new_item
        if changed is None:
            return value
        items = {key: changed.get(key, item) for key, item in value.items()}
        if kind is dict:
            return items
        try:
            return kind(items)
        except Exception:
            return items
    if strategy in (_SEQUENCE, _NAMEDTUPLE):
        if all(type(item) in _ATOMIC for item in value):
            return value
        new = [_redact(item, deeper) for item in value]
        if all(a is b for a, b in zip(new, value, strict=False)):
            return value
        return kind(*new) if strategy == _NAMEDTUPLE else kind(new)
    if strategy == _DATACLASS:
        changes = {}
        for field in dataclasses.fields(value):
            if field.init:
                old = getattr(value, field.name)
                new_item = _redact(old, deeper)
                if new_item is not old:
                    changes[field.name] = new_item
        return dataclasses.replace(value, **changes) if changes else value
    update = {}
    fields = getattr(value, "__dict__", None) or {}
    extra = getattr(value, "__pydantic_extra__", None) or {}
    for source in (fields, extra):
        for name, old in source.items():
            if type(old) in _ATOMIC or (type(old) in _PLAIN_CONTAINERS and not old):
                continue
            new_item = _redact(old, deeper)
            if new_item is not old:
                update[name] = new_item
    return value.model_copy(update=update) if update else value


class Serializer(Protocol):
    """What the protocol needs of a checkpoint serializer (LangGraph's `SerializerProtocol`)."""

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]: ...

    def loads_typed(self, data: tuple[str, bytes]) -> Any: ...


class RedactingSerializer:
    """A serializer that redacts secrets before delegating to `serde`.

    Loading is plain `serde.loads_typed`: redaction is one-way.

    Args:
        serde: LangGraph serializer to wrap (`JsonPlusSerializer` in the savers).
    """

    def __init__(self, serde: Serializer) -> None:
        self.serde = serde

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        """Serialize `obj` with its secrets redacted."""
        return self.serde.dumps_typed(redact_secrets(obj))

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        """Deserialize with the wrapped serializer."""
        return self.serde.loads_typed(data)
