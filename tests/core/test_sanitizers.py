"""The C core under AddressSanitizer and UBSan, and its ABI hygiene.

The sources are compiled with gcc into a standalone executable (native/*.c plus
tests/core/tl_driver.c), so no ASan runtime has to be preloaded into Python; the golden
vectors and random cases run through it, and every answer must equal the Python spec's.
Any sanitizer report aborts the run (`-fno-sanitize-recover=all`). Without gcc these tests
skip, unless CI is set.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import re
import shutil
import subprocess
from array import array
from collections.abc import Iterator
from pathlib import Path

import ormsgpack
import pytest

from tests.core.conftest import native
from tests.core.test_vectors import CDC_VECTORS, NOISE, SHA256_VECTORS
from threadloom.core import _python

ROOT = Path(__file__).resolve().parents[2]
NATIVE = ROOT / "native"
DRIVER = Path(__file__).with_name("tl_driver.c")
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]
WARN = ["-std=c99", "-Wall", "-Wextra", "-Wpedantic", "-Wshadow", "-Werror"]


def _gcc() -> str:
    gcc = shutil.which("gcc")
    if gcc is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set but gcc is missing: the sanitizer tests must run in CI")
        pytest.skip("gcc is not installed")
    return gcc


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The C core and tl_driver.c built with -O1 -g plus ASan and UBSan."""
    gcc = _gcc()
    out = tmp_path_factory.mktemp("asan") / "tl_driver"
    sources = [str(path) for path in sorted(NATIVE.glob("*.c"))] + [str(DRIVER)]
    command = [gcc, *WARN, "-O1", "-g", *SANITIZE, f"-I{NATIVE}", *sources, "-lm", "-o", str(out)]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, f"{' '.join(command)}\n{result.stderr}"
    return out


def _hex(data: bytes) -> str:
    return data.hex() or "-"


def _joined(items: list[str]) -> str:
    return ",".join(items) or "-"


def _typed_tokens(typed: list[tuple[str, bytes]]) -> str:
    return " ".join(f"{_hex(kind.encode())} {_hex(payload)}" for kind, payload in typed)


