"""`threadloom view`: the address it prints, Ctrl-C, its errors, and the layers it keeps
(the viewer never loads LangGraph; the other commands never load the web stack)."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests._fresh import run_fresh
from tests.test_layers import SRC, imported, modules
from tests.viewer.conftest import Served


def test_view_prints_its_address_serves_and_stops_on_ctrl_c(
    memory: dict[str, Any], tmp_path: Path
) -> None:
    """The banner names a 127.0.0.1 address that serves the pages; SIGINT ends it with
    status 0 and leaves no -wal or -shm beside the file."""
    path = tmp_path / "copy.db"
    path.write_bytes(memory["path"].read_bytes())
    served = Served(path)
    try:
        assert "read-only" in served.banner
        with urllib.request.urlopen(served.url + "/threads.json", timeout=10) as response:
            assert json.load(response)["page"] == "threads"
        with urllib.request.urlopen(served.url + "/", timeout=10) as response:
            assert response.url.endswith("/threads")
    finally:
        code, _, err = served.stop()
    assert code == 0, err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.db"]


def run(*args: str, code: str = "") -> subprocess.CompletedProcess[str]:
    script = f"{code}\nfrom threadloom.cli import run\nrun()"
    return subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=60
    )


def test_view_without_the_extra_says_what_to_install(memory: dict[str, Any]) -> None:
    """Without the web stack: `error:`, a `hint:` to install the view extra, status 1."""
    done = run("view", str(memory["path"]), code="import sys; sys.modules['starlette'] = None")
    assert done.returncode == 1
    assert done.stderr.startswith("error: the web viewer needs starlette")
    assert (
        "hint: install the view extra: pip install '.[view]' in threadloom's clone" in done.stderr
    )


def test_view_errors(tmp_path: Path, memory: dict[str, Any]) -> None:
    """No file, a path that is not a threadloom file and a port in use are `error:` lines
    with a hint, never a traceback."""
    missing = run("view", str(tmp_path / "nope.db"))
    assert missing.returncode == 1 and missing.stderr.startswith("error: ")
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    foreign = run("view", str(text), "--port", "0")
    assert foreign.returncode == 1 and "not an SQLite database" in foreign.stderr
    assert text.read_text() == "hello\n"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = run("view", str(memory["path"]), "--port", str(taken.getsockname()[1]))
    assert busy.returncode == 1 and "hint: pass another --port" in busy.stderr
    assert run("view").returncode == 2
    for done in (missing, foreign, busy):
        assert "Traceback" not in done.stderr


def test_another_host_is_served_only_with_a_warning(
    memory: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Loopback hosts are served quietly; any other host is warned about before binding."""
    from threadloom.cli import main
    from threadloom.cli.commands import view

    assert view.loopback("127.0.0.1") and view.loopback("localhost") and view.loopback("::1")
    assert not view.loopback("0.0.0.0") and not view.loopback("192.0.2.1")

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise OSError(99, "not binding in a test")

    monkeypatch.setattr(socket, "create_server", refuse)
    assert main(["view", str(memory["path"]), "--host", "0.0.0.0"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("warning: serving on 0.0.0.0: anyone who can reach this address")
    assert main(["view", "--db", str(memory["path"])]) == 1
    assert "warning" not in capsys.readouterr().err


def status_for(port: int, host: str) -> int:
    """The status of `GET /threads.json` on 127.0.0.1:`port` with `Host: host` (what a
    browser sends for a page whose name resolves to 127.0.0.1, rebinding included)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/threads.json", headers={"Host": host})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def test_a_non_loopback_bind_still_refuses_foreign_host_names(
    memory: dict[str, Any], tmp_path: Path
) -> None:
    """`--host 0.0.0.0` listens on 127.0.0.1 too, so a website whose name is rebound to
    127.0.0.1 reaches it: a Host that is not a loopback name, the bound address, this
    machine's name or an `--allow-host` one is refused (400); those are served."""
    path = tmp_path / "copy.db"
    path.write_bytes(memory["path"].read_bytes())
    served = Served(path, "--host", "0.0.0.0", "--allow-host", "viewer.example")
    port = served.port
    try:
        for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example", ""):
            assert status_for(port, host) in (400, 421), host
        allowed = [
            "localhost",
            f"localhost:{port}",
            f"127.0.0.1:{port}",
            "[::1]",
            f"[::1]:{port}",
            f"[0:0:0:0:0:0:0:1]:{port}",
            f"0.0.0.0:{port}",
            socket.gethostname(),
            f"{socket.getfqdn()}:{port}",
            "viewer.example",
            f"Viewer.Example:{port}",
        ]
        for host in allowed:
            assert status_for(port, host) == 200, host
    finally:
        code, _, err = served.stop()
    assert code == 0, err
    assert "warning: serving on 0.0.0.0" in err and "--allow-host" in err


def test_the_viewer_imports_no_langgraph_and_no_adapter() -> None:
    """viewer/ imports the engine and the protocol, never LangGraph, LangChain, the savers,
    the Store adapter or the CLI; and a crawl in a fresh process loads none of them."""
    found = modules(SRC)
    known = set(found)
    banned = ("langgraph", "langchain", "langchain_core")
    for module, path in found.items():
        if not module.startswith("threadloom.viewer"):
            continue
        for target in imported(module, path, known):
            assert target.split(".")[0] not in banned, (module, target)
            wing = target.startswith(("threadloom.langgraph", "threadloom.cli"))
            assert not wing, (module, target)


def test_a_viewer_process_never_loads_langgraph_and_light_commands_never_load_starlette(
    memory: dict[str, Any],
) -> None:
    """Serving pages loads no LangGraph module; `doctor` loads no web module."""
    code = (
        "import sys\n"
        "from starlette.testclient import TestClient\n"
        "from threadloom.viewer.app import create_app\n"
        "from threadloom.viewer.source import Source\n"
        f"app = create_app(Source({str(memory['path'])!r}), allowed_hosts=['testserver'])\n"
        "with TestClient(app) as c:\n"
        "    for url in ('/threads', '/threads/chat-1', '/threads/chat-1/history', '/store', "
        "'/store?q=tea', '/file'):\n"
        "        assert c.get(url).status_code == 200, url\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'langgraph', 'langchain_core', 'langchain'})\n"
        "assert not loaded, loaded\n"
    )
    run_fresh(code)
    code = (
        "import sys\nfrom threadloom.cli import main\n"
        f"assert main(['doctor', '--db', {str(memory['path'])!r}]) == 0\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'starlette', 'uvicorn', 'jinja2', 'playwright'})\nassert not loaded, loaded\n"
    )
    run_fresh(code)
