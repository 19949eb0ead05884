"""`threadloom migrate`: copy threads from a SqliteSaver, PostgresSaver or naas into a file.

The kinds: `sqlite` (a SqliteSaver/AsyncSqliteSaver file), `postgres` (`--source-url` or
`$POSTGRES_URL`), `naas-sqlite` (the naas document service's SQLite file) and `nats` (the
engine's document service, what `threadloom import` does). With `--to postgres` the other
way: the threadloom file SOURCE into LangGraph's PostgresSaver tables at `--target-url`
(or `$POSTGRES_URL`). A dry run unless `--apply`; the report is naas's `migrate-memory`
JSON with `--json` (docs/cli.md).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from typing import Any

from threadloom.cli.bar import shown
from threadloom.errors import MigrationError

HELP = (
    "copy threads from a SqliteSaver file, a PostgresSaver database or naas "
    "into the file, or out of it to PostgreSQL with --to postgres (dry run unless --apply)"
)

#: The choices of `--from`: the migration registry's kinds, then `nats`, which this
#: command reads itself (over threadloom.nats, above the wing). Written out because
#: building the parser must not load the engine the registry imports; tests/test_cli.py
#: fails when they differ from `threadloom.langgraph.migration.KINDS`.
KINDS = ("sqlite", "postgres", "naas-sqlite", "nats")
#: The choices of `--to` (`threadloom.langgraph.migration.TARGETS`, written out as KINDS).
TARGETS = ("postgres",)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `threadloom migrate`."""
    from threadloom.cli._transfer import SECRET_ENV, TOKEN_ENV
    from threadloom.protocol import DEFAULT_AGENT_ID, DEFAULT_NAMESPACE

    parser.add_argument(
        "source",
        nargs="?",
        metavar="SOURCE",
        help="the file to copy from: a SqliteSaver file or a naas documents.sqlite (with "
        "--to: the threadloom file)",
    )
    parser.set_defaults(usage_error=parser.error)
    parser.add_argument(
        "--db",
        metavar="FILE",
        help="the threadloom file (created by --apply); with --to, the file to copy out of",
    )
    parser.add_argument(
        "--to",
        choices=TARGETS,
        help="copy out of the threadloom file instead, into LangGraph's PostgresSaver tables",
    )
    parser.add_argument(
        "--target-url",
        metavar="URL",
        help="--to postgres: postgresql://... (or set POSTGRES_URL)",
    )
    parser.add_argument(
        "--from",
        dest="kind",
        choices=KINDS,
        help="the kind of source (default: what SOURCE or the URL looks like; a source of "
        "another kind is refused)",
    )
    parser.add_argument(
        "--source-url",
        metavar="URL",
        help="postgresql://... (or set POSTGRES_URL with --from postgres) or nats://HOST:PORT",
    )
    parser.add_argument(
        "--thread",
        action="append",
        dest="threads",
        metavar="T",
        help="a thread id (repeatable; default: every thread of the source)",
    )
    parser.add_argument(
        "--namespace",
        default=DEFAULT_NAMESPACE,
        help="the scope's namespace in the file, and in a naas source (default: %(default)s)",
    )
    parser.add_argument(
        "--agent-id",
        default=DEFAULT_AGENT_ID,
        help="the scope's agent id in the file, and in a naas source (default: %(default)s)",
    )
    parser.add_argument(
        "--apply", action="store_true", help="write (default: a dry run that only reads)"
    )
    parser.add_argument(
        "--include-diverged",
        action="store_true",
        help="also write threads whose target has diverged",
    )
    parser.add_argument(
        "--store",
        action="store_true",
        help="also copy the LangGraph Store's items (SqliteStore, PostgresStore; with --to: "
        "the file's Store into PostgresStore)",
    )
    parser.add_argument(
        "--store-source",
        metavar="PATH|URL",
        help="where the Store is (default: the source)",
    )
    parser.add_argument(
        "--no-vacuum",
        action="store_true",
        help="leave a new target as written (by default a migration that creates the file "
        "ends with VACUUM: no free pages, dense b-trees)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--token", help=f"--from nats: a service token (or set {TOKEN_ENV})")
    parser.add_argument(
        "--jwt-secret", help=f"--from nats: the secret that signs tokens (or set {SECRET_ENV})"
    )
    parser.add_argument(
        "--identity", default="api", help="--from nats: the token's subject (default: api)"
    )


