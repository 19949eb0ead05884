"""Write `format12.db` and `answers.json`: a Store of on-disk format 12 and what it answers.

A Store with a vector index (8 dimensions, `embed` below) and its text index, as format 13
finds them: items put once, put again with a new text, put again unchanged, put with their
own `index` fields, put with `index=False`, and one deleted. Format 13 records each item's
text digest (`store_items.text_digest`); a format-12 row has none, so its first put after
the upgrade writes its text entry again. `answers.json` holds every item and the keys and
scores of text searches. Written by threadloom at commit 7117459 (the last commit writing
format 12), from a checkout of that commit: `PYTHONPATH=src python
tests/data/format12/make.py OUTDIR`. The upgrade test (tests/store/test_text_digest.py)
opens the file with the current threadloom and compares.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import apsw

from threadloom import Store

NAMESPACE = ("memories", "ada")
QUERIES = ["amber fox", "ERR-4711", "kettle", "orbit", "quiet harbor", "note"]


def embed(texts: list[str]) -> list[list[float]]:
    """A deterministic embedder: 8 floats from each text's SHA-256."""
    return [[b / 255.0 - 0.5 for b in hashlib.sha256(t.encode()).digest()[:8]] for t in texts]


def index() -> dict[str, Any]:
    return {"dims": 8, "embed": embed, "fields": ["text"]}


def fill(store: Store) -> None:
    texts = {
        "a": "the amber fox crossed the road",
        "b": "build failed with ERR-4711 at the linker",
        "c": "a kettle whistles in the quiet harbor",
        "d": "satellites in a low orbit",
        "e": "a note about the amber kettle",
        "f": "nothing to see",
    }
    for key, text in texts.items():
        store.put(NAMESPACE, key, {"text": text, "title": f"note {key}"})
    store.put(NAMESPACE, "b", {"text": "the linker passed after ERR-4711", "title": "note b"})
    store.put(NAMESPACE, "c", {"text": texts["c"], "title": "note c"})  # unchanged
    store.put(NAMESPACE, "d", {"text": texts["d"], "title": "orbit note"}, index=["title"])
    store.put(NAMESPACE, "e", {"text": texts["e"], "title": "note e"}, index=False)
    store.delete(NAMESPACE, "f")


def answers(store: Store) -> dict[str, Any]:
    items = sorted(store.search(NAMESPACE, limit=100), key=lambda i: i.key)
    found = {
        q: [[i.key, i.score] for i in store.search(NAMESPACE, query=q, mode="text", limit=10)]
        for q in QUERIES
    }
    return {"items": {i.key: i.value for i in items}, "text": found}


if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    path = out / "format12.db"
    store = Store(path, index=index())
    try:
        fill(store)
        found = answers(store)
    finally:
        store.close()
    (out / "answers.json").write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    conn = apsw.Connection(str(path))
    conn.execute("VACUUM")
    conn.close()
