"""The naas engine's own savers writing the scenario threads into its own SQLite file.

Runs inside the naas venv (tests/nats/_peers.py builds it), never in threadloom's, with
no NATS and no engine around: naas-abi-core 3.1.0's `DocumentSecondaryAdapterSQLite`
(the engine's `storage/documents.sqlite`) under `DocumentService._for_engine`, and on it

- `v2`: the engine's `DocumentCheckpointSaver` (schema 2, what every engine agent writes);
- `v1`: core's legacy schema-1 writer (`services/agent/tests/legacy_checkpoints.v1_saver`,
  the one that wrote SPEC §2.6's vectors: whole checkpoints in `langgraph_*_v1`).

A thread the engine saver resumes from schema 1 continues in schema 2, and its reader
then shows a schema-1 checkpoint with its schema-1 writes only (SPEC §5.3), not the
schema-2 writes the resumed run added to it. What such a thread becomes once migrated is
what naas's own `migrate-memory` makes of it (`CheckpointMigration.migrate_checkpoints`
from `LegacyDocumentCheckpointReader` into the engine saver), so `migrated` is that.

Usage: `python naas_engine_checkpoints.py MODE PATH NAMESPACE AGENT_ID SCENARIO...`
(MODE `v1-write`: only write the scenarios in schema 1 and print what the engine reads).
Runs each scenario of `_graphs.py` on its own thread (the thread id is the scenario's
name), closes the file, copies it to PATH.resumed, and prints one JSON object:
`{"before": {scenario: {"snapshots", "tuples"}}, "after": {scenario: {"continued",
"snapshots", "tuples"}}, "migrated": {...}}`, where `before` is read back from PATH by the
engine saver (schema 1 through its legacy reads), `after` is PATH.resumed once each
thread was resumed there by the engine saver, and `migrated` (mode v1 only) is a copy of
PATH.resumed after naas's `migrate_checkpoints`, read in schema 2 only.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _graphs  # noqa: E402  (the directory above is on the path only now)
from naas_abi_core.services.agent.DocumentCheckpointSaver import (  # noqa: E402
    DocumentCheckpointSaver,
)
from naas_abi_core.services.agent.tests.legacy_checkpoints import v1_saver  # noqa: E402
from naas_abi_core.services.document.adapters.secondary.DocumentSecondaryAdapterSQLite import (  # noqa: E402, E501
    DocumentSecondaryAdapterSQLite,
)
from naas_abi_core.services.document.DocumentService import DocumentService  # noqa: E402


def reader(adapter: Any, namespace: str, agent_id: str) -> DocumentCheckpointSaver:
    """The engine saver on the file (schema 2, schema 1 through legacy reads)."""
    saver = DocumentCheckpointSaver(
        DocumentService._for_engine(adapter).for_namespace(namespace), agent_id=agent_id
    )
    saver.setup()
    return saver


def read(saver: Any, names: list[str]) -> dict[str, Any]:
    return {
        name: {
            "snapshots": _graphs.snapshots(name, saver, name),
            "tuples": _graphs.tuples(saver, name),
        }
        for name in names
    }


def main(argv: list[str]) -> dict[str, Any]:
    mode, path, namespace, agent_id, *names = argv
    if mode == "v1-write":
        return write_v1(path, namespace, agent_id, names)
    adapter = DocumentSecondaryAdapterSQLite(path)
    try:
        documents = DocumentService._for_engine(adapter).for_namespace(namespace)
        if mode == "v2":
            writer: Any = DocumentCheckpointSaver(documents, agent_id=agent_id)
            writer.setup()
        elif mode == "v1":
            writer = v1_saver(documents, agent_id)
        else:
            raise SystemExit(f"unknown mode {mode!r}")
        for name in names:
            _graphs.run(name, writer, name)
        before = read(reader(adapter, namespace, agent_id), names)
    finally:
        adapter.close()
    resumed = path + ".resumed"
    shutil.copyfile(path, resumed)
    adapter = DocumentSecondaryAdapterSQLite(resumed)
    try:
        saver = reader(adapter, namespace, agent_id)
        after = {name: {"continued": _graphs.continued(name, saver, name)} for name in names}
        for name, found in read(saver, names).items():
            after[name].update(found)
    finally:
        adapter.close()
    out = {"before": before, "after": after}
    if mode == "v1":
        out["migrated"] = _migrated(resumed, namespace, agent_id, names)
    return out


def write_v1(path: str, namespace: str, agent_id: str, names: list[str]) -> dict[str, Any]:
    """Only write the scenarios in schema 1 into `path` (a running service's file too:
    SQLite lets the two processes share it); print what the engine's saver reads."""
    adapter = DocumentSecondaryAdapterSQLite(path)
    try:
        documents = DocumentService._for_engine(adapter).for_namespace(namespace)
        writer = v1_saver(documents, agent_id)
        for name in names:
            _graphs.run(name, writer, name)
        return read(reader(adapter, namespace, agent_id), names)
    finally:
        adapter.close()


def _migrated(path: str, namespace: str, agent_id: str, names: list[str]) -> dict[str, Any]:
    """naas's migrate-memory (documents-v1) on a copy of `path`, read back in schema 2."""
    from naas_abi_core.services.agent.CheckpointMigration import migrate_checkpoints
    from naas_abi_core.services.agent.DocumentCheckpointSaver import (
        LegacyDocumentCheckpointReader,
    )

    copy = path + ".migrated"
    shutil.copyfile(path, copy)
    adapter = DocumentSecondaryAdapterSQLite(copy)
    try:
        documents = DocumentService._for_engine(adapter).for_namespace(namespace)
        target = DocumentCheckpointSaver(documents, agent_id=agent_id, legacy_reads=False)
        target.setup()
        source = LegacyDocumentCheckpointReader(documents, agent_id=agent_id)
        migrate_checkpoints(source, target, threads=names, apply=True)
        return read(target, names)
    finally:
        adapter.close()


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
