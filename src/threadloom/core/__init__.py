"""Pure functions under everything else: hashing, protocol refs, chunking, msgpack spans,
vector similarity.

Layer: core. Imports nothing from threadloom but `threadloom.errors`. Two backends compute
the same results: `python` (`core._python`, `core.cdc`, `core.msgpack`: the specification)
and `native` (`core._native`, the C core in `native/` built with cffi). The environment
variable `THREADLOOM_BACKEND` chooses, once, at import:

- `auto` (default): native when the extension imports, else python;
- `native`: native, or BackendError when the extension is missing;
- `python`: python, even when the extension is there.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Literal

from threadloom.core import _python
from threadloom.core._python import CHUNK_SIZE, Buffer, ListRefs, Typed
from threadloom.core.similarity import METRICS, Metric
from threadloom.errors import ThreadloomError

__all__ = [
    "CHUNK_SIZE",
    "METRICS",
    "BackendError",
    "ListRefs",
    "Metric",
    "array_spans",
    "backend",
    "cdc_blocks",
    "cdc_cuts",
    "chunk_texts",
    "list_refs",
    "sha256_hex",
    "value_blob_refs",
    "vector_above",
    "vector_bounds",
    "vector_chunk_bounds",
    "vector_coarse_bounds",
    "vector_means",
    "vector_nearest",
    "vector_planes",
    "vector_quantize",
    "vector_refine",
    "vector_refine_tight",
    "vector_scores",
    "vector_tight_bounds",
    "vector_top",
    "vector_tops",
]

BACKENDS = ("auto", "native", "python")


class BackendError(ThreadloomError, ImportError):
    """THREADLOOM_BACKEND names no backend, or names `native` and the extension is missing."""


def _select(choice: str) -> ModuleType:
    if choice not in BACKENDS:
        raise BackendError(
            f"THREADLOOM_BACKEND={choice!r} is not one of {', '.join(BACKENDS)}; "
            "unset it to let threadloom choose"
        )
    if choice == "python":
        return _python
    try:
        from threadloom.core import _native
    except ImportError as error:
        if choice == "native":
            raise BackendError(
                "THREADLOOM_BACKEND=native but the C extension threadloom._native is not "
                f"importable ({error}). Build it with a C compiler: `pip install -e .` from a "
                "checkout (add THREADLOOM_STRICT_BUILD=1 to see why a compile fails), or set "
                "THREADLOOM_BACKEND=auto to fall back to the pure-Python core"
            ) from error
        return _python
    return _native


_impl = _select(os.environ.get("THREADLOOM_BACKEND", "auto").strip().lower() or "auto")

sha256_hex: Callable[[Buffer], str] = _impl.sha256_hex
list_refs: Callable[[Sequence[Typed]], ListRefs] = _impl.list_refs
chunk_texts: Callable[[Sequence[Typed]], list[str]] = _impl.chunk_texts
value_blob_refs: Callable[[Sequence[Typed]], list[str]] = _impl.value_blob_refs
cdc_cuts: Callable[[Buffer, int, int, int], list[int]] = _impl.cdc_cuts
cdc_blocks: Callable[[Buffer, int, int, int], tuple[list[int], list[bytes]]] = _impl.cdc_blocks
array_spans: Callable[[Buffer], list[tuple[int, int]] | None] = _impl.array_spans
vector_scores: Callable[[Buffer, Buffer, int, str], array[float]] = _impl.vector_scores
vector_nearest: Callable[[Buffer, Buffer, int, str], list[int]] = _impl.vector_nearest
vector_top: Callable[[Sequence[float], Sequence[int] | None, int], list[int]] = _impl.vector_top
vector_quantize: Callable[[Buffer, int], tuple[bytes, array[float]]] = _impl.vector_quantize
vector_bounds: Callable[
    [Buffer, Sequence[float], Buffer, Sequence[float], int, str], array[float]
] = _impl.vector_bounds
vector_chunk_bounds: Callable[
    [Buffer, Sequence[float], Buffer, Sequence[int], int, str], tuple[array[int], array[float]]
] = _impl.vector_chunk_bounds
vector_means: Callable[[Buffer, Sequence[int], int, int, bool], tuple[bytes, list[int]]] = (
    _impl.vector_means
)


def _planes_backend() -> ModuleType:
    """The 4-bit planes of the exact scan in the backend chosen: core.planes (the spec) or
    core._native_planes."""
    if _impl.NAME == "native":
        from threadloom.core import _native_planes

        return _native_planes
    from threadloom.core import planes

    return planes


_planes = _planes_backend()
#: (high, low, spread) of int8 codes (core/planes.py).
vector_planes: Callable[[Buffer, int], tuple[bytes, bytes, array[float]]] = _planes.planes
#: An upper bound of each vector's score from its high plane (core/planes.py).
vector_coarse_bounds: Callable[
    [Buffer, Sequence[float], Buffer, Sequence[float], Sequence[float], int, str],
    tuple[array[float], array[int]],
] = _planes.coarse_bounds
#: The indices of the values at least a threshold, and their count (core/planes.py).
vector_above: Callable[[Sequence[float], float, int], tuple[list[int], int]] = _planes.above
#: The int8 bounds and lower bounds of the vectors a coarse bound keeps (core/planes.py).
vector_refine: Callable[..., int] = _planes.refine
#: (tops, tight): the low nibbles' top bits of int8 codes (core/planes.py).
vector_tops: Callable[[Buffer, int], tuple[bytes, array[float]]] = _planes.tops
#: `vector_refine` from the raw of `vector_tight_bounds` (core/planes.py).
vector_refine_tight: Callable[..., int] = _planes.refine_tight
#: Tighter coarse bounds from the high plane and the top bits (core/planes.py).
vector_tight_bounds: Callable[..., tuple[array[float], array[int]]] = _planes.tight_bounds


def backend() -> Literal["native", "python"]:
    """Return the backend in use: "native" (the C core) or "python"."""
    name: Literal["native", "python"] = _impl.NAME
    return name
