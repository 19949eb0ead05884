"""The content store under the logical documents: blocks and inline bodies, the shared
zstd dictionaries and their training, inspection, and rows measured before they go.

Outer layers reach it only through `threadloom.engine.File` (`File.content`) and the
checks; nothing here is imported from outside the engine.
"""

from threadloom.engine.content.content_store import ContentStore

__all__ = ["ContentStore"]
