"""Fixtures of the migration tests: sources written by their real producers.

The naas peers are tests/nats's own fixtures (the naas venv, nats-server, the real
document service), used here as they are.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.sqlite import SqliteSaver

from tests.migration import _graphs
from tests.nats._peers import NaasEnv
from tests.nats.conftest import (  # noqa: F401  (fixtures, used by name)
    document_namespace,
    document_service,
    naas_env,
    nats_server,
    sdk_runner,
)

HERE = Path(__file__).resolve().parent
NAAS_SCRIPT = HERE / "naas_engine_checkpoints.py"
NAAS_NAMESPACE = "naas_abi_core.services.agent"
NAAS_AGENT = "engine.v1"


@pytest.fixture
def sqlite_source(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """Writes scenario threads with LangGraph's SqliteSaver into `source.sqlite`; returns
    its path. Call it with scenario names (each on the thread of its own name)."""
    path = tmp_path / "source.sqlite"

    def write(*names: str) -> Path:
        with SqliteSaver.from_conn_string(str(path)) as saver:
            for name in names:
                _graphs.run(name, saver, name)
        return path

    yield write


@pytest.fixture
def read_sqlite() -> Iterator[Callable[[Path], Any]]:
    """Opens a SqliteSaver on a file to read it as the application would (closed after)."""
    opened: list[sqlite3.Connection] = []

    def reader(path: Path) -> SqliteSaver:
        conn = sqlite3.connect(str(path), check_same_thread=False)
        opened.append(conn)
        return SqliteSaver(conn)

    yield reader
    for conn in opened:
        conn.close()


@pytest.fixture(scope="session")
def naas_files(
    naas_env: NaasEnv,  # noqa: F811  (the imported fixture)
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[Path, dict[str, Any]]]:
    """Per mode (`v2`: the engine's DocumentCheckpointSaver, `v1`: core's schema-1 writer),
    a naas document service SQLite file holding every scenario, and what the engine's
    saver reads from it (`naas_engine_checkpoints.py`)."""
    out: dict[str, tuple[Path, dict[str, Any]]] = {}
    for mode in ("v2", "v1"):
        path = tmp_path_factory.mktemp(f"naas-{mode}") / "documents.sqlite"
        run = naas_env.run(
            NAAS_SCRIPT,
            mode,
            str(path),
            NAAS_NAMESPACE,
            NAAS_AGENT,
            *_graphs.SCENARIOS,
            timeout=300,
        )
        out[mode] = (path, json.loads(run.stdout.strip().splitlines()[-1]))
    return out
