"""Damage report: the integrity suite's cases as a table, per damage kind.

Runs the cases of `tests/integrity` (the same fixture, seeds and counts unless told
otherwise) and counts, per kind, how the reads of each damaged copy compared with the
original (identical / raised a ThreadloomError / raised another exception / wrong without
raising) and what `threadloom verify` said: sound (0) while a read differed or raised,
could not check (1) while a read differed or raised, problems (3) on a copy whose reads are
identical, and tracebacks. Nothing is asserted; the exit status is 0.

    python bench/damage_report.py            # the suite's counts (~2 min on 2 cores)
    python bench/damage_report.py --quick    # 20 flips, 1 per b-tree
    python bench/damage_report.py --list     # also name every case that breaks a promise
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from _tables import table  # noqa: E402 (after the path set-up above)

from tests.integrity import _cases  # noqa: E402
from tests.integrity._damage import IDENTICAL, SEVERITY, original  # noqa: E402

COLUMNS = (
    "cases",
    *SEVERITY[::-1],
    "verify 0 while reads differ",
    "verify 1 while reads differ",
    "verify 3, reads identical",
    "verify tracebacks",
    "cases failing",
)


def tally(results: list[_cases.Result]) -> Counter[str]:
    """Count one kind's results into the report's columns."""
    counts: Counter[str] = Counter(cases=len(results))
    for result in results:
        kind, codes = result.outcome.kind, result.verdict.codes
        counts[kind] += 1
        if kind != IDENTICAL and 0 in codes:
            counts["verify 0 while reads differ"] += 1
        if kind != IDENTICAL and 1 in codes:
            counts["verify 1 while reads differ"] += 1
        if kind == IDENTICAL and 3 in codes:
            counts["verify 3, reads identical"] += 1
        counts["verify tracebacks"] += result.verdict.traceback
        counts["cases failing"] += bool(_cases.failures(result))
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 flips, 1 per b-tree")
    parser.add_argument("--list", action="store_true", help="name every failing case")
    args = parser.parse_args()
    flips, per_tree = (20, 1) if args.quick else (_cases.FLIPS, _cases.PER_TREE)
    started = time.monotonic()
    rows, failing = [], []
    with tempfile.TemporaryDirectory(prefix="threadloom-damage-") as folder:
        fixture = original(Path(folder))
        size = fixture.path.stat().st_size
        for kind in _cases.KINDS:
            results = []
            for case in _cases.cases(fixture.path, kind, flips=flips, per_tree=per_tree):
                with tempfile.TemporaryDirectory(dir=folder) as scratch:
                    results.append(_cases.run(case, fixture, Path(scratch)))
            counts = tally(results)
            rows.append([kind, *(counts[c] for c in COLUMNS)])
            failing += [(r.case.name, _cases.failures(r)) for r in results if _cases.failures(r)]
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    total = ["all", *(sum(row[i + 1] for row in rows) for i in range(len(COLUMNS)))]
    print(f"threadloom damage report, commit {commit}, fixture {size} bytes\n")
    print(table(["kind", *COLUMNS], [*rows, total]))
    print(f"\n{time.monotonic() - started:.0f} s")
    if args.list:
        for name, broken in failing:
            print(f"\n{name}:\n  " + "\n  ".join(line[:300] for line in broken))
    return 0


if __name__ == "__main__":
    sys.exit(main())
