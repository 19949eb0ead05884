"""The viewer in process: every page and its JSON twin, the URL scheme, escaping, the
headers, and read-only by construction (no route writes, the file's bytes never change)."""

from __future__ import annotations

import hashlib
import html
import json
import re
import shutil
import urllib.parse
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from tests.viewer._memory import BIG, BREAKOUT, ODD, SCRIPT, TURNS
from threadloom.viewer.values import lanes, shorten, tagged, tilde, untilde


class Elements(HTMLParser):
    """What a browser would build from a page: its tags, event-handler attributes, script
    sources and text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.handlers: list[str] = []
        self.scripts: list[str | None] = []
        self.text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.handlers += [name for name, _ in attrs if name.startswith("on")]
        if tag == "script":
            self.scripts.append(dict(attrs).get("src"))

    def handle_data(self, data: str) -> None:
        self.text += data


def head_of(client: Any, thread_id: str) -> str:
    return str(client.get(f"/threads/{tilde(thread_id)}.json").json()["thread"]["head"])


def test_the_thread_list_and_its_twin(client: Any, memory: dict[str, Any]) -> None:
    """/threads lists every thread newest first with title, owner, activity, messages and
    size; `.json` and `Accept: application/json` give the same data."""
    page = client.get("/threads")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    twin = client.get("/threads.json")
    assert twin.headers["content-type"] == "application/json"
    data = twin.json()
    assert data == client.get("/threads", headers={"Accept": "application/json"}).json()
    assert data["page"] == "threads" and data["next"] is None
    assert len(data["threads"]) == memory["threads"]
    chat = next(t for t in data["threads"] if t["thread_id"] == "chat-1")
    assert chat["owner"] == "ada" and chat["messages"] == TURNS * 4 and chat["bytes"] > 0
    moments = [t["updated_at"] for t in data["threads"]]
    assert moments == sorted(moments, reverse=True)
    assert "Ada&#39;s sums" in page.text and 'href="/threads/chat-1"' in page.text


def test_the_thread_list_searches_filters_and_pages(client: Any) -> None:
    """q matches ids and titles, owner filters, limit pages through `next`."""
    found = client.get("/threads.json?q=REVIEW").json()["threads"]
    assert sorted(t["thread_id"] for t in found) == ["review-1", "review-2"]
    found = client.get("/threads.json?q=sums&owner=ada").json()["threads"]
    assert [t["thread_id"] for t in found] == ["chat-1"]
    assert client.get("/threads.json?owner=bob").json()["threads"][0]["owner"] == "bob"
    seen, url = [], "/threads.json?limit=2"
    while url:
        data = client.get(url).json()
        seen += [t["thread_id"] for t in data["threads"]]
        url = (
            f"/threads.json?limit=2&before={urllib.parse.quote(data['next'])}"
            if data["next"]
            else ""
        )
    assert seen == [t["thread_id"] for t in client.get("/threads.json").json()["threads"]]
    assert client.get("/threads.json?limit=0").status_code == 400
    # A text SQLite's LIKE would refuse as "too complex" is a 400 naming the limit, and
    # the longest allowed text is searched.
    refused = client.get("/threads.json?q=" + "x%" * 25_000)
    assert refused.status_code == 400 and "at most 1000 characters" in refused.text
    assert client.get("/threads.json?q=" + "%_" * 500).json()["threads"] == []
    assert client.get("/threads.json?before=nonsense").json()["status"] == 400


def test_a_transcript_pages_from_the_tail_backwards(client: Any) -> None:
    """The conversation page shows the last 20 messages; `before=<start>` gives the 20 before,
    down to the first; tool calls and results come with their ids and names."""
    data = client.get("/threads/chat-1.json").json()
    transcript = data["transcript"]
    total = TURNS * 4
    assert (transcript["total"], transcript["start"], len(transcript["messages"])) == (
        total,
        total - 20,
        20,
    )
    indexes = []
    while True:
        indexes = [m["index"] for m in transcript["messages"]] + indexes
        if transcript["older"] is None:
            break
        transcript = client.get(f"/threads/chat-1.json?before={transcript['older']}").json()[
            "transcript"
        ]
    assert indexes == list(range(total))
    first = client.get("/threads/chat-1.json?before=4").json()["transcript"]["messages"]
    assert [m["type"] for m in first] == ["human", "ai", "tool", "ai"]
    assert first[1]["tool_calls"][0]["name"] == "multiply" and first[2]["tool_call_id"]
    page = client.get("/threads/chat-1?before=4").text
    assert '<details class="tool-call"' in page and '<details class="tool-result"' in page
    assert "Load older" not in page


def test_a_big_message_is_shown_shortened_with_its_size_and_whole_on_its_page(client: Any) -> None:
    """A 60,000-character message is cut on the transcript (with its size and a link) and
    whole at /threads/<id>/messages/<index>."""
    message = client.get("/threads/big-result.json").json()["transcript"]["messages"][0]
    assert message["cut"] and message["content"]["chars"] == BIG
    assert len(message["content"]["$cut"]) < BIG and message["bytes"] > BIG
    page = client.get("/threads/big-result").text
    assert 'href="/threads/big-result/messages/0"' in page and "Show all" in page
    whole = client.get("/threads/big-result/messages/0.json").json()["message"]
    assert whole["content"] == "x" * BIG and not whole["cut"]
    assert client.get("/threads/big-result/messages/99").status_code == 404


def test_interrupts_and_pending_writes_are_marked(client: Any) -> None:
    """A paused graph's conversation shows its interrupt (node and question); a subgraph's
    interrupt shows on its parent's thread."""
    pending = client.get("/threads/review-1.json").json()["pending"]
    (interrupt,) = pending["interrupts"]
    assert interrupt["node"] == "review" and interrupt["value"]["round"] == 1
    assert "waiting for input" in client.get("/threads/review-1").text
    pending = client.get("/threads/subgraph-1.json").json()["pending"]
    assert pending["interrupts"][0]["value"]["question"] == "approve?"
    assert client.get("/threads/chat-1.json").json()["pending"]["interrupts"] == []


