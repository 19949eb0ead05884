"""The file's format: schema and migrations, table descriptors, row seals, namespace
heads, metadata keys, body framing, and recognizing what a path holds.

Everything here is pure description or statement text over one connection; no module
holds a scope or a cache. Outer layers use the names below; the other rooms of the
engine import the modules themselves.
"""

from threadloom.engine.format.recognize import DESCRIPTIONS, Found, identify, look, uri
from threadloom.engine.format.schema import FORMAT_VERSION

__all__ = ["DESCRIPTIONS", "FORMAT_VERSION", "Found", "identify", "look", "uri"]
