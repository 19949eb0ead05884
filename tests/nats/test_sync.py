"""`threadloom sync` between two threadloom files through a real nats-server and
`threadloom serve` (one broker and one served file for the module, a namespace per
test), and against naas-abi-core's own document service.

Oracles: the documents each side holds (`Saver.documents()`, compared canonically) and
the state and history `threadloom.Saver` reads from each file.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph

from tests.nats._peers import RunningDocumentService
from tests.nats.test_serve import SECRET, Served, serving
from tests.nats.test_transfer import canonical, read
from threadloom import Saver
from threadloom.cli import main as cli
from threadloom.engine import CheckpointStore, File
from threadloom.engine.checks.verify import verify
from threadloom.errors import ServiceUnavailableError
from threadloom.nats import Credentials, DocumentClient, sync_file
from threadloom.nats.sync import sync_threads
from threadloom.nats.transfer import prepare

PEER = "box"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """`threadloom serve` on a file of its own, on a nats-server of its own."""
    with serving(tmp_path_factory.mktemp("sync")) as found:
        yield found


@pytest.fixture
def ns() -> str:
    return f"sync-{uuid.uuid4().hex[:10]}"


def chat(saver: Saver, thread: str, text: str) -> None:
    """One turn of a small chat graph (real LangGraph checkpoints, time-ordered ids)."""

    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"re: {state['messages'][-1].content}")]}

    graph = StateGraph(MessagesState)
    graph.add_node("reply", reply)
    graph.add_edge(START, "reply")
    compiled = graph.compile(checkpointer=saver)
    compiled.invoke({"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": thread}})


def saver_of(path: Path, ns: str) -> Saver:
    return Saver.from_conn_string(str(path), namespace=ns, agent_id="a")


def docs(path: Path, ns: str, thread: str) -> dict[str, Any]:
    with saver_of(path, ns) as saver:
        return {key: data for _, key, data in saver.documents(thread)}


def state(path: Path, ns: str, thread: str) -> Any:
    with saver_of(path, ns) as saver:
        return read(saver, thread)


def sync(path: Path, served: Served, ns: str, **options: Any) -> dict[str, Any]:
    if "agent_id" in options:
        options["remote_agent_id"] = options.pop("agent_id")
    report = sync_file(
        str(path),
        served.url,
        Credentials(secret=SECRET),
        namespace=ns,
        agent_id="a",
        peer=PEER,
        **options,
    )
    return report.as_dict()


def test_a_dry_run_writes_nothing_and_apply_moves_both_ways(
    tmp_path: Path, served: Served, ns: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Threads only the file holds are pushed and threads only the service holds are
    pulled; the dry run before reports exactly that and writes nothing on either side;
    the next sync sends nothing."""
    local = tmp_path / "local.db"
    with saver_of(local, ns) as saver:
        chat(saver, "mine", "hello")
        chat(saver, "mine", "again")
    with saver_of(served.path, ns) as saver:
        chat(saver, "theirs", "from the box")
    before = local.read_bytes()
    code = cli(
        [
            "sync",
            str(local),
            "--nats",
            served.url,
            "--jwt-secret",
            SECRET,
            "--local-namespace",
            ns,
            "--local-agent-id",
            "a",
            "--peer",
            PEER,
            "--json",
        ]
    )
    dry = json.loads(capsys.readouterr().out)
    assert code == 0 and dry["mode"] == "dry-run"
    assert dry["pushed"] == 6 and dry["pulled"] == 3 and dry["documents_copied"] == 0
    assert local.read_bytes() == before and not Path(f"{local}-wal").exists()
    assert docs(served.path, ns, "mine") == {} and docs(local, ns, "theirs") == {}

    done = sync(local, served, ns, apply=True)
    assert done["pushed"] == 6 and done["pulled"] == 3 and done["conflicts"] == []
    for thread in ("mine", "theirs"):
        assert canonical(docs(local, ns, thread)) == canonical(docs(served.path, ns, thread))
        assert state(local, ns, thread) == state(served.path, ns, thread)

    again = sync(local, served, ns, apply=True)
    assert again["threads"] == 0 and again["unchanged"] == 2
    assert again["documents_copied"] == 0 and again["wire"]["sent"] < 1024


