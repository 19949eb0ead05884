"""The physical content store under the logical documents (docs/FORMAT.md, format 2).

Engine layer. `ContentStore` is one file's blocks, inline bodies and dictionaries:
packing and reading (`blocks.py`), dictionary training and repacking (`training.py`),
statistics and verification (`inspection.py`). See `blocks.py` for the invariants.
"""

from __future__ import annotations

import time

from threadloom.engine.content.blocks import CHUNK_FROM, BlockStore, Packed
from threadloom.engine.content.inspection import Inspection, Stats
from threadloom.engine.content.training import Training
from threadloom.engine.sql import vacuum

__all__ = ["CHUNK_FROM", "BlockStore", "ContentStore", "Packed", "Stats"]


class ContentStore(Training, Inspection):
    """Blocks and dictionaries of one file; shared by every scope and saver on it.

    Args:
        file: the open file (format 2 or later).
        tables: the file's body-table registry (`tables.BODY_TABLES`): every table whose
            rows hold bodies; retraining, `verify` and `stats` cover exactly these.
    """

    def compact(self) -> Stats:
        """Delete released blocks, retrain the dictionary, re-encode every inline body with
        it, rewrite mostly-dead extents, then VACUUM (`reclaim`)."""
        self.reclaim()
        return self.stats()

    def reclaim(self, grace: float = 0.0) -> tuple[int, int]:
        """What `compact` does; returns `(blocks swept, extents rewritten)`.

        Released blocks go whatever their age by default: the grace protects a reader
        that read a row and reads its blocks in a later statement, and such a reader,
        finding a block gone, reads again in one transaction (`Reader.get`); compact
        runs with the file to itself anyway (VACUUM needs it).

        For a file upgraded from format 1, or one that shrank a lot (deleted threads).
        VACUUM rewrites the whole file and needs no other connection writing to it.

        Raises:
            EngineError: another connection kept the file busy during VACUUM.
        """
        with self.file.write() as conn:
            swept = self.sweep(conn, grace)
        self.train(force=True)
        with self.file.write() as conn:
            rewritten = self._repack(conn, time.time())
        with self.file.connection() as conn:
            vacuum(conn, self.file.path)
        return swept, rewritten
