"""The pieces under the migration, each alone: what a path is, naas's codec, redaction,
divergence, and the Store's dated create-only import."""

from __future__ import annotations

import secrets
import sqlite3
import urllib.parse
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.store.base import Item

from tests.store._hashing_embedder import HashingEmbedder
from threadloom import Saver, Store
from threadloom.engine.foreign import decode
from threadloom.engine.format.recognize import Found, identify, recognize
from threadloom.errors import LangGraphStoreFileError, NaasDocumentsFileError
from threadloom.langgraph.migration.urls import redact, scrub
from threadloom.protocol.lineage import diverged


def test_identify_names_each_kind_of_file(tmp_path: Path) -> None:
    """identify tells a threadloom file, a SqliteSaver (with or without a Store), a
    SqliteStore, a naas document file, another app's database and a new path apart."""
    from langgraph.store.sqlite import SqliteStore

    saver_file = tmp_path / "saver.sqlite"
    with SqliteSaver.from_conn_string(str(saver_file)) as saver:
        saver.setup()
    assert identify(str(saver_file)).found is Found.SQLITE_SAVER
    assert identify(str(saver_file)).store is False
    conn = sqlite3.connect(saver_file, isolation_level=None)
    SqliteStore(conn).setup()
    conn.close()
    assert identify(str(saver_file)).store is True
    store_file = tmp_path / "store.sqlite"
    conn = sqlite3.connect(store_file, isolation_level=None)
    SqliteStore(conn).setup()
    conn.close()
    assert identify(str(store_file)).found is Found.SQLITE_STORE
    with pytest.raises(LangGraphStoreFileError, match="--store-source"):
        recognize(str(store_file))
    naas = tmp_path / "documents.sqlite"
    with sqlite3.connect(naas) as c:
        c.execute("CREATE TABLE abi_document_collections (namespace, name, spec)")
        c.execute("CREATE TABLE abi_documents (namespace, collection, id, data, c, u, v)")
    assert identify(str(naas)).found is Found.NAAS_DOCUMENTS
    with pytest.raises(NaasDocumentsFileError, match="--from naas-sqlite"):
        recognize(str(naas))
    with Saver.from_conn_string(str(tmp_path / "memory.db")):
        pass
    assert identify(str(tmp_path / "memory.db")).found is Found.THREADLOOM
    assert identify(str(tmp_path / "new.db")).found is Found.NEW
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as c:
        c.execute("CREATE TABLE notes (x)")
    assert identify(str(other)).description.endswith("(tables: notes)")


def test_the_naas_codec_is_decoded_as_the_service_does() -> None:
    """Tagged bytes and datetimes, `$`-escaped keys and out-of-range integers decode as
    naas's document_codec.decode returns them."""
    stored = {
        "payload": {"$t": "bytes", "$v": "AAEC"},
        "at": {"$t": "datetime", "$v": "2026-11-29T14:24:49.915732+00:00"},
        "$$kind": [1, 2.0, 2.5, {"$$t": "x"}],
    }
    assert decode(stored) == {
        "payload": b"\x00\x01\x02",
        "at": datetime(2026, 11, 29, 14, 24, 49, 915732, tzinfo=timezone.utc),
        "$kind": [1, 2, 2.5, {"$t": "x"}],
    }
    assert type(decode(2.0)) is float and type(decode(2**64)) is float  # as naas decodes them


@pytest.mark.parametrize(
    ("template", "shown"),
    [
        ("postgresql://ada:{q}@db:5432/app", "postgresql://ada:***@db:5432/app"),
        ("postgres://db/app?user=ada&password={q}", "postgres://db/app?user=ada&password=***"),
        ("host=db password={p} dbname=app", "host=db password=*** dbname=app"),
        ("postgresql://ada@db/app", "postgresql://ada@db/app"),
    ],
)
def test_urls_are_shown_without_their_password(template: str, shown: str) -> None:
    """A URL's password (user info, query, keyword string) is shown as ***, and driver
    text quoting the URL or the password (raw or decoded) is scrubbed."""
    password = secrets.token_urlsafe(9) + "/x"  # made up per run; "/" is quoted in URLs
    quoted = urllib.parse.quote(password, safe="")
    url = template.format(q=quoted, p=password)
    assert redact(url) == shown
    text = scrub(f"failed for {url}:\n password '{password}' ({quoted}) rejected", url)
    if template == shown:
        return  # no password to scrub
    assert password not in text and quoted not in text and "\n" not in text
    assert text.startswith(f"failed for {shown}")


def test_divergence_follows_the_target_lineage() -> None:
    """A target that continued the source, or holds part of it, has not diverged; one
    that went on from an older checkpoint of it has."""

    def row(cid: str, parent: str | None = None) -> dict[str, object]:
        return {"checkpoint_ns": "", "checkpoint_id": cid, "parent_id": parent}

    ours = [row("1"), row("2", "1"), row("3", "2")]
    assert not diverged(ours, [row("1"), row("2", "1")])  # a partial copy
    assert not diverged(ours, [*ours, row("4", "3")])  # continued
    assert diverged(ours, [row("1"), row("2", "1"), row("9", "2")])  # went on from 2
    assert not diverged(ours, [])


def test_store_import_keeps_times_and_is_create_only(tmp_path: Path) -> None:
    """import_items writes items with their own times, embeds them with the store's
    index, leaves a stored key as it is, and returns how many it wrote."""
    embedder = HashingEmbedder()
    index = {"dims": embedder.dims, "embed": embedder, "fields": ["text"]}
    then = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)
    items = [
        Item(
            namespace=("u", "ada"),
            key=f"k{i}",
            value={"text": f"fact number {i}"},
            created_at=then,
            updated_at=then + timedelta(days=i),
        )
        for i in range(3)
    ]
    with Store.from_conn_string(str(tmp_path / "m.db"), index=index) as store:
        store.put(("u", "ada"), "k0", {"text": "already here"})
        assert store.import_items(items) == 2
        assert store.import_items(items) == 0
        assert store.get(("u", "ada"), "k0").value == {"text": "already here"}
        copied = store.get(("u", "ada"), "k2")
        assert copied.created_at == then and copied.updated_at == then + timedelta(days=2)
        assert store.search(("u",), query="fact number 1")[0].key == "k1"
        naive = Item(
            namespace=("u",), key="n", value={}, created_at=then.replace(tzinfo=None),
            updated_at=then.replace(tzinfo=None),
        )  # fmt: skip
        store.import_items([naive])
        assert store.get(("u",), "n").created_at == then
