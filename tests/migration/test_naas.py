"""Migrating the naas engine's own SQLite document file, and the engine over NATS.

Producers: the engine's `DocumentCheckpointSaver` (schema 2) and core's schema-1 writer,
each running the scenario graphs on naas-abi-core's `DocumentSecondaryAdapterSQLite`
(`naas_engine_checkpoints.py`, in the naas venv); the naas SDK saver on the real
document service over NATS. Oracles: what the engine's saver reads back from the file
(snapshots, tuples), the documents in the file byte for byte, and for a schema-1 thread
resumed in schema 2 what naas's own `migrate-memory` makes of it. The engine lists a
checkpoint's pending writes by (task id, index) where threadloom, like LangGraph's
savers, orders them by task path first, so writes are compared as sets there.
"""

from __future__ import annotations

import base64
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.migration import _graphs
from tests.migration.conftest import NAAS_AGENT, NAAS_NAMESPACE
from tests.nats._peers import NaasEnv, NaasScriptRunner, RunningDocumentService
from threadloom import Saver, migrate
from threadloom.cli import main as cli
from threadloom.errors import MigrationError

Files = dict[str, tuple[Path, dict[str, Any]]]


def jsonable(value: Any) -> Any:
    """`value` as it compares with what the naas venv printed (tuples as lists)."""
    return json.loads(json.dumps(value))


def writes_as_sets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Checkpoint tuples with their pending writes in one canonical order."""
    return [{**row, "writes": sorted(row["writes"], key=json.dumps)} for row in rows]


def same(saver: Saver, expected: dict[str, Any], name: str) -> None:
    """The thread reads as the engine's saver read it."""
    assert jsonable(_graphs.snapshots(name, saver, name)) == expected["snapshots"], name
    assert writes_as_sets(jsonable(_graphs.tuples(saver, name))) == writes_as_sets(
        expected["tuples"]
    ), name


def decode(value: Any) -> Any:
    """The document service codec's decoding (bytes tagged, `$` keys escaped), written out
    here on its own, so it can catch a mistake in the migration's reader."""
    if isinstance(value, dict):
        if value.keys() == {"$t", "$v"} and value["$t"] == "bytes":
            return base64.b64decode(value["$v"])
        return {(k[1:] if k.startswith("$$") else k): decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def file_documents(path: Path, thread_id: str) -> dict[tuple[str, str], Any]:
    """Every schema-2 document of a thread in a naas file, by (collection, id)."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT collection, id, data FROM abi_documents WHERE collection LIKE '%_v2'"
        ).fetchall()
    found = {(c, i): decode(json.loads(d)) for c, i, d in rows}
    return {k: v for k, v in found.items() if v["thread_id"] == thread_id}


def test_engine_threads_come_in_byte_for_byte(tmp_path: Path, naas_files: Files) -> None:
    """Schema-2 threads of the engine's file are stored as the same documents (ids and
    data) and read as the engine's saver reads them; they resume to the same run."""
    path, seen = naas_files["v2"]
    target = str(tmp_path / "memory.db")
    report = migrate(str(path), target, kind="naas-sqlite", apply=True).as_dict()
    assert report["source"] == {
        "kind": "naas-sqlite",
        "path": str(path),
        "namespace": NAAS_NAMESPACE,
        "agent_id": NAAS_AGENT,
    }
    assert report["threads"] == len(_graphs.SCENARIOS)
    assert report["copied"] == report["checkpoints"] > 30
    with Saver.from_conn_string(target) as saver:
        for name in _graphs.SCENARIOS:
            ours = {(c, k): d for c, k, d in saver.documents(name)}
            assert ours == file_documents(path, name), name
            same(saver, seen["before"][name], name)
        for name in _graphs.SCENARIOS:
            assert _graphs.continued(name, saver, name) == seen["after"][name]["continued"]
    again = migrate(str(path), target, apply=True).as_dict()
    assert again["copied"] == again["writes_copied"] == 0
    assert again["present"] == report["copied"]