def test_history_shows_the_tree_with_its_fork(client: Any) -> None:
    """The history of a forked thread lists every checkpoint with step, source and node,
    marks the fork and puts the abandoned branch in a second lane; pages by `before`."""
    data = client.get("/threads/forked-1/history.json").json()
    tree = data["tree"]
    assert tree["total"] == len(tree["checkpoints"]) == 8 and tree["head"]
    assert [c["forks"] for c in tree["checkpoints"]].count(2) == 1
    assert {c["source"] for c in tree["checkpoints"]} == {"input", "loop", "update"}
    assert tree["lanes"] == 2 and {c["lane"] for c in tree["checkpoints"]} == {0, 1}
    assert any(c["nodes"] == ["step2"] for c in tree["checkpoints"])
    first = client.get("/threads/forked-1/history.json?limit=3").json()["tree"]
    rest = client.get(f"/threads/forked-1/history.json?before={first['next']}").json()["tree"]
    ids = [c["checkpoint_id"] for c in first["checkpoints"] + rest["checkpoints"]]
    assert ids == [c["checkpoint_id"] for c in tree["checkpoints"]]
    assert "fork ×2" in client.get("/threads/forked-1/history").text


def test_a_subgraph_namespace_has_its_history(client: Any) -> None:
    """The child namespace of a subgraph is listed and its own history opens with `ns`."""
    namespaces = client.get("/threads/subgraph-1/history.json").json()["namespaces"]
    child = next(ns for ns in namespaces if ns)
    tree = client.get(f"/threads/subgraph-1/history.json?ns={urllib.parse.quote(child)}").json()
    assert tree["tree"]["checkpoint_ns"] == child and tree["tree"]["checkpoints"]
    cid = tree["tree"]["checkpoints"][0]["checkpoint_id"]
    page = client.get(f"/threads/subgraph-1/checkpoints/{cid}.json?ns={urllib.parse.quote(child)}")
    assert page.status_code == 200 and page.json()["checkpoint_ns"] == child


def test_a_checkpoint_shows_its_values_and_what_changed(client: Any) -> None:
    """A step's checkpoint says which channels changed from the parent (old and new value),
    the list channel's length and tail, and the metadata."""
    tree = client.get("/threads/forked-1/history.json").json()["tree"]["checkpoints"]
    step = next(c for c in tree if c["source"] == "loop" and c["step"] == 3 and c["lane"] == 0)
    data = client.get(f"/threads/forked-1/checkpoints/{step['checkpoint_id']}.json").json()
    assert data["parent_id"] == step["parent_id"] and data["metadata"]["step"] == 3
    channels = {c["channel"]: c for c in data["channels"]}
    assert channels["count"]["change"] == "changed"
    assert (channels["count"]["parent"]["value"], channels["count"]["value"]) == (100, 101)
    log = channels["log"]
    assert log["stored"] == "list" and log["length"] == 3 and log["parent"]["length"] == 2
    assert len(log["value"]) == 3 and "count" in data["versions"]
    page = client.get(f"/threads/forked-1/checkpoints/{step['checkpoint_id']}").text
    assert "What changed from the parent" in page and "changed" in page


