"""THREADLOOM_BACKEND: which backend `threadloom.core` uses, and what it says when it can't.

Each case runs a fresh interpreter, since the choice is made once at import. A missing
extension is simulated by blocking its import (`sys.modules[...] = None`), which is what
Python does for a module that cannot be found.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import threadloom.core as core
from tests.core.conftest import native, require_native
from threadloom.cli.commands.doctor import report

BLOCK_NATIVE = "import sys; sys.modules['threadloom._native'] = None; "
PRINT_BACKEND = "import threadloom.core as c; print(c.backend())"


def _run(code: str, backend: str | None, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "THREADLOOM_BACKEND"}
    if backend is not None:
        env["THREADLOOM_BACKEND"] = backend
    command = [sys.executable, *(argv or ("-c", code))]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)


def test_in_process_backend_follows_the_environment() -> None:
    """The backend of this test process is the one THREADLOOM_BACKEND asks for."""
    wanted = os.environ.get("THREADLOOM_BACKEND", "auto").strip().lower() or "auto"
    expected = wanted if wanted != "auto" else "python" if native is None else "native"
    assert core.backend() == expected
    assert report()["backend"] == expected


@pytest.mark.parametrize(("backend", "expected"), [(None, "native"), ("auto", "native"),
                                                   ("native", "native"), ("python", "python"),
                                                   (" Python ", "python")])  # fmt: skip
def test_choice(backend: str | None, expected: str) -> None:
    """Unset or auto picks native when built; native and python pick themselves."""
    require_native()
    result = _run(PRINT_BACKEND, backend)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected


def test_auto_falls_back_to_python() -> None:
    """auto (and unset) use the Python core when the extension is missing."""
    for backend in (None, "auto"):
        result = _run(BLOCK_NATIVE + PRINT_BACKEND, backend)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "python"


def test_native_without_the_extension_says_how_to_build_it() -> None:
    """native without the extension raises BackendError naming the build command."""
    code = BLOCK_NATIVE + (
        "from threadloom.errors import ThreadloomError\n"
        "try:\n    import threadloom.core\n"
        "except ThreadloomError as e:\n    print(type(e).__name__, isinstance(e, ImportError), e)"
    )
    result = _run(code, "native")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("BackendError True THREADLOOM_BACKEND=native")
    assert "pip install -e ." in result.stdout and "THREADLOOM_STRICT_BUILD=1" in result.stdout


def test_unknown_backend_is_refused() -> None:
    """An unknown THREADLOOM_BACKEND value fails the import with the allowed values."""
    result = _run(PRINT_BACKEND, "c")
    assert result.returncode != 0
    assert "BackendError" in result.stderr and "auto, native, python" in result.stderr


def test_doctor_reports_the_backend() -> None:
    """`threadloom doctor --json` prints the backend the core uses."""
    for backend in ("python", None):
        result = _run("", backend, "-m", "threadloom", "doctor", "--json")
        assert result.returncode == 0, result.stderr
        expected = _run(PRINT_BACKEND, backend).stdout.strip()
        assert json.loads(result.stdout)["backend"] == expected