def test_new_turns_on_either_side_move_alone(tmp_path: Path, served: Served, ns: str) -> None:
    """After a sync, a turn here and a turn on the service move in the next sync, which
    looks only at those two threads and sends about the size of the new documents."""
    local = tmp_path / "local.db"
    with saver_of(local, ns) as saver:
        for n in range(6):
            chat(saver, f"t{n}", "start")
    sync(local, served, ns, apply=True)
    with saver_of(local, ns) as saver:
        chat(saver, "t1", "more here " * 500)
    with saver_of(served.path, ns) as saver:
        chat(saver, "t4", "more there " * 500)
    dry = sync(local, served, ns)
    assert [t["thread_id"] for t in dry["per_thread"]] == ["t1", "t4"]
    done = sync(local, served, ns, apply=True)
    assert [t["thread_id"] for t in done["per_thread"]] == ["t1", "t4"]
    assert done["unchanged"] == 4 and done["pushed"] == 3 and done["pulled"] == 3
    assert done["diverged"] == []
    for thread in ("t1", "t4"):
        assert canonical(docs(local, ns, thread)) == canonical(docs(served.path, ns, thread))
    assert sync(local, served, ns, apply=True)["threads"] == 0


def test_a_thread_continued_on_both_sides_keeps_both_histories(
    tmp_path: Path, served: Served, ns: str
) -> None:
    """A thread continued here and on the service since the last sync is left as each
    side has it, the service's history is copied in as `t@box`, later syncs skip it, and
    `prefer` resolves it either way, keeping the losing history as a named copy."""
    local = tmp_path / "local.db"
    with saver_of(local, ns) as saver:
        chat(saver, "t", "shared")
        chat(saver, "u", "shared")
    sync(local, served, ns, apply=True)
    for path, side in ((local, "here"), (served.path, "there")):
        with saver_of(path, ns) as saver:
            chat(saver, "t", f"went on {side}")
            chat(saver, "u", f"went on {side}")
    ours, theirs = state(local, ns, "t"), state(served.path, ns, "t")
    dry = sync(local, served, ns)
    assert dry["diverged"] == ["t", "u"] and dry["copies"] == []
    done = sync(local, served, ns, apply=True)
    assert done["diverged"] == ["t", "u"] and done["copies"] == ["t@box", "u@box"]
    assert state(local, ns, "t") == ours and state(served.path, ns, "t") == theirs
    assert state(local, ns, "t@box")["latest"]["values"] == theirs["latest"]["values"]
    later = sync(local, served, ns, apply=True)
    assert later["skipped"] == ["t", "u"] and later["documents_copied"] == 0

    remote = sync(local, served, ns, apply=True, threads=["t"], prefer="remote")
    assert remote["resolved"] == ["t"] and remote["conflicts"] == []
    assert state(local, ns, "t") == theirs
    assert state(local, ns, "t@local")["latest"]["values"] == ours["latest"]["values"]
    u_ours = state(local, ns, "u")
    mine = sync(local, served, ns, apply=True, threads=["u"], prefer="local")
    assert mine["resolved"] == ["u"] and mine["conflicts"] == []
    assert state(served.path, ns, "u") == u_ours
    final = sync(local, served, ns, apply=True)
    assert final["diverged"] == [] and final["conflicts"] == []
    for path in (local, served.path):
        with saver_of(path, ns) as saver:
            assert verify(saver.file).sound


class _CutAfter(DocumentClient):
    """A client whose connection is cut after `puts` puts (as a broker going away)."""

    puts = 0

    async def put(self, *args: Any, **kwargs: Any) -> Any:
        if self.puts <= 0:
            raise ServiceUnavailableError("UNAVAILABLE", "the connection was cut")
        self.puts -= 1
        return await super().put(*args, **kwargs)


