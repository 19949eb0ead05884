"""Run in the naas venv (threadloom on PYTHONPATH), in a naas project whose document
service holds agent memory: what `threadloom.naas.bind` binds and gives back, in one
process with several engines.

Usage: naas_bind_lifecycle.py PROJECT_DIR

Prints one JSON object of observations (names below); the test checks them.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from typing import Any


def main() -> None:
    os.chdir(sys.argv[1])
    sys.path.insert(0, os.getcwd())
    from naas_abi_core.engine.context import get_default_agent_checkpointer as default
    from naas_abi_core.engine.Engine import Engine

    import threadloom.errors
    import threadloom.naas

    seen: dict[str, Any] = {}
    name = lambda value: None if value is None else type(value).__name__  # noqa: E731

    # Bound before any engine loads; a second engine that never loaded shuts down.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        saver = threadloom.naas.bind("storage/bound.db")
        first = Engine()
        first.load()
    seen["default after load"] = name(default())
    seen["warned at load"] = [str(w.message)[:40] for w in caught]
    Engine().shutdown()
    seen["closed by an engine that never loaded"] = saver._closed
    seen["same path, same options"] = threadloom.naas.bind("storage/bound.db") is saver
    try:
        threadloom.naas.bind("storage/bound.db", synchronous="FULL")
        seen["other options"] = "bound"
    except ValueError as exc:
        seen["other options"] = str(exc)[:40]
    first.shutdown()
    seen["closed by the last loaded engine"] = saver._closed
    seen["default after the last shutdown"] = name(default())

    # Bound after an engine loaded its own document memory; unbind gives it back.
    second = Engine()
    second.load()
    own = default()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = threadloom.naas.bind("storage/bound.db")
    seen["warned at bind"] = [w.category.__name__ for w in caught]
    seen["default while bound"] = name(default())
    threadloom.naas.unbind()
    seen["given back"] = default() is own and own is not None
    seen["closed by unbind"] = again._closed
    threadloom.naas.unbind()  # idempotent

    # Warnings raised as errors (-W error): bind raises, yet stays whole and undoable.
    original_load = Engine.load
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            threadloom.naas.bind("storage/bound.db")
            seen["warning as error"] = "not raised"
        except threadloom.errors.NaasMemoryWarning:
            seen["warning as error"] = name(default())
    threadloom.naas.unbind()
    seen["unwrapped after unbind"] = Engine.load is original_load and default() is own
    second.shutdown()
    seen["default at the end"] = name(default())

    # The same relative path after a chdir is another file.
    threadloom.naas.bind("storage/bound.db")
    os.makedirs("elsewhere/storage", exist_ok=True)
    os.chdir("elsewhere")
    try:
        threadloom.naas.bind("storage/bound.db")
        seen["after chdir"] = "the same saver"
    except ValueError:
        seen["after chdir"] = "refused"
    threadloom.naas.unbind()
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
