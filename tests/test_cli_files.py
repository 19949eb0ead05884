"""Every command on every file: the file given either way, files this process may not
write, closed pipes, Ctrl-C and waiting for another writer (real files, real processes)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from threadloom.cli import main
from threadloom.engine import lock_wait

SRC = str(Path(__file__).resolve().parents[1] / "src")


@pytest.fixture(scope="module")
def demo_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A file the demo agent wrote: one thread, `demo`, of eleven checkpoints."""
    path = tmp_path_factory.mktemp("files") / "demo.db"
    assert main(["demo", "--db", str(path)]) == 0
    return path


@pytest.fixture
def db(demo_file: Path, tmp_path: Path) -> Path:
    """A copy of the demo file in a folder of its own."""
    folder = tmp_path / "folder"
    folder.mkdir()
    return Path(shutil.copy(demo_file, folder / "memory.db"))


def cli(*args: str, stdin: int | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m threadloom` in a real process."""
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run(
        [sys.executable, "-m", "threadloom", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@contextlib.contextmanager
def unwritable(path: Path) -> Iterator[None]:
    """Make `path` (a file or a folder) unwritable for this process: `chmod` for a user,
    the immutable attribute for root (whom permissions do not stop)."""
    if os.geteuid() == 0:
        if shutil.which("chattr") is None:
            pytest.skip("running as root without chattr: cannot make a file unwritable")
        done = subprocess.run(["chattr", "+i", str(path)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"chattr +i is not supported here: {done.stderr.strip()!r}")
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(path)], check=True)
    else:
        mode = path.stat().st_mode
        path.chmod(0o555 if path.is_dir() else 0o444)
        try:
            yield
        finally:
            path.chmod(mode)


# -- the file, positional or --db ------------------------------------------------------------

FILE_COMMANDS = [
    ["verify"],
    ["verify", "--quick"],
    ["doctor"],
    ["compact"],
    ["threads"],
    ["history", "@", "demo"],
    ["show", "@", "demo"],
]


@pytest.mark.parametrize("command", FILE_COMMANDS, ids=lambda c: " ".join(c))
def test_every_command_takes_the_file_positionally_or_as_db(
    db: Path, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The file as the first argument and as --db run the same command with the same output,
    and naming it both ways at once is accepted."""
    name, *rest = command
    at = rest.index("@") if "@" in rest else None
    after = [r for r in rest if r != "@"]

    def positional() -> list[str]:
        return [name, str(db), *after] if at is not None else [name, str(db), *rest]

    outputs = []
    for argv in (positional(), [name, "--db", str(db), *after], [*positional(), "--db", str(db)]):
        assert main(argv) == 0, argv
        outputs.append(capsys.readouterr().out.replace(str(db), "F"))
    if name != "compact":  # compact reports what it reclaimed, the first time only
        assert outputs[0] == outputs[1] == outputs[2]


@pytest.mark.parametrize(
    "argv",
    [
        ["verify", "A", "--db", "B"],
        ["doctor", "A", "--db", "B"],
        ["compact", "A", "--db", "B"],
        ["export", "A", "--db", "B", "--to", "nats://127.0.0.1:1"],
        ["import", "A", "--db", "B", "--from", "nats://127.0.0.1:1"],
        ["sync", "A", "--db", "B", "--nats", "nats://127.0.0.1:1"],
        ["serve", "A", "--db", "B", "--nats", "nats://127.0.0.1:1"],
        ["view", "A", "--db", "B"],
        ["demo", "A", "--db", "B"],
        ["threads", "A", "--db", "B"],
    ],
    ids=lambda a: a[0],
)
def test_two_different_files_are_a_usage_error(
    tmp_path: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A positional file and a --db naming another file exit 2 and touch neither."""
    first, second = tmp_path / "a.db", tmp_path / "b.db"
    first.write_bytes(b"")
    second.write_bytes(b"")
    argv = [str(first) if a == "A" else str(second) if a == "B" else a for a in argv]
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert "two files given" in capsys.readouterr().err
    assert first.read_bytes() == second.read_bytes() == b""


# -- files this process may not write ----------------------------------------------------------

READS = [
    ["threads", "F"],
    ["threads", "F", "--json"],
    ["show", "F", "demo"],
    ["history", "F", "demo"],
    ["verify", "F"],
    ["doctor", "F"],
    ["prune", "F", "--keep-last", "1"],
    ["erase", "F", "--owner", "ada"],
]

WRITES = [
    ["delete", "F", "demo"],
    ["compact", "F"],
    ["prune", "F", "--keep-last", "1", "--apply"],
    ["demo", "F"],
]


@pytest.mark.parametrize("locked", ["file", "folder"])
def test_read_commands_read_an_unwritable_file_and_leave_nothing(
    db: Path, locked: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every read command works on a file (or in a folder) this process may not write,
    and leaves the file's bytes as they were and no -wal, -shm or -journal beside it."""
    before = digest(db)
    with unwritable(db if locked == "file" else db.parent):
        for argv in READS:
            code = main([str(db) if a == "F" else a for a in argv])
            out, err = capsys.readouterr()
            assert code == 0, (argv, err)
            assert listing(db.parent) == ["memory.db"], argv
    assert digest(db) == before


def test_read_commands_leave_no_side_file_in_a_writable_folder(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On a file this process may write, read commands leave no side file either."""
    for argv in READS:
        assert main([str(db) if a == "F" else a for a in argv]) == 0, argv
        assert listing(db.parent) == ["memory.db"], argv


@pytest.mark.parametrize("argv", WRITES, ids=lambda a: " ".join(a[:1] + a[2:]))
def test_a_write_command_on_an_unwritable_file_says_so_in_one_line(
    db: Path, argv: list[str]
) -> None:
    """delete, compact, prune --apply and demo on a file this process may
    not write exit 1 with `error:` and a `hint:` naming permissions, no traceback, no
    mention of readonly=True, and change nothing."""
    before = digest(db)
    with unwritable(db):
        done = cli(*[str(db) if a == "F" else a for a in argv])
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith(("error:", "hint:"))]
    assert errors == done.stderr.splitlines()[-2:] and len(errors) == 2, done.stderr
    assert "cannot be written" in errors[0] and "write permission" in errors[1]
    assert "Traceback" not in done.stderr and "readonly=True" not in done.stderr
    assert digest(db) == before and listing(db.parent) == ["memory.db"]


# -- closed pipes and Ctrl-C --------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [["threads", "F"], ["show", "F", "demo"], ["history", "F", "demo", "--json"]],
    ids=lambda a: a[0],
)
def test_a_closed_pipe_ends_the_command_quietly(db: Path, argv: list[str]) -> None:
    """When the reader of stdout has gone (`| head -1` done reading), the command ends
    without a word on stderr, with the exit status of a closed pipe (141)."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line: every write fails
    try:
        done = subprocess.run(
            [sys.executable, "-m", "threadloom", *[str(db) if a == "F" else a for a in argv]],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": SRC},
            timeout=120,
        )
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, "")


def hold_write_lock(path: Path) -> apsw.Connection:
    """Another connection holding the file's write lock (as another process's writer)."""
    holder = apsw.Connection(str(path))
    holder.execute("BEGIN IMMEDIATE")
    return holder


def test_ctrl_c_ends_a_command_with_what_was_done_and_how_to_resume(db: Path) -> None:
    """SIGINT to `delete` waiting for another writer: exit 130, an `error: interrupted`
    line and a `hint:` to run it again, no traceback, the thread still there."""
    holder = hold_write_lock(db)
    try:
        env = {**os.environ, "PYTHONPATH": SRC}
        process = subprocess.Popen(
            [sys.executable, "-m", "threadloom", "delete", str(db), "demo"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert process.stderr is not None
        assert process.stderr.readline().startswith("waiting for another writer on ")
        process.send_signal(signal.SIGINT)
        assert process.wait(60) == 130
        err = process.stderr.read()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert "Traceback" not in err
    assert err.splitlines()[0].startswith("error: interrupted")
    assert err.splitlines()[1].startswith("hint: run the same command again")
    assert main(["threads", str(db), "--json"]) == 0


def test_a_writer_says_it_waits_and_its_timeout_tells_the_truth(
    db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Behind another writer, `delete` says it waits after WAIT_NOTICE seconds, gives up
    after the busy timeout (not twice that) and says how long it waited."""
    monkeypatch.setattr(lock_wait, "BUSY_TIMEOUT_MS", 1500)
    monkeypatch.setattr(lock_wait, "WAIT_NOTICE", 0.3)
    holder = hold_write_lock(db)
    try:
        started = time.monotonic()
        code = main(["delete", str(db), "demo"])
        took = time.monotonic() - started
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    err = capsys.readouterr().err.splitlines()
    assert code == 1 and took < 2.9
    assert err[0] == f"waiting for another writer on {db} (up to 1 s; Ctrl-C to stop)..."
    assert err[1].startswith(f"error: another process held {str(db)!r} for writing for 2 s")
    assert "busy timeout (1 s)" in err[1] and err[2].startswith("hint: retry")


def sqlite_saver_file(path: Path, threads: int) -> None:
    """A LangGraph SqliteSaver file of `threads` threads of one checkpoint each."""
    import sqlite3

    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.sqlite import SqliteSaver

    with contextlib.closing(sqlite3.connect(path, check_same_thread=False)) as conn:
        saver = SqliteSaver(conn)
        saver.setup()
        for number in range(threads):
            made = empty_checkpoint()
            made["channel_values"], made["channel_versions"] = {"x": number}, {"x": 1}
            config = {"configurable": {"thread_id": f"t{number}", "checkpoint_ns": ""}}
            saver.put(config, made, {"step": 0}, {"x": 1})  # type: ignore[arg-type, typeddict-item]


def test_ctrl_c_during_migrate_apply_says_how_far_and_a_rerun_resumes(tmp_path: Path) -> None:
    """SIGINT while `migrate --apply` copies threads (its progress on a terminal): exit 130,
    `error: interrupted after N/400 threads`, a hint to run it again, no traceback; the
    rerun copies the rest and the file holds every thread once."""
    import json
    import pty

    pytest.importorskip("langgraph.checkpoint.sqlite")
    source, target = tmp_path / "checkpoints.sqlite", tmp_path / "memory.db"
    sqlite_saver_file(source, 400)
    argv = [sys.executable, "-m", "threadloom", "migrate", str(source), "--db", str(target)]
    terminal, stderr = pty.openpty()  # progress is drawn on a terminal only
    process = subprocess.Popen(
        [*argv, "--apply"],
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        env={**os.environ, "PYTHONPATH": SRC},
    )
    os.close(stderr)
    seen = b""
    while b" threads" not in seen:  # the first progress line
        seen += os.read(terminal, 1024)
    process.send_signal(signal.SIGINT)
    assert process.wait(60) == 130
    with contextlib.suppress(OSError):  # the terminal is closed once the process is gone
        while chunk := os.read(terminal, 4096):
            seen += chunk
    os.close(terminal)
    err = seen.decode().replace("\r\n", "\n").replace("\x1b[K", "").splitlines()
    assert "Traceback" not in seen.decode()
    assert any(
        line.startswith("error: interrupted after ") and "/400 threads" in line for line in err
    ), err
    assert err[-1].startswith("hint: run the same command again")
    done = subprocess.run(
        [*argv, "--apply", "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
        timeout=120,
    )
    report = json.loads(done.stdout)
    assert done.returncode == 0 and 0 < report["copied"] < 400
    assert report["present"] == 400 - report["copied"]
    listed = cli("threads", str(target), "--json", "--limit", "500")
    assert len(json.loads(listed.stdout)["threads"]) == 400


# -- one-line errors where tracebacks were -------------------------------------------------------


def test_a_bad_backend_variable_is_a_one_line_error(db: Path) -> None:
    """THREADLOOM_BACKEND=bogus: exit 1, `error:` naming the choices, `hint:` to unset it."""
    done = subprocess.run(
        [sys.executable, "-m", "threadloom", "threads", str(db)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC, "THREADLOOM_BACKEND": "bogus"},
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "error: THREADLOOM_BACKEND='bogus' is not one of auto, native, python",
        "hint: unset it to let threadloom choose",
    ]


@pytest.mark.parametrize("thread_id", ["\udc80", "caf\udce9"], ids=["lone", "latin-1 byte"])
def test_an_argument_that_is_not_utf8_is_a_usage_error(
    db: Path, thread_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A thread id holding bytes that are not UTF-8 (lone surrogates): exit 2, one
    `error:` line and a `hint:`, nothing opened."""
    assert main(["show", str(db), thread_id]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: the argument ") and "is not UTF-8 text" in err[0]
    assert err[1].startswith("hint: give thread ids")
    assert len(err) == 2


@pytest.mark.parametrize(
    "argv",
    [
        ["export", "F", "--to", "nats://127.0.0.1:1", "--token", "t"],
        ["import", "F", "--from", "nats://127.0.0.1:1", "--token", "t"],
        ["serve", "F", "--nats", "nats://127.0.0.1:1", "--jwt-secret", "s"],
    ],
    ids=lambda a: a[0],
)
def test_nats_commands_without_the_nats_extra_name_it(db: Path, argv: list[str]) -> None:
    """Where nats-py does not import, export, import and serve exit 1 with an `error:`
    and a `hint:` giving the install command, and the file keeps its bytes."""
    before = digest(db)
    code = (
        "import sys\n"
        "sys.modules['nats'] = None  # import nats raises ImportError, as when not installed\n"
        "from threadloom.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *[str(db) if a == "F" else a for a in argv]],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    err = done.stderr.splitlines()
    assert len(err) == 2 and err[0].startswith("error: this command speaks NATS")
    assert err[1] == "hint: install it: pip install '.[nats]' in threadloom's clone"
    assert digest(db) == before


def test_a_progress_line_has_counts_rate_and_time_left() -> None:
    """The one progress style: bar, done/total and unit, then rate and ETA once known."""
    from threadloom.cli.bar import line

    assert line("", 100, 400, "threads", 10.0, 100) == (
        "[######..................] 100/400 threads  10/s  ETA 0:30"
    )
    assert line("pruning", 1, 400, "threads", 0.1, 1) == (
        "pruning [........................] 1/400 threads"
    )
    assert line("", 3, 3, "", 2.0, 3).endswith("3/3  1.5/s")


# -- the scope line, cursors, prune's report -------------------------------------------------


@pytest.fixture
def myapp(tmp_path: Path) -> Path:
    """A file whose only threads (three) are in the scope `myapp / engine.v1`."""
    from langgraph.checkpoint.base import empty_checkpoint

    from threadloom import Saver

    path = tmp_path / "myapp.db"
    with Saver.from_conn_string(str(path), namespace="myapp") as saver:
        for number in range(3):
            config = {"configurable": {"thread_id": f"t{number}", "checkpoint_ns": ""}}
            saver.put(config, empty_checkpoint(), {}, {})  # type: ignore[arg-type]
    return path


def test_an_empty_default_scope_names_the_scope_that_holds_threads(
    myapp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """threads, show and delete on the default scope of a file whose threads are all in
    `myapp` name that scope and the option that chooses it; no naas scope is printed."""
    assert main(["threads", str(myapp)]) == 0
    out = capsys.readouterr().out
    assert (
        out
        == "no threads in the default scope, scope 'myapp' holds 3 threads: use --namespace myapp\n"
    )
    assert main(["show", str(myapp), "t0"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"error: no thread 't0' in {myapp}",
        "hint: no threads in the default scope, scope 'myapp' holds 3 threads: "
        "use --namespace myapp",
    ]
    assert main(["delete", str(myapp), "t0"]) == 1
    assert "use --namespace myapp" in capsys.readouterr().err


def test_the_scope_is_named_only_when_it_is_not_the_default(
    db: Path, myapp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A thread missing from the default scope of a file that holds threads there: no
    scope in the message; from another scope: that scope and the options to list it."""
    assert main(["show", str(db), "nope"]) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[0] == f"error: no thread 'nope' in {db}"
    assert "naas_abi_core" not in err
    assert main(["show", str(myapp), "nope", "--namespace", "myapp"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"error: no thread 'nope' in {myapp} (scope myapp / engine.v1)",
        f"hint: `threadloom threads {myapp} --namespace myapp` lists its threads",
    ]
    assert main(["prune", str(db), "--keep-last", "1"]) == 0
    assert capsys.readouterr().out.startswith("dry-run: 1 threads, keep last 1,")


def test_history_before_a_cursor_it_never_gave_is_an_error(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """history --before garbage exits 1 naming what to pass; the `next` of a page works."""
    assert main(["history", str(db), "demo", "--before", "garbage"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "error: before='garbage' names no checkpoint of thread 'demo'"
    assert err[1].startswith("hint: pass a checkpoint id of the thread")
    import json

    assert main(["history", str(db), "demo", "--limit", "2", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert (
        main(["history", str(db), "demo", "--limit", "2", "--json", "--before", first["next"]]) == 0
    )
    second = json.loads(capsys.readouterr().out)
    assert second["checkpoints"][0]["checkpoint_id"] < first["checkpoints"][-1]["checkpoint_id"]


def test_prune_min_age_0_does_not_blame_min_age_for_what_it_keeps(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --min-age 0 the values kept are young by the grace, and the report says so."""
    assert main(["prune", str(db), "--keep-last", "1", "--min-age", "0"]) == 0
    out = capsys.readouterr().out
    assert "younger than the grace (60 s)" in out and "--min-age" not in out
    assert main(["prune", str(db), "--keep-last", "1"]) == 0
    assert "younger than --min-age or the grace (60 s)" in capsys.readouterr().out


def test_ctrl_c_stops_the_viewer_with_exit_0_however_early(db: Path) -> None:
    """SIGINT right after `view` printed its address (before its server may have taken
    the signal over) stops it: exit 0, no `interrupted` error, no traceback."""
    for _ in range(3):
        process = subprocess.Popen(
            [sys.executable, "-m", "threadloom", "view", str(db), "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONPATH": SRC},
        )
        assert process.stdout is not None
        assert process.stdout.readline().startswith("threadloom view: http://127.0.0.1:")
        process.send_signal(signal.SIGINT)
        rest = process.communicate(timeout=60)[0]
        assert process.returncode == 0, rest
        assert "interrupted" not in rest and "Traceback" not in rest


def test_migrate_apply_into_an_unwritable_file_says_so_in_one_line(
    db: Path, tmp_path: Path
) -> None:
    """migrate --apply into a file this process may not write: exit 1, `error:` and a
    `hint:` about permissions, no traceback, the file unchanged."""
    pytest.importorskip("langgraph.checkpoint.sqlite")
    source = tmp_path / "checkpoints.sqlite"
    sqlite_saver_file(source, 2)
    before = digest(db)
    with unwritable(db):
        done = cli("migrate", str(source), "--db", str(db), "--apply")
    assert done.returncode == 1, done.stderr
    err = done.stderr.splitlines()
    assert err[-2].startswith("error: ") and "cannot be written" in err[-2]
    assert err[-1].startswith("hint: ") and "write permission" in err[-1]
    assert "Traceback" not in done.stderr and digest(db) == before
