"""Run naas-abi-core's real document service on NATS, for the tests' naas venv.

Runs inside the naas virtual environment (tests/nats/_peers.py builds it), never in
threadloom's: it wires the engine's own classes the way SPEC §9 describes, with no
engine around them: an SQLite document store, the engine's document root, and the
NATS primary adapter that serves `abi.svc.document.v1.*`.

Usage: python naas_document_service.py NATS_URL SQLITE_PATH, with the JWT secret in
the environment variable NAAS_JWT_SECRET. Prints "ready" once the service is
subscribed, then serves until SIGTERM/SIGINT or until its standard input closes (the
test process died), and stops the service and the store.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading

import nats
import nats.errors
from naas_abi_core.services.document.adapters.primary.document__primary_adapter__NATS import (
    DocumentPrimaryAdapterNATS,
)
from naas_abi_core.services.document.adapters.secondary.DocumentSecondaryAdapterSQLite import (
    DocumentSecondaryAdapterSQLite,
)
from naas_abi_core.services.document.DocumentService import DocumentService

# How long a stopping service may take to answer the calls it has received.
STOP_SECONDS = 5.0


def _set_when_stdin_closes(event: asyncio.Event) -> None:
    """Set `event` once standard input reaches end of file (a daemon thread waits)."""
    loop = asyncio.get_running_loop()

    def wait() -> None:
        # os.read, not sys.stdin: a buffered reader's lock held by this thread would
        # abort the interpreter's shutdown.
        while os.read(sys.stdin.fileno(), 65536):
            pass
        loop.call_soon_threadsafe(event.set)

    threading.Thread(target=wait, name="stdin-watch", daemon=True).start()


async def serve(url: str, sqlite_path: str, jwt_secret: str) -> None:
    """Serve the document service until asked to stop."""
    # NAAS_SQLITE_TIMEOUT: the seconds the backend waits for SQLite's lock (naas's default
    # 5 s unless a test asks for less, to see a busy backend's STORAGE_ERROR at once).
    timeout = float(os.environ.get("NAAS_SQLITE_TIMEOUT") or 5.0)
    adapter = DocumentSecondaryAdapterSQLite(sqlite_path, timeout=timeout)
    primary = DocumentPrimaryAdapterNATS(DocumentService._for_engine(adapter), jwt_secret)
    stop = asyncio.Event()

    async def closed() -> None:
        stop.set()

    # Without its broker the service has nothing to do: a lost connection ends it.
    connection = await nats.connect(
        url, name="naas-document-service", allow_reconnect=False, closed_cb=closed
    )
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    _set_when_stdin_closes(stop)
    try:
        await primary.start(connection)
        # The subscriptions exist on the server once a flush round-trips.
        await connection.flush()
        print("ready", flush=True)
        await stop.wait()
    finally:
        try:
            # Drains the endpoints: calls already received are answered first.
            await asyncio.wait_for(primary.stop(), STOP_SECONDS)
        except (nats.errors.ConnectionClosedError, asyncio.TimeoutError):
            pass  # the broker is gone (or going): there is nobody left to answer
        finally:
            await connection.close()
            adapter.close()


def main() -> int:
    """Parse the arguments and serve."""
    if len(sys.argv) != 3 or not os.environ.get("NAAS_JWT_SECRET"):
        print(
            "usage: NAAS_JWT_SECRET=... naas_document_service.py NATS_URL SQLITE_PATH",
            file=sys.stderr,
        )
        return 2
    asyncio.run(serve(sys.argv[1], sys.argv[2], os.environ["NAAS_JWT_SECRET"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
