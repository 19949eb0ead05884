"""Reading a file whole: `verify`, the figures of `doctor` (with the WAL's, `wal`),
`compact`, `backup`, and the reads the viewer needs beyond the savers' and the Store's
own (`viewer_reads`).

Everything here but `compact` reads only (`backup` writes only its copy). Outer layers
use the names below.
"""

from threadloom.engine.checks import viewer_reads
from threadloom.engine.checks.backup import BackupReport, backup
from threadloom.engine.checks.figures import counts, figures
from threadloom.engine.checks.reclaim import compact
from threadloom.engine.checks.verify import Problem, Report, verify

__all__ = [
    "BackupReport",
    "Problem",
    "Report",
    "backup",
    "compact",
    "counts",
    "figures",
    "verify",
    "viewer_reads",
]
