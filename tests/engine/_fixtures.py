"""The files older threadloom versions wrote (tests/data/formatN): their documents, as the
upgrade tests compare them."""

from __future__ import annotations

from pathlib import Path

import ormsgpack
import zstandard

from threadloom import Saver

DATA = Path(__file__).resolve().parents[1] / "data"


def dumped(folder: Path) -> bytes:
    """The documents the fixture's make.py dumped beside its file, as msgpack."""
    found = zstandard.ZstdDecompressor().decompress((folder / "documents.msgpack.zst").read_bytes())
    return ormsgpack.packb(ormsgpack.unpackb(found))


def documents(saver: Saver) -> bytes:
    """Every document `saver` holds, as msgpack in the form `dumped` compares."""
    return ormsgpack.packb([list(d) for d in saver.documents()])