def test_raw_documents_are_the_served_documents_in_tagged_json(
    client: Any, memory: dict[str, Any]
) -> None:
    """The raw page holds the checkpoint document under its protocol key, its pending writes
    and the blobs it references, exactly as `documents()` yields them, payloads decoded
    class-free and shown as sizes, never as bytes."""
    from threadloom import Saver

    head = head_of(client, "chat-1")
    data = client.get(f"/threads/chat-1/checkpoints/{head}/raw.json").json()
    docs = data["documents"]
    assert docs[0]["collection"] == "langgraph_checkpoints_v2"
    assert set(docs[0]["data"]["checkpoint"]["payload"]) == {"$t", "size"}
    assert "$v" not in str(docs[0]["data"]) and docs[0]["decoded"]["metadata"]["user_id"] == "ada"
    blob = next(d for d in docs if d["ref"] and d["ref"].startswith("b-"))
    assert blob["data"]["length"] == TURNS * 4 and blob["references"]
    with Saver.from_conn_string(str(memory["path"]), readonly=True) as saver:
        served = {key: (collection, body) for collection, key, body in saver.documents("chat-1")}
    assert served[docs[0]["key"]][0] == docs[0]["collection"]
    assert served[docs[0]["key"]][1]["checkpoint_id"] == head
    chunk = blob["references"][-1]["ref"]
    page = client.get(f"/threads/chat-1/documents/{chunk}.json").json()
    assert page["document"]["collection"] == "langgraph_items_v2"
    element = page["document"]["references"][0]
    assert element["bytes"] > 0
    shown = client.get(f"/threads/chat-1/documents/{element['ref']}.json").json()["document"]
    assert shown["decoded"]["value"]["$type"].startswith("langchain_core.messages")


def test_the_store_pages(client: Any) -> None:
    """The Store page shows the namespace tree with counts, a namespace's items with their
    TTL, an item whole, and text search results with scores, best first."""
    root = client.get("/store.json").json()
    assert [c["label"] for c in root["children"]] == ["acme"] and root["items"] == []
    assert "embedder" in root["search_note"]
    facts = client.get("/store.json?ns=acme.user.ada.facts").json()
    assert facts["items_total"] == 4 and [i["key"] for i in facts["items"]][0] == "f-city"
    ttl = next(i for i in facts["items"] if i["key"] == "f-ttl")
    assert ttl["ttl_minutes"] == 60 and not ttl["expired"] and 0 < ttl["expires_in_minutes"] <= 60
    assert next(i for i in facts["items"] if i["key"] == "f-tea")["ttl_minutes"] is None
    found = client.get("/store.json?q=tea+prefers").json()["search"]["results"]
    assert found[0]["key"] == "f-tea" and found[0]["score"] == pytest.approx(2 / 6**0.5, abs=1e-3)
    assert [r["score"] for r in found] == sorted((r["score"] for r in found), reverse=True)
    assert client.get("/store.json?ns=acme.user.bob&q=tea").json()["search"]["results"] == []
    item = client.get("/store/item.json?ns=acme.user.ada.profile&key=profile").json()["item"]
    assert item["value"] == {"name": "Ada", "langs": ["en", "fr"]}
    assert client.get("/store/item.json?ns=acme&key=nope").status_code == 404
    assert client.get("/store.json?ns=a..b").status_code == 400


