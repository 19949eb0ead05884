"""Owner labels: any identity as a valid Store namespace label, reversibly.

Layer: protocol, pure and I/O-free, so the tools that name an owner's Store namespaces
(the CLI's `erase`) encode them as `threadloom.langgraph.memories.OwnerStore` does without
importing LangGraph. `threadloom.langgraph.memories` re-exports both functions.
"""

from __future__ import annotations

from threadloom.errors import InvalidArgumentError

__all__ = ["MARK", "decode_label", "encode_label"]

#: First character of every encoded owner label; a plain label never starts with it.
MARK = "~"
_ESCAPES = {"%": "%25", ".": "%2E", "\x00": "%00"}
_UNESCAPES = {code: char for char, code in _ESCAPES.items()}


def encode_label(label: str) -> str:
    """An owner label as a valid namespace label, reversibly (`decode_label` undoes it).

    A label that is non-empty, holds no ``.`` and no NUL, does not start with ``~`` and is
    not the wildcard ``*`` stays as it is. Any other label becomes ``~`` followed by the
    label with ``%`` written ``%25``, ``.`` written ``%2E`` and NUL written ``%00``. So an
    encoded label is never empty, never holds ``.`` or NUL, always starts with ``~``, and
    never equals a plain label: distinct labels give distinct encodings.

    Example:
        >>> encode_label("ada@example.com"), encode_label(""), encode_label("u-1")
        ('~ada@example%2Ecom', '~', 'u-1')
    """
    if not isinstance(label, str):
        raise InvalidArgumentError(f"an owner label must be a str, got {type(label).__name__}")
    plain = label and label != "*" and not label.startswith(MARK)
    if plain and "." not in label and "\x00" not in label:
        return label
    return MARK + "".join(_ESCAPES.get(char, char) for char in label)


def decode_label(label: str) -> str:
    """The owner label `encode_label` turned into `label`.

    Raises:
        ValueError: `label` is not something `encode_label` produces.

    Example:
        >>> decode_label("~ada@example%2Ecom")
        'ada@example.com'
    """
    if not label.startswith(MARK):
        decoded = label
    else:
        parts: list[str] = []
        rest = label[1:]
        while rest:
            head, sep, rest = rest.partition("%")
            parts.append(head)
            if sep:
                code, rest = "%" + rest[:2], rest[2:]
                if code not in _UNESCAPES:
                    raise ValueError(f"{label!r} is not an encoded owner label (bad {code!r})")
                parts.append(_UNESCAPES[code])
        decoded = "".join(parts)
    if encode_label(decoded) != label:
        raise ValueError(f"{label!r} is not an owner label encode_label produces")
    return decoded
