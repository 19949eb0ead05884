"""LangGraph's checkpointer conformance suite: every capability, both savers, both API families.

`langgraph-checkpoint-conformance` drives a saver through its async methods. Each saver
class is run as is (its `a*` family) and through `_SyncFamily`, which exposes the
class's sync methods to the suite, so the sync family meets the same contract. One
test per (saver, family, capability): the test ids are the conformance report, and a
failure lists the suite's failing checks with their tracebacks.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import (
    BASE_CAPABILITIES,
    EXTENDED_CAPABILITIES,
    Capability,
)
from langgraph.checkpoint.conformance.report import ProgressCallbacks

from threadloom import AsyncSaver, Saver

#: capability -> the sync method a saver must override to offer it.
_SYNC_METHODS = {
    Capability.PUT: "put",
    Capability.PUT_WRITES: "put_writes",
    Capability.GET_TUPLE: "get_tuple",
    Capability.LIST: "list",
    Capability.DELETE_THREAD: "delete_thread",
    Capability.DELETE_FOR_RUNS: "delete_for_runs",
    Capability.COPY_THREAD: "copy_thread",
    Capability.PRUNE: "prune",
}


class _SyncFamily(BaseCheckpointSaver[Any]):
    """Presents a real saver's sync methods as the async API the conformance suite calls.

    Every call goes straight to the wrapped saver's sync method on the event loop's
    thread, so what the suite checks is the sync family's behaviour.
    """

    def __init__(self, inner: BaseCheckpointSaver[Any]) -> None:
        super().__init__(serde=inner.serde)
        self.inner = inner

    async def aget_tuple(self, config: Any) -> Any:
        return self.inner.get_tuple(config)

    async def alist(
        self,
        config: Any,
        *,
        filter: dict[str, Any] | None = None,
        before: Any = None,
        limit: int | None = None,
    ) -> AsyncIterator[Any]:
        for item in self.inner.list(config, filter=filter, before=before, limit=limit):
            yield item

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        return self.inner.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        self.inner.put_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        self.inner.delete_thread(thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.inner.delete_for_runs(run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.inner.copy_thread(source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self.inner.prune(thread_ids, strategy=strategy)

    def get_next_version(self, current: Any, channel: None = None) -> Any:
        return self.inner.get_next_version(current, channel)


_CLASSES: dict[str, type[BaseCheckpointSaver[Any]]] = {"Saver": Saver, "AsyncSaver": AsyncSaver}
_FAMILIES = ("async", "sync")
_ORDER = sorted(BASE_CAPABILITIES, key=lambda c: c.value) + sorted(
    EXTENDED_CAPABILITIES, key=lambda c: c.value
)
_CASES = [
    pytest.param(cls, family, cap, id=f"{cls}-{family}-{cap.value}")
    for cls, family, cap in itertools.product(_CLASSES, _FAMILIES, _ORDER)
]


def _implements(cls: type[BaseCheckpointSaver[Any]], family: str, cap: Capability) -> bool:
    """Whether `cls` overrides the base-class method of `cap` in `family`."""
    name = _SYNC_METHODS[cap] if family == "sync" else "a" + _SYNC_METHODS[cap]
    return getattr(cls, name) is not getattr(BaseCheckpointSaver, name)


def _factory(
    tmp_path: Path, cls: type[BaseCheckpointSaver[Any]], family: str
) -> Callable[[], AsyncIterator[BaseCheckpointSaver[Any]]]:
    counter = itertools.count()

    async def make() -> AsyncIterator[BaseCheckpointSaver[Any]]:
        saver = cls(tmp_path / f"conformance-{next(counter)}.db")  # type: ignore[call-arg]
        try:
            yield saver if family == "async" else _SyncFamily(saver)
        finally:
            saver.close()  # type: ignore[attr-defined]

    return make


@pytest.mark.parametrize(("cls_name", "family", "cap"), _CASES)
def test_capability(tmp_path: Path, cls_name: str, family: str, cap: Capability) -> None:
    """Every conformance check of the capability passes for this saver class and API family."""
    cls = _CLASSES[cls_name]
    assert _implements(cls, family, cap), (
        f"{cls_name} does not implement {cap.value} in the {family} family "
        "(the method is still BaseCheckpointSaver's NotImplementedError stub)"
    )
    failures: list[str] = []

    def record(capability: str, test_name: str, passed: bool, error: str | None) -> None:
        if not passed:
            failures.append(f"{test_name}:\n{error}")

    registered = checkpointer_test(name=f"threadloom.{cls_name}[{family}]")(
        _factory(tmp_path, cls, family)
    )
    report = asyncio.run(
        validate(
            registered,
            capabilities={cap.value},
            progress=ProgressCallbacks(on_test_result=record),
        )
    )
    result = report.results[cap.value]
    assert result.detected, f"the conformance suite did not detect {cap.value} on {cls_name}"
    assert result.tests_passed > 0, f"no conformance check of {cap.value} ran"
    assert result.passed, (
        f"{result.tests_failed} of {result.tests_failed + result.tests_passed} {cap.value} checks "
        "failed:\n\n" + "\n".join(failures)
    )


def test_suite_detects_a_broken_saver(tmp_path: Path) -> None:
    """The harness fails a saver that loses channel values, so a passing run means something."""

    class Forgetful(Saver):
        def get_tuple(self, config: Any) -> Any:
            found = super().get_tuple(config)
            if found is not None:
                found.checkpoint["channel_values"].clear()
            return found

    registered = checkpointer_test(name="forgetful")(_factory(tmp_path, Forgetful, "sync"))
    report = asyncio.run(validate(registered, capabilities={Capability.PUT.value}))
    assert report.results[Capability.PUT.value].passed is False
