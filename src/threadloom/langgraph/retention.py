"""Retention on the savers: a policy, one run of it, a background sweeper (docs/retention.md).

Adapter layer, no SQL: `RetentionPolicy` checks what it is given, the engine
(`engine/conversations/retention.py`) decides and deletes, one transaction per thread. naas's
`prune-memory` semantics are the floor: keep the last `keep_last` checkpoints of each
thread (the head, the subgraph checkpoints they link to, and the ancestors their
DeltaChannels rebuild from stay), collect the values that orphans once older than
`min_age`, and, beyond naas, delete threads idle longer than `max_age` whole.
LangGraph's own `prune(thread_ids, strategy)` stays as it is beside it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from threadloom.core.lazy import lazy_exports
from threadloom.errors import InvalidArgumentError, InvalidValueError
from threadloom.protocol.constants import RETENTION_GRACE_SECONDS

if TYPE_CHECKING:
    from threadloom.engine import CheckpointStore
    from threadloom.engine.conversations import (
        Progress,
        RetentionReport,
        ThreadExpired,
        ThreadPruned,
    )

__all__ = [
    "Retention",
    "RetentionPolicy",
    "RetentionReport",
    "ThreadExpired",
    "ThreadPruned",
    "parse_duration",
]

log = logging.getLogger("threadloom.langgraph.retention")

#: The engine's records this module exports, loaded on first use (PEP 562): a saver that
#: never applies a policy does not hold the engine's retention code (peak RSS).
__getattr__ = lazy_exports(
    __name__,
    {
        name: ("threadloom.engine.conversations", name)
        for name in ("RetentionReport", "ThreadExpired", "ThreadPruned")
    },
)


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([smhdw]?)\s*", re.IGNORECASE)


def parse_duration(text: str) -> float:
    """Seconds in a duration such as `90`, `90s`, `15m`, `12h`, `30d` or `2w`.

    Raises:
        InvalidValueError: not a duration.
    """
    found = _DURATION.fullmatch(text) if isinstance(text, str) else None
    if found is None:
        raise InvalidValueError(
            f"{text!r} is not a duration; give seconds, or a number with s, m, h, d or w "
            "(e.g. 90s, 15m, 12h, 30d)"
        )
    return float(found.group(1)) * _UNITS[(found.group(2) or "s").lower()]


def _seconds(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        hint = f"parse_duration({value!r})" if isinstance(value, str) else "a number of seconds"
        raise InvalidArgumentError(
            f"{name} must be seconds (an int or float), not {type(value).__name__}; pass {hint}"
        )
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidValueError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
    return seconds


@dataclass(frozen=True)
class RetentionPolicy:
    """What retention keeps.

    Attributes:
        keep_last: checkpoints kept per thread (the newest root checkpoints, with what
            they need); None keeps every checkpoint (only `max_age` applies). Default 20,
            as naas's `prune-memory`.
        max_age: seconds a thread may stay idle (no write) before it is deleted whole
            (`parse_duration("30d")`); None (default) never. The grace is a floor here
            too: a thread written less than 60 s ago (on the real clock) is never idle.
        min_age: values nothing references any more are collected only once they are
            this old (seconds, default 60, naas's `--min-age`). The file's grace (60 s)
            is a floor: a smaller `min_age` is accepted and the grace applies.

    Raises:
        InvalidArgumentError: a value of the wrong type.
        InvalidValueError: a policy that makes no sense (`keep_last` below 1, negative
            ages, `max_age` shorter than `min_age`, nothing to do).
    """

    keep_last: int | None = 20
    max_age: float | None = None
    min_age: float = RETENTION_GRACE_SECONDS

    def __post_init__(self) -> None:
        keep = self.keep_last
        if keep is not None:
            if isinstance(keep, bool) or not isinstance(keep, int):
                raise InvalidArgumentError(
                    f"keep_last must be an int (checkpoints kept per thread) or None, not "
                    f"{type(keep).__name__}"
                )
            if keep < 1:
                raise InvalidValueError(
                    f"keep_last must be at least 1 (the head is always kept), got {keep}; "
                    "pass keep_last=None to keep every checkpoint, or delete the thread"
                )
        object.__setattr__(self, "min_age", _seconds(self.min_age, "min_age"))
        if self.max_age is not None:
            age = _seconds(self.max_age, "max_age")
            if age <= 0:
                raise InvalidValueError(
                    "max_age must be more than 0 seconds (it would delete every thread); "
                    "pass None to delete no thread for being idle"
                )
            if age < self.min_age:
                raise InvalidValueError(
                    f"max_age ({age:g} s) is shorter than min_age ({self.min_age:g} s): a "
                    "thread deleted whole takes its young values with it; give a max_age of "
                    "at least min_age"
                )
            object.__setattr__(self, "max_age", age)
        if keep is None and self.max_age is None:
            raise InvalidValueError(
                "this policy keeps everything: give keep_last, max_age, or both"
            )


def _policy(policy: Any) -> RetentionPolicy:
    if policy is None:
        return RetentionPolicy()
    if not isinstance(policy, RetentionPolicy):
        raise InvalidArgumentError(
            f"policy must be a RetentionPolicy, not {type(policy).__name__}: pass "
            "RetentionPolicy(keep_last=20, max_age='30d')"
        )
    return policy


def _threads(threads: Sequence[str] | None) -> list[str] | None:
    if threads is None:
        return None
    if isinstance(threads, (str, bytes)):
        raise InvalidArgumentError(f"threads must be a list of thread ids: pass [{threads!r}]")
    listed = list(threads)
    if not all(isinstance(t, str) for t in listed):
        raise InvalidArgumentError("threads must be a list of thread ids (str)")
    return listed


class Retention:
    """Retention on `Saver` and `AsyncSaver` (mixed into both)."""

    checkpoints: CheckpointStore
    _retention_thread: threading.Thread | None = None
    _retention_stop: threading.Event | None = None
    _retention_every: tuple[RetentionPolicy, float] | None = None
    #: The report of the background sweeper's last run (None before its first).
    last_retention: RetentionReport | None = None

    def apply_retention(
        self,
        policy: RetentionPolicy | None = None,
        threads: Sequence[str] | None = None,
        apply: bool = True,
        *,
        now: float | None = None,
        progress: Progress | None = None,
    ) -> RetentionReport:
        """Apply `policy` (default `RetentionPolicy()`: keep the last 20) to every thread
        of this saver's scope, or to `threads`; one transaction per thread.

        Args:
            apply: False for a dry run: the same decisions and report, nothing changed.
            now: the clock (Unix time) `min_age` and `max_age` are measured from;
                default the time now. The grace is measured on the real clock whatever
                `now` says: a value or thread written within it is never collected.
            progress: called as `progress(done, total)` after each thread.
        """
        checked = _policy(policy)
        return self.checkpoints.retention.run(
            keep_last=checked.keep_last,
            max_age=checked.max_age,
            min_age=checked.min_age,
            threads=_threads(threads),
            apply=bool(apply),
            now=now,
            progress=progress,
        )

    async def aapply_retention(
        self,
        policy: RetentionPolicy | None = None,
        threads: Sequence[str] | None = None,
        apply: bool = True,
        *,
        now: float | None = None,
    ) -> RetentionReport:
        """Async `apply_retention`, run on a worker thread."""
        return await asyncio.to_thread(
            lambda: self.apply_retention(policy, threads, apply, now=now)
        )

    def start_retention(
        self, policy: RetentionPolicy | None = None, every: float = 3600.0
    ) -> threading.Thread:
        """Apply `policy` every `every` seconds on a daemon thread, until `stop_retention`
        or `close` (the first run is `every` seconds from now). A failed run is logged
        on `threadloom.langgraph.retention`, never raised; the next one runs as planned. Works for
        async apps too: the runs never touch the event loop.

        Raises:
            InvalidValueError: `every` is not a positive number of seconds, or another
                sweeper with another policy runs (stop it first).
        """
        checked = _policy(policy)
        if isinstance(every, bool) or not isinstance(every, (int, float)):
            raise InvalidArgumentError("every must be a number of seconds")
        if not math.isfinite(every) or every <= 0:
            raise InvalidValueError(f"every must be more than 0 seconds, got {every!r}")
        running = self._retention_thread
        if running is not None and running.is_alive():
            if self._retention_every == (checked, float(every)):
                return running
            raise InvalidValueError(
                "a retention sweeper with another policy runs; call stop_retention() first"
            )
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(float(every)):
                self._retain_logged(checked)

        self._retention_stop = stop
        self._retention_every = (checked, float(every))
        self._retention_thread = threading.Thread(
            target=loop, name="threadloom-retention", daemon=True
        )
        self._retention_thread.start()
        return self._retention_thread

    def stop_retention(self, timeout: float | None = None) -> bool:
        """Stop the sweeper (a run under way finishes its thread first); True when it
        stopped within `timeout` seconds."""
        if self._retention_stop is not None:
            self._retention_stop.set()
        running = self._retention_thread
        if running is None:
            return True
        if running is not threading.current_thread():
            running.join(timeout)
        stopped = not running.is_alive()
        if stopped:
            self._retention_thread = None
        return stopped

    def _retain_logged(self, policy: RetentionPolicy) -> None:
        stop = self._retention_stop
        try:
            report = self.checkpoints.retention.run(
                keep_last=policy.keep_last,
                max_age=policy.max_age,
                min_age=policy.min_age,
                progress=lambda done, total: _stopping(stop),
            )
        except _Stopped:
            return
        except Exception:
            log.exception("%s: the retention run failed", self.checkpoints.file.path)
            return
        self.last_retention = report
        log.info(
            "%s: retention deleted %d checkpoints, %d writes, %d values (%d bytes), "
            "%d idle threads",
            self.checkpoints.file.path,
            report.checkpoints,
            report.writes,
            report.values,
            report.bytes,
            len(report.expired),
        )


class _Stopped(Exception):
    """The sweeper was asked to stop between two threads."""


def _stopping(stop: threading.Event | None) -> None:
    if stop is not None and stop.is_set():
        raise _Stopped
