"""Write `format4.db` and `documents.msgpack.zst`: a file of on-disk format 4 and its documents.

The same threads as `tests/data/format3/make.py` (chat threads, a replaced special write,
an interrupt, a subgraph), written by threadloom at commit 1e1a305 (the last commit
writing format 4), from a checkout of that commit: `THREADLOOM_BACKEND=python
PYTHONPATH=src python tests/data/format4/make.py OUTDIR`. The upgrade test opens the file
with the current threadloom, compares its documents with the dump, and adds a Store.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location(
    "format3_make", Path(__file__).resolve().parents[1] / "format3" / "make.py"
)
assert _SPEC is not None and _SPEC.loader is not None
_THREADS = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_THREADS)

if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    _THREADS.write(out / "format4.db")
