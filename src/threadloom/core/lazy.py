"""Names a module exports but loads on first use (PEP 562), for the rooms' `__init__`s.

Core layer: imports nothing from threadloom. A process that only checkpoints never
touches the conversation features, the document view or the sync state; their modules
load when a name of theirs is first asked for (peak RSS, bench/README.md).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(module: str, names: Mapping[str, tuple[str, str]]) -> Callable[[str], Any]:
    """A module-level `__getattr__` that imports each of `names` on first use.

    Args:
        module: the exporting module's `__name__` (named in the error for other names).
        names: each exported name -> (the module that holds it, its name there).
    """

    def load(name: str) -> Any:
        try:
            where, attribute = names[name]
        except KeyError:
            raise AttributeError(f"module {module!r} has no attribute {name!r}") from None
        return getattr(importlib.import_module(where), attribute)

    return load
