"""Test helpers: vector decoding, a dict document store with the protocol's put semantics, and
the rule for a real component that is missing (skip outside CI, fail in CI)."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NoReturn

import pytest

from tests.protocol._resolution import Resolution
from threadloom.protocol import CHECKPOINTS, Put

VECTORS = Path(__file__).parent / "data" / "vectors"


def unavailable(reason: str) -> NoReturn:
    """Skip the test for `reason` outside CI; fail it in CI, where every component must run."""
    if "CI" in os.environ:
        pytest.fail(f"CI is set, so this component must run: {reason}", pytrace=False)
    pytest.skip(reason)


def decode(value: Any) -> Any:
    """Decode the vectors' JSON encodings (`$t: bytes`, `$repeat`) into Python values."""
    if isinstance(value, dict):
        if value.keys() == {"$t", "$v"} and value["$t"] == "bytes":
            return base64.b64decode(value["$v"])
        if value.keys() == {"$repeat", "count"}:
            return value["$repeat"] * value["count"]
        return {key: decode(item) for key, item in value.items()}
    if isinstance(value, list):
        return [decode(item) for item in value]
    return value


def inputs() -> list[dict[str, Any]]:
    """Return the steps of `inputs.json`, decoded, dict order preserved."""
    return decode(json.loads((VECTORS / "inputs.json").read_text()))


def jsonl(name: str) -> list[dict[str, Any]]:
    """Return the rows of a vector `.jsonl` file, with `data` decoded when present."""
    rows = []
    for line in (VECTORS / name).read_text().splitlines():
        row = json.loads(line)
        if "data" in row:
            row["data"] = decode(row["data"])
        rows.append(row)
    return rows


class DictStore:
    """A document store in a dict, applying puts with the savers' semantics (SPEC §4.5)."""

    def __init__(self) -> None:
        self.docs: dict[tuple[str, str], dict[str, Any]] = {}
        self.versions: dict[tuple[str, str], int] = {}

    def apply(self, puts: Iterable[Put]) -> list[str]:
        """Apply puts in order; return each outcome (created / conflict-kept / replaced)."""
        outcomes = []
        for put in puts:
            slot = (put.collection, put.key)
            if put.if_version is None:
                outcomes.append("replaced" if slot in self.docs else "created")
            elif slot in self.docs:
                if put.on_conflict == "compare" and self.docs[slot] != put.data:
                    raise AssertionError(f"VERSION_CONFLICT on {slot}")
                outcomes.append("conflict-kept")
                continue
            else:
                outcomes.append("created")
            self.docs[slot] = put.data
            self.versions[slot] = self.versions.get(slot, 0) + 1
        return outcomes

    def find(self, collection: str, **where: Any) -> list[dict[str, Any]]:
        """Return documents of `collection` whose fields equal `where`."""
        return [
            data
            for (coll, _), data in self.docs.items()
            if coll == collection and all(data.get(k) == v for k, v in where.items())
        ]

    def resolve(self, roots: Iterable[Mapping[str, Any]]) -> tuple[dict[str, Any], list[Any]]:
        """Resolve `roots` level by level, each find in id order as the service answers."""
        resolution = Resolution(roots)
        read = []
        while resolution.pending:
            for batch in resolution.level():
                read.append(batch)
                wanted = set(batch.refs)
                found = sorted(
                    (key, data)
                    for (coll, key), data in self.docs.items()
                    if coll == batch.collection and data.get("ref") in wanted
                )
                resolution.receive(data for _, data in found)
            resolution.advance()
        return dict(resolution.fetched), read

    def checkpoint(self, key: str) -> dict[str, Any]:
        """Return the checkpoint document with id `key`."""
        return self.docs[(CHECKPOINTS, key)]
