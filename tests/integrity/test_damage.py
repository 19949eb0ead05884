"""No damaged byte gives a wrong read, and `threadloom verify` finds every damage a read sees.

Each case damages a copy of one fixture file (built once per session) and holds the
issue's promises: every public read either returns what the original returned or raises
a ThreadloomError (never another exception, never a different or missing answer), verify
never prints a traceback, and verify exits 3 whenever a read differs or raises (a copy
whose reads are identical may get 0 or 3). One outcome short of that is named, counted
by bench/damage_report.py, and allowed only when verify exits 3: a filtered list that
differs because the metadata key rows it decides on were damaged (`filter-index`);
docs/FORMAT.md says why.
verify runs in this process (`_damage.verify`); one test holds the real command to the
same output. The counts below keep the whole suite under ~90 s on two cores (see
bench/damage_report.py for the same cases as a table).
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.integrity import _cases
from tests.integrity._cases import Case
from tests.integrity._damage import Original, original, verify


@functools.cache
def fixture() -> Original:
    """The fixture file, built once per process in a temporary folder removed at exit."""
    folder = Path(tempfile.mkdtemp(prefix="threadloom-damage-"))
    atexit.register(shutil.rmtree, folder, True)
    return original(folder)


def cases(kind: str) -> list[Case]:
    """The cases of one damage kind (counts in `_cases`: FLIPS, TRUNCATIONS, PER_TREE)."""
    return _cases.cases(fixture().path, kind)


def check(case: Case, tmp_path: Path) -> None:
    """Run one case and fail with every promise it breaks."""
    result = _cases.run(case, fixture(), tmp_path)
    broken = _cases.failures(result)
    assert not broken, f"{case.name}:\n  " + "\n  ".join(broken)


def test_the_fixture_is_sound() -> None:
    """verify calls the undamaged fixture sound, with JSON, and without a traceback."""
    verdict = verify(fixture().path)
    assert verdict.codes == (0, 0), verdict.stderr
    assert not verdict.traceback
    assert verdict.report is not None
    assert not verdict.left_open


@pytest.mark.parametrize("damaged", [False, True], ids=["sound", "truncated"])
def test_the_command_says_what_verify_in_process_says(damaged: bool, tmp_path: Path) -> None:
    """`python -m threadloom verify` (the real entry point, two processes) prints and exits
    as the in-process runs every case uses do, on the fixture and on a damaged copy."""
    path = fixture().path
    if damaged:
        path = fixture().copy(tmp_path, "copy")
        cases("truncate")[0].damage(path)
    command, here = verify(path, processes=True), verify(path)
    assert command.codes == here.codes == ((3, 3) if damaged else (0, 0)), command.stderr
    assert (command.json_out, command.plain_out) == (here.json_out, here.plain_out)
    assert not command.traceback and not here.traceback
    assert not here.left_open


@pytest.mark.parametrize("case", cases("flip"), ids=str)
def test_random_byte_flip(case: Case, tmp_path: Path) -> None:
    """A flipped byte anywhere in the file never yields a wrong read or an unsound verify."""
    check(case, tmp_path)


@pytest.mark.parametrize("case", cases("truncate"), ids=str)
def test_truncation(case: Case, tmp_path: Path) -> None:
    """A truncated file never yields a wrong read (a lost checkpoint included)."""
    check(case, tmp_path)


@pytest.mark.parametrize("case", cases("btree"), ids=str)
def test_btree_flip(case: Case, tmp_path: Path) -> None:
    """A flipped byte in the cells of any table or index never yields a wrong read."""
    check(case, tmp_path)


@pytest.mark.parametrize("case", cases("edit"), ids=str)
def test_identity_edit(case: Case, tmp_path: Path) -> None:
    """A changed identity column never moves a row silently to another name."""
    check(case, tmp_path)


def test_every_btree_is_aimed_at() -> None:
    """Every table and index of the fixture (dbstat's names) gets aimed flips."""
    aimed = {case.name.split("-")[1] for case in cases("btree")}
    assert {"checkpoints", "writes", "vals", "blocks", "extents", "threads", "scopes"} <= aimed
    assert len(aimed) >= 15, sorted(aimed)
