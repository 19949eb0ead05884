"""`threadloom prune`, `compact --json` and `doctor --db`: the documented shapes, the dry
run that changes nothing, and bad policies refused before the file is touched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

from tests.engine.test_graphs import agent_graph, thread
from tests.retention._helpers import age, file_state
from tests.retention.test_runs import PRUNED_KEYS, REPORT_KEYS
from threadloom import Saver
from threadloom.cli import main
from threadloom.langgraph.retention import RetentionPolicy

COMPACT_KEYS = [
    "file",
    "bytes_before",
    "bytes_after",
    "reclaimed",
    "page_size",
    "pages_before",
    "pages_after",
    "pages_freed",
    "free_pages_before",
    "values",
    "value_bytes",
    "blocks",
    "extents_rewritten",
    "vectors_retrained",
    "damaged",
]


@pytest.fixture
def chat_file(tmp_path: Path) -> Path:
    """A closed file holding two chat threads whose values are an hour old."""
    path = tmp_path / "memory.db"
    with Saver.from_conn_string(str(path)) as saver:
        graph = agent_graph().compile(checkpointer=saver)
        for name in ("a", "b"):
            for turn in range(2):
                graph.invoke(
                    {"messages": [HumanMessage(f"what is {turn}?", id=f"h{turn}")]}, thread(name)
                )
        with saver.file.write() as conn:
            conn.execute("UPDATE vals SET created_at = created_at - 3600")
    return path


def checkpoints(path: Path, name: str) -> int:
    with Saver.from_conn_string(str(path)) as saver:
        return len(list(saver.list(thread(name))))


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_prune_is_a_dry_run_unless_apply(
    chat_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --apply prune reports what it would delete and leaves every byte of the
    file (no WAL, no side file either); with it, it deletes exactly that."""
    before = file_state(chat_file)
    dry = run_json(capsys, "prune", str(chat_file), "--keep-last", "3", "--json")
    assert file_state(chat_file) == before
    assert sorted(p.name for p in chat_file.parent.iterdir()) == ["memory.db"]
    assert list(dry) == REPORT_KEYS and dry["mode"] == "dry-run"
    assert dry["checkpoints"] > 0 and dry["values"] > 0
    applied = run_json(
        capsys, "prune", "--db", str(chat_file), "--keep-last", "3", "--apply", "--json"
    )
    assert applied["mode"] == "applied"
    for report, flag in ((dry, False), (applied, True)):
        entries = report["pruned"]
        assert isinstance(entries, list)
        assert [p.pop("applied") for p in entries] == [flag, flag]
    assert {k: v for k, v in applied.items() if k != "mode"} == {
        k: v for k, v in dry.items() if k != "mode"
    }
    assert checkpoints(chat_file, "a") == checkpoints(chat_file, "b") == 3
    assert main(["verify", "--db", str(chat_file)]) == 0


