"""A progress bar on stderr for long commands (`export`, `import`, `migrate`)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

#: Characters of the bar.
WIDTH = 30


def progress_bar(unit: str = "") -> Callable[[int, int], None]:
    """A callback `(done, total)` that redraws `[####....] done/total unit` on stderr."""
    suffix = f" {unit}" if unit else ""

    def show(done: int, total: int) -> None:
        filled = WIDTH * done // total if total else WIDTH
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (WIDTH - filled)}] {done}/{total}{suffix}")
        sys.stderr.flush()

    return show


@contextlib.contextmanager
def shown(unit: str = "", *, quiet: bool = False) -> Iterator[Callable[[int, int], None] | None]:
    """A progress callback on a terminal (None elsewhere or when `quiet`, e.g. `--json`),
    its line ended when the block does."""
    bar = progress_bar(unit) if sys.stderr.isatty() and not quiet else None
    try:
        yield bar
    finally:
        if bar is not None:
            sys.stderr.write("\n")
