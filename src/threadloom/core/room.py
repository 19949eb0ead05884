"""Room for a large encoding: a clear error where an encoder would abort (core layer).

msgpack encoders written in Rust (ormsgpack, under LangGraph's serializer and the content
store's bodies) abort the process when an allocation fails: under an address-space limit
(`ulimit -v`, a container's) a value of a few hundred MiB ends the process with a panic,
not a `MemoryError`. Before such an encoding, `ensure_room` maps (without touching) the
address space the encoder will need, about twice the payload (its output buffer grows by
copying), and raises `OutOfMemoryError` when the process cannot have it; the mapping is
given back at once. Small payloads are not probed.
"""

from __future__ import annotations

import mmap
from typing import Final

from threadloom.errors import OutOfMemoryError

#: Payloads below this are encoded without a probe.
PROBE_FROM: Final = 16 * 2**20


def ensure_room(payload: int, what: str) -> None:
    """Raise OutOfMemoryError unless the process can map twice `payload` bytes more.

    Raises:
        OutOfMemoryError: the address space is not there; nothing was encoded.
    """
    if payload < PROBE_FROM:
        return
    want = 2 * payload
    try:
        probe = mmap.mmap(-1, want)
    except (OSError, MemoryError, OverflowError):
        raise OutOfMemoryError(
            f"{what} holds {payload / 2**20:,.0f} MiB, and encoding it needs about "
            f"{want / 2**20:,.0f} MiB more than this process can allocate (memory or an "
            "address-space limit such as `ulimit -v`); nothing was written: keep values "
            "this large outside the checkpoint (a file, the Store's blocks) or raise the limit"
        ) from None
    probe.close()
