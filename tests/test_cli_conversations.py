"""The conversation commands (`threads`, `show`, `history`, `delete`, `erase`) on files
written by real graphs, through `threadloom.cli.main` and a real subprocess."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.types import Command

from tests._fresh import run_fresh
from tests.engine.test_graphs import (
    LONG,
    Inner,
    agent_graph,
    counter_graph,
    failing_fan_graph,
    review_graph,
    subgraph_graph,
)
from threadloom import OwnerStore, Saver, Store
from threadloom.cli import main
from threadloom.cli._conversations import size
from threadloom.cli._transcript import brief

ANSWER = f"The answer is 12. {LONG}"


@dataclass
class Written:
    """A file written by real graphs and what LangGraph and the saver said of it."""

    path: Path
    threads: list[dict[str, Any]] = field(default_factory=list)
    transcripts: dict[str, dict[str, Any]] = field(default_factory=dict)
    history: list[tuple[Any, ...]] = field(default_factory=list)
    fork_point: str = ""
    interrupt: Any = None


def config(thread_id: str, user: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread_id}
    if user is not None:
        conf["user_id"] = user
    return {"configurable": conf}


def raw_graph() -> StateGraph:
    """A graph whose `messages` list holds values that are not messages: text and bytes."""
    graph = StateGraph(Inner)
    graph.add_node("keep", lambda s: {"notes": ["kept"]})
    graph.add_edge(START, "keep")
    return graph


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Written:
    """Three agent threads (ada, bob, ada), a paused review, a paused subgraph, a thread
    forked by time travel, raw values, and Store items of ada and bob."""
    path = tmp_path_factory.mktemp("cli") / "memory.db"
    found = Written(path)
    with Saver.from_conn_string(str(path)) as saver:
        agent = agent_graph().compile(checkpointer=saver)
        for thread_id, user in (("t-1", "ada"), ("t-2", "bob"), ("t-3", "ada")):
            agent.invoke({"messages": [HumanMessage("what is 6 x 2?")]}, config(thread_id, user))
        review = review_graph().compile(checkpointer=saver)
        out = review.invoke({"draft": "v1", "verdicts": [], "published": False}, config("rev"))
        found.interrupt = out["__interrupt__"][0]
        sub = subgraph_graph().compile(checkpointer=saver)
        sub.invoke({"messages": ["hi"], "notes": [], "done": False}, config("sub"))
        counter = counter_graph().compile(checkpointer=saver)
        counter.invoke({"count": 0, "log": []}, config("tt"))
        past = next(s for s in counter.get_state_history(config("tt")) if s.next == ("step2",))
        counter.invoke(None, past.config)
        counter.invoke(None, counter.update_state(past.config, {"count": 100, "log": ["x"]}))
        found.fork_point = past.config["configurable"]["checkpoint_id"]
        found.history = [
            (
                s.config["configurable"]["checkpoint_id"],
                (s.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
                s.metadata["step"],
                s.metadata["source"],
            )
            for s in counter.get_state_history(config("tt"))
        ]
        raw = raw_graph().compile(checkpointer=saver)
        raw.invoke({"messages": ["plain text", b"\x00\x01\x02"], "notes": []}, config("raw"))
        found.threads = [info.as_json() for info in saver.threads(limit=100)]
        for thread_id in ("t-1", "rev", "raw"):
            found.transcripts[thread_id] = saver.messages(thread_id).as_json()
    with Store.from_conn_string(path) as store:
        OwnerStore(store, "ada").put(("facts",), "f1", {"text": "ada likes tea"})
        OwnerStore(store, "ada").put(("facts",), "f2", {"text": "ada lives in Lisbon"})
        OwnerStore(store, "bob").put(("facts",), "f1", {"text": "bob likes coffee"})
    return found


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main([*argv])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def copy(written: Written, tmp_path: Path) -> Path:
    target = tmp_path / "copy.db"
    shutil.copy(written.path, target)
    return target


# -- threads ------------------------------------------------------------------------------


def test_threads_json_is_the_index_and_the_file_may_be_positional(
    written: Written, capsys: pytest.CaptureFixture[str]
) -> None:
    """`threads FILE --json` and `threads --db FILE --json` print the same page: each
    thread as `ThreadInfo.as_json()`, newest first, and `next` null on the last page."""
    db = str(written.path)
    positional = run_json(capsys, "threads", db, "--limit", "100")
    flagged = run_json(capsys, "threads", "--db", db, "--limit", "100")
    assert positional == flagged == {"threads": written.threads, "next": None}
    assert [t["thread_id"] for t in positional["threads"]] == [
        "raw",
        "tt",
        "sub",
        "rev",
        "t-3",
        "t-2",
        "t-1",
    ]
    assert list(positional["threads"][0]) == [
        "thread_id",
        "owner",
        "title",
        "summary",
        "tags",
        "created_at",
        "updated_at",
        "checkpoints",
        "messages",
        "bytes",
        "head",
        "namespaces",
        "cursor",
        "status",
    ]


def test_threads_pages_with_before_and_filters_by_owner(
    written: Written, capsys: pytest.CaptureFixture[str]
) -> None:
    """Pages of 3 followed by their `next` cursor give every thread once, the last with
    `next` null; `--owner ada` gives ada's threads only."""
    db = str(written.path)
    seen: list[str] = []
    cursors = []
    cursor: str | None = None
    while True:
        extra = ["--before", cursor] if cursor else []
        page = run_json(capsys, "threads", db, "--limit", "3", *extra)
        seen += [t["thread_id"] for t in page["threads"]]
        cursor = page["next"]
        cursors.append(cursor)
        if cursor is None:
            break
    assert seen == [t["thread_id"] for t in written.threads]
    assert len(cursors) == 3 and cursors[0] == written.threads[2]["cursor"]
    ada = run_json(capsys, "threads", db, "--owner", "ada")
    assert [t["thread_id"] for t in ada["threads"]] == ["t-3", "t-1"] and ada["next"] is None
    exact = run_json(capsys, "threads", db, "--owner", "ada", "--limit", "2")
    assert exact["next"] is None  # a full page with nothing after it
    created = run_json(capsys, "threads", db, "--order", "created", "--limit", "1")
    assert created["next"].startswith("c")


