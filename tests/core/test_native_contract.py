"""The C ABI's checked preconditions and error codes, called directly through cffi.

The wrappers in `core._native` never pass bad arguments, so these paths are only reachable
from here (and from other C callers): each documented error must come back as its code,
without writing past any buffer.
"""

from __future__ import annotations

import hashlib
from array import array
from typing import Any

import pytest

from tests.core.conftest import require_native


@pytest.fixture(scope="module")
def c() -> Any:
    """The cffi module `threadloom._native` (ffi and lib)."""
    require_native()
    from threadloom import _native as extension

    return extension


def _batch(
    c: Any, kinds: bytes, kind_lengths: list[int] | None, payloads: bytes, lengths: list[int]
) -> tuple[Any, list[Any]]:
    keep = [
        c.ffi.from_buffer("unsigned char[]", kinds),
        c.ffi.NULL
        if kind_lengths is None
        else c.ffi.from_buffer("uint64_t[]", array("Q", kind_lengths)),
        c.ffi.from_buffer("unsigned char[]", payloads),
        c.ffi.from_buffer("uint64_t[]", array("Q", lengths)),
    ]
    batch = c.ffi.new("tl_batch *")
    batch.count = len(lengths)
    batch.kinds, batch.kind_lengths, batch.payloads, batch.payload_lengths = keep
    batch.kinds_len, batch.payloads_len = len(kinds), len(payloads)
    return batch, keep


def test_unknown_feature_bits_are_refused(c: Any) -> None:
    """A feature bit the ABI does not define gives TL_EINVAL from every hashing function."""
    out = c.ffi.new("unsigned char[32]")
    assert c.lib.tl_sha256(b"abc", 3, 0x80, out) == c.lib.TL_EINVAL
    batch, _keep = _batch(c, b"k", [1], b"p", [1])
    refs = c.ffi.new("char[]", 3 * c.lib.TL_REF_STRIDE)
    assert c.lib.tl_value_blob_refs(batch, 0x80, refs) == c.lib.TL_EINVAL
    assert c.lib.tl_refs(batch, 0x80, refs, c.ffi.NULL, 0, c.ffi.NULL) == c.lib.TL_EINVAL


def test_native_core_refuses_missing_hardware() -> None:
    """NativeCore will not enable a hardware path tl_cpu_features did not report."""
    native = require_native()
    with pytest.raises(ValueError, match="hardware this CPU lacks"):
        native.NativeCore(native.FEATURES | 0x40)


@pytest.mark.parametrize(
    ("kind_lengths", "lengths"),
    [([1], [2]), ([1, 0], [1, 1]), ([2], [1]), (None, [1, 1])],
    ids=["past-end", "sum-past-end", "kinds-past-end", "shared-kind-payloads-past-end"],
)
def test_bad_lengths_are_refused(
    c: Any, kind_lengths: list[int] | None, lengths: list[int]
) -> None:
    """Lengths that add up to more than their buffer give TL_EINVAL."""
    batch, _keep = _batch(c, b"k", kind_lengths, b"p", lengths)
    refs = c.ffi.new("char[]", 4 * c.lib.TL_REF_STRIDE)
    assert c.lib.tl_value_blob_refs(batch, 0, refs) == c.lib.TL_EINVAL
    assert c.lib.tl_refs(batch, 0, refs, c.ffi.NULL, 0, c.ffi.NULL) == c.lib.TL_EINVAL


def test_missing_buffers_are_refused(c: Any) -> None:
    """NULL payload lengths for a non-empty batch, or a NULL refs buffer, give TL_EINVAL."""
    batch, _keep = _batch(c, b"k", None, b"p", [1])
    refs = c.ffi.new("char[]", 3 * c.lib.TL_REF_STRIDE)
    assert c.lib.tl_refs(batch, 0, c.ffi.NULL, c.ffi.NULL, 0, c.ffi.NULL) == c.lib.TL_EINVAL
    batch.payload_lengths = c.ffi.NULL
    assert c.lib.tl_refs(batch, 0, refs, c.ffi.NULL, 0, c.ffi.NULL) == c.lib.TL_EINVAL
    assert c.lib.tl_value_blob_refs(batch, 0, refs) == c.lib.TL_EINVAL
    empty, _keep_empty = _batch(c, b"", None, b"", [])
    empty.payload_lengths = c.ffi.NULL
    assert c.lib.tl_refs(empty, 0, refs, c.ffi.NULL, 0, c.ffi.NULL) == c.lib.TL_OK
    assert c.ffi.unpack(refs, 66) == b"b-" + hashlib.sha256(b"l[]").hexdigest().encode()


def test_refs_layout(c: Any) -> None:
    """tl_refs writes e-, c- and b- refs at TL_REF_STRIDE, each followed by a newline."""
    assert c.lib.TL_REF_STRIDE == 67
    payloads = [bytes([i]) * i for i in range(40)]
    batch, _keep = _batch(c, b"msgpack", None, b"".join(payloads), [len(p) for p in payloads])
    count = 40 + 2 + 1
    refs = c.ffi.new("char[]", count * 67)
    assert c.lib.tl_refs(batch, 0, refs, c.ffi.NULL, 0, c.ffi.NULL) == c.lib.TL_OK
    lines = c.ffi.unpack(refs, count * 67).decode().split("\n")
    assert lines[-1] == "" and len(lines) == count + 1
    assert [line[:2] for line in lines[:-1]] == ["e-"] * 40 + ["c-"] * 2 + ["b-"]
    assert lines[0] == "e-" + hashlib.sha256(b"msgpack\0").hexdigest()