def _cases() -> Iterator[tuple[str, str]]:
    """Yield (command, expected line), the expectation computed by the Python spec."""
    rng = random.Random(20261129)
    buffers = [data for data, _ in SHA256_VECTORS] + [
        rng.randbytes(rng.randrange(300)) for _ in range(40)
    ]
    for data in buffers:
        for hw in ("hw", "0"):
            yield f"sha {hw} {_hex(data)}", hashlib.sha256(data).hexdigest()
    hello = [("msgpack", bytes.fromhex("a568656c6c6f"))]
    lists = [[], hello, [("", b"")] * 33]
    for count in (1, 31, 32, 33, 64, 65, 100):
        lists.append([(rng.choice(["msgpack", "json", "é"]), rng.randbytes(rng.randrange(200)))
                      for _ in range(count)])  # fmt: skip
    # One shared kind (kind_lengths NULL), payloads around the 64-byte blocks, and kinds
    # whose `kind ‖ \0` fills a block or overflows it (streamed alone, not paired).
    edges = [0, 1, 54, 55, 56, 63, 64, 65, 118, 119, 120, 128, 1000]
    lists.append([("msgpack", rng.randbytes(size)) for size in edges * 3])
    for kind in ("k" * 62, "k" * 63, "k" * 64, "k" * 100):
        lists.append([(kind, rng.randbytes(size)) for size in edges])
        lists.append([(rng.choice([kind, "json"]), rng.randbytes(size)) for size in edges])
    for typed in lists:
        refs = _python.list_refs(typed)
        texts = [text.encode().hex() for text in _python.chunk_texts(typed)]
        expected = " ".join([
            _joined([ref[2:] for ref in refs.element_refs]),
            _joined([ref[2:] for ref in refs.chunk_refs]),
            refs.list_ref[2:],
            _joined(texts),
        ])  # fmt: skip
        blobs = _joined([ref[2:] for ref in _python.value_blob_refs(typed)])
        for hw in ("hw", "0"):
            yield f"refs {hw} {len(typed)} {_typed_tokens(typed)}", expected
            yield f"vblob {hw} {len(typed)} {_typed_tokens(typed)}", blobs
    cdc = [(data, sizes) for data, sizes, _ in CDC_VECTORS]
    cdc += [(NOISE[: rng.randrange(5000)], (rng.randrange(1, 64), 64, rng.randrange(64, 900)))
            for _ in range(30)]  # fmt: skip
    cdc += [(b"", (1, 8, 8)), (b"a", (1, 8, 8)), (NOISE[:64], (64, 64, 64))]
    for data, (low, avg, high) in cdc:
        cuts = _python.cdc_cuts(data, low, avg, high)
        yield f"cdc {low} {avg} {high} {_hex(data)}", _joined([str(cut) for cut in cuts])
    yield "cdc 0 8 8 00", "E-2"
    # Blocks of one to many chunks, so the scalar, SSE2 and AVX2 BLAKE3 paths all run.
    long = b"".join(hashlib.sha256(n.to_bytes(4, "big")).digest() for n in range(2500))
    blocks = [
        (b"", (1, 8, 8)),
        (NOISE[:3000], (64, 256, 1024)),
        (long, (1024, 4096, 16384)),
        (long, (9000, 16000, 40000)),
    ]
    for data, (low, avg, high) in blocks:
        cuts, keys = _python.cdc_blocks(data, low, avg, high)
        expected = f"{_joined([str(cut) for cut in cuts])} {_joined([key.hex() for key in keys])}"
        for hw in ("hw", "0"):
            yield f"blk {hw} {low} {avg} {high} {_hex(data)}", expected
    payloads = [ormsgpack.packb(value) for value in ([], [1, "x", [2, {"k": b"v"}]], [None] * 20)]
    payloads += [
        b"",
        b"\x91",
        b"\x91\xc1",
        b"\xdd\xff\xff\xff\xff",
        b"\x92\xd9\x05abc",
        b"\x90\x90",
    ]
    payloads += [rng.randbytes(rng.randrange(1, 20)) for _ in range(50)]
    for payload in payloads:
        spans = _python.array_spans(payload)
        if spans is None:
            expected = "E-1"
        else:
            expected = _joined([str(offset) for offset in [spans[0][0] if spans else len(payload)]
                                + [end for _, end in spans]])  # fmt: skip
        yield f"spans {_hex(payload)}", expected


def _drive(driver: Path, commands: list[str]) -> list[str]:
    """The ASan+UBSan driver's output lines for `commands`, one each, after a run with
    no report (leaks included)."""
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:halt_on_error=1"}
    stdin = "\n".join(commands) + "\n"
    result = subprocess.run([str(driver)], input=stdin, capture_output=True, text=True, env=env)
    assert result.returncode == 0 and not result.stderr, result.stderr[-4000:]
    lines = result.stdout.splitlines()
    assert len(lines) == len(commands)
    return lines


def test_vectors_under_sanitizers(driver: Path) -> None:
    """The ASan+UBSan build gives the Python spec's answer on every vector, with no report."""
    cases = list(_cases())
    lines = _drive(driver, [command for command, _ in cases])
    for (command, expected), line in zip(cases, lines, strict=True):
        assert line == expected, command[:200]


#: A vector case: hw, metric code, dims, k, query + matrix rows, centroids.
_Case = tuple[str, int, int, int, list[list[float]], list[list[float]]]


def _vector_cases() -> Iterator[_Case]:
    """(hw, metric code, dims, k, query + matrix rows, centroids): lanes' edges, zeros."""
    rng = random.Random(20261201)
    for dims in (1, 3, 7, 8, 9, 31, 32, 33, 100, 384):
        for metric in (0, 1, 2):
            for hw in ("hw", "0"):
                count = rng.choice([0, 1, 5, 31, 32, 33, 70])
                rows = [[rng.gauss(0, 1) for _ in range(dims)] for _ in range(count + 1)]
                if count > 2:
                    rows[2] = [0.0] * dims
                k = rng.choice([1, 2, 7])
                cents = [[rng.gauss(0, 1) for _ in range(dims)] for _ in range(k)]
                yield hw, metric, dims, k, rows, cents