def test_threads_table(written: Written, capsys: pytest.CaptureFixture[str]) -> None:
    """The human table has a header and a row per thread with owner, title, counts, size."""
    code, out, _ = run(capsys, "threads", str(written.path), "--owner", "ada")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == [
        "THREAD",
        "STATUS",
        "OWNER",
        "TITLE",
        "MESSAGES",
        "CHECKPOINTS",
        "SIZE",
        "UPDATED",
        "(UTC)",
    ]
    by_id = {t["thread_id"]: t for t in written.threads}
    for line, thread_id in zip(lines[1:], ("t-3", "t-1"), strict=True):
        info = by_id[thread_id]
        updated = datetime.fromisoformat(info["updated_at"]).strftime("%Y-%m-%d %H:%M:%S")
        assert line.split() == [
            thread_id,
            "idle",
            "ada",
            *["what", "is", "6", "x", "2?"],
            "4",
            "5",
            *size(info["bytes"]).split(),
            *updated.split(),
        ]
    code, out, _ = run(capsys, "threads", str(written.path), "--limit", "2")
    assert out.splitlines()[-1] == f"more: --before {written.threads[1]['cursor']}"


# -- errors -------------------------------------------------------------------------------


def test_a_missing_file_is_an_error_with_a_hint_and_is_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every command on a missing file exits 1 with `error:` and `hint:`, creating nothing."""
    missing = tmp_path / "nope.db"
    for argv in (
        ["threads", str(missing)],
        ["show", str(missing), "t-1"],
        ["history", "--db", str(missing), "t-1"],
        ["delete", str(missing), "t-1"],
        ["erase", str(missing), "--owner", "ada", "--apply"],
    ):
        code, out, err = run(capsys, *argv)
        assert (code, out) == (1, "")
        assert err.splitlines() == [
            f"error: {str(missing)!r} does not exist or is not a file",
            "hint: give the path of a threadloom file (--db FILE or the first argument)",
        ]
    assert list(tmp_path.iterdir()) == []


def test_usage_errors_exit_2(written: Written, capsys: pytest.CaptureFixture[str]) -> None:
    """No file, no thread, two threads to show, an extra argument or a bad limit: exit 2."""
    db = str(written.path)
    for argv, message in (
        (["threads"], "give the threadloom file: --db FILE or the first argument"),
        (["show", db], "give one thread id"),
        (["show", db, "t-1", "t-2"], "give one thread id, not 2"),
        (["threads", db, "extra"], "unexpected arguments: extra"),
        (["delete", "--db", db], "the following arguments are required"),
        (["threads", db, "--limit", "0"], "'0' is not a number from 1 to 1000"),
    ):
        with pytest.raises(SystemExit) as exit:
            main(argv)
        assert exit.value.code == 2
        assert message in capsys.readouterr().err


def test_an_unknown_thread_is_an_error(
    written: Written, capsys: pytest.CaptureFixture[str]
) -> None:
    """show and history of a thread the scope does not hold exit 1 naming it."""
    for command in ("show", "history"):
        code, _, err = run(capsys, command, str(written.path), "nope")
        assert code == 1
        assert err.splitlines()[0] == f"error: no thread 'nope' in {written.path}"
        assert err.splitlines()[1].startswith("hint: `threadloom threads ")


# -- show ---------------------------------------------------------------------------------


def test_show_prints_tool_calls_and_results_compactly(
    written: Written, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tool conversation: one line per tool call and per result, the long answer
    summarized with its size."""
    code, out, _ = run(capsys, "show", str(written.path), "t-1")
    assert code == 0
    head = written.transcripts["t-1"]["checkpoint_id"]
    assert out.splitlines() == [
        f"thread t-1: messages 0-3 of 4, checkpoint {head}",
        "",
        "[0] human",
        "  what is 6 x 2?",
        "",
        "[1] ai",
        '  → multiply({"a":6,"b":2})',
        "",
        "[2] tool",
        "  ← multiply: 12 (2 bytes)",
        "",
        "[3] ai",
        f"  {ANSWER[:200]}… ({len(ANSWER)} bytes)",
    ]


