"""`threadloom doctor`: versions, SQLite build, the core backend and the on-disk format written."""

from __future__ import annotations

import json
import platform

import apsw

from threadloom import __version__, core
from threadloom.engine.schema import FORMAT_VERSION


def report() -> dict[str, object]:
    """Return what `doctor` prints."""
    return {
        "threadloom": __version__,
        "python": platform.python_version(),
        "sqlite": apsw.sqlite_lib_version(),
        "apsw": apsw.apsw_version(),
        "format_version": FORMAT_VERSION,
        "backend": core.backend(),
    }


def run_doctor(*, as_json: bool) -> int:
    """Print the report as a table or JSON; return 0."""
    found = report()
    if as_json:
        print(json.dumps(found, indent=2))
    else:
        width = max(map(len, found))
        for key, value in found.items():
            print(f"{key:<{width}}  {value}")
    return 0