def test_an_interrupted_sync_resumes(tmp_path: Path, served: Served, ns: str) -> None:
    """A sync cut after 7 puts left whole documents only; the next one completes it
    without sending again what had arrived, and both files verify."""
    local = tmp_path / "local.db"
    with saver_of(local, ns) as saver:
        for n in range(4):
            chat(saver, f"t{n}", f"long enough to be a value of its own {n} " * 200)
            chat(saver, f"t{n}", "more")
    file = File.open(local)
    store = CheckpointStore(file, namespace=ns, agent_id="a")

    async def cut() -> None:
        connection = await DocumentClient.connect(served.url, ns, Credentials(secret=SECRET))
        client = _CutAfter(connection.connection, ns, Credentials(secret=SECRET), owned=True)
        client.puts = 7
        try:
            await sync_threads(store, client, peer=PEER, apply=True)
        finally:
            await client.close()

    try:
        with pytest.raises(ServiceUnavailableError):
            asyncio.run(cut())
    finally:
        file.close()
    with saver_of(served.path, ns) as saver:
        assert saver.file.content.verify()["problems"] == []
    done = sync(local, served, ns, apply=True)
    assert done["conflicts"] == [] and done["pushed"] > 0
    for n in range(4):
        thread = f"t{n}"
        assert canonical(docs(local, ns, thread)) == canonical(docs(served.path, ns, thread))
    assert sync(local, served, ns, apply=True)["threads"] == 0


def test_two_files_sync_through_the_naas_document_service(
    tmp_path: Path, document_service: RunningDocumentService, document_namespace: str
) -> None:
    """A file pushes to naas's own service, a second file pulls it, continues it and
    pushes back, and the first pulls only the new turn."""
    ns = document_namespace
    first, second = tmp_path / "first.db", tmp_path / "second.db"
    service = Served(document_service.url, Path())
    credentials = Credentials(secret=document_service.jwt_secret)

    def run(path: Path, **options: Any) -> Mapping[str, Any]:
        return sync_file(
            str(path), service.url, credentials, namespace=ns, agent_id="a", peer="naas", **options
        ).as_dict()

    with saver_of(first, ns) as saver:
        chat(saver, "t", "hello")
    assert run(first, apply=True)["pushed"] == 3
    pulled = run(second, apply=True)
    assert pulled["pulled"] == 3 and pulled["conflicts"] == []
    with saver_of(second, ns) as saver:
        chat(saver, "t", "continued")
    assert run(second, apply=True)["pushed"] == 3
    back = run(first, apply=True)
    assert back["pulled"] == 3 and back["threads"] == 1 and back["diverged"] == []
    assert canonical(docs(first, ns, "t")) == canonical(docs(second, ns, "t"))
    assert state(first, ns, "t") == state(second, ns, "t")


def test_documents_that_do_not_hash_to_their_refs_are_not_pulled(
    tmp_path: Path, served: Served, ns: str
) -> None:
    """A value on the service whose payload was changed under its ref makes the pull of
    its thread a conflict, and nothing of the thread is stored."""
    from threadloom.protocol import ITEMS
    from threadloom.protocol.refs import key_of

    with saver_of(tmp_path / "source.db", ns) as saver:
        chat(saver, "t", "long enough to be stored as its own value " * 200)
        found = [(c, d) for c, _, d in saver.documents("t")]
    bad = next(d for c, d in found if c == ITEMS and "payload" in d.get("value", {}))
    bad["value"] = {**bad["value"], "payload": bytes(bad["value"]["payload"])[:-1] + b"!"}

    async def put_all() -> None:
        async with await DocumentClient.connect(
            served.url, ns, Credentials(secret=SECRET)
        ) as client:
            await prepare(client)
            for collection, data in found:
                await client.put(collection, key_of(collection, data), data)

    asyncio.run(put_all())
    local = tmp_path / "local.db"
    done = sync(local, served, ns, apply=True)
    assert len(done["conflicts"]) == 1 and "do not verify" in done["conflicts"][0]
    assert docs(local, ns, "t") == {}