def test_show_json_is_the_transcript_page(
    written: Written, capsys: pytest.CaptureFixture[str]
) -> None:
    """`show --json` is `Transcript.as_json()` of the saver plus `interrupts`, `errors`,
    `status` and the sizes, and `--tail` with `--before` pages back."""
    db = str(written.path)
    for thread_id in ("t-1", "raw"):
        page = run_json(capsys, "show", db, thread_id)
        assert page.pop("bytes") > 0
        assert page.pop("server_records") == {"records": 0, "bytes": 0}  # no server's thread
        assert page == {
            **written.transcripts[thread_id],
            "interrupts": [],
            "errors": [],
            "status": "idle",
        }
    older = run_json(capsys, "show", "--db", db, "t-1", "--tail", "2", "--before", "2")
    assert (older["start"], older["older"], older["total"]) == (0, None, 4)
    assert [m["index"] for m in older["messages"]] == [0, 1]
    assert older["messages"][1]["tool_calls"] == [
        {"id": "call-1", "name": "multiply", "args": {"a": 6, "b": 2}}
    ]
    last = run_json(capsys, "show", db, "t-1", "--tail", "1")
    assert (last["start"], last["older"]) == (3, 3)
    assert last["messages"][0]["content"] == ANSWER


def test_show_marks_a_pending_interrupt(
    written: Written, capsys: pytest.CaptureFixture[str]
) -> None:
    """A paused graph's head interrupt is listed in JSON and on the text's last line."""
    db = str(written.path)
    page = run_json(capsys, "show", db, "rev")
    asked = written.interrupt
    assert page["interrupts"] == [{"id": asked.id, "node": "review", "value": asked.value}]
    assert page["messages"] == [] and page["total"] == 0
    code, out, _ = run(capsys, "show", db, "rev")
    value = json.dumps(asked.value, separators=(",", ":"))
    assert out.splitlines()[-1] == (
        f"interrupted: review waits for {value[:100]}… ({len(value.encode())} bytes)"
    )
    sub = run_json(capsys, "show", db, "sub")
    assert [(i["node"], i["value"]) for i in sub["interrupts"]] == [
        ("child", {"question": "approve?", "notes": ["researched 2"]})
    ]


