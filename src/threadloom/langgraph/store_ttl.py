"""The Store's expiry: sweeping items whose TTL ran out, by hand or on a schedule
(adapter layer, beside `store.py`).

`Sweeping` is the sync stores' part (a daemon thread); `AsyncSweeping` the async
store's (a task on the event loop, each sweep on a worker thread), whose methods are
all coroutines, as AsyncSqliteStore's are. One sweep deletes in the engine
(`engine/items/rows.py`); a background sweep logs a failure and goes on.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from langgraph.store.base import TTLConfig

from threadloom.engine import File
from threadloom.engine.items import Items

log = logging.getLogger("threadloom.langgraph.store")


class _Sweeps:
    """What both kinds share: one sweep, and one logged sweep."""

    file: File
    items: Items
    ttl_config: TTLConfig | None

    def _sweep(self) -> int:
        return self.items.sweep()

    def _sweep_logged(self) -> None:
        """One sweep of a background sweeper: logged, never raised (one failure, a busy
        file, is not the last sweep)."""
        try:
            swept = self._sweep()
            if swept:
                log.info("%s: swept %d expired store items", self.file.path, swept)
        except Exception:
            log.exception("%s: the TTL sweep failed", self.file.path)

    def _minutes(self, given: float | None) -> float:
        return float(given or (self.ttl_config or {}).get("sweep_interval_minutes") or 5)

    async def asweep_ttl(self) -> int:
        """Delete the items whose TTL ran out, on a worker thread; return how many."""
        return await asyncio.to_thread(self._sweep)


class Sweeping(_Sweeps):
    """Sweeps of a sync store: `sweep_ttl()` and a sweeper thread."""

    _sweeper: threading.Thread | None = None
    _stop: threading.Event

    def _init_sweeping(self) -> None:
        self._sweeper = None
        self._stop = threading.Event()

    def sweep_ttl(self) -> int:
        """Delete the items whose TTL ran out; return how many."""
        return self._sweep()

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> threading.Thread:
        """Sweep expired items every `sweep_interval_minutes` (default: the TTLConfig's
        `sweep_interval_minutes`, else 5) on a daemon thread until `stop_ttl_sweeper`."""
        minutes = self._minutes(sweep_interval_minutes)
        if self._sweeper is not None and self._sweeper.is_alive():
            return self._sweeper
        self._stop.clear()

        def loop() -> None:
            while not self._stop.wait(minutes * 60):
                self._sweep_logged()

        self._sweeper = threading.Thread(target=loop, name="threadloom-ttl-sweeper", daemon=True)
        self._sweeper.start()
        return self._sweeper

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper thread; True when it stopped within `timeout` seconds."""
        self._stop.set()
        if self._sweeper is None:
            return True
        self._sweeper.join(timeout)
        stopped = not self._sweeper.is_alive()
        if stopped:
            self._sweeper = None
        return stopped

    def _stop_sweeping(self) -> None:
        self.stop_ttl_sweeper(5)


class AsyncSweeping(_Sweeps):
    """Sweeps of the async store: every method a coroutine, the sweeper a task."""

    _task_sweeper: asyncio.Task[None] | None = None

    def _init_sweeping(self) -> None:
        self._task_sweeper = None

    async def sweep_ttl(self) -> int:
        """Delete the items whose TTL ran out, on a worker thread; return how many."""
        return await asyncio.to_thread(self._sweep)

    async def start_ttl_sweeper(
        self, sweep_interval_minutes: float | None = None
    ) -> asyncio.Task[None]:
        """Sweep expired items every `sweep_interval_minutes` (default: the TTLConfig's,
        else 5) on the event loop, each sweep on a worker thread; as LangGraph's async
        stores, a task to await or cancel (or `stop_ttl_sweeper`)."""
        if self._task_sweeper is not None and not self._task_sweeper.done():
            return self._task_sweeper
        minutes = self._minutes(sweep_interval_minutes)

        async def loop() -> None:
            while True:
                await asyncio.sleep(minutes * 60)
                await asyncio.to_thread(self._sweep_logged)

        self._task_sweeper = asyncio.create_task(loop())
        return self._task_sweeper

    async def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Cancel the sweeper task; True when it ended within `timeout` seconds."""
        task, self._task_sweeper = self._task_sweeper, None
        if task is None or task.done():
            return True
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=timeout)
        return bool(done)

    def _stop_sweeping(self) -> None:
        task, self._task_sweeper = self._task_sweeper, None
        if task is not None:
            task.cancel()
