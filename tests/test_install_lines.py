"""Every install line a user reads works without a published package.

threadloom is installed from its clone, not from a package index, so an install line in
the README, in docs/ or in an error message names the clone (`.` in it, or
`/path/to/threadloom` from elsewhere), never the bare name `threadloom`; and every extra
it names exists in pyproject.toml.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: An install command and the rest of its line.
_LINE = re.compile(r"(?:pip install|uv add)\s+(.*)")
#: A word of that rest: quoted whole, or up to a space, backtick, quote or comma.
_WORD = re.compile(r"'[^']*'|[^\s`'\",]+")
#: What a requirement may be: the clone, here or by its path, with extras.
_CLONE = re.compile(r"^(?:\.|/path/to/threadloom)(?:\[([\w,-]+)\])?$")


def extras() -> set[str]:
    """The extras pyproject.toml declares."""
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    return set(re.findall(r"^([\w-]+) = \[", section, re.M))


def install_lines() -> list[tuple[str, str]]:
    """`(where, arguments)` of every install command in README.md, docs/*.md and src/."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    files += sorted((ROOT / "src").rglob("*.py"))
    found = []
    for path in files:
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            for match in _LINE.finditer(line):
                found.append((f"{path.relative_to(ROOT)}:{number}", match.group(1)))
    return found


def requirement(arguments: str) -> tuple[str, list[str]]:
    """The requirement an install command's arguments give (options skipped) and the
    extras named by `--extra` options before or after it."""
    words = [w.strip("'") for w in _WORD.findall(arguments)]
    given = ""
    named: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--extra" and i + 1 < len(words):
            named.append(words[i + 1])
            i += 2
        elif word.startswith("-"):
            i += 1
        elif not given:
            given = word
            i += 1
        else:
            break  # prose or the next command
    return given, named


def test_install_lines_name_the_clone_and_known_extras() -> None:
    """Each `pip install` / `uv add` names the clone (never the unpublished name) and
    only extras pyproject.toml has."""
    known = extras() | {"EXTRA"}  # the README's placeholder for any of them
    lines = install_lines()
    assert len(lines) >= 8  # the README's, docs/'s and the messages' are all seen
    bad = []
    for where, arguments in lines:
        given, named = requirement(arguments)
        clone = _CLONE.match(given)
        if clone is None:
            bad.append(f"{where}: {given!r} is not the clone")
        elif clone.group(1):
            named += clone.group(1).split(",")
        bad += [f"{where}: no extra {name!r}" for name in named if name not in known]
    assert bad == []


def test_the_rule_sees_a_published_name() -> None:
    """The check above fails on the line the README had (`pip install 'threadloom[view]'`)."""
    match = _LINE.search("pip install 'threadloom[view]' && threadloom view memory.db")
    assert match is not None
    assert requirement(match.group(1)) == ("threadloom[view]", [])
    assert _CLONE.match("threadloom[view]") is None