def test_show_values_that_are_not_messages(
    written: Written, capsys: pytest.CaptureFixture[str]
) -> None:
    """Elements that are not messages print as values; bytes by their size."""
    code, out, _ = run(capsys, "show", str(written.path), "raw")
    assert out.splitlines()[2:] == ["[0] value", '  "plain text"', "", "[1] value", '  "<3 bytes>"']


def test_sizes_read_as_people_read_them() -> None:
    """Bytes under 1 KiB as they are, then KiB, MiB, GiB with one decimal."""
    assert [size(n) for n in (0, 1023, 1024, 1536, 20 * 2**20, 3 * 2**30)] == [
        "0 B",
        "1023 B",
        "1.0 KiB",
        "1.5 KiB",
        "20.0 MiB",
        "3.0 GiB",
    ]


def test_brief_shows_tagged_values_by_what_they_are() -> None:
    """Bytes and unread payloads by size, secrets by class, wrapped maps unwrapped."""
    value = {
        "b": {"$bytes": "AAE=", "size": 2},
        "p": [{"$unreadable": "pickle", "size": 30}],
        "s": {"$type": "pydantic.types.SecretStr", "$masked": True},
        "m": {"$map": {"$type": 1}},
    }
    assert brief(value) == {
        "b": "<2 bytes>",
        "p": ["<unreadable pickle, 30 bytes>"],
        "s": "<secret pydantic.types.SecretStr>",
        "m": {"$type": 1},
    }


def test_show_markdown(written: Written, capsys: pytest.CaptureFixture[str]) -> None:
    """The markdown transcript: the title, a section per message, tool lines, a summary."""
    code, out, _ = run(capsys, "show", str(written.path), "t-1", "--markdown")
    head = written.transcripts["t-1"]["checkpoint_id"]
    assert code == 0
    assert out.splitlines() == [
        "# what is 6 x 2?",
        "",
        f"Thread `t-1`, checkpoint `{head}`, messages 0–3 of 4.",
        "",
        "### 0 · human",
        "",
        "what is 6 x 2?",
        "",
        "### 1 · ai",
        "",
        '- tool call `multiply({"a":6,"b":2})`',
        "",
        "### 2 · tool `multiply`",
        "",
        "- ← multiply: 12 (2 bytes)",
        "",
        "### 3 · ai",
        "",
        f"{ANSWER[:200]}… ({len(ANSWER)} bytes)",
    ]


# -- history ------------------------------------------------------------------------------


def test_history_of_a_forked_thread(written: Written, capsys: pytest.CaptureFixture[str]) -> None:
    """After a replay and an update_state, the history is LangGraph's (ids, parents,
    steps, sources) with the nodes each step ran and three forks at the fork point."""
    found = run_json(capsys, "history", str(written.path), "tt", "--ns", "", "--limit", "50")
    rows = found["checkpoints"]
    assert found["thread_id"] == "tt" and found["next"] is None
    assert [(r["checkpoint_id"], r["parent_id"], r["step"], r["source"]) for r in rows] == (
        written.history
    )
    fork = next(r for r in rows if r["checkpoint_id"] == written.fork_point)
    assert (fork["forks"], fork["nodes"], fork["step"], fork["writes"]) == (3, ["step1"], 1, 3)
    assert [r["nodes"] for r in rows if r["source"] == "loop" and r["step"] == 3] == [
        ["step2"],
        ["step2"],
        ["step3"],
    ]
    assert list(rows[0]) == [
        "checkpoint_id",
        "checkpoint_ns",
        "parent_id",
        "step",
        "source",
        "nodes",
        "time",
        "forks",
        "writes",
    ]
    code, out, _ = run(capsys, "history", str(written.path), "tt")
    line = next(x for x in out.splitlines() if written.fork_point in x.split()[5:6])
    assert line.split()[:3] == ["1", "loop", "step1"] and line.split()[7:9] == ["3", "3"]


