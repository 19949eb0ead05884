"""Smoke tests of the real NATS peers the nats tests run against (see conftest.py)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import sqlite3
from pathlib import Path

import nats
import pytest
from nats.aio.msg import Msg

from tests.nats._peers import (
    COMPLETE_MARKER,
    NaasEnv,
    NaasScriptRunner,
    RunningDocumentService,
    ScriptFailed,
)

REPO = Path(__file__).resolve().parents[2]


def stored(service: RunningDocumentService, namespace: str) -> list[tuple[str, str, str | None]]:
    """(collection, id, thread_id) of every document the service stored in `namespace`."""
    with contextlib.closing(sqlite3.connect(service.sqlite_path)) as db:
        return db.execute(
            "SELECT collection, id, json_extract(data, '$.thread_id') FROM abi_documents"
            " WHERE namespace = ? ORDER BY collection, id",
            (namespace,),
        ).fetchall()


def test_nats_server_echoes_payloads_above_1mb_to_nats_py(nats_server: str) -> None:
    """Our venv's nats-py connects, sees an 8 MiB max_payload and gets a 2 MiB reply."""

    async def echo() -> tuple[int, bytes]:
        connection = await nats.connect(nats_server, allow_reconnect=False)
        try:

            async def reply(message: Msg) -> None:
                await message.respond(message.data[::-1])

            await connection.subscribe("threadloom.echo", cb=reply)
            answer = await connection.request("threadloom.echo", payload, timeout=5)
            return connection.max_payload, answer.data
        finally:
            await connection.close()

    payload = bytes(range(256)) * 8192
    max_payload, answer = asyncio.run(echo())
    assert max_payload == 8 * 1024 * 1024
    assert answer == payload[::-1]


def test_naas_env_is_a_separate_cached_venv(naas_env: NaasEnv) -> None:
    """The naas venv is complete, lives outside the repository and is absent from ours."""
    assert (naas_env.path / COMPLETE_MARKER).is_file()
    assert naas_env.python.is_file()
    assert REPO not in naas_env.path.resolve().parents
    assert importlib.util.find_spec("naas_abi_core") is None


def test_document_service_answers_the_sdk_and_refuses_a_bad_token(
    document_service: RunningDocumentService, sdk_runner: NaasScriptRunner, document_namespace: str
) -> None:
    """The SDK's ensure_collection/put/get work; a token of another secret is UNAUTHENTICATED."""
    result = sdk_runner(
        "naas_sdk_smoke.py", "documents", document_namespace, env=document_service.env
    ).json()
    assert result["put"] == {"id": "doc-1", "version": 1}
    assert result["get"]["data"] == result["sent"]
    assert result["get"]["version"] == 1
    assert result["get"]["created_at"].endswith("+00:00")
    assert result["bad_token"] == {
        "code": "UNAUTHENTICATED",
        "message": "UNAUTHENTICATED: missing or invalid auth token",
    }
    assert stored(document_service, document_namespace) == [("smoke", "doc-1", None)]


def test_sdk_saver_puts_and_reads_a_checkpoint_through_the_service(
    document_service: RunningDocumentService, sdk_runner: NaasScriptRunner, document_namespace: str
) -> None:
    """The naas SDK saver reads back with get_tuple the checkpoint it put in the service."""
    result = sdk_runner(
        "naas_sdk_smoke.py", "saver", document_namespace, "thread-1", env=document_service.env
    ).json()
    assert result["channel_values"] == {"messages": ["hi", "there"], "raw": {"hex": "0102"}}
    assert result["loaded_config"]["configurable"]["checkpoint_id"] == result["checkpoint_id"]
    assert result["put_config"] == result["loaded_config"]
    assert result["metadata"] == {"source": "input", "step": -1}
    checkpoints = [
        row
        for row in stored(document_service, document_namespace)
        if row[0] == "langgraph_checkpoints_v2"
    ]
    assert [thread for _, _, thread in checkpoints] == ["thread-1"]


def test_sdk_runner_raises_with_the_script_output(sdk_runner: NaasScriptRunner) -> None:
    """A script that exits non-zero raises ScriptFailed carrying its stderr."""
    with pytest.raises(ScriptFailed) as failure:
        sdk_runner(
            "naas_sdk_smoke.py",
            "no-such-command",
            env={"NAAS_NATS_URL": "x", "NAAS_JWT_SECRET": "y"},
        )
    assert failure.value.returncode == 2
    assert "Usage: python naas_sdk_smoke.py" in failure.value.stderr
