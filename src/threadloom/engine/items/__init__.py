"""The Store's items: rows, namespaces and TTLs, the filter index (field keys), the text
index, JSON checks, the vector index, its candidates and its training, searches, their
checks, the refilling of items' index entries (reindex.py), the embedding cache
(embedded.py).

Outer layers (the LangGraph Store, the viewer) use the names below.
"""

from threadloom.engine.items.embedded import key as embedding_key
from threadloom.engine.items.embedded import vectors as cached_vectors
from threadloom.engine.items.jsontext import MAX_NESTING, check_json, check_text
from threadloom.engine.items.recall import Recall
from threadloom.engine.items.records import MINUTE, Stored, Write, now_us, time_us
from threadloom.engine.items.reindex import Entry, Reindex
from threadloom.engine.items.rows import READS, Items
from threadloom.engine.items.vector_training import BackgroundTraining
from threadloom.engine.items.vector_values import page_size_for
from threadloom.engine.items.vectors import VectorIndex

__all__ = [
    "MAX_NESTING",
    "BackgroundTraining",
    "MINUTE",
    "READS",
    "Entry",
    "Items",
    "Recall",
    "Reindex",
    "Stored",
    "VectorIndex",
    "Write",
    "cached_vectors",
    "check_json",
    "check_text",
    "embedding_key",
    "now_us",
    "page_size_for",
    "time_us",
]
