"""The command line's error contract: `error:` and `hint:` lines, exit codes."""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType

import pytest

from tests._fresh import run_fresh
from threadloom.cli import COMMANDS, main


def test_an_error_prints_what_went_wrong_and_a_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """verify on a text file exits 1 with an `error:` line and a `hint:` line, no traceback."""
    path = tmp_path / "notes.txt"
    path.write_text("not a database\n")
    assert main(["verify", "--db", str(path)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: ") and "not an SQLite database" in err[0]
    assert err[1].startswith("hint: ") and "Traceback" not in "".join(err)


def test_doctor_reads_a_file_without_changing_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """doctor --db leaves no -wal or -shm beside the file."""
    from threadloom import Saver

    path = tmp_path / "memory.db"
    with Saver.from_conn_string(str(path)):
        pass
    assert main(["doctor", "--db", str(path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["memory.db"]


def test_compact_leaves_no_side_files(tmp_path: Path) -> None:
    """compact folds the WAL in and closes: only the database file remains."""
    from threadloom import Saver

    path = tmp_path / "memory.db"
    with Saver.from_conn_string(str(path)):
        pass
    assert main(["compact", "--db", str(path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["memory.db"]


def test_verify_exit_codes_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """0 sound (with the JSON shape docs/cli.md gives), 3 for a truncated file SQLite
    cannot open, 1 for another application's database."""
    import json
    import sqlite3

    from langgraph.checkpoint.base import empty_checkpoint

    from threadloom import Saver

    path = tmp_path / "memory.db"
    with Saver.from_conn_string(str(path)) as saver:
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        saver.put(config, empty_checkpoint(), {"step": 0}, {})
    assert main(["verify", "--db", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["sound"] and report["problems"] == [] and report["threads"] == 1
    assert report["checks"] == ["sqlite", "owners", "heads", "rows", "index", "store", "blocks"]
    assert main(["verify", "--db", str(path), "--quick"]) == 0
    assert "sound" in capsys.readouterr().out
    truncated = tmp_path / "truncated.db"
    truncated.write_bytes(path.read_bytes()[:5000])
    assert main(["verify", "--db", str(truncated)]) == 3
    assert "problem: [sqlite] the file cannot be opened" in capsys.readouterr().out
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE notes(x)").connection.commit()
    assert main(["verify", "--db", str(other)]) == 1
    assert capsys.readouterr().err.startswith("error: ")


def registry_problems(
    modules: Mapping[str, ModuleType], commands: Sequence[tuple[str, str]]
) -> list[str]:
    """What is wrong between the command modules (by name) and the registry."""
    registered = {module for _, module in commands}
    found = [f"{name} is not registered" for name in sorted(set(modules) - registered)]
    for name, module in commands:
        loaded = modules.get(module)
        if loaded is None:
            found.append(f"{name}: no module {module}")
            continue
        if not isinstance(getattr(loaded, "HELP", None), str) or not loaded.HELP:
            found.append(f"{name}: no HELP")
        found += [
            f"{name}: no {f}()"
            for f in ("add_arguments", "run")
            if not callable(getattr(loaded, f, None))
        ]
    return found


def test_every_command_module_is_registered_and_has_the_interface() -> None:
    """Each module of cli/commands is one registered command with HELP, add_arguments and run."""
    package = Path(importlib.import_module("threadloom.cli.commands").__file__ or "").parent
    modules = {
        path.stem: importlib.import_module(f"threadloom.cli.commands.{path.stem}")
        for path in package.glob("*.py")
        if path.stem != "__init__"
    }
    assert registry_problems(modules, COMMANDS) == []
    assert len({name for name, _ in COMMANDS}) == len(COMMANDS) == len(modules)


def test_the_registry_check_finds_what_it_looks_for() -> None:
    """A module no command names, a command without a module and one without run are found."""
    whole, partial = ModuleType("whole"), ModuleType("partial")
    vars(whole).update(HELP="help", add_arguments=print, run=print)
    vars(partial).update(HELP="help", add_arguments=print)
    found = registry_problems(
        {"whole": whole, "partial": partial, "stray": whole},
        [("whole", "whole"), ("partial", "partial"), ("ghost", "ghost")],
    )
    assert found == ["stray is not registered", "partial: no run()", "ghost: no module ghost"]


def test_building_the_parser_imports_no_heavy_module() -> None:
    """Every command module is imported to build the parser, and none of them loads the
    engine, LangGraph, NATS or the web stack at its top level."""
    code = (
        "import sys\nfrom threadloom.cli import _parser\n_parser()\n"
        "heavy = {'langgraph', 'langchain_core', 'nats', 'starlette', 'uvicorn', 'jinja2', "
        "'apsw'}\nloaded = sorted(m for m in sys.modules if m.split('.')[0] in heavy or "
        "m.startswith(('threadloom.engine', 'threadloom.langgraph', 'threadloom.nats', "
        "'threadloom.viewer')))\nassert not loaded, loaded\n"
    )
    run_fresh(code)


def test_migrate_offers_every_registered_source_kind() -> None:
    """`threadloom migrate --from` offers the migration registry's kinds, in its order,
    then `nats`, and `--to` the way-out targets (written out: the parser loads no engine)."""
    from threadloom.cli.commands import migrate
    from threadloom.langgraph.migration import KINDS, TARGETS

    assert (*KINDS, "nats") == migrate.KINDS
    assert TARGETS == migrate.TARGETS