def test_history_of_a_subgraph_thread_pages_every_namespace(
    written: Written, capsys: pytest.CaptureFixture[str]
) -> None:
    """A subgraph thread lists both namespaces; pages of 2 with `--before` cover the same
    checkpoints as one page, and `--ns ""` only the root's."""
    db = str(written.path)
    whole = run_json(capsys, "history", db, "sub")["checkpoints"]
    assert len(whole) == 6
    assert len({r["checkpoint_ns"] for r in whole}) == 2
    assert [r["nodes"] for r in whole if r["checkpoint_ns"] == ""] == [
        ["prepare"],
        ["__start__"],
        [],
    ]
    paged, cursor = [], None
    while True:
        extra = ["--before", cursor] if cursor else []
        page = run_json(capsys, "history", db, "sub", "--limit", "2", *extra)
        paged += page["checkpoints"]
        cursor = page["next"]
        if cursor is None:
            break
    assert paged == whole
    roots = run_json(capsys, "history", db, "sub", "--ns", "")["checkpoints"]
    assert roots == [r for r in whole if r["checkpoint_ns"] == ""]


# -- the file is never changed by a read --------------------------------------------------


def test_read_commands_never_change_the_file(
    written: Written, capsys: pytest.CaptureFixture[str]
) -> None:
    """threads, show (text, markdown, JSON), history and an erase dry run leave the file's
    bytes as they were and no side file beside it."""
    before = digest(written.path)
    db = str(written.path)
    for argv in (
        ["threads", db],
        ["threads", db, "--json", "--owner", "ada"],
        ["show", db, "t-1"],
        ["show", db, "t-1", "--markdown"],
        ["show", db, "rev", "--json"],
        ["history", db, "sub"],
        ["history", db, "tt", "--json"],
        ["erase", db, "--owner", "ada"],
        ["show", db, "-", "--namespace", "another"],
    ):
        main(argv)
        capsys.readouterr()
    assert digest(written.path) == before
    assert sorted(p.name for p in written.path.parent.iterdir()) == ["memory.db"]


# -- delete and erase ---------------------------------------------------------------------