def test_the_file_page(client: Any, memory: dict[str, Any]) -> None:
    """The file page gives the format, backend, pages, dictionary, the thread index's and
    the Store's totals and the scopes; `?detail=1` adds rows, sizes per table, dedup and
    reclaimable space."""
    data = client.get("/file.json").json()
    space = data["space"]
    assert space["file_format"] == data["format_version"]
    assert data["backend"] in ("native", "python")
    assert space["pages"] * space["page_size"] == space["file_bytes"]
    assert space["dictionary"] is not None and data["detail"] is False
    assert data["measured"] is None
    index = data["thread_index"]
    assert index["state"] == "ready" and index["threads"] == memory["threads"]
    assert index["messages"] > memory["messages"]
    listed = client.get("/threads.json?limit=500").json()["threads"]
    for name in ("checkpoints", "messages", "bytes"):
        assert index[name] == sum(t[name] for t in listed) > 0, name
    assert data["scopes"][0]["threads"] == memory["threads"]
    assert data["store"] == {"namespaces": 3, "items": 6}
    page = client.get("/file").text
    assert 'href="/file?detail=1"' in page and "reads the whole file" in page
    assert "Bytes per table and index" not in page
    assert "built-in method" not in page
    assert '<th>Store items</th><td class="num">6</td>' in page

    detail = client.get("/file.json?detail=1").json()
    measured = detail["measured"]
    assert detail["detail"] is True and measured["figures"]["threads"] == memory["threads"]
    assert measured["figures"]["checkpoints"] == index["checkpoints"]
    used = sum(measured["tables"].values()) + space["free_pages"] * space["page_size"]
    assert 0 < used <= space["pages"] * space["page_size"]
    assert measured["reclaimable"] >= space["free_pages"] * space["page_size"]
    assert measured["dedup"]["inline_rows"] > 0
    assert "Bytes per table and index" in client.get("/file?detail=1").text
    assert client.get("/file.json?detail=2").status_code == 400


def test_the_file_page_reads_no_whole_table_unless_asked(
    memory: dict[str, Any], tmp_path: Path
) -> None:
    """By default `/file` runs no statement whose cost grows with the file: no `dbstat`
    (every page), no count or sum over checkpoints, pending writes, values, blocks,
    extents or the Store's items and vectors (one pass over the `threads` rows, for the
    index's totals, is the most it reads). `?detail=1` runs them."""
    import apsw
    from starlette.testclient import TestClient

    from threadloom.viewer.app import create_app
    from threadloom.viewer.source import Source

    statements: list[str] = []

    def trace(cursor: Any, sql: str, bindings: Any) -> bool:
        statements.append(sql)
        return True

    def hook(conn: apsw.Connection) -> None:
        conn.exec_trace = trace

    whole = re.compile(
        r"\bdbstat\b|\bFROM\s+(checkpoints|writes|vals|blocks|extents|store_items|"
        r"store_vectors)\b",
        re.IGNORECASE,
    )
    path = tmp_path / "copy.db"  # a path of its own: its connections are new, so traced
    shutil.copyfile(memory["path"], path)
    apsw.connection_hooks.append(hook)
    try:
        source = Source(path)
        with TestClient(create_app(source, allowed_hosts=["testserver"])) as client:
            assert client.get("/threads").status_code == 200  # the pool's connections
            statements.clear()
            assert client.get("/file").status_code == 200
            assert client.get("/file.json").status_code == 200
            assert statements and [sql for sql in statements if whole.search(sql)] == []
            assert client.get("/file.json?detail=1").status_code == 200
            assert any("dbstat" in sql for sql in statements)
    finally:
        apsw.connection_hooks.remove(hook)


def test_ids_that_a_path_cannot_hold_are_tilde_encoded(client: Any) -> None:
    """A thread id with `/`, `.`, `~`, `?` and non-ASCII round-trips through its URL; the
    thread list links to it."""
    assert untilde(tilde(ODD)) == ODD and re.fullmatch(r"[A-Za-z0-9_~-]+", tilde(ODD))
    assert f'href="/threads/{tilde(ODD)}"' in client.get("/threads").text
    data = client.get(f"/threads/{tilde(ODD)}.json").json()
    assert data["thread"]["thread_id"] == ODD and data["transcript"]["messages"] == []
    assert client.get(f"/threads/{tilde(ODD)}/history.json").json()["tree"]["total"] == 0


def test_errors_are_pages_too(client: Any) -> None:
    """Unknown threads, checkpoints and routes are 404 pages with a JSON twin; bad
    parameters 400."""
    for url in ("/threads/nope", "/threads/chat-1/checkpoints/nope", "/nowhere"):
        assert client.get(url).status_code == 404
    assert client.get("/threads/nope.json").json() == {
        "page": "error",
        "status": 404,
        "error": "no thread 'nope' in scope {'namespace': 'naas_abi_core.services.agent', "
        "'agent_id': 'engine.v1'}",
    }
    assert client.get("/threads/chat-1.json?before=x").status_code == 400
    assert client.get("/threads/chat-1/documents/x-1.json").status_code == 400