def test_bad_invocations_say_what_to_do_and_touch_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--prefer` without `--thread` is a usage error; a dry run of a missing file is an
    error naming `--apply`; a broker that cannot be reached is an error; none of them
    creates the file."""
    missing = tmp_path / "missing.db"
    with pytest.raises(SystemExit) as usage:
        cli(["sync", str(missing), "--nats", "nats://127.0.0.1:1", "--prefer", "local"])
    assert usage.value.code == 2
    argv = ["sync", str(missing), "--nats", "nats://127.0.0.1:1", "--jwt-secret", SECRET]
    assert cli(argv) == 1
    err = capsys.readouterr().err
    assert "error: " in err and "--apply" in err and "hint: " in err
    assert cli([*argv, "--apply"]) == 1
    assert "cannot reach the NATS broker" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_full_finds_a_checkpoint_below_the_mark(tmp_path: Path, served: Served, ns: str) -> None:
    """A checkpoint the service gained with an id below the mark (an old id copied in) is
    not seen by the incremental sync, and `full` finds and pulls it."""
    from tests.engine.test_durability import put

    local = tmp_path / "local.db"
    with saver_of(local, ns) as saver:
        chat(saver, "t", "hello")
    sync(local, served, ns, apply=True)
    with saver_of(served.path, ns) as saver:
        put(saver, {"x": 1}, thread_id="old", number=1)  # id 1f0d0000-...: long ago
    assert sync(local, served, ns, apply=True)["threads"] == 0
    found = sync(local, served, ns, apply=True, full=True)
    assert found["pulled"] == 1 and found["threads"] == 2 and found["conflicts"] == []
    assert canonical(docs(local, ns, "old")) == canonical(docs(served.path, ns, "old"))


def test_documents_are_re_keyed_to_the_services_agent_id(
    tmp_path: Path, served: Served, ns: str
) -> None:
    """With another agent id on the service, pushed documents carry its id there and
    pulled ones the file's, both ways."""
    local = tmp_path / "local.db"
    with saver_of(local, ns) as saver:
        chat(saver, "mine", "hello " * 500)
    with Saver.from_conn_string(str(served.path), namespace=ns, agent_id="b") as saver:
        chat(saver, "theirs", "there " * 500)
    done = sync(local, served, ns, apply=True, agent_id="b")
    assert done["pushed"] == 3 and done["pulled"] == 3 and done["conflicts"] == []
    with Saver.from_conn_string(str(served.path), namespace=ns, agent_id="b") as saver:
        theirs = read(saver, "mine")
        assert {d["agent_id"] for _, _, d in saver.documents("mine")} == {"b"}
    assert theirs["latest"]["values"] == state(local, ns, "mine")["latest"]["values"]
    assert {d["agent_id"] for d in docs(local, ns, "theirs").values()} == {"a"}


def test_a_moment_sorts_between_the_checkpoint_ids_written_before_and_after_it() -> None:
    """`id_at` (what caps the mark at a sync's start) orders with LangGraph's uuid6 ids."""
    import time

    from langgraph.checkpoint.base.id import uuid6

    from threadloom.nats._syncmoves import id_at

    before = str(uuid6(clock_seq=-1))
    time.sleep(0.002)
    at = id_at(time.time_ns())
    time.sleep(0.002)
    after = str(uuid6(clock_seq=0))
    assert before < at < after
    assert id_at(0) < "1f0d0000-0000-6000-8000-000000000001" < at


def test_a_turn_written_here_during_a_sync_goes_with_the_next(
    tmp_path: Path, served: Served, ns: str
) -> None:
    """A turn stored in a thread while the sync pushes that thread is not lost: the next
    sync pushes it."""
    local = tmp_path / "local.db"
    with saver_of(local, ns) as saver:
        chat(saver, "t", "hello")
    meanwhile = saver_of(local, ns)

    class _WriteDuring(DocumentClient):
        written = False

        async def put(self, *args: Any, **kwargs: Any) -> Any:
            if not self.written and args[0] == "langgraph_checkpoints_v2":
                self.written = True
                with meanwhile as saver:
                    chat(saver, "t", "written while the sync ran")
            return await super().put(*args, **kwargs)

    file = File.open(local)
    store = CheckpointStore(file, namespace=ns, agent_id="a")

    async def first() -> None:
        connection = await DocumentClient.connect(served.url, ns, Credentials(secret=SECRET))
        client = _WriteDuring(connection.connection, ns, Credentials(secret=SECRET), owned=True)
        try:
            await sync_threads(store, client, peer=PEER, apply=True)
        finally:
            await client.close()

    try:
        asyncio.run(first())
    finally:
        file.close()
    again = sync(local, served, ns, apply=True)
    assert again["pushed"] == 3 and again["conflicts"] == []
    assert canonical(docs(local, ns, "t")) == canonical(docs(served.path, ns, "t"))
