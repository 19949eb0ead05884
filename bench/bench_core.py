"""The C core against the pure-Python core: CDC throughput, list refs, SHA-256.

Run: `python bench/bench_core.py` (`--quick`: smaller inputs, fewer repeats).

Needs only threadloom (no bench extras). Each figure is the best of several repeats, so it
estimates the cost on an idle core. Rows:

- CDC: `cdc_cuts` at 2 KiB / 8 KiB / 64 KiB (min/avg/max) over pseudo-random bytes, MiB/s.
- refs of a 1000-element list (payloads 50..2000 bytes, then 20..200 bytes; kind msgpack):
  the element, chunk and list-blob refs as the planner needs them; per-element hashlib + json.dumps
  (`threadloom.protocol.refs`, what the planner calls today), the Python spec's
  `list_refs`, and the native batch (`tl_refs`: one C call), in microseconds.
- SHA-256 of 1 MiB: hashlib (OpenSSL) and `tl_sha256` with and without SHA-NI, MiB/s.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from _tables import MiB, ratio, table

import threadloom
import threadloom.core as core
from threadloom.core import _python
from threadloom.protocol.constants import CHUNK_SIZE
from threadloom.protocol.refs import chunk_ref, element_ref, list_blob_ref

try:
    from threadloom.core import _native
except ImportError:  # the extension was not built: python rows only
    _native = None  # type: ignore[assignment]


def best(function: Callable[[], Any], repeats: int) -> float:
    """Return the fastest of `repeats` timed calls, in seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def noise(size: int) -> bytes:
    """Return `size` pseudo-random bytes (fixed seed)."""
    return random.Random(7).randbytes(size)


def per_element_refs(typed: list[tuple[str, bytes]]) -> tuple[list[str], list[str], str]:
    """The refs of a list the way the planner computes them today: one hash per element."""
    entries = [[element_ref(kind, payload), len(payload)] for kind, payload in typed]
    chunk_refs = [
        chunk_ref(entries[i : i + CHUNK_SIZE]) for i in range(0, len(entries), CHUNK_SIZE)
    ]
    return [e[0] for e in entries], chunk_refs, list_blob_ref(chunk_refs)


def refs_rows(typed: list[tuple[str, bytes]], quick: bool, repeats: int) -> list[list[Any]]:
    """Time the refs of `typed` per method; return table rows (µs per list, speedup)."""
    loops = 20 if quick else 100

    def many(function: Callable[[list[tuple[str, bytes]]], Any]) -> Callable[[], None]:
        def run() -> None:
            for _ in range(loops):
                function(typed)

        return run

    baseline = best(many(per_element_refs), repeats) / loops
    spec = best(many(_python.list_refs), repeats) / loops
    rows: list[list[Any]] = [
        ["per-element hashlib + json.dumps (planner today)", baseline * 1e6, "1.00x"],
        ["python list_refs (spec)", spec * 1e6, ratio(baseline, spec)],
    ]
    if _native is not None:
        batch = best(many(_native.list_refs), repeats) / loops
        portable = best(many(_native.NativeCore(0).list_refs), repeats) / loops
        rows.append(["native list_refs (one tl_refs call)", batch * 1e6, ratio(baseline, batch)])
        rows.append(["native, portable SHA-256", portable * 1e6, ratio(baseline, portable)])
        got = _native.list_refs(typed)
        assert (got.element_refs, got.chunk_refs, got.list_ref) == per_element_refs(typed)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller inputs, fewer repeats")
    args = parser.parse_args()
    repeats = 3 if args.quick else 7
    print(
        f"machine: {os.cpu_count()} cores, {platform.machine()}; Python "
        f"{platform.python_version()}; threadloom {threadloom.__version__}; default backend: "
        f"{core.backend()}; SHA-NI: {'yes' if _native and _native.FEATURES else 'no'}",
        file=sys.stderr,
    )
    if _native is None:
        print("the C extension is not built: only python rows are measured", file=sys.stderr)

    # -- CDC ------------------------------------------------------------------------------
    native_size = (16 if args.quick else 64) * MiB
    python_size = (1 if args.quick else 4) * MiB
    sizes = (2048, 8192, 65536)
    rows: list[list[Any]] = []
    data = noise(python_size)
    py_cdc = python_size / MiB / best(lambda: _python.cdc_cuts(data, *sizes), max(1, repeats // 3))
    rows.append(["python", f"{python_size // MiB} MiB", py_cdc, "1.00x"])
    if _native is not None:
        big = noise(native_size)
        nat_cdc = native_size / MiB / best(lambda: _native.cdc_cuts(big, *sizes), repeats)
        rows.append(["native", f"{native_size // MiB} MiB", nat_cdc, ratio(nat_cdc, py_cdc)])
    print("\n### CDC (cdc_cuts, min/avg/max 2/8/64 KiB)\n")
    print(table(["backend", "input", "MiB/s", "vs python"], rows))

    # -- refs of a 1000-element list ------------------------------------------------------
    rng = random.Random(11)
    for low, high in ((50, 2000), (20, 200)):
        typed = [("msgpack", rng.randbytes(rng.randrange(low, high))) for _ in range(1000)]
        total = sum(len(payload) for _, payload in typed)
        title = f"refs of a 1000-element list ({low}..{high} B payloads, {total / 1024:.0f} KiB)"
        print(f"\n### {title}\n")
        print(table(["method", "µs per list", "speedup"], refs_rows(typed, args.quick, repeats)))

    # -- SHA-256 --------------------------------------------------------------------------
    blob = noise(MiB)
    sha_loops = 10 if args.quick else 50

    def mibps(function: Callable[[bytes], Any]) -> float:
        def run() -> None:
            for _ in range(sha_loops):
                function(blob)

        return sha_loops / best(run, repeats)

    base_sha = mibps(lambda b: hashlib.sha256(b).hexdigest())
    rows = [["hashlib (OpenSSL)", base_sha, "1.00x"]]
    if _native is not None:
        for label, features in (
            ("tl_sha256, SHA-NI", _native.FEATURES),
            ("tl_sha256, portable", 0),
        ):
            if label.endswith("SHA-NI") and not features:
                continue
            speed = mibps(_native.NativeCore(features).sha256_hex)
            rows.append([label, speed, ratio(speed, base_sha)])
    print("\n### SHA-256 of 1 MiB\n")
    print(table(["implementation", "MiB/s", "vs hashlib"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