def test_an_error_page_links_only_to_the_viewer(client: Any) -> None:
    """A path that reads as another site in a link (`//host/...`, `/\\host/...`, encoded
    or not) gives a 404 whose links all stay on the viewer: its JSON link is a path."""
    for path in (
        "//evil.example/x",
        "///evil.example/x",
        "/%2F/evil.example/x",
        "/%5Cevil.example/x",
    ):
        url = "http://testserver" + path  # in full: the client reads "//host/x" as a host
        response = client.get(url)
        assert response.status_code == 404, url
        links = re.findall(r'(?:href|src)="([^"]*)"', response.text)
        assert links and all(re.match(r"/[^/\\]", html.unescape(link)) for link in links), links
        assert "evil.example" in response.text  # its JSON link still names the path, encoded
    assert 'href="/evil.example/x.json"' in client.get("http://testserver//evil.example/x").text
    assert 'href="/threads/nope.json?limit=2"' in client.get("/threads/nope?limit=2").text


def test_no_route_writes_and_the_headers_keep_markup_inert(client: Any) -> None:
    """Every method but GET and HEAD is refused (405) on every route; pages carry a strict
    Content-Security-Policy, nosniff and no-store; a foreign Host header is refused."""
    for url in ("/threads", "/threads/chat-1", "/store", "/file", "/static/viewer.css"):
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            assert client.request(method, url).status_code == 405, (method, url)
        assert client.head(url).status_code == 200
    headers = client.get("/threads").headers
    assert headers["content-security-policy"].startswith("default-src 'self'; script-src 'self'")
    assert "'unsafe-inline'" not in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff" and headers["cache-control"] == "no-store"
    assert client.get("/threads", headers={"host": "evil.example"}).status_code == 400


def test_only_allowed_host_names_are_served(memory: dict[str, Any]) -> None:
    """By default the loopback names are served, with any port and in any IPv6 form; a
    foreign name (a DNS-rebinding page's own) or a malformed Host is refused (400), and a
    wildcard is not accepted as an allowed host."""
    from starlette.testclient import TestClient

    from threadloom.viewer.app import create_app, host_name
    from threadloom.viewer.source import Source

    assert host_name("[0:0:0:0:0:0:0:1]:8765") == "::1" == host_name("::1")
    assert host_name("LocalHost.:80") == "localhost" and host_name("[::1") is None
    with TestClient(create_app(Source(memory["path"]))) as client:
        for host in ("localhost", "localhost:8765", "127.0.0.1:1", "[::1]:8765", "[::1]"):
            assert client.get("/threads", headers={"host": host}).status_code == 200, host
        for host in ("evil.example", "localhost.evil.example", "localhost:x", "[::1", ""):
            assert client.get("/threads", headers={"host": host}).status_code == 400, host
    source = Source(memory["path"])
    try:
        with pytest.raises(ValueError, match="wildcard"):
            create_app(source, allowed_hosts=["*"])
    finally:
        source.close()


def test_stored_markup_is_escaped_everywhere(client: Any) -> None:
    """Titles, messages and Store values holding `<script>` and an attribute breakout come
    out escaped in HTML (and as plain strings in JSON); no page has an inline script or
    event handler."""
    pages = [
        "/threads",
        "/threads/chat-1?before=16",
        "/threads/chat-1/messages/12",
        "/threads/review-2",
        "/threads/review-2/history",
        "/store?ns=acme.user.ada.facts",
        "/store?q=wrote",
        "/store/item?ns=acme.user.ada.facts&key=f-hostile",
    ]
    for url in pages:
        text = client.get(url).text
        assert "<script>window" not in text and "<img src=x" not in text, url
        elements = Elements()
        elements.feed(text)
        assert elements.handlers == [], url
        assert elements.scripts == ["/static/viewer.js"], url
        assert "img" not in elements.tags, url
        shown = elements.text
        assert SCRIPT in shown and (BREAKOUT in shown or json.dumps(BREAKOUT)[1:-1] in shown), url
    assert (
        client.get("/threads/chat-1/messages/12.json")
        .json()["message"]["content"]
        .endswith(BREAKOUT)
    )