def test_vector_kernels_under_sanitizers(driver: Path) -> None:
    """The ASan+UBSan build's vector scores are within the stated tolerance of the Python
    spec, its nearest centroids score within tolerance of the best, and its top-k and means
    equal the spec's on them, with no report."""
    from threadloom.core import similarity

    names = ("cosine", "l2", "inner_product")
    cases = list(_vector_cases())
    commands = []
    for hw, metric, dims, k, rows, cents in cases:
        packed = [
            b"".join(similarity.pack(row) for row in part).hex() or "-"
            for part in ([rows[0]], rows[1:], cents)
        ]
        commands.append(f"vec {hw} {metric} {dims} {k} {' '.join(packed)}")
    lines = _drive(driver, commands)
    for (_, metric, dims, k, rows, cents), line in zip(cases, lines, strict=True):
        name = names[metric]
        scores_text, nearest_text, top_text, means_hex = line.split(" ")
        query, matrix = rows[0], b"".join(similarity.pack(row) for row in rows[1:])
        spec = similarity.vector_scores(similarity.pack(query), matrix, dims, name)
        scores = [float(x) for x in scores_text.split(",")] if scores_text != "-" else []
        assert len(scores) == len(rows) - 1
        for row, got, want in zip(rows[1:], scores, spec, strict=True):
            assert abs(got - want) <= similarity.tolerance(name, query, row), (name, dims)
        nearest = [int(x) for x in nearest_text.split(",")] if nearest_text != "-" else []
        cents_blob = b"".join(similarity.pack(c) for c in cents)
        for row, choice in zip(rows[1:], nearest, strict=True):
            best = list(similarity.vector_scores(similarity.pack(row), cents_blob, dims, name))
            slack = 2 * max(similarity.tolerance(name, row, c) for c in cents) + 1e-9
            assert best[choice] >= max(best) - slack, (name, dims)
        top = [int(x) for x in top_text.split(",")] if top_text != "-" else []
        assert top == similarity.top(scores, None, k)
        means, _ = similarity.means(matrix, nearest, k, dims, False)
        assert means_hex == (means.hex() or "-")


def test_quantized_scan_under_sanitizers(driver: Path) -> None:
    """The ASan+UBSan build quantizes and bounds exactly as the Python spec, with no report."""
    from threadloom.core import similarity

    names = ("cosine", "l2", "inner_product")
    cases = list(_vector_cases())
    lines = _run_vector_cases(driver, "qnt", cases)
    for (_, metric, dims, _, rows, _), line in zip(cases, lines, strict=True):
        matrix = b"".join(similarity.pack(row) for row in rows[1:])
        codes, params = similarity.quantize(matrix, dims)
        query_codes, query_params = similarity.quantize(similarity.pack(rows[0]), dims)
        bounds = similarity.bounds(query_codes, query_params, codes, params, dims, names[metric])
        codes_hex, params_text, bounds_text = line.split(" ")
        assert codes_hex == (codes.hex() or "-")
        parsed = [] if params_text == "-" else [float(x) for x in params_text.split(",")]
        assert parsed == list(params), (names[metric], dims)
        parsed = [] if bounds_text == "-" else [float(x) for x in bounds_text.split(",")]
        assert parsed == list(bounds), (names[metric], dims)


