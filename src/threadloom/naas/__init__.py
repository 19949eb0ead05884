"""threadloom as the memory of a naas project (docs/naas.md).

- `DocumentAdapter`: a naas document adapter (`services.document.document_adapter:
  {adapter: custom, python_module: threadloom.naas, module_callable: DocumentAdapter,
  custom_config: {path: storage/memory.db}}`) keeping the LangGraph collections in a
  threadloom file and every other collection in a fallback naas adapter.
- `bind(path)`: for projects without NATS, a threadloom `Saver` as the engine's default
  agent memory; `unbind()` gives the engine its own back.

Needs naas-abi-core (the `naas` extra); runs in the naas project's environment.
"""

from __future__ import annotations

from threadloom.naas.adapter import DocumentAdapter
from threadloom.naas.binding import bind, unbind

__all__ = ["DocumentAdapter", "bind", "unbind"]
