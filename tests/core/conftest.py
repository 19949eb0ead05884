"""Backends under test: every available implementation of `threadloom.core`, whatever
THREADLOOM_BACKEND selects for the rest of the suite.

`python` is the specification; `native` is the C core with the hardware paths this CPU
offers; `native-portable` is the C core forced onto its portable code. With CI set, a
missing extension fails the native tests instead of skipping them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest

from threadloom.core import _python

try:
    from threadloom.core import _native
except ImportError as error:  # pragma: no cover - depends on the build
    _native_error: ImportError | None = error
    native: ModuleType | None = None
else:
    _native_error = None
    native = _native

BACKEND_NAMES = ["python", "native", "native-portable"]


@dataclass(frozen=True)
class Backend:
    """One implementation of the core functions, named for test ids."""

    name: str
    sha256_hex: Callable[[Any], str]
    list_refs: Callable[[Any], Any]
    chunk_texts: Callable[[Any], list[str]]
    value_blob_refs: Callable[[Any], list[str]]
    cdc_cuts: Callable[[Any, int, int, int], list[int]]
    cdc_blocks: Callable[[Any, int, int, int], tuple[list[int], list[bytes]]]
    array_spans: Callable[[Any], Any]
    vector_scores: Callable[[Any, Any, int, str], Any]
    vector_nearest: Callable[[Any, Any, int, str], list[int]]
    vector_top: Callable[[Any, Any, int], list[int]]
    vector_means: Callable[[Any, Any, int, int, bool], tuple[bytes, list[int]]]


def require_native() -> ModuleType:
    """Return `core._native`; skip without it, or fail when CI is set."""
    if native is None:
        message = f"the C extension threadloom._native is not built: {_native_error}"
        if os.environ.get("CI"):
            pytest.fail(f"{message} (CI is set: build it with THREADLOOM_STRICT_BUILD=1)")
        pytest.skip(message)
    return native


def make_backend(name: str) -> Backend:
    """Return the backend called `name` (one of BACKEND_NAMES)."""
    hashing: Any = _python
    chunking: Any = _python
    if name != "python":
        chunking = require_native()
        hashing = chunking.NativeCore(chunking.FEATURES if name == "native" else 0)
    return Backend(
        name,
        hashing.sha256_hex,
        hashing.list_refs,
        hashing.chunk_texts,
        hashing.value_blob_refs,
        chunking.cdc_cuts,
        hashing.cdc_blocks,
        chunking.array_spans,
        hashing.vector_scores,
        hashing.vector_nearest,
        chunking.vector_top,
        chunking.vector_means,
    )


@pytest.fixture(params=BACKEND_NAMES)
def impl(request: pytest.FixtureRequest) -> Backend:
    """Each available backend in turn."""
    return make_backend(request.param)
