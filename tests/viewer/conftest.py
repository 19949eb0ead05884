"""Fixtures of the viewer tests: the memory file (made once by real graphs and a Store),
the application in process (Starlette's TestClient), and `threadloom view` running for
real in a subprocess, which the browser tests open.

The web stack is the `view` extra, installed by the `test` extra: when it is missing the
tests skip outside CI and fail in CI (`tests.helpers.unavailable`).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import unavailable
from tests.viewer._memory import make_memory


def _needs(module: str) -> None:
    try:
        __import__(module)
    except ImportError:
        unavailable(f"{module} is not installed (pip install -e '.[test]')")


@pytest.fixture(scope="session")
def memory(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The memory file every viewer test reads (`_memory.make_memory`), and what it holds."""
    path = tmp_path_factory.mktemp("viewer") / "memory.db"
    found = make_memory(path)
    return {**found, "path": path}


@pytest.fixture(scope="session")
def client(memory: dict[str, Any]) -> Iterator[Any]:
    """The viewer on the memory file, in process."""
    _needs("starlette")
    from starlette.testclient import TestClient

    from threadloom.viewer.app import create_app
    from threadloom.viewer.source import Source

    app = create_app(Source(memory["path"]), allowed_hosts=["testserver"])
    with TestClient(app) as opened:
        yield opened


class Served:
    """`threadloom view` running in a subprocess."""

    def __init__(self, path: Path, *extra: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "threadloom", "view", str(path), "--port", "0", *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert self.process.stdout is not None
        self.banner = self.process.stdout.readline()
        found = re.search(r"http://(127\.0\.0\.1|0\.0\.0\.0):(\d+)/", self.banner)
        if found is None:
            self.process.kill()
            _, err = self.process.communicate(timeout=10)
            raise AssertionError(f"threadloom view printed {self.banner!r}; stderr: {err}")
        self.port = int(found.group(2))
        self.url = f"http://127.0.0.1:{self.port}"  # 0.0.0.0 listens on loopback too

    def stop(self) -> tuple[int, str, str]:
        """Ctrl-C it; return its exit status, the rest of its stdout and its stderr."""
        self.process.send_signal(signal.SIGINT)
        out, err = self.process.communicate(timeout=30)
        return self.process.returncode, out, err


@pytest.fixture(scope="session")
def served(memory: dict[str, Any]) -> Iterator[Served]:
    """`threadloom view FILE --port 0`, stopped with Ctrl-C after the session (which must
    exit 0)."""
    _needs("uvicorn")
    server = Served(memory["path"])
    try:
        yield server
    finally:
        code, _, err = server.stop()
        assert code == 0, err
