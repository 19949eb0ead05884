"""The Store's values as JSON text: exactly what was put, or a clear refusal (no SQL).

Engine layer. `check_json` refuses what JSON text would not give back as it is (a tuple
would come back a list, an int key a string), text UTF-8 cannot hold, and integers too
long for Python to write; `encode_value` is the compact JSON of a checked value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from threadloom.errors import InvalidValueError


def encode_value(value: Mapping[str, Any], *, checked: bool = False) -> bytes:
    """A value's JSON text, exactly: refuses what JSON would silently change
    (`checked`: the caller ran `check_json` on it already).

    Raises:
        TypeError: a key that is not a string, or a value JSON cannot hold as it is
            (a tuple, a set, bytes, a datetime...), naming where it is.
    """
    if not checked:
        check_json(value)
    return _ENCODER.encode(value).encode("utf-8", "surrogatepass")


#: `json.dumps` with these settings builds an encoder per call (2.7 of 7 us for a small
#: value); an encoder keeps no state between calls, so one serves every thread.
_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=True)


#: The deepest a Store value nests (objects and lists, the value itself is level 1). Each
#: read and check of a value is bounded by it: a value refused here is never half stored,
#: and every value stored can be read, filtered, deleted and verified on the default
#: Python stack.
MAX_NESTING: Final = 128


#: Where a value sits: "$" (the root's name), or (its parent's place, key or list index).
_Place = Any


def check_json(value: Any, where: str = "$") -> None:
    """Raise, naming where, for what JSON text would not give back as it is.

    Walks the value without recursion, so a value of any depth gets this answer. The
    place of a child is kept as (parent place, key or index) and written out only for
    an error: a bulk load checks every value, and most values are fine.

    Raises:
        TypeError: a type JSON does not have (a tuple, a set, a non-string key...).
        InvalidValueError: text UTF-8 cannot hold (a lone surrogate), an integer too
            long for Python to write as text (more than 4300 digits), or a value nested
            deeper than MAX_NESTING levels.
    """
    pending: list[tuple[Any, _Place, int]] = [(value, where, 1)]
    while pending:
        value, place, depth = pending.pop()
        if isinstance(value, (dict, list)):
            if depth > MAX_NESTING:
                raise InvalidValueError(
                    f"store values nest at most {MAX_NESTING} levels of objects and lists; "
                    f"{_shortened(_where(place))} is deeper: flatten the value or store the "
                    "deep part as a JSON string"
                )
            if isinstance(value, list):
                children: Any = enumerate(value)
            else:
                children = value.items()
                for key in value:
                    if type(key) is not str:
                        if not isinstance(key, str):
                            raise TypeError(
                                f"store values are JSON: the key {key!r} at {_where(place)} "
                                f"is a {type(key).__name__}; use str keys"
                            )
                        check_text(key, f"{_where(place)} (a key)")
                    elif not key.isascii():
                        check_text(key, f"{_where(place)} (a key)")
            for label, child in children:
                # The common leaves are decided here, without a trip through `pending`.
                if type(child) is str:
                    if not child.isascii():
                        check_text(child, _where((place, label)))
                elif child is None or type(child) is float or type(child) is bool:
                    continue
                elif type(child) is int:
                    if child.bit_length() > _INT_BITS:
                        _too_long(_where((place, label)))
                else:
                    pending.append((child, (place, label), depth + 1))
        elif isinstance(value, str):
            check_text(value, _where(place))
        elif isinstance(value, int) and not isinstance(value, bool):
            if value.bit_length() > _INT_BITS:
                _too_long(_where(place))
        elif value is None or isinstance(value, (bool, float)):
            continue
        else:
            raise TypeError(
                f"store values are JSON: {_where(place)} is a {type(value).__name__}, which "
                "JSON would change; convert it (a list for a tuple, a string for a datetime)"
            )


def _where(place: _Place) -> str:
    """A place written out: `$.key[3].other`."""
    labels: list[str] = []
    while isinstance(place, tuple):
        place, label = place
        labels.append(f"[{label}]" if isinstance(label, int) else f".{label}")
    return str(place) + "".join(reversed(labels))


def _too_long(where: str) -> None:
    raise InvalidValueError(
        f"store values are JSON text: the integer at {where} has more than "
        "14,000 bits (about 4,200 digits; Python writes at most 4,300 as "
        "text); store it as a string"
    )


def _shortened(where: str) -> str:
    return where if len(where) <= 80 else f"{where[:40]}...{where[-36:]}"


def check_text(text: str, where: str) -> None:
    """Raise InvalidValueError when `text` is not Unicode text UTF-8 can hold."""
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidValueError(
            f"the text at {where} holds {text[exc.start]!r} (a lone surrogate), which UTF-8 "
            "cannot hold; decode it properly first (or store it escaped)"
        ) from None


#: Integers past this many bits may have more than 4300 digits (`sys.int_max_str_digits`).
_INT_BITS: Final = 14_000