def test_delete_deletes_the_threads_found_and_names_the_missing(
    written: Written, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Deleting t-1, t-9 and t-2 deletes t-1 and t-2, says so, and exits 1 naming t-9."""
    path = copy(written, tmp_path)
    by_id = {t["thread_id"]: t for t in written.threads}
    code, out, err = run(capsys, "delete", str(path), "t-1", "t-9", "t-2", "--json")
    assert code == 1
    assert json.loads(out) == {
        "deleted": [
            {
                "thread_id": tid,
                "checkpoints": by_id[tid]["checkpoints"],
                "messages": by_id[tid]["messages"],
                "bytes": by_id[tid]["bytes"],
            }
            for tid in ("t-1", "t-2")
        ],
        "missing": ["t-9"],
    }
    assert err.splitlines()[0] == f"error: no thread 't-9' in {path}"
    assert err.splitlines()[1].startswith("hint: the others were deleted; ")
    left = [t["thread_id"] for t in run_json(capsys, "threads", str(path))["threads"]]
    assert left == ["raw", "tt", "sub", "rev", "t-3"]
    code, out, _ = run(capsys, "delete", "--db", str(path), "t-3")
    assert (code, out.split()[:2]) == (0, ["deleted", "t-3"])
    assert run(capsys, "verify", "--db", str(path))[0] == 0


def test_delete_of_missing_threads_only_leaves_the_file_as_it_was(
    written: Written, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """When no thread is found nothing is opened writable: the bytes are unchanged."""
    path = copy(written, tmp_path)
    before = digest(path)
    code, _, err = run(capsys, "delete", str(path), "x", "y")
    assert code == 1 and err.startswith("error: no threads 'x', 'y' in ")
    assert digest(path) == before


def test_erase_dry_run_changes_nothing_and_apply_erases(
    written: Written, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The dry run reports ada's threads and Store items and leaves the bytes as they
    were; --apply removes exactly them and reports the same counts."""
    path = copy(written, tmp_path)
    before = digest(path)
    dry = run_json(capsys, "erase", str(path), "--owner", "ada")
    assert digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.db"]
    assert list(dry) == [
        "owner",
        "applied",
        "threads",
        "checkpoints",
        "writes",
        "values",
        "items",
        "namespaces",
        "kept_namespaces",
        "paths",
        "digest",
    ]
    assert (dry["owner"], dry["applied"], dry["threads"]) == ("ada", False, ["t-1", "t-3"])
    assert (dry["checkpoints"], dry["items"], dry["namespaces"]) == (10, 2, [["ada"]])
    code, out, _ = run(capsys, "erase", str(path), "--owner", "ada")
    assert out.splitlines() == [
        "dry run: erasing 'ada' would remove 2 threads (t-1, t-3): 10 checkpoints, "
        f"{dry['writes']} pending writes, {dry['values']} values; 2 Store items under ada",
        "run again with --apply to erase",
    ]
    done = run_json(capsys, "erase", "--db", str(path), "--owner", "ada", "--apply")
    assert done == {**dry, "applied": True}
    owners = {t["owner"] for t in run_json(capsys, "threads", str(path))["threads"]}
    assert owners == {"bob", None}
    with Store.from_conn_string(path) as store:
        assert store.search(("ada",)) == []
        assert [item.key for item in store.search(("bob",))] == ["f1"]
    again = run_json(capsys, "erase", str(path), "--owner", "ada", "--apply")
    assert (again["threads"], again["items"], again["applied"]) == ([], 0, True)
    kept = run_json(capsys, "erase", str(path), "--owner", "bob", "--no-store")
    assert (kept["threads"], kept["items"], kept["namespaces"]) == (["t-2"], 0, [])
    prefixed = run_json(capsys, "erase", str(path), "--owner", "bob", "--store-prefix", "bob.facts")
    assert (prefixed["items"], prefixed["namespaces"]) == (1, [["bob", "facts"]])


def test_progress_shows_on_a_terminal_only(
    written: Written,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a terminal delete and erase --apply say what they do on stderr, and clear it."""
    path = copy(written, tmp_path)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    code, _, err = run(capsys, "delete", str(path), "t-2")
    drawn = "\r\x1b[Kdeleting [........................] 0/1 threads  t-2\r\x1b[K"
    assert code == 0 and err == drawn
    code, _, err = run(capsys, "erase", str(path), "--owner", "ada", "--apply")
    assert err == "\r\x1b[Kerasing 2 threads and 2 Store items of 'ada'...\r\x1b[K"
    code, out, err = run(capsys, "delete", str(path), "tt", "--json")
    assert (code, err) == (0, "")  # no progress with --json
    assert json.loads(out)["deleted"][0]["thread_id"] == "tt"


# -- a real process -----------------------------------------------------------------------


def test_python_m_threadloom_threads_json(written: Written) -> None:
    """`python -m threadloom threads FILE --json` prints the index page."""
    done = subprocess.run(
        [sys.executable, "-m", "threadloom", "threads", str(written.path), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"threads": written.threads[:20], "next": None}


def test_the_commands_load_no_langgraph(written: Written) -> None:
    """threads, show, history and erase run without importing LangGraph or LangChain."""
    db = str(written.path)
    code = (
        "import sys, contextlib, io\nfrom threadloom.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    assert main(['threads', {db!r}]) == 0\n"
        f"    assert main(['show', {db!r}, 't-1']) == 0\n"
        f"    assert main(['show', {db!r}, 'rev', '--markdown']) == 0\n"
        f"    assert main(['history', {db!r}, 'sub']) == 0\n"
        f"    assert main(['erase', {db!r}, '--owner', 'ada']) == 0\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'langgraph', 'langchain_core', 'langchain'})\nassert not loaded, loaded\n"
    )
    run_fresh(code)


def test_resumed_thread_shows_its_new_head(
    written: Written, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Once the paused review is resumed to its end, show lists no interrupt."""
    path = copy(written, tmp_path)
    with Saver.from_conn_string(str(path)) as saver:
        review = review_graph().compile(checkpointer=saver)
        review.invoke(Command(resume="ok"), config("rev"))
        review.invoke(Command(resume="fine"), config("rev"))
    assert run_json(capsys, "show", str(path), "rev")["interrupts"] == []


# -- status -------------------------------------------------------------------------------


def failed(path: Path) -> Path:
    """`path` with a thread `f` whose branch `b` failed (an `__error__` write on its head)."""
    with Saver.from_conn_string(str(path)) as saver:
        graph = failing_fan_graph({"a": 0, "b": 0}, {"b"}).compile(checkpointer=saver)
        with pytest.raises(RuntimeError, match="b failed"):
            graph.invoke({"log": []}, config("f"))
    return path


def test_threads_show_and_filter_by_status(
    written: Written, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The STATUS column and `status` field say idle, interrupted, error or running (a live
    lease), and `--status S` lists only the threads of that status."""
    path = str(failed(copy(written, tmp_path)))
    statuses = {t["thread_id"]: t["status"] for t in run_json(capsys, "threads", path)["threads"]}
    assert statuses == {
        "f": "error",
        "raw": "idle",
        "tt": "idle",
        "sub": "interrupted",
        "rev": "interrupted",
        "t-3": "idle",
        "t-2": "idle",
        "t-1": "idle",
    }
    waiting = run_json(capsys, "threads", path, "--status", "interrupted")
    assert [t["thread_id"] for t in waiting["threads"]] == ["sub", "rev"]
    code, out, _ = run(capsys, "threads", path, "--status", "error")
    assert code == 0 and [line.split()[:2] for line in out.splitlines()[1:]] == [["f", "error"]]
    with Saver.from_conn_string(path) as saver, saver.lease("t-2"):
        running = run_json(capsys, "threads", path, "--status", "running")
        assert [t["thread_id"] for t in running["threads"]] == ["t-2"]
        assert running["threads"][0]["status"] == "running"
    assert run(capsys, "threads", path, "--status", "running")[1] == "no running threads\n"
    from threadloom.cli.commands.threads import STATUSES
    from threadloom.engine.threads import STATUSES as ENGINE_STATUSES

    assert STATUSES == ENGINE_STATUSES  # the parser's choices are the engine's statuses
    with pytest.raises(SystemExit) as exit:
        main(["threads", path, "--status", "paused"])
    assert exit.value.code == 2 and "invalid choice: 'paused'" in capsys.readouterr().err


def test_show_names_the_status_and_the_error_of_a_failed_thread(
    written: Written, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`show` of a failed thread gives its status and LangGraph's recorded error in JSON,
    on the text's first and last lines and in markdown; an interrupted one its status."""
    path = str(failed(copy(written, tmp_path)))
    page = run_json(capsys, "show", path, "f")
    assert page["status"] == "error"
    assert page["errors"] == [{"node": "b", "error": "RuntimeError('b failed')"}]
    lines = run(capsys, "show", path, "f")[1].splitlines()
    assert lines[0].startswith("thread f (error): ")
    assert lines[-1] == "error: b failed: RuntimeError('b failed')"
    marked = run(capsys, "show", path, "f", "--markdown")[1].splitlines()
    assert marked[2].startswith("Thread `f` (error), checkpoint ")
    assert marked[-1] == "> **Error**: `b` failed: `RuntimeError('b failed')`"
    assert run(capsys, "show", path, "rev")[1].startswith("thread rev (interrupted): ")
    assert run(capsys, "show", path, "t-1")[1].startswith("thread t-1: ")
    assert run_json(capsys, "show", path, "rev")["status"] == "interrupted"


# -- the contract -------------------------------------------------------------------------


def shape(value: Any) -> Any:
    """The keys of a JSON value, nested, down to free-form values (`value`, `args`)."""
    if isinstance(value, dict):
        return {k: None if k in ("value", "args") else shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(item) for item in value]
    return None


def test_docs_give_the_json_shapes(
    written: Written, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each JSON example of docs/cli.md's conversation commands has exactly the fields the
    command prints."""
    docs = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
    section = docs.read_text()
    section = section[section.index("## Conversations:") :]
    examples = [json.loads(block) for block in re.findall(r"```json\n(.*?)```", section, re.S)]
    db = str(written.path)
    page = run_json(capsys, "show", db, "t-1", "--tail", "2", "--before", "3")
    page["interrupts"] = run_json(capsys, "show", db, "rev")["interrupts"]
    copied = copy(written, tmp_path)
    page["errors"] = run_json(capsys, "show", str(failed(copied)), "f")["errors"]
    real = [
        run_json(capsys, "threads", db, "--limit", "1"),
        page,
        run_json(capsys, "history", db, "tt", "--limit", "1"),
        json.loads(run(capsys, "delete", str(copied), "t-1", "t-9", "--json")[1]),
        run_json(capsys, "erase", db, "--owner", "ada"),
    ]
    assert [shape(example) for example in examples] == [shape(found) for found in real]
