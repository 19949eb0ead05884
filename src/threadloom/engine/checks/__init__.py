"""Reading a file whole: `verify`, the figures of `doctor` (with the WAL's, `wal`),
`compact` (and its last step alone, `vacuum`), `backup`, and the reads the viewer needs
beyond the savers' and the Store's own (`viewer_reads`).

Everything here but `compact` and `vacuum` reads only (`backup` writes only its copy). Outer layers
use the names below.
"""

from threadloom.engine.checks import viewer_reads
from threadloom.engine.checks.backup import BackupReport, backup
from threadloom.engine.checks.figures import counts, figures
from threadloom.engine.checks.reclaim import compact, vacuum
from threadloom.engine.checks.verify import Problem, Report, verify

__all__ = [
    "BackupReport",
    "Problem",
    "Report",
    "backup",
    "compact",
    "counts",
    "figures",
    "vacuum",
    "verify",
    "viewer_reads",
]