def test_chunk_text_capacity(c: Any) -> None:
    """tl_refs fills the text buffer exactly, and a one-byte-short buffer gives TL_ENOSPC."""
    lengths = [10 ** (i % 6) for i in range(33)]
    batch, _keep = _batch(c, b"msgpack" * 33, [7] * 33, b"x" * sum(lengths), lengths)
    refs = c.ffi.new("char[]", (33 + 2 + 1) * c.lib.TL_REF_STRIDE)
    bounds = c.ffi.new("uint64_t[]", 3)
    capacity = c.lib.tl_refs_text_capacity(33)
    assert capacity == 33 * 94 + 2 * 2
    text = c.ffi.new("char[]", capacity)
    assert c.lib.tl_refs(batch, 0, refs, text, capacity, bounds) == c.lib.TL_OK
    exact = bounds[2]
    assert exact == 2 * 2 + 33 * (4 + 64 + 3 + 1) + 2 * 31 + sum(len(str(n)) for n in lengths)
    assert c.lib.tl_refs(batch, 0, refs, text, exact, bounds) == c.lib.TL_OK
    short = c.lib.tl_refs(batch, 0, refs, text, exact - 1, bounds)
    assert short == c.lib.TL_ENOSPC
    assert c.lib.tl_refs_text_capacity(2**63) == 0


def test_cdc_errors(c: Any) -> None:
    """tl_cdc_cuts refuses bad sizes with TL_EINVAL and a short cut array with TL_ENOSPC."""
    data = bytes(range(256)) * 16
    cuts = c.ffi.new("uint64_t[]", 1)
    assert c.lib.tl_cdc_cuts(data, len(data), 8, 4, 16, cuts, 1) == c.lib.TL_EINVAL
    assert c.lib.tl_cdc_cuts(data, len(data), 1, 4, 16, cuts, 1) == c.lib.TL_EINVAL
    assert c.lib.tl_cdc_cuts(data, len(data), 16, 64, 256, cuts, 1) == c.lib.TL_ENOSPC
    assert c.lib.tl_cdc_cuts(c.ffi.NULL, 0, 16, 64, 256, c.ffi.NULL, 0) == 0


def test_cdc_blocks_errors(c: Any) -> None:
    """tl_cdc_blocks fails as tl_cdc_cuts does, and refuses a NULL key buffer for data
    and unknown feature bits."""
    data = bytes(range(256)) * 16
    cuts = c.ffi.new("uint64_t[]", 1)
    keys = c.ffi.new("unsigned char[]", 32)
    blocks = c.lib.tl_cdc_blocks
    assert blocks(data, len(data), 8, 4, 16, 0, cuts, 1, keys) == c.lib.TL_EINVAL
    assert blocks(data, len(data), 16, 64, 256, 0, cuts, 1, keys) == c.lib.TL_ENOSPC
    assert blocks(data, 10, 16, 64, 256, 0, cuts, 1, c.ffi.NULL) == c.lib.TL_EINVAL
    assert blocks(data, 10, 16, 64, 256, 1 << 30, cuts, 1, keys) == c.lib.TL_EINVAL
    assert blocks(c.ffi.NULL, 0, 16, 64, 256, 0, c.ffi.NULL, 0, c.ffi.NULL) == 0


def test_msgpack_sizing(c: Any) -> None:
    """With NULL offsets the header's count comes back; a short offset array gives TL_ENOSPC."""
    payload = b"\x93\x01\x02\x03"
    assert c.lib.tl_msgpack_array_spans(payload, 4, c.ffi.NULL, 0) == 3
    offsets = c.ffi.new("uint64_t[]", 4)
    assert c.lib.tl_msgpack_array_spans(payload, 4, offsets, 3) == c.lib.TL_ENOSPC
    assert c.lib.tl_msgpack_array_spans(payload, 4, offsets, 4) == 3
    assert list(offsets) == [1, 2, 3, 4]
    assert c.lib.tl_msgpack_array_spans(b"\x01", 1, c.ffi.NULL, 0) == c.lib.TL_ENOTARRAY
    assert c.lib.tl_msgpack_array_spans(c.ffi.NULL, 3, c.ffi.NULL, 0) == c.lib.TL_EINVAL


def test_every_c_function_releases_the_gil(tmp_path: Any) -> None:
    """The generated wrapper of each exported function drops the GIL around the C call.

    cffi's API mode does so by default; this holds the build recipe (native/build.py) to it,
    and checks that the header exports no function the wrappers miss.
    """
    import importlib.util
    import re
    from pathlib import Path

    native = Path(__file__).resolve().parents[2] / "native"
    spec = importlib.util.spec_from_file_location("threadloom_native_build", native / "build.py")
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    emitted = tmp_path / "emitted.c"
    build.ffibuilder.emit_c_code(str(emitted))
    source = emitted.read_text()
    wrappers = dict(
        (name, body)
        for body, name in re.findall(
            r"(static PyObject \*\n_cffi_f_(tl_\w+)\(.*?\n}\n)", source, re.S
        )
    )
    declared = set(re.findall(r"\b(tl_\w+)\s*\(", build.cdef_text(str(native / "threadloom.h"))))
    assert declared and declared == set(wrappers)
    for name, body in wrappers.items():
        assert "Py_BEGIN_ALLOW_THREADS" in body and "Py_END_ALLOW_THREADS" in body, name