def test_schema_1_threads_are_written_as_schema_2(tmp_path: Path, naas_files: Files) -> None:
    """Schema-1 threads (whole checkpoints) are read, stored as schema 2, read as the
    engine's saver reads them, and resume to the same run; a rerun copies nothing."""
    path, seen = naas_files["v1"]
    target = str(tmp_path / "memory.db")
    report = migrate(str(path), target, apply=True).as_dict()
    assert report["copied"] == report["checkpoints"] > 30
    with Saver.from_conn_string(target) as saver:
        for name in _graphs.SCENARIOS:
            assert {h.schema for h in saver.checkpoints.view.heads(name)} == {2}
            assert not any(c.endswith("_v1") for c, _, _ in saver.documents(name))
            same(saver, seen["before"][name], name)
        for name in _graphs.SCENARIOS:
            assert _graphs.continued(name, saver, name) == seen["after"][name]["continued"]
    again = migrate(str(path), target, apply=True).as_dict()
    assert again["copied"] == again["writes_copied"] == 0


def test_a_schema_1_thread_resumed_in_schema_2_migrates_as_naas_does(
    tmp_path: Path, naas_files: Files
) -> None:
    """A thread that started in schema 1 and went on in schema 2 becomes what naas's own
    migrate-memory makes of it (its schema-1 checkpoints, and every write, in schema 2)."""
    path, seen = naas_files["v1"]
    resumed = Path(str(path) + ".resumed")
    target = str(tmp_path / "memory.db")
    migrate(str(resumed), target, apply=True)
    with Saver.from_conn_string(target) as saver:
        for name in _graphs.SCENARIOS:
            same(saver, seen["migrated"][name], name)


def test_an_engine_file_that_went_on_copies_what_is_new(tmp_path: Path, naas_files: Files) -> None:
    """Migrating the file, then the same file after the engine resumed every thread,
    copies only the new checkpoints; none has diverged."""
    path, _ = naas_files["v2"]
    target = str(tmp_path / "memory.db")
    first = migrate(str(path), target, apply=True)
    second = migrate(str(path) + ".resumed", target, apply=True).as_dict()
    assert second["present"] == first.copied
    assert second["copied"] == second["checkpoints"] - first.copied > 0
    assert second["diverged"] == [] and second["conflicts"] == []


def test_a_scope_the_file_lacks_is_named_with_those_it_holds(
    tmp_path: Path, naas_files: Files
) -> None:
    """Asking for a namespace or agent id the file holds no checkpoints of lists the ones
    it holds; nothing is created."""
    path, _ = naas_files["v2"]
    target = tmp_path / "memory.db"
    with pytest.raises(MigrationError, match=f"it holds {NAAS_NAMESPACE} / {NAAS_AGENT}"):
        migrate(str(path), str(target), agent_id="someone.else", apply=True)
    assert not target.exists()


def test_a_naas_file_given_as_sqlite_saver_is_refused(tmp_path: Path, naas_files: Files) -> None:
    """`--from sqlite` on the engine's file says what the file looks like (exit 1)."""
    path, _ = naas_files["v2"]
    target = tmp_path / "memory.db"
    with pytest.raises(MigrationError, match="looks like a naas document service file"):
        migrate(str(path), str(target), kind="sqlite")
    assert cli(["migrate", str(path), "--from", "sqlite", "--db", str(target)]) == 1
    assert not target.exists()


