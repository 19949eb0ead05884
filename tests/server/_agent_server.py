"""One `langgraph dev` server for a test module: the test project copied to a folder,
started on a free port with threadloom's checkpointer and store, killed with SIGKILL or
stopped, and started again on the same folder."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.helpers import unavailable

PROJECT = Path(__file__).parent / "project"
SRC = Path(__file__).resolve().parents[2] / "src"
#: What the server needs, and where each comes from (the `server` extra).
NEEDED = ("langgraph_api", "langgraph_cli", "langgraph_runtime_inmem", "langgraph_sdk")
#: Nothing leaves the machine: no browser, no version check, no analytics, no tracing.
QUIET = {
    "LANGGRAPH_NO_VERSION_CHECK": "true",
    "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    "LANGSMITH_TRACING": "false",
    "LANGCHAIN_TRACING_V2": "false",
    "LANGSMITH_TRACING_V2": "false",
}


def require_server() -> None:
    """Skip (fail in CI) when a server package is missing, naming it."""
    missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    if missing:
        unavailable(
            f"{', '.join(missing)} not installed: the Agent Server tests need the server "
            "extra (pip install '.[server]')"
        )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class AgentServer:
    """`langgraph dev --no-browser --no-reload` in `folder` (a copy of the test project),
    or `threadloom agent-server` there (`agent_server=True`)."""

    def __init__(self, folder: Path, *, agent_server: bool = False) -> None:
        shutil.copytree(PROJECT, folder, ignore=shutil.ignore_patterns("__pycache__"))
        self.folder = folder
        self.db = folder / "threadloom.db"
        self.log = folder / "server.log"
        self.agent_server = agent_server
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self, timeout: float = 60.0) -> None:
        """Start the server and wait until it answers `/ok`."""
        port = _free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("LANGSMITH_API")}
        env.update(QUIET)
        env.pop("THREADLOOM_DB", None)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), env.get("PYTHONPATH")]))
        if self.agent_server:
            command = [sys.executable, "-m", "threadloom", "agent-server"]
        else:
            command = [sys.executable, "-m", "langgraph_cli", "dev", "--no-browser", "--no-reload"]
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [*command, "--host", "127.0.0.1", "--port", str(port)],
                cwd=self.folder,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{self.url}/ok", timeout=1) as answer,
            ):
                if answer.status == 200:
                    return
            time.sleep(0.2)
        self.stop()
        tail = self.log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"the Agent Server did not start:\n{tail}")

    def kill(self) -> None:
        """SIGKILL the server's process group (a crash: nothing is flushed or closed)."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
            self.process = None

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s)."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
            self.process = None