def run(args: argparse.Namespace) -> int:
    """Run a migration; print the report; 1 when a thread conflicted."""
    from threadloom.langgraph.migration import detect_kind

    if args.to:
        return _out(args)
    if args.target_url:
        args.usage_error("--target-url names the database of --to postgres; add --to postgres")
    if not args.db:
        args.usage_error("the following arguments are required: --db")
    source = args.source_url or args.source
    if args.source_url and args.source:
        raise MigrationError("give either SOURCE or --source-url, not both")
    if args.kind == "postgres" and not source:
        source = os.environ.get("POSTGRES_URL")
    if args.store and args.kind == "nats":
        raise MigrationError("--store reads a SqliteStore or PostgresStore, not NATS")
    kind = detect_kind(source, args.kind)
    if args.no_vacuum and kind == "nats":
        args.usage_error("--no-vacuum: a migration --from nats never vacuums; leave it out")
    with shown("threads", quiet=args.json) as progress:
        if kind == "nats":
            found = _from_nats(args, source or "", progress)
        else:
            found = _migrate(args, source, kind, progress)
    if args.json:
        print(json.dumps(found, indent=2))
    else:
        _print(found)
    return 1 if found["conflicts"] else 0


def _out(args: argparse.Namespace) -> int:
    """`--to postgres`: the file's threads into LangGraph's PostgresSaver tables."""
    from threadloom.langgraph.migration.outbound import migrate_out

    for given, name in ((args.kind, "--from"), (args.source_url, "--source-url"),
                        (args.store_source, "--store-source")):  # fmt: skip
        if given:
            args.usage_error(f"{name} names a source to migrate in; --to reads the file SOURCE")
    if args.no_vacuum:
        args.usage_error("--no-vacuum is about a file migrated into; --to writes PostgreSQL")
    if args.source and args.db and args.source != args.db:
        args.usage_error(f"two files given: {args.source} and --db {args.db}; give one")
    path = args.source or args.db
    if not path:
        args.usage_error("give the threadloom file to copy out of: SOURCE or --db FILE")
    with shown("threads", quiet=args.json) as progress:
        report = migrate_out(
            path,
            args.target_url,
            threads=args.threads,
            apply=args.apply,
            namespace=args.namespace,
            agent_id=args.agent_id,
            include_diverged=args.include_diverged,
            store=args.store,
            progress=progress,
            refuse_unknown=True,
        )
    found = report.as_dict()
    if args.json:
        print(json.dumps(found, indent=2))
    else:
        _print(found)
    return 1 if found["conflicts"] else 0


def _migrate(args: argparse.Namespace, source: str | None, kind: str, progress: Any) -> Any:
    from threadloom.langgraph.migration import migrate

    report = migrate(
        source,
        args.db,
        kind=kind,
        threads=args.threads,
        apply=args.apply,
        namespace=args.namespace,
        agent_id=args.agent_id,
        include_diverged=args.include_diverged,
        store=args.store,
        store_source=args.store_source,
        progress=progress,
        refuse_unknown=True,
        vacuum=not args.no_vacuum,
    )
    return report.as_dict()


def _from_nats(args: argparse.Namespace, url: str, progress: Any) -> dict[str, Any]:
    """`threadloom import`'s run, reported in migrate's shape."""
    from threadloom.cli._transfer import transfer
    from threadloom.langgraph.migration.urls import redact

    options = argparse.Namespace(
        db=args.db,
        url=url,
        threads=args.threads,
        namespace=args.namespace,
        agent_id=args.agent_id,
        local_namespace=args.namespace,
        local_agent_id=args.agent_id,
        token=args.token,
        jwt_secret=args.jwt_secret,
        identity=args.identity,
        apply=args.apply,
        include_diverged=args.include_diverged,
    )
    if not args.apply and not os.path.exists(args.db):
        # A dry run never creates the target: compare with an empty file instead.
        with tempfile.TemporaryDirectory(prefix="threadloom-migrate-") as scratch:
            options.db = os.path.join(scratch, "empty.db")
            found = transfer(options, "from", progress)
    else:
        found = transfer(options, "from", progress)
    seen = {thread["thread_id"] for thread in found.pop("per_thread", [])}
    _schema_1_over_nats(args, url, found, seen)
    found["source"] = {"kind": "nats", "url": redact(url), **found["source"]}
    found["source"].pop("schema", None)
    found["target"] = {
        "path": args.db,
        "namespace": args.namespace,
        "agent_id": args.agent_id,
        "schema": 2,
    }
    found.setdefault("not_found", [])
    return found