def test_from_nats_and_from_the_service_file(
    tmp_path: Path,
    document_service: RunningDocumentService,
    document_namespace: str,
    sdk_runner: NaasScriptRunner,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Threads the naas SDK saver wrote through the real document service migrate over
    NATS (`--from nats`, threadloom import's code) and from the service's own SQLite file
    while it runs (`--from naas-sqlite`), to the same documents; reruns copy nothing."""
    sdk_runner(
        "naas_sdk_checkpoints.py",
        "graph",
        document_namespace,
        NAAS_AGENT,
        "sdk-thread",
        "2",
        env=document_service.env,
    )
    monkeypatch.setenv("THREADLOOM_NATS_JWT_SECRET", document_service.jwt_secret)
    over_nats = tmp_path / "nats.db"
    base = ["migrate", "--db", str(over_nats), "--namespace", document_namespace, "--json"]
    nats = ["--from", "nats", "--source-url", document_service.url]
    assert cli([*base, *nats]) == 0
    dry = json.loads(capsys.readouterr().out)
    assert not over_nats.exists()
    assert dry["mode"] == "dry-run" and dry["missing"] == dry["checkpoints"] > 0
    assert dry["source"]["kind"] == "nats" and dry["target"]["path"] == str(over_nats)
    assert cli([*base, *nats, "--apply"]) == 0
    applied = json.loads(capsys.readouterr().out)
    assert applied["copied"] == dry["missing"]
    from_file = tmp_path / "file.db"
    assert (
        cli(
            [
                "migrate",
                str(document_service.sqlite_path),
                "--db",
                str(from_file),
                "--namespace",
                document_namespace,
                "--apply",
                "--json",
            ]
        )
        == 0
    )
    read = json.loads(capsys.readouterr().out)
    assert read["source"]["kind"] == "naas-sqlite" and read["copied"] == applied["copied"]
    with (
        Saver.from_conn_string(str(over_nats), namespace=document_namespace) as one,
        Saver.from_conn_string(str(from_file), namespace=document_namespace) as other,
    ):
        ours = {(c, k): d for c, k, d in one.documents("sdk-thread")}
        assert ours == {(c, k): d for c, k, d in other.documents("sdk-thread")}
        assert len(ours) > 10
    assert cli([*base, *nats, "--apply"]) == 0
    assert json.loads(capsys.readouterr().out)["copied"] == 0


def test_a_damaged_naas_file_is_refused_before_anything_is_copied(
    tmp_path: Path, naas_files: Files
) -> None:
    """A naas file with damaged pages fails SQLite's check (with the service's own
    collation, which its indexes name) before any thread is written."""
    path, _ = naas_files["v2"]
    damaged = tmp_path / "documents.sqlite"
    data = bytearray(path.read_bytes())
    for page in range(2, len(data) // 4096, 3):
        data[page * 4096 + 8 : page * 4096 + 40] = b"\xff" * 32
    damaged.write_bytes(bytes(data))
    target = tmp_path / "memory.db"
    with pytest.raises(MigrationError, match="cannot be read as"):
        migrate(str(damaged), str(target), apply=True)
    assert not target.exists()


def test_schema_1_documents_over_nats_come_as_schema_2(
    tmp_path: Path,
    document_service: RunningDocumentService,
    document_namespace: str,
    naas_env: NaasEnv,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Schema-1 threads the running document service holds (written into its file by
    core's schema-1 writer) migrate over NATS as schema 2, as from the file itself, and
    read as the engine's saver reads them."""
    from tests.migration.conftest import NAAS_SCRIPT

    names = ["review", "fanout"]
    run = naas_env.run(
        NAAS_SCRIPT, "v1-write", str(document_service.sqlite_path), document_namespace,
        NAAS_AGENT, *names,
    )  # fmt: skip
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    monkeypatch.setenv("THREADLOOM_NATS_JWT_SECRET", document_service.jwt_secret)
    over_nats = tmp_path / "nats.db"
    argv = ["migrate", "--from", "nats", "--source-url", document_service.url, "--db"]
    scope = ["--namespace", document_namespace, "--json"]
    assert cli([*argv, str(over_nats), *scope]) == 0
    dry = json.loads(capsys.readouterr().out)
    assert dry["threads"] == 2 and dry["missing"] == dry["checkpoints"] == 5
    assert not over_nats.exists()
    assert cli([*argv, str(over_nats), *scope, "--apply"]) == 0
    applied = json.loads(capsys.readouterr().out)
    assert applied["copied"] == 5 and applied["writes_copied"] == applied["writes"] > 0
    assert cli([*argv, str(over_nats), *scope, "--apply"]) == 0
    assert json.loads(capsys.readouterr().out)["copied"] == 0
    from_file = tmp_path / "file.db"
    migrate(
        str(document_service.sqlite_path), str(from_file), namespace=document_namespace,
        threads=names, apply=True,
    )  # fmt: skip
    with (
        Saver.from_conn_string(str(over_nats), namespace=document_namespace) as one,
        Saver.from_conn_string(str(from_file), namespace=document_namespace) as other,
    ):
        for name in names:
            assert {h.schema for h in one.checkpoints.view.heads(name)} == {2}
            assert {(c, k): d for c, k, d in one.documents(name)} == {
                (c, k): d for c, k, d in other.documents(name)
            }
            same(one, seen[name], name)
