"""Code run in a fresh interpreter: what a new process imports, or does, on its own."""

from __future__ import annotations

import subprocess
import sys


def run_fresh(code: str) -> None:
    """Run `code` in a new process of this interpreter; fail with its stderr if it fails."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