def test_planes_scan_under_sanitizers(driver: Path) -> None:
    """The ASan+UBSan build's planes, coarse bounds and refinement, and its top bits, tight
    bounds and their refinement, equal the Python spec (core/planes.py) bit for bit, on
    exact-sized buffers, with no report."""
    from threadloom.core import planes, similarity

    names = ("cosine", "l2", "inner_product")
    cases = list(_vector_cases())
    lines = _run_vector_cases(driver, "pln", cases)
    for (_, metric, dims, _, rows, _), line in zip(cases, lines, strict=True):
        codes, params = similarity.quantize(b"".join(similarity.pack(r) for r in rows[1:]), dims)
        query_codes, query_params = similarity.quantize(similarity.pack(rows[0]), dims)
        high, low, spread = planes.planes(codes, dims)
        split = planes.split(query_codes, dims)
        coarse, raw = planes.coarse_bounds(
            split, query_params, high, params, spread, dims, names[metric]
        )
        bounds, lows = array("d", coarse), array("d", coarse)
        reaching = planes.refine(split, query_params, raw, low, params, dims, names[metric],
                                 -math.inf, math.inf, coarse, bounds, lows)  # fmt: skip
        parts = line.split(" ")
        parsed = [[] if part == "-" else [float(x) for x in part.split(",")] for part in parts]
        assert parsed[:3] == [list(coarse), list(bounds), list(lows)], (names[metric], dims)
        assert int(parts[3]) == reaching
        bits, tight = planes.tops(codes, dims)
        tighter, raw2 = planes.tight_bounds(
            split, query_params, high, bits, params, tight, dims, names[metric]
        )
        refined, tlows = array("d", tighter), array("d", tighter)
        planes.refine_tight(split, query_params, raw2, low, params, dims, names[metric],
                            -math.inf, math.inf, tighter, refined, tlows)  # fmt: skip
        assert parsed[4:] == [list(tighter), list(refined)], (names[metric], dims)
        assert list(refined) == list(bounds)


def test_c_files_are_small_and_prefixed() -> None:
    """Each C file stays under 400 lines and every ABI name starts with tl_ / TL_."""
    for path in NATIVE.glob("*.[ch]"):
        assert len(path.read_text().splitlines()) < 400, path.name
    header = (NATIVE / "threadloom.h").read_text()
    cdef = header[header.index("CDEF-BEGIN") : header.index("CDEF-END")]
    cdef = re.sub(r"/\*.*?\*/", "", cdef, flags=re.S)
    names = re.findall(r"\b(\w+)\s*\(", cdef) + re.findall(r"\b(TL_\w+|tl_\w+)\b", cdef)
    assert names and all(name.lower().startswith("tl_") for name in names)
    functions = list(re.finditer(r"^\S[^;(]*?\b(tl_\w+)\(", header, flags=re.M))
    assert len(functions) == 23
    for match in functions:
        before = header[: match.start()].rstrip()
        assert before.endswith("*/"), f"{match.group(1)} has no comment"


def test_no_mutable_globals(tmp_path: Path) -> None:
    """No object file of the C core has data in writable sections (.data, .bss, common)."""
    gcc = _gcc()
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm is not installed")
    for source in NATIVE.glob("*.c"):
        obj = tmp_path / (source.stem + ".o")
        subprocess.run([gcc, *WARN, "-O2", f"-I{NATIVE}", "-c", str(source), "-o", str(obj)],
                       check=True)  # fmt: skip
        symbols = subprocess.run([nm, str(obj)], capture_output=True, text=True, check=True)
        writable = [
            line for line in symbols.stdout.splitlines() if re.search(r" [BbDdCGgSs] ", line)
        ]
        assert not writable, f"{source.name}: {writable}"


def test_extension_exports_only_its_init() -> None:
    """The built extension exports PyInit__native and no tl_ symbol."""
    nm = shutil.which("nm")
    if native is None or nm is None:
        pytest.skip("the extension or nm is missing")
    from threadloom import _native as extension

    result = subprocess.run([nm, "-D", "--defined-only", extension.__file__],
                            capture_output=True, text=True, check=True)  # fmt: skip
    exported = {line.split()[-1] for line in result.stdout.splitlines()}
    assert "PyInit__native" in exported
    assert not [name for name in exported if name.startswith("tl_")]


def _run_vector_cases(driver: Path, command: str, cases: list[_Case]) -> list[str]:
    """Run the driver's `command` (qnt, pln) on each vector case, the query its first row
    and the matrix the rest; its output lines, one a case, after a run with no report."""
    from threadloom.core import similarity

    commands = []
    for hw, metric, dims, _, rows, _ in cases:
        matrix = b"".join(similarity.pack(row) for row in rows[1:]).hex() or "-"
        query = similarity.pack(rows[0]).hex()
        commands.append(f"{command} {hw} {metric} {dims} {query} {matrix}")
    return _drive(driver, commands)
