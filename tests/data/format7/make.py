"""Write `format7.db` and `documents.msgpack.zst`: a file of on-disk format 7 and its documents.

The threads and Store items of `tests/data/format5/make.py`, and a lease held on thread
`gamma` (a run that never ended: the row stays in the file). Written by threadloom at
commit f67fca9 (the last commit writing format 7), from a checkout of that commit:
`PYTHONPATH=src python tests/data/format7/make.py OUTDIR`. The upgrade test
(tests/engine/test_features.py) opens the file with the current threadloom, compares
its documents with the dump, reads the Store and the lease, and writes again.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from threadloom import Saver

_SPEC = importlib.util.spec_from_file_location(
    "format5_make", Path(__file__).resolve().parents[1] / "format5" / "make.py"
)
assert _SPEC is not None and _SPEC.loader is not None
_FORMAT5 = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_FORMAT5)


def write(path: Path) -> None:
    _FORMAT5.write(path)
    saver = Saver(str(path))
    saver.lease("gamma", ttl=86_400, renew=False).acquire()  # never released
    saver.close()


if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    write(out / "format7.db")
