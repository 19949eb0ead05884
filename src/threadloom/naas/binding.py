"""`threadloom.naas.bind(path)`: a naas engine's agent memory in a threadloom file, one line.

Outer layer (naas). For projects without NATS, where naas's engine does not load the
document service and agents built with `memory=None` fall back to `MemorySaver` (memory
lost on restart): after `bind("storage/memory.db")`, they checkpoint into that file
through `threadloom.Saver`, in the engine's memory scope (namespace
`naas_abi_core.services.agent`, agent id `engine.v1`, the same scope the document
adapter and `threadloom serve` hold), so a project can later move to NATS mode with the
adapter on the same file and keep every thread.

naas has no hook for this: the engine binds its agent memory in `Engine.load()` (through
`set_default_agent_checkpointer`) and clears it in `Engine.shutdown()`. `bind` wraps
those places, in naas's `Engine` module only: loads keep the file's saver as the
default, and when the last engine that loaded while bound shuts down, the saver is
closed and the wrappers taken away (`unbind()` does the same at any time, and gives the
default back to what the engine chose, when that engine is still loaded). An engine
whose own document service holds agent memory (NATS mode, or a module that loads the
service) is warned about: agents would then write the file while the engine's other
clients read the document service, two stores of one memory that diverge; use the
document adapter instead (docs/naas.md).
"""

from __future__ import annotations

import atexit
import os
import threading
import warnings
import weakref
from pathlib import Path
from typing import Any

from threadloom.errors import NaasMemoryWarning
from threadloom.langgraph.saver import Saver

try:
    from naas_abi_core.engine import Engine as engine_module
    from naas_abi_core.engine import context
except ImportError as error:  # pragma: no cover - not in a naas project
    raise ImportError(
        "threadloom.naas runs inside a naas project: it needs naas-abi-core "
        "(pip install '/path/to/threadloom[naas]', the path of threadloom's clone)"
    ) from error

DIVERGE = (
    "this naas engine keeps agent memory in its document service ({found}), and "
    "threadloom.naas.bind keeps this process's agents in {path}: two stores of one memory "
    "would diverge. Keep one: in NATS mode put the LangGraph collections in the file "
    "with the threadloom document adapter (services.document.document_adapter: custom, "
    "docs/naas.md) instead of bind()"
)

_lock = threading.RLock()
_bound: _Binding | None = None


class _Binding:
    """One bind: the saver, what was wrapped, and the engines that loaded while bound."""

    def __init__(self, path: Path, saver: Saver, options: dict[str, Any]) -> None:
        self.path = path
        #: The file, resolved when bound (a later chdir does not change which it is).
        self.where = path.resolve()
        self.saver = saver
        self.options = options
        self.set_default = engine_module.set_default_agent_checkpointer
        self.load = engine_module.Engine.load
        self.shutdown = engine_module.Engine.shutdown
        #: Engines loaded while bound; the last one's shutdown ends the binding. Those
        #: still loading count too (a failed load shuts its engine down inside `load`).
        self.engines: weakref.WeakSet[Any] = weakref.WeakSet()
        self.loading: weakref.WeakSet[Any] = weakref.WeakSet()
        #: What the default would be without the binding (the engine's own choice).
        self.given_back: Any = None

    def install(self) -> Any:
        """Wrap the engine's binding places and make the saver the default; return the
        memory that was the default (to warn about once bound)."""
        binding = self

        def set_default(checkpointer: Any) -> None:
            if checkpointer is not binding.saver:
                binding.given_back = checkpointer
                if checkpointer is not None:
                    _diverge(checkpointer, binding.path)
            binding.set_default(binding.saver)

        def load(engine: Any, *args: Any, **kwargs: Any) -> Any:
            binding.loading.add(engine)
            try:
                loaded = binding.load(engine, *args, **kwargs)
                binding.engines.add(engine)
                return loaded
            finally:
                binding.loading.discard(engine)

        def shutdown(engine: Any) -> None:
            own = getattr(engine, "_Engine__agent_checkpointer", None)
            try:
                binding.shutdown(engine)
            finally:
                if own is not None and binding.given_back is own:
                    binding.given_back = None  # released with its engine
                if engine in binding.engines and engine not in binding.loading:
                    binding.engines.discard(engine)
                    if not binding.engines and not binding.loading:
                        _end(binding)

        engine_module.set_default_agent_checkpointer = set_default
        engine_module.Engine.load = load
        engine_module.Engine.shutdown = shutdown
        current = context.get_default_agent_checkpointer()
        if current is not None and current is not self.saver:
            self.given_back = current
        context.set_default_agent_checkpointer(self.saver)
        return self.given_back

    def remove(self) -> None:
        engine_module.set_default_agent_checkpointer = self.set_default
        engine_module.Engine.load = self.load
        engine_module.Engine.shutdown = self.shutdown
        if context.get_default_agent_checkpointer() is self.saver:
            context.set_default_agent_checkpointer(self.given_back)
        self.saver.close()


def _diverge(found: Any, path: Path) -> None:
    warnings.warn(
        DIVERGE.format(found=type(found).__name__, path=path), NaasMemoryWarning, stacklevel=3
    )


def bind(path: str | os.PathLike[str] = "storage/memory.db", **options: Any) -> Saver:
    """Make a threadloom `Saver` on `path` the naas engine's default agent memory.

    Call it before `Engine().load()`. Agents built with `memory=None` checkpoint into
    the file until the last engine that loaded while bound shuts down, which closes the
    saver. An engine loaded before `bind` is not counted: agents it builds afterwards
    take the file too, but its shutdown does not end the binding, and another engine's
    may end it under them. Binding the same file with the same options again returns
    the same saver.

    Args:
        path: the threadloom file (created if missing, its folder too).
        **options: `threadloom.Saver` options (`serde`, `synchronous`, `owner_keys`, ...);
            the scope stays the engine's unless `namespace` / `agent_id` say otherwise.

    Raises:
        ValueError: the process is bound already, to another file or with other options
            (`unbind()` first).
        NotOurFileError: `path` holds another application's file (left untouched).
    """
    global _bound
    where = Path(path)
    with _lock:
        if _bound is not None:
            if _bound.where == where.resolve() and _bound.options == options:
                return _bound.saver
            raise ValueError(
                f"naas agent memory is bound to {_bound.path} already (with "
                f"{_bound.options or 'no options'}); call threadloom.naas.unbind() first"
            )
        where.parent.mkdir(parents=True, exist_ok=True)
        binding = _Binding(where, Saver(where, **options), dict(options))
        try:
            found = binding.install()
        except BaseException:
            binding.remove()
            raise
        _bound = binding
    if found is not None:  # once bound: a warning raised as an error leaves it whole
        _diverge(found, binding.path)
    return binding.saver


def unbind() -> None:
    """Give the engine its own agent memory back and close the bound saver (idempotent)."""
    with _lock:
        if _bound is not None:
            _end(_bound)


def _end(binding: _Binding) -> None:
    """End `binding` if it is still the process's (under the lock: no bind in between)."""
    global _bound
    with _lock:
        if _bound is binding:
            _bound = None
            binding.remove()


atexit.register(unbind)