def test_prune_options(chat_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--thread (repeatable) narrows, --min-age and --older-than take durations, and the
    report names the scope and the policy."""
    found = run_json(
        capsys,
        "prune",
        "--db",
        str(chat_file),
        "--keep-last",
        "1",
        "--min-age",
        "2h",
        "--older-than",
        "30d",
        "--thread",
        "b",
        "--thread",
        "nope",
        "--apply",
        "--json",
    )
    assert found["target"] == {"namespace": "naas_abi_core.services.agent", "agent_id": "engine.v1"}
    assert (found["keep_last"], found["min_age"], found["max_age"]) == (1, 7200.0, 2592000.0)
    assert found["threads"] == 1 and found["values"] == 0 and found["waiting"] > 0
    assert checkpoints(chat_file, "b") == 1 and checkpoints(chat_file, "a") > 1
    other = run_json(
        capsys, "prune", str(chat_file), "--agent-id", "someone-else", "--apply", "--json"
    )
    assert other["threads"] == 0 and other["target"]["agent_id"] == "someone-else"
    assert other["mode"] == "applied"
    from threadloom.engine import File
    from threadloom.engine.checkpoints.scope import agent_ids

    file = File.open(str(chat_file), readonly=True)
    try:  # pruning a scope the file does not hold does not add it
        assert agent_ids(file, "naas_abi_core.services.agent") == ["engine.v1"]
    finally:
        file.close()


def test_prune_prints_a_summary_without_json(
    chat_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The human report says what would go and how to apply it."""
    assert main(["prune", str(chat_file), "--keep-last", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("dry-run: 2 threads, keep last")
    assert "would delete" in out and "pass --apply" in out


KEY = b"0123456789abcdef"


def test_prune_says_which_threads_it_cannot_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On a file written with EncryptedSerializer the CLI has no key: it cannot read the
    checkpoints' metadata, so it keeps those threads whole (safe), names them under
    `unreadable` and hints to run retention from Python with the saver that has the key,
    which then prunes them."""
    path = tmp_path / "secret.db"
    encrypted = EncryptedSerializer.from_pycryptodome_aes(key=KEY)
    with Saver.from_conn_string(str(path), serde=encrypted) as saver:
        graph = agent_graph().compile(checkpointer=saver)
        for turn in range(2):
            graph.invoke({"messages": [HumanMessage(f"{turn}?", id=f"h{turn}")]}, thread("a"))
        age(saver)
        total = len(list(saver.list(thread("a"))))
    assert main(["prune", str(path), "--keep-last", "1", "--apply", "--json"]) == 0
    out, err = capsys.readouterr()
    found = json.loads(out)
    assert (found["checkpoints"], found["kept"]) == (0, total)
    assert found["unreadable"] == ["a"]
    assert "hint: " in err and "saver.apply_retention(RetentionPolicy(keep_last=1))" in err
    assert main(["prune", str(path), "--keep-last", "1"]) == 0
    out, err = capsys.readouterr()
    assert "unreadable" in out and "a" in out.split("unreadable", 1)[1]
    assert "saver.apply_retention" in err
    with Saver.from_conn_string(str(path)) as keyless:  # from Python without the key too
        assert keyless.apply_retention(RetentionPolicy(keep_last=1)).unreadable == ["a"]
    with Saver.from_conn_string(str(path), serde=encrypted) as saver:
        report = saver.apply_retention(RetentionPolicy(keep_last=1))
        assert report.unreadable == [] and report.checkpoints > 0
        assert len(list(saver.list(thread("a")))) < total


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--keep-last", "0"], "--keep-last must be at least 1"),
        (["--keep-last", "x"], "--keep-last must be a whole number"),
        (["--min-age", "-5"], "--min-age '-5' is not an age"),
        (["--older-than", "3x"], "--older-than '3x' is not an age"),
        (["--older-than", "10s"], "--older-than (10 s) is shorter than --min-age"),
        (["--keep-last", "all"], "--keep-last all without --older-than deletes nothing"),
    ],
)
def test_a_bad_policy_is_refused_and_nothing_changes(
    chat_file: Path, capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    """A keep-last of 0, a negative or unreadable age, an expiry shorter than min-age, or
    a policy that deletes nothing exit 1 with error/hint lines; the file keeps its bytes."""
    before = file_state(chat_file)
    assert main(["prune", "--db", str(chat_file), *argv, "--apply"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {says}") and "\nhint: " in err
    assert file_state(chat_file) == before


def test_prune_needs_one_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No file, two different files, or a path that is no file: exit 1 with a hint."""
    assert main(["prune"]) == 1
    assert "pass the threadloom file" in capsys.readouterr().err
    assert main(["prune", "a.db", "--db", "b.db"]) == 1
    assert "give the file once" in capsys.readouterr().err
    assert main(["prune", str(tmp_path / "missing.db")]) == 1
    assert "is not a file" in capsys.readouterr().err


def test_compact_json_says_what_it_did(chat_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """compact --json gives the sizes before and after, what it reclaimed and how."""
    assert main(["prune", str(chat_file), "--keep-last", "1", "--apply"]) == 0
    capsys.readouterr()
    found = run_json(capsys, "compact", "--db", str(chat_file), "--json")
    assert list(found) == COMPACT_KEYS
    assert found["bytes_after"] == chat_file.stat().st_size
    assert found["reclaimed"] == found["bytes_before"] - found["bytes_after"]
    assert found["pages_freed"] == found["pages_before"] - found["pages_after"]
    assert main(["compact", "--db", str(chat_file)]) == 0
    assert " bytes (reclaimed " in capsys.readouterr().out


def test_doctor_json_has_the_space_fields(
    chat_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """doctor --db --json adds where the bytes are to the file's figures."""
    found = run_json(capsys, "doctor", "--db", str(chat_file), "--json")
    for key in (
        "table_bytes",
        "largest_threads",
        "free_page_bytes",
        "dead_extent_bytes",
        "released_blocks",
        "released_block_bytes",
        "reclaimable_bytes",
    ):
        assert key in found, key
    assert [t["thread_id"] for t in found["largest_threads"]] in (["a", "b"], ["b", "a"])
    assert main(["doctor", "--db", str(chat_file)]) == 0
    out = capsys.readouterr().out
    assert "\ntable_bytes\n  " in out and "\n  checkpoints " in out


def documented(command: str) -> dict[str, object]:
    """The first JSON example of a command's section in docs/cli.md."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    section = text.split(f"## `threadloom {command}", 1)[1].split("\n## ", 1)[0]
    return json.loads(section.split("```json\n", 1)[1].split("```", 1)[0])  # type: ignore[no-any-return]


def test_docs_show_the_json_the_commands_print(
    chat_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The JSON examples of docs/cli.md have exactly the fields, in the order, that
    prune --json and compact --json print."""
    pruned = documented("prune")
    assert list(pruned) == REPORT_KEYS
    with Saver.from_conn_string(str(chat_file)) as saver, saver.file.write() as conn:
        conn.execute("UPDATE threads SET updated_at = updated_at - 86400 WHERE thread_id = 'a'")
    found = run_json(capsys, "prune", str(chat_file), "--older-than", "1h", "--json")
    assert found["expired_threads"], "the dry run at 1 s should expire thread a"
    assert list(pruned["expired_threads"][0]) == list(found["expired_threads"][0])
    found = run_json(capsys, "prune", str(chat_file), "--keep-last", "1", "--json")
    assert list(pruned["pruned"][0]) == list(found["pruned"][0]) == PRUNED_KEYS
    assert list(documented("compact")) == COMPACT_KEYS