def _schema_1_over_nats(
    args: argparse.Namespace, url: str, found: dict[str, Any], seen: set[str]
) -> None:
    """Schema-1 checkpoints the service holds (`langgraph_*_v1`, which import does not
    read): restored with their writes and written as schema 2 through a Saver, as from a
    naas file; counted into `found`."""
    import asyncio

    from threadloom.cli._transfer import credentials
    from threadloom.langgraph.migration.copier import Copier
    from threadloom.langgraph.migration.sources import history_of
    from threadloom.langgraph.migration.urls import redact
    from threadloom.langgraph.saver import Saver
    from threadloom.nats import DocumentClient
    from threadloom.nats.transfer import fetch_thread, target_threads
    from threadloom.protocol import CHECKPOINTS, CHECKPOINTS_V1, WRITES_V1

    given = credentials(args)
    scope = {"namespace": args.namespace, "agent_id": args.agent_id}
    if args.apply:
        saver: Saver | None = Saver(args.db, **scope)
    elif os.path.exists(args.db):
        saver = Saver(args.db, readonly=True, **scope)
    else:
        saver = None
    copier = Copier(saver, apply=args.apply, include_diverged=args.include_diverged)

    async def run() -> None:
        async with await DocumentClient.connect(url, args.namespace, given) as client:
            names = args.threads or await target_threads(client, args.agent_id, CHECKPOINTS_V1)
            for thread_id in names:
                docs = await fetch_thread(
                    client, args.agent_id, thread_id, [CHECKPOINTS, CHECKPOINTS_V1, WRITES_V1]
                )
                history = history_of(thread_id, docs, redact(url))
                history.documents = []  # schema 2 came in through import
                if not history.checkpoints:
                    continue
                entry = copier.copy(history)
                if thread_id not in seen:
                    seen.add(thread_id)
                    found["threads"] += 1
                for name in ("checkpoints", "writes", "copied", "present", "missing"):
                    found[name] += getattr(entry, name)
                found["writes_copied"] = found.get("writes_copied", 0) + entry.writes_copied
                if entry.diverged and thread_id not in found["diverged"]:
                    found["diverged"].append(thread_id)
                if entry.skipped and thread_id not in found["skipped"]:
                    found["skipped"].append(thread_id)
                if entry.conflict is not None:
                    found["conflicts"].append(entry.conflict)

    try:
        asyncio.run(run())
    finally:
        if saver is not None:
            saver.close()


def _print(found: dict[str, Any]) -> None:
    source = found["source"]
    where = source.get("path") or source.get("url")
    into = found.get("target") or {}
    to = f" to {into['kind']} {into['url']}" if into.get("url") else ""
    print(
        f"{found['mode']}: {found['threads']} threads from {source['kind']} {where}{to}: "
        f"{found['checkpoints']} checkpoints ({found['present']} present, "
        f"{found['missing']} missing), {found['copied']} copied; {found['writes']} pending writes"
    )
    for name in ("diverged", "skipped", "not_found"):
        if found.get(name):
            shown = ", ".join(found[name][:10]) + (" ..." if len(found[name]) > 10 else "")
            print(f"  {name.replace('_', ' ')}: {shown}")
    for conflict in found["conflicts"]:
        print(f"conflict: {conflict}")
    store = found.get("store")
    if store:
        print(
            f"store: {store['items']} items in {store['namespaces']} namespaces "
            f"({store['present']} present, {store['missing']} missing), {store['copied']} copied"
        )
        if store.get("unembedded"):
            target = (found.get("target") or {}).get("path") or "FILE"
            print(
                f"store: {store['unembedded']} items without embeddings: vector search finds "
                f"them once embedded (threadloom reembed {target} --embed MODULE:NAME "
                "--dims N --apply)"
            )
    if found.get("vacuum_error"):
        print(f"not vacuumed (the migration is complete): {found['vacuum_error']}")
    vacuumed = found.get("vacuumed")
    if vacuumed:
        print(
            f"vacuumed: {vacuumed['bytes_before']} -> {vacuumed['bytes_after']} bytes "
            "(the new file rewritten without free pages)"
        )
    if found["mode"] == "dry-run" and (found["missing"] or (store and store["missing"])):
        print("nothing was written: rerun with --apply to copy what is missing")
