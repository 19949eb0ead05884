"""A value too large for the process's memory is a clear error, never an abort.

The msgpack encoders under LangGraph's serializer and the content store (ormsgpack, in
Rust) abort the process when an allocation fails. Under an address-space limit a 600 MiB
value used to end the process inside ormsgpack; it is now an `OutOfMemoryError` raised
before any encoding, nothing is written, and the saver goes on working.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CHILD = textwrap.dedent(
    """
    import resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (1800 * 2**20, 1800 * 2**20))
    from langgraph.checkpoint.base import empty_checkpoint
    from threadloom import Saver
    from threadloom.errors import OutOfMemoryError

    saver = Saver(sys.argv[1])
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}

    def put(value):
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"big": value}
        checkpoint["channel_versions"] = {"big": 1}
        return saver.put(config, checkpoint, {}, {"big": 1})

    mib = 2**20
    value = "x" * (600 * mib) if sys.argv[2] == "str" else b"x" * (600 * mib)
    try:
        put(value)
    except OutOfMemoryError as exc:
        print("refused:", exc)
    del value
    assert saver.get_tuple(config) is None, "nothing was written"
    put(b"y" * (40 * mib))  # a large value the process has room for is stored
    stored = saver.get_tuple(config).checkpoint["channel_values"]["big"]
    print("stored", len(stored))
    saver.close()
    """
)


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS is a Linux limit here")
@pytest.mark.parametrize("kind", ["str", "bytes"])
def test_a_value_beyond_the_address_space_is_an_error(kind: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "m.db"), kind],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("refused: channel 'big' holds 600 MiB"), lines
    assert "nothing was written" in lines[0]
    assert lines[1] == f"stored {40 * 2**20}"
