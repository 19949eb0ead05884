"""Progress on stderr for long commands, in one style everywhere.

CLI layer. `label [########......] 120/400 threads  35/s  ETA 0:08  item`, redrawn at
most ten times a second, only on a terminal (never with `--json`), and cleared when the
work ends. Every bar also records how far it got (`last`), drawn or not, so an
interrupted command can say what was done (`threadloom.cli._signals`).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

#: Characters of the bar.
WIDTH = 24
#: Seconds between two redraws.
REDRAW = 0.1


@dataclass
class Reached:
    """How far the latest progress went: `done` of `total` `unit`."""

    label: str
    done: int
    total: int
    unit: str

    def __str__(self) -> str:
        what = f"{self.done}/{self.total}" + (f" {self.unit}" if self.unit else "")
        return f"{self.label} {what}" if self.label else what


#: The progress last reported by any bar of this process (None before any).
last: Reached | None = None


class Bar:
    """A `(done, total)` progress callback drawing one line on stderr.

    Args:
        unit: what is counted, e.g. "threads".
        label: what is being done, e.g. "deleting".
        enabled: draw (else only record); drawn only when stderr is a terminal anyway.
        minimum: totals below this are not drawn (short work needs no bar).
    """

    def __init__(
        self, unit: str = "", label: str = "", *, enabled: bool = True, minimum: int = 0
    ) -> None:
        self.unit = unit
        self.label = label
        self.enabled = enabled and sys.stderr.isatty()
        self.minimum = minimum
        #: When and at what count the first report came: the rate counts from there, so
        #: the time spent opening files before the work does not lower it.
        self.first: tuple[float, int] | None = None
        self.drawn = 0.0
        self.shown = False

    def __call__(self, done: int, total: int, item: str = "") -> None:
        global last
        last = Reached(self.label, done, total, self.unit)
        if not self.enabled or total < self.minimum:
            return
        now = time.monotonic()
        if self.first is None:
            self.first = (now, done)
        if now - self.drawn < REDRAW and done < total:
            return
        self.drawn = now
        self.shown = True  # first: a Ctrl-C while drawing must still clear the line
        since, base = self.first
        text = line(self.label, done, total, self.unit, now - since, done - base)
        sys.stderr.write("\r\x1b[K" + text)
        if item:
            sys.stderr.write(f"  {item}")
        sys.stderr.flush()

    def end(self) -> None:
        """Clear the line (the command's report follows)."""
        if self.shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
            self.shown = False


def line(label: str, done: int, total: int, unit: str, elapsed: float, moved: int) -> str:
    """The text of a progress line (no item): bar, counts, and once `moved` units took
    `elapsed` seconds (half a second at least), the rate and the time left."""
    filled = WIDTH * done // total if total else WIDTH
    text = f"[{'#' * filled}{'.' * (WIDTH - filled)}] {done}/{total}" + (f" {unit}" if unit else "")
    if label:
        text = f"{label} {text}"
    if moved > 0 and elapsed >= 0.5:
        rate = moved / elapsed
        text += f"  {rate:.1f}/s" if rate < 10 else f"  {rate:.0f}/s"
        if done < total:
            text += f"  ETA {clock((total - done) / rate)}"
    return text


def clock(seconds: float) -> str:
    """Seconds as `M:SS` (or `H:MM:SS`)."""
    whole = int(seconds + 0.5)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


@contextlib.contextmanager
def shown(unit: str = "", *, quiet: bool = False, label: str = "") -> Iterator[Bar]:
    """A progress callback, drawn on a terminal unless `quiet` (e.g. `--json`), its line
    cleared when the block ends."""
    bar = Bar(unit, label, enabled=not quiet)
    try:
        yield bar
    finally:
        bar.end()
