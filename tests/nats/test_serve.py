"""`threadloom serve` against the real peers: the naas SDK saver (in the naas venv) uses a
threadloom file as its memory through nats-server, and threadloom.Saver reads the result
from the same file.

`threadloom serve` runs as a process of its own (the command line), on a nats-server of
its own: the session's broker already has naas's document service on the same subjects.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.nats._peers import (
    NaasScriptRunner,
    nats_server_binary,
    require,
    run_nats_server,
)
from tests.nats.test_transfer import read
from threadloom import Saver
from threadloom.errors import (
    CollectionNotFoundError,
    DocumentNotFoundError,
    InvalidRequestError,
    PermissionDeniedError,
    UnauthenticatedError,
    VersionConflictError,
)
from threadloom.nats import Credentials, DocumentClient, issue_token
from threadloom.nats.transfer import COLLECTIONS, prepare
from threadloom.protocol import BLOBS, CHECKPOINTS

SECRET = "threadloom-serve-tests-secret-of-some-length"


class Served:
    def __init__(self, url: str, path: Path) -> None:
        self.url = url
        self.path = path
        self.env = {"NAAS_NATS_URL": url, "NAAS_JWT_SECRET": SECRET}


@contextlib.contextmanager
def serving(tmp_path: Path, *options: str) -> Iterator[Served]:
    """`threadloom serve` (with `options`) on a nats-server of its own."""
    binary = require(nats_server_binary)
    with run_nats_server(binary, tmp_path / "nats") as server:
        path = tmp_path / "served.db"
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from threadloom.cli import run; run()",
                "serve",
                "--db",
                str(path),
                "--nats",
                server.url,
                "--jwt-secret",
                SECRET,
                *options,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.startswith("ready"), line + process.stdout.read()
            yield Served(server.url, path)
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
        assert process.returncode == 0


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    with serving(tmp_path) as found:
        yield found


def run(served: Served, body: Any, credentials: Credentials | None = None, ns: str = "ns") -> Any:
    async def main() -> Any:
        creds = credentials or Credentials(secret=SECRET)
        async with await DocumentClient.connect(served.url, ns, creds) as client:
            return await body(client)

    return asyncio.run(main())


def test_the_sdk_saver_runs_on_the_file(served: Served, sdk_runner: NaasScriptRunner) -> None:
    """Four turns (a 300 KB result, pending writes, a child namespace) written by the SDK
    saver through `threadloom serve`: the SDK reads them back, and threadloom.Saver reads
    the same state and history from the file."""
    seen = sdk_runner(
        "naas_sdk_checkpoints.py", "write", "ns", "module.agent.v1", "s", "4", env=served.env
    ).json()
    assert len(seen["history"]) == 5
    with Saver.from_conn_string(
        str(served.path), namespace="ns", agent_id="module.agent.v1"
    ) as saver:
        assert read(saver, "s") == seen
        assert saver.file.content.verify()["problems"] == []


def test_a_20_mib_value_goes_through_within_the_broker_limit(
    served: Served, sdk_runner: NaasScriptRunner
) -> None:
    """Parts of 256 KiB in, pages of at most a quarter of the limit out."""
    seen = sdk_runner(
        "naas_sdk_checkpoints.py",
        "write",
        "ns",
        "big.v1",
        "b",
        "2",
        str(20 * 1024 * 1024),
        env=served.env,
        timeout=300,
    ).json()
    latest = seen["latest"]["values"]["messages"]
    assert len(latest[4]["message"]["content"]) == 20 * 1024 * 1024 + 1
    with Saver.from_conn_string(str(served.path), namespace="ns", agent_id="big.v1") as saver:
        assert read(saver, "b") == seen


def test_authentication_versions_and_errors(served: Served) -> None:
    """Refused tokens and identities, create-only puts, ids that are not keys, paging with
    a cursor, a foreign cursor, page sizes, missing documents and collections."""
    with pytest.raises(UnauthenticatedError):
        run(served, lambda c: c.collections(), Credentials(secret="not-the-secret"))
    with pytest.raises(PermissionDeniedError):
        run(served, lambda c: c.namespaces(), Credentials(secret=SECRET, identity="a-module"))

    async def body(client: DocumentClient) -> dict[str, Any]:
        with pytest.raises(CollectionNotFoundError):
            await client.get(CHECKPOINTS, "x")
        await prepare(client)
        assert await client.collections() == sorted(COLLECTIONS)
        with pytest.raises(InvalidRequestError, match="only the LangGraph collections"):
            await client.ensure_collection("other")
        from threadloom.protocol.refs import key_of

        docs = []
        for i in range(12):
            data = {
                "agent_id": "a",
                "thread_id": "t",
                "ref": f"b-{i:064x}",
                "_schema": 2,
                "value": {"kind": "msgpack", "payload": bytes(1000)},
            }
            docs.append(data)
            stored = await client.put(BLOBS, key_of(BLOBS, data), data, if_version=0)
            assert stored.version == 1
        with pytest.raises(VersionConflictError):
            await client.put(BLOBS, key_of(BLOBS, docs[0]), docs[0], if_version=0)
        same = await client.put(BLOBS, key_of(BLOBS, docs[0]), docs[0])
        assert same.version == 1
        with pytest.raises(InvalidRequestError, match="not the key"):
            await client.put(BLOBS, "wrong-id", docs[1])
        got = await client.get(BLOBS, key_of(BLOBS, docs[3]))
        assert got.data == docs[3]
        where = [
            ("agent_id", "eq", "a"),
            ("thread_id", "eq", "t"),
            ("ref", "in", [d["ref"] for d in docs[:10]]),
        ]
        first, cursor = await client.find_page(BLOBS, where, max_bytes=3000, limit=50)
        every = [d async for d in client.find(BLOBS, where, max_bytes=3000)]
        with pytest.raises(InvalidRequestError, match="Invalid cursor"):
            await client.find_page(BLOBS, [("thread_id", "eq", "t")], cursor=cursor)
        with pytest.raises(InvalidRequestError, match="Page size"):
            await client.find_page(BLOBS, where, limit=1001)
        with pytest.raises(InvalidRequestError, match="Unsupported predicate operator"):
            await client.find_page(BLOBS, [("ref", "like", "b-%")])
        counted = await client.count(BLOBS, [("thread_id", "eq", "t")])
        await client.delete(BLOBS, key_of(BLOBS, docs[11]))
        await client.delete(BLOBS, key_of(BLOBS, docs[11]))
        with pytest.raises(VersionConflictError):
            await client.delete(BLOBS, key_of(BLOBS, docs[11]), if_version=1)
        with pytest.raises(DocumentNotFoundError):
            await client.get(BLOBS, key_of(BLOBS, docs[11]))
        return {
            "first": len(first),
            "cursor": cursor,
            "every": sorted(d.data["ref"] for d in every),
            "count": counted,
            "after": await client.count(BLOBS),
        }

    out = run(served, body)
    assert 1 <= out["first"] < 10 and out["cursor"] is not None
    assert out["every"] == sorted(f"b-{i:064x}" for i in range(10))
    assert out["count"] == 12 and out["after"] == 11


def test_no_responders_once_serve_stops(tmp_path: Path) -> None:
    """Without `threadloom serve` the client says that no document service answers."""
    binary = require(nats_server_binary)
    with run_nats_server(binary, tmp_path / "nats") as server:
        start = time.monotonic()
        with pytest.raises(Exception, match="no document service answers"):
            asyncio.run(_collections(server.url))
        assert time.monotonic() - start < 30


async def _collections(url: str) -> Any:
    async with await DocumentClient.connect(url, "ns", Credentials(secret=SECRET)) as client:
        return await client.collections()


def test_a_langgraph_agent_on_the_sdk_saver_runs_on_the_file(
    served: Served, sdk_runner: NaasScriptRunner
) -> None:
    """A compiled LangGraph graph (tool calls, five turns) checkpoints through the SDK saver
    into `threadloom serve`; threadloom.Saver reads the same state and history."""
    seen = sdk_runner(
        "naas_sdk_checkpoints.py", "graph", "ns", "agent.v1", "g", "5", env=served.env
    ).json()
    messages = seen["latest"]["values"]["messages"]
    assert len(messages) == 5 * 4 and len(seen["history"]) == 5 * 5
    with Saver.from_conn_string(str(served.path), namespace="ns", agent_id="agent.v1") as saver:
        assert read(saver, "g") == seen


def test_grants_and_token_lifetime_over_nats(tmp_path: Path) -> None:
    """With `--grant`, identity b can neither read, overwrite, delete, find nor count a's
    documents; a 100-year token and, under `--max-token-lifetime 600`, the default
    one-hour token are refused."""
    from threadloom.protocol.refs import key_of

    data = {
        "agent_id": "a",
        "thread_id": "t",
        "ref": "b-" + "0" * 64,
        "_schema": 2,
        "value": {"kind": "msgpack", "payload": b"mine"},
    }
    key = key_of(BLOBS, data)
    options = ("--grant", "a=ns-a", "--grant", "b=ns-b", "--max-token-lifetime", "600")
    with serving(tmp_path, *options) as served:
        a = Credentials(secret=SECRET, identity="a", ttl=600)
        b = Credentials(secret=SECRET, identity="b", ttl=600)

        async def store(client: DocumentClient) -> None:
            await prepare(client)
            await client.put(BLOBS, key, data, if_version=0)

        run(served, store, a, ns="ns-a")
        attempts = [
            lambda c: c.get(BLOBS, key),
            lambda c: c.put(BLOBS, key, {**data, "value": {"kind": "msgpack", "payload": b"x"}}),
            lambda c: c.delete(BLOBS, key),
            lambda c: c.find_page(BLOBS, [("thread_id", "eq", "t")]),
            lambda c: c.count(BLOBS),
        ]
        refused = 0
        for attempt in attempts:
            with pytest.raises(PermissionDeniedError):
                run(served, attempt, b, ns="ns-a")
            refused += 1
        assert refused == 5
        got = run(served, lambda c: c.get(BLOBS, key), a, ns="ns-a")
        assert got.data == data
        century = issue_token(SECRET, "a", ttl=100 * 365 * 24 * 3600)
        with pytest.raises(UnauthenticatedError):
            run(served, lambda c: c.count(BLOBS), Credentials(token=century), ns="ns-a")
        with pytest.raises(UnauthenticatedError):
            run(served, lambda c: c.count(BLOBS), Credentials(secret=SECRET, identity="a"), "ns-a")


def test_bad_serve_options_are_refused_before_serving(tmp_path: Path) -> None:
    """A malformed grant or a non-positive lifetime: exit 1 with an error that says how."""
    for options, said in [
        (["--grant", "nobody"], "IDENTITY=NAMESPACE"),
        (["--max-token-lifetime", "0"], "positive"),
        (["--grants", str(tmp_path / "missing")], "cannot read the grants file"),
    ]:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                "from threadloom.cli import run; run()",
                "serve",
                "--db",
                str(tmp_path / "x.db"),
                "--nats",
                "nats://127.0.0.1:1",
                "--jwt-secret",
                SECRET,
                *options,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 1 and said in done.stderr, done.stderr
