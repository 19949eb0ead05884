"""Output of the benchmark scripts: Markdown tables and number formatting."""

from __future__ import annotations

import cProfile
import io
import pstats
from collections.abc import Sequence
from typing import Any

MiB = 1024 * 1024


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown pipe table with padded columns (readable as plain text too)."""
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(cells[0], widths, strict=True)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    for row in cells[1:]:
        lines.append(
            "| "
            + " | ".join(
                c.rjust(w) if _numeric(c) else c.ljust(w) for c, w in zip(row, widths, strict=True)
            )
            + " |"
        )
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def _numeric(text: str) -> bool:
    return bool(text) and (text[0].isdigit() or text[0] in "-.") and text != "-"


def kib(n: int | None) -> str:
    return "-" if n is None else f"{n / 1024:.1f} KiB"


def mib(n: int | None) -> str:
    return "-" if n is None else f"{n / MiB:.2f} MiB"


def ms(stats: tuple[float, float, int] | None) -> tuple[str, str]:
    """(median, p95) formatted in milliseconds."""
    if stats is None:
        return "-", "-"
    return f"{stats[0]:.2f}", f"{stats[1]:.2f}"


def ratio(value: Any, base: Any) -> str:
    """`value / base` as "1.23x", or "-" when either is missing (None, a dict, zero base)."""
    if not isinstance(value, (int, float)) or not isinstance(base, (int, float)) or not base:
        return "-"
    return f"{value / base:.2f}x"


def profile_report(profile: cProfile.Profile, title: str, top: int = 15) -> str:
    """The top functions of a profile by own time and by cumulative time."""
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.strip_dirs()
    out.write(f"\n## profile: {title} (by tottime)\n")
    stats.sort_stats("tottime").print_stats(top)
    out.write(f"\n## profile: {title} (by cumtime)\n")
    stats.sort_stats("cumulative").print_stats(top)
    return out.getvalue()