def test_the_value_helpers() -> None:
    """shorten cuts strings and counts list and map elements; tagged shows bytes as sizes
    (a base64 prefix only outside stored values) and escapes `$` keys; lanes put a branch
    in its own lane."""
    assert shorten("x" * 10, text=4) == {"$cut": "xxxx", "chars": 10, "bytes": 10}
    assert shorten(list(range(5)), items=2) == [0, 1, {"$more": 3}]
    assert shorten({str(i): i for i in range(3)}, items=1) == {"0": 0, "…": {"$more": 2}}
    assert tagged({"kind": "msgpack", "payload": b"secret"}) == {
        "kind": "msgpack",
        "payload": {"$t": "bytes", "size": 6},
    }
    assert tagged({"$x": b"ab"}) == {"$$x": {"$t": "bytes", "size": 2, "$v": "YWI="}}
    nodes = [
        {"checkpoint_id": "5", "parent_id": "3"},
        {"checkpoint_id": "4", "parent_id": "2"},
        {"checkpoint_id": "3", "parent_id": "2"},
        {"checkpoint_id": "2", "parent_id": "1"},
        {"checkpoint_id": "1", "parent_id": None},
    ]
    assert lanes(nodes) == 2 and [n["lane"] for n in nodes] == [0, 1, 0, 0, 0]


def test_crawling_every_page_changes_no_byte_of_the_file(
    memory: dict[str, Any], tmp_path: Path
) -> None:
    """Following every link of the viewer (and each page's JSON twin) on a copy of the file
    leaves its bytes as they were, and no `-wal` or `-shm` beside it once closed."""
    from starlette.testclient import TestClient

    from threadloom.errors import ReadOnlyError
    from threadloom.viewer.app import create_app
    from threadloom.viewer.source import Source

    path = tmp_path / "copy.db"
    shutil.copyfile(memory["path"], path)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    source = Source(path)
    with pytest.raises(ReadOnlyError), source.file.write():
        pass  # pragma: no cover - the open is read-only
    seen: set[str] = set()
    queue = ["/threads", "/store", "/file"]
    with TestClient(create_app(source, allowed_hosts=["testserver"])) as client:
        while queue and len(seen) < 600:
            url = queue.pop()
            if url in seen:
                continue
            seen.add(url)
            response = client.get(url)
            assert response.status_code == 200, url
            if "/static/" in url:
                continue
            path_part, _, query = url.partition("?")
            twin = client.get(path_part + ".json" + ("?" + query if query else ""))
            assert twin.status_code == 200 and twin.json()["page"] != "error", url
            for link in re.findall(r'href="(/[^"#]*)', response.text):
                link = html.unescape(link)
                if not link.partition("?")[0].endswith(".json") and link not in seen:
                    queue.append(link)
    assert len(seen) > 80
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.db"]


