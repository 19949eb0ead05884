"""A progress bar on stderr for long commands (`export`, `import`, `migrate`)."""

from __future__ import annotations

import sys
from collections.abc import Callable

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
