"""The README's conversation example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest


def test_the_readme_conversation_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = re.search(r"<!-- conversation-example -->\n```python\n(.*?)```", readme, re.S)
    assert block is not None
    monkeypatch.chdir(tmp_path)
    exec(compile(block.group(1), "README.md (conversation example)", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "busy: answer HTTP 409"
    assert out[1].startswith("t-1 idle Plan my week 2 20")  # updated_at: a UTC datetime
    assert out[1].endswith("+00:00")
    assert out[2] == "['Plan my week', 'you said: Plan my week'] ai"
