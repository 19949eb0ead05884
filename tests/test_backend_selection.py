"""The pure-Python pass (`--backend-only`, tests/_backend.py) keeps every core caller."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests._backend import ALSO, TESTS, left_out, selected


def test_the_python_pass_collects_every_module_that_calls_the_core() -> None:
    """`pytest --backend-only` on the python backend collects every test module that imports
    threadloom.core (at any depth, through tests/ modules or a conftest) and those in ALSO."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "--backend-only"],
        cwd=TESTS.parent,
        env={**os.environ, "THREADLOOM_BACKEND": "python"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    collected = {
        (TESTS.parent / line.partition("::")[0]).resolve()
        for line in done.stdout.splitlines()
        if "::" in line
    }
    assert left_out(collected) == []
    assert collected <= selected(), sorted(map(str, collected - selected()))
    assert all((TESTS / name).is_file() for name in ALSO), ALSO


def test_the_selection_finds_every_way_of_calling_the_core(tmp_path: Path) -> None:
    """The rule picks a module for each form of core import (in a function too, through a
    helper module or a conftest), the listed ones and nothing else, and `left_out` names a
    caller missing from a collection."""
    root = tmp_path / "tests"
    files = {
        "__init__.py": "",
        "test_direct.py": "from threadloom.core import sha256_hex\n",
        "test_nested.py": "def test_x():\n    import threadloom.core.lru\n",
        "test_package.py": "from threadloom import Saver, core\n",
        "test_attribute.py": "import threadloom\n\n\ndef f():\n    return threadloom.core.x\n",
        "_helper.py": "def f():\n    from threadloom.core.msgpack import skip\n",
        "_middle.py": "from tests._helper import f\n",
        "test_via_helpers.py": "from tests import _middle\n",
        "sub/__init__.py": "",
        "sub/conftest.py": "from threadloom.core import backend\n",
        "sub/test_below_conftest.py": "def test_x():\n    pass\n",
        "test_listed.py": "from threadloom import Saver\n",
        "test_engine.py": "import threadloom.engine.core\nfrom threadloom.engine import core\n",
        "test_strings.py": "CODE = 'import threadloom.core'\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    found = selected(root, also=("test_listed.py",))
    assert sorted(str(path.relative_to(root)) for path in found) == [
        "sub/test_below_conftest.py",
        "test_attribute.py",
        "test_direct.py",
        "test_listed.py",
        "test_nested.py",
        "test_package.py",
        "test_via_helpers.py",
    ]
    short = found - {root / "test_nested.py", root / "test_listed.py"}
    assert left_out(short, root, ("test_listed.py",)) == ["test_listed.py", "test_nested.py"]
    assert left_out(found, root, ("test_listed.py",)) == []


def test_the_readme_runs_the_python_pass_with_backend_only() -> None:
    """The test command `.ci/run` takes from the README runs its pure-Python pass with
    `--backend-only`, the selection the tests above hold."""
    readme = (TESTS.parent / "README.md").read_text()
    block = re.search(r"<!-- test-command -->\n```sh\n(.*?)\n```", readme, re.S)
    assert block is not None, "no test command after <!-- test-command --> in README.md"
    assert "THREADLOOM_BACKEND=python .venv/bin/python -m pytest --backend-only" in block[1]
