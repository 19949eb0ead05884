"""The README's main set-up command runs as written on a fresh copy of the clone.

It builds a venv, installs threadloom with the `demo` extra from the copy (the package
index supplies the dependencies, as on a new machine), and runs the demo agent twice:
the second run must continue the first run's conversation from the embedded default
file. The copy holds the clone's tracked files only (what a fresh clone has), so a file
the install needs but git does not track fails here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _command(marker: str) -> str:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    start = lines.index(marker) + 2  # the marker, then the opening fence
    end = lines.index("```", start)
    return "\n".join(lines[start:end])


def _fresh_copy(into: Path) -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, tracked):
        source = ROOT / os.fsdecode(name)
        if source.is_file():
            target = into / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


@pytest.mark.skipif(shutil.which("git") is None, reason="the copy is made from git's list")
def test_the_main_command_runs_the_demo_twice_and_it_remembers(tmp_path: Path) -> None:
    clone = tmp_path / "threadloom"
    _fresh_copy(clone)
    command = _command("<!-- main-command -->")
    assert command.startswith("python3 -m venv .venv") and "threadloom demo" in command
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs = [line for line in done.stdout.splitlines() if line.startswith("threadloom demo:")]
    assert len(runs) == 2, done.stdout[-3000:]
    assert runs[0].endswith("0 earlier turns remembered")
    assert runs[1].endswith("3 earlier turns remembered")
    assert (clone / "threadloom-demo.db").exists()
