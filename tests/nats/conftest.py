"""Fixtures that start the real NATS peers: nats-server, the naas venv, the document service.

All are session-scoped (started once, stopped at the end); tests that share the document
service keep apart by namespace (`document_namespace`). A peer that cannot be set up
skips the test outside CI and fails it in CI (see `_peers.unavailable`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.nats._peers import (
    NaasEnv,
    NaasScriptRunner,
    RunningDocumentService,
    ensure_naas_env,
    nats_server_binary,
    require,
    run_document_service,
    run_nats_server,
)
from threadloom.engine.file import File


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL (`nats://127.0.0.1:PORT`) of a nats-server with `max_payload: 8MB`."""
    binary = require(nats_server_binary)
    with run_nats_server(binary, tmp_path_factory.mktemp("nats-server")) as server:
        yield server.url


@pytest.fixture(scope="session")
def naas_env() -> NaasEnv:
    """The cached naas venv (naas-abi-core 3.1.0 --no-deps, naas-abi-sdk 0.2.0, pins)."""
    return require(ensure_naas_env)


@pytest.fixture(scope="session")
def document_service(
    naas_env: NaasEnv, nats_server: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningDocumentService]:
    """naas-abi-core's real document service on `nats_server`, SQLite-backed, test secret."""
    with run_document_service(
        naas_env, nats_server, tmp_path_factory.mktemp("document-service")
    ) as service:
        yield service


@pytest.fixture(scope="session")
def sdk_runner(naas_env: NaasEnv) -> NaasScriptRunner:
    """Runs a script file (relative paths: in tests/nats) with the naas venv's Python."""
    return naas_env.run


@pytest.fixture
def document_namespace() -> str:
    """A namespace no other test uses, for isolation on the shared document service."""
    return f"threadloom-test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def db(tmp_path: Path) -> Iterator[File]:
    """A private threadloom file for the in-process service tests."""
    opened = File(tmp_path / "served.db")
    try:
        yield opened
    finally:
        opened.close()
