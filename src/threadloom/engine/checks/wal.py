"""The WAL of a file for `threadloom doctor`: its size, why it is large, what to do.

Engine layer. Reads only: the `-wal` file's size and the header of the WAL index
(`-shm`, SQLite's documented wal-index format), which holds what
`PRAGMA wal_checkpoint(PASSIVE)` would report without running a checkpoint: the frames
in the log (`mxFrame`) and those already copied into the file (`nBackfill`), and the
snapshot marks of the readers. With no process attached the index may be stale; the
figures are then what the last process left.

threadloom keeps a running WAL small (SQLite checkpoints after every ~1,000 pages
committed, `journal_size_limit` truncates it to `WAL_LIMIT` after each checkpoint) and
folds it in on its last close. A WAL grows anyway when a checkpoint cannot reach its
end: a reader holds an old snapshot while writers go on (checkpoint starvation), or
no connection checkpoints (another program's, with automatic checkpoints off).
"""

from __future__ import annotations

import os
import struct

from threadloom.engine.file import WAL_LIMIT

#: A WAL above this many bytes is reported with its reason and what to do.
LARGE = 4 * WAL_LIMIT
#: The wal-index header: two copies of 48 bytes, then the checkpoint info.
_HEADER = struct.Struct("=IIIBBHII8x8x8x")
_CHECKPOINT = struct.Struct("=I5I")
_VERSION = 3007000
_WAL_HEADER = 32
_FRAME_HEADER = 24
_UNUSED_MARK = 0xFFFFFFFF


def wal(path: str, *, large: int = LARGE) -> dict[str, object]:
    """The WAL of `path`: bytes, frames in the log and checkpointed, reader snapshots,
    and, when it is larger than `large` bytes, why and what to do (`state`, `reason`,
    `hint`)."""
    try:
        size = os.path.getsize(f"{path}-wal")
    except OSError:
        return {"bytes": 0, "state": "none", "reason": "no WAL: the file is at rest"}
    out: dict[str, object] = {"bytes": size}
    index = _index(f"{path}-shm")
    if index is not None:
        page_size, frames, backfilled, marks = index
        out["frames"] = frames
        out["checkpointed"] = backfilled
        out["log_bytes"] = _WAL_HEADER + frames * (page_size + _FRAME_HEADER) if frames else 0
        out["reader_snapshots"] = marks
    if size <= large:
        out["state"] = "ok"
        return out
    out.update(_diagnose(index, large))
    return out


def _index(shm: str) -> tuple[int, int, int, list[int]] | None:
    """(page size, frames in the log, frames checkpointed, reader marks behind the log's
    end) from the WAL index, or None when it is missing or not initialised."""
    try:
        with open(shm, "rb") as handle:
            head = handle.read(136)
    except OSError:
        return None
    if len(head) < 136:
        return None
    first, second = head[:48], head[48:96]
    version, _, _, ready, _, page, frames, _ = _HEADER.unpack(first)
    if version != _VERSION or not ready or first != second:
        return None  # not initialised, or a writer was changing it at that moment
    backfilled, *marks = _CHECKPOINT.unpack(head[96:120])
    page_size = 65536 if page == 1 else page
    behind = sorted({m for m in marks[1:] if m != _UNUSED_MARK and 0 < m < frames})
    return page_size, frames, min(backfilled, frames), behind


def _diagnose(index: tuple[int, int, int, list[int]] | None, large: int) -> dict[str, object]:
    """Why a WAL file is larger than `large` bytes, and what to do: frames not yet
    checkpointed past `large` bytes are a checkpoint that cannot run or cannot finish;
    otherwise the file kept the size it reached once."""
    end = "end the long read (find the process with `fuser FILE-wal` or `lsof FILE`)"
    if index is None:
        return {
            "state": "large",
            "reason": "the WAL index (-shm) is missing or unreadable, so whether a "
            "checkpoint is blocked cannot be told",
            "hint": "open the file with threadloom and close it (the last close folds the "
            "WAL in), then run doctor again",
        }
    page_size, frames, backfilled, marks = index
    log = _WAL_HEADER + frames * (page_size + _FRAME_HEADER) if frames else 0
    pending = (frames - backfilled) * (page_size + _FRAME_HEADER)
    if pending > large and backfilled == 0:
        return {
            "state": "no-checkpoint",
            "reason": f"no checkpoint has run since the log restarted ({frames} frames, none "
            "copied into the file): a process writes with automatic checkpoints off, or a "
            "reader has held one snapshot since the log restarted",
            "hint": f"{end}; a threadloom writer checkpoints after its next commit, and "
            "the last threadloom close folds the WAL in and removes it",
        }
    if pending > large:
        return {
            "state": "checkpoint-starved",
            "reason": f"checkpoints stop at frame {backfilled} of {frames}: a reader holds a "
            "snapshot older than the log's end while writers go on (a long read "
            "transaction, an unfinished iterator, a stuck or suspended process)"
            + (f"; reader snapshots end at frames {marks}" if marks else ""),
            "hint": f"{end}; the next checkpoint then copies the log and threadloom "
            f"truncates the WAL to {WAL_LIMIT // (1024 * 1024)} MiB",
        }
    return {
        "state": "not-truncated",
        "reason": f"the log in use is small ({frames} frames, {log:,} bytes, {backfilled} "
        "checkpointed) but the "
        "file kept the size it reached during a large write or an earlier blocked "
        "checkpoint; SQLite reuses that space instead of shrinking the file",
        "hint": "close every process that has the file open (the last threadloom close "
        "folds the WAL in and removes it), or run `PRAGMA wal_checkpoint(TRUNCATE)` on it",
    }