def test_docs_name_every_field_of_every_twin(client: Any) -> None:
    """docs/cli.md's `view` section names every top-level field of each page's JSON twin
    (and of its nested records); README shows the command and the committed screenshot."""
    root = Path(__file__).resolve().parents[2]
    docs = (root / "docs" / "cli.md").read_text()
    section = docs[docs.index("## `threadloom view") :]
    head = head_of(client, "chat-1")
    tree = client.get("/threads/forked-1/history.json").json()["tree"]
    twins = [
        "/threads.json",
        "/threads/review-1.json",
        "/threads/chat-1/messages/0.json",
        "/threads/forked-1/history.json",
        f"/threads/forked-1/checkpoints/{tree['checkpoints'][1]['checkpoint_id']}.json",
        f"/threads/chat-1/checkpoints/{head}/raw.json",
        "/store.json?ns=acme.user.ada.facts&q=tea",
        "/store/item.json?ns=acme.user.ada.profile&key=profile",
        "/file.json",
        "/file.json?detail=1",
    ]

    def fields(value: Any, depth: int = 0) -> set[str]:
        if isinstance(value, list):
            return set().union(*(fields(v, depth) for v in value[:3])) if value else set()
        if not isinstance(value, dict) or depth > 2:
            return set()
        found = set(value)
        for key, item in value.items():
            if key not in (
                "value",
                "data",
                "decoded",
                "metadata",
                "checkpoint",
                "tables",
                "figures",
                "content",
                "versions",
                "args",
            ):
                found |= fields(item, depth + 1)
        return found

    missing = {}
    for url in twins:
        data = client.get(url).json()
        assert data["page"] != "error", url
        absent = {f for f in fields(data) if f'"{f}"' not in section and not f.startswith("$")}
        if absent:
            missing[url] = sorted(absent)
    assert missing == {}
    readme = (root / "README.md").read_text()
    assert "threadloom view memory.db" in readme and "](docs/viewer.png)" in readme
    assert (root / "docs" / "viewer.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_secrets_are_masked_and_never_shown_as_bytes(tmp_path: Path) -> None:
    """A SecretStr in a channel (alone or inside a model) shows as `$masked` on the
    checkpoint and raw pages and their twins; its text appears nowhere, not even in a
    payload's bytes."""
    from langgraph.checkpoint.base import empty_checkpoint
    from pydantic import BaseModel, SecretStr
    from starlette.testclient import TestClient

    from threadloom import Saver
    from threadloom.viewer.app import create_app
    from threadloom.viewer.source import Source

    class Creds(BaseModel):
        user: str
        token: SecretStr

    path = tmp_path / "secrets.db"
    with Saver.from_conn_string(str(path)) as saver:
        made = empty_checkpoint()
        made["channel_values"] = {
            "creds": Creds(user="ada", token=SecretStr("hunter2")),
            "key": SecretStr("hunter3"),
        }
        made["channel_versions"] = {"creds": 1, "key": 1}
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        saver.put(config, made, {"source": "loop", "step": 1}, {})
    with TestClient(create_app(Source(path), allowed_hosts=["testserver"])) as client:
        head = head_of(client, "t")
        base = f"/threads/t/checkpoints/{head}"
        channels = {c["channel"]: c for c in client.get(base + ".json").json()["channels"]}
        assert channels["key"]["value"] == {"$type": "pydantic.types.SecretStr", "$masked": True}
        assert channels["creds"]["value"]["$kwargs"]["token"]["$masked"] is True
        for url in (base, base + ".json", base + "/raw", base + "/raw.json"):
            text = client.get(url).text
            assert "hunter" not in text and "masked" in text, url
            assert "$v" not in text, url  # no payload as (base64) bytes either


def test_split_values_are_read_only_when_asked(tmp_path: Path) -> None:
    """A value split into parts (over 256 KiB: a channel's blob, a pending write) is shown
    by its size on the transcript, checkpoint, raw and document pages, none of which
    fetches a part; `?whole=1` on the last three joins and decodes it, behind a link."""
    from langgraph.checkpoint.base import empty_checkpoint
    from starlette.testclient import TestClient

    from threadloom import Saver
    from threadloom.protocol import PARTS
    from threadloom.viewer.app import create_app
    from threadloom.viewer.source import Source

    path = tmp_path / "split.db"
    with Saver.from_conn_string(str(path)) as saver:
        made = empty_checkpoint()
        made["channel_values"] = {"doc": "x" * 600_000, "small": 1}
        made["channel_versions"] = {"doc": 1, "small": 1}
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        done = saver.put(config, made, {"source": "loop", "step": 1}, {})
        saver.put_writes(done, [("doc", "y" * 300_000)], task_id="task-1")
    source = Source(path)
    asked: list[str] = []
    find = source.store.view.find

    def recorded(collection: str, **options: Any) -> Any:
        asked.append(collection)
        return find(collection, **options)

    source.store.view.find = recorded  # type: ignore[method-assign]
    with TestClient(create_app(source, allowed_hosts=["testserver"])) as client:
        head = head_of(client, "t")
        base = f"/threads/t/checkpoints/{head}"
        ref = next(
            c["ref"] for c in client.get(base + ".json").json()["channels"] if c["channel"] == "doc"
        )
        asked.clear()
        pending = client.get("/threads/t.json").json()["pending"]
        assert pending["writes"][0]["value"] == {"$split": 2, "bytes": 300_005}
        shown = client.get(base + ".json").json()
        doc = next(c for c in shown["channels"] if c["channel"] == "doc")
        assert doc["value"] == {"$split": 3, "bytes": 600_005} and doc["bytes"] == 600_005
        assert shown["split"] == {"values": 2, "bytes": 900_010} and shown["whole"] is False
        raw = client.get(base + "/raw.json").json()
        assert PARTS not in {d["collection"] for d in raw["documents"]}
        assert raw["split"] == {"values": 2, "bytes": 900_010}
        document = client.get(f"/threads/t/documents/{ref}.json").json()
        assert document["document"]["decoded"]["value"] == {"$split": 3, "bytes": 600_005}
        for url in (base, base + "/raw", f"/threads/t/documents/{ref}"):
            note = re.search(r'<p class="split[^>]*>.*?href="([^"]+)"', client.get(url).text)
            assert note and html.unescape(note.group(1)) == url + "?whole=1", url
        assert PARTS not in asked

        for url in (base, base + "/raw", f"/threads/t/documents/{ref}"):
            assert 'class="split' not in client.get(url + "?whole=1").text, url
        whole = client.get(base + ".json?whole=1").json()
        doc = next(c for c in whole["channels"] if c["channel"] == "doc")
        assert doc["value"]["chars"] == 600_000 and whole["split"] is None
        assert whole["pending"]["writes"][0]["value"]["chars"] == 300_000
        raw = client.get(base + "/raw.json?whole=1").json()
        decoded = [v for d in raw["documents"] for v in d["decoded"].values()]
        assert {600_000, 300_000} <= {v.get("chars") for v in decoded if isinstance(v, dict)}
        document = client.get(f"/threads/t/documents/{ref}.json?whole=1").json()
        assert document["document"]["decoded"]["value"]["chars"] == 600_000
        assert PARTS in asked


def test_the_store_search_finds_items_put_with_vectors(tmp_path: Path) -> None:
    """The viewer's word search finds items an application put through a Store with an
    embedding index (they used to have no text entry: "No item shares a word")."""
    from starlette.testclient import TestClient

    from tests.store._hashing_embedder import HashingEmbedder
    from threadloom import Store
    from threadloom.viewer.app import create_app
    from threadloom.viewer.source import Source

    path = tmp_path / "vectors.db"
    index: Any = {"dims": 32, "embed": HashingEmbedder(32), "fields": ["text"]}
    with Store.from_conn_string(path, index=index) as store:
        store.put(("acme", "facts"), "f-tea", {"text": "Ada prefers tea in Lisbon"})
        store.put(("acme", "facts"), "f-bike", {"text": "Bob rides a bicycle"})
    with TestClient(create_app(Source(path), allowed_hosts=["testserver"])) as client:
        found = client.get("/store.json?q=tea+Lisbon").json()["search"]["results"]
        assert [r["key"] for r in found] == ["f-tea"] and found[0]["score"] > 0


def test_the_thread_list_and_header_show_each_threads_status(tmp_path: Path) -> None:
    """The list and the transcript header show idle, interrupted, error and running (a
    live lease), in HTML and in the twins; `?status=` filters the list and a bad one is
    a 400."""
    from langgraph.types import Command
    from starlette.testclient import TestClient

    from tests.engine.test_graphs import failing_fan_graph, review_graph
    from threadloom import Saver
    from threadloom.viewer.app import create_app
    from threadloom.viewer.source import Source

    path = tmp_path / "status.db"
    draft = {"draft": "v1", "verdicts": [], "published": False}
    with Saver.from_conn_string(str(path)) as saver:
        review = review_graph().compile(checkpointer=saver)
        for name in ("waiting", "held", "done"):
            review.invoke(draft, {"configurable": {"thread_id": name}})
        for answer in ("a", "b"):
            review.invoke(Command(resume=answer), {"configurable": {"thread_id": "done"}})
        fan = failing_fan_graph({"a": 0, "b": 0}, {"b"}).compile(checkpointer=saver)
        with pytest.raises(RuntimeError, match="b failed"):
            fan.invoke({"log": []}, {"configurable": {"thread_id": "failed"}})
        with (
            saver.lease("held"),
            TestClient(create_app(Source(path), allowed_hosts=["testserver"])) as client,
        ):
            listed = client.get("/threads.json").json()
            assert {t["thread_id"]: t["status"] for t in listed["threads"]} == {
                "waiting": "interrupted",
                "held": "running",
                "done": "idle",
                "failed": "error",
            }
            assert listed["status"] is None
            only = client.get("/threads.json?status=interrupted").json()
            assert only["status"] == "interrupted"
            assert [t["thread_id"] for t in only["threads"]] == ["waiting"]
            found = client.get("/threads.json?status=running&q=hel").json()["threads"]
            assert [t["thread_id"] for t in found] == ["held"]
            assert (
                client.get("/threads.json?q=a&status=error").json()["threads"][0]["thread_id"]
                == "failed"
            )
            assert client.get("/threads.json?status=paused").status_code == 400
            page = client.get("/threads").text
            assert '<span class="badge bad"' in page and '<span class="badge add"' in page
            assert '<option value="error">' in page
            assert 'value="interrupted" selected' in client.get("/threads?status=interrupted").text
            for thread_id, status in (("failed", "error"), ("held", "running")):
                twin = client.get(f"/threads/{thread_id}.json").json()
                assert twin["thread"]["status"] == status
                header = client.get(f"/threads/{thread_id}").text.split("</dl>")[0]
                assert f">{status}</span></dd>" in header
