"""Copying one thread's history into a threadloom file: only what is missing, oldest first.

Adapter layer. Semantics of naas's `migrate_checkpoints` (SPEC §8.1), with three changes:

- a checkpoint is `present` when the target holds its id (either schema), else `missing`;
  applied, missing ones are put oldest first through the target `Saver` (one transaction
  each: an interruption leaves whole checkpoints, a complete older history, never a torn
  one), with the parent as the put's config and the source's channel versions;
- pending writes are sent only where the target lacks them, by key (task id, index):
  ordinary writes of a task as one `put_writes` call, special ones (negative index) as
  another, with the task path when the source gave it. naas re-sends every write of every
  checkpoint on each run, which replaces the special ones (SPEC §11.3) and would undo
  what the target did since with a thread it continued;
- a thread whose target `diverged` (its head is not the source's, and the source's head
  is not on its lineage) is reported and left alone unless `include_diverged`, as
  `threadloom import` does: its copied history would hide the target's newer head.

Schema-2 documents (from a naas file) are stored as they are (`import_documents`: one
transaction for the thread, create-only), so they stay byte for byte the engine's.

A thread the copy wrote to takes its creation and last activity from its checkpoints'
`ts` (`CheckpointStore.restamp`), not the copy's time, so `prune --older-than` and the
viewer see how old the conversation is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import WRITES_IDX_MAP, CheckpointTuple

from threadloom.errors import CheckpointConflictError
from threadloom.langgraph.migration.report import ThreadReport
from threadloom.langgraph.migration.sources import TaskPaths, ThreadHistory
from threadloom.langgraph.saver import Saver
from threadloom.protocol import CHECKPOINTS, WRITES
from threadloom.protocol.lineage import diverged, put_order

WriteKey = tuple[str, str, str, int]


class Copier:
    """Copies thread histories into `saver` (None: a dry run on a target that does not exist).

    Args:
        saver: the target (read-only for a dry run).
        apply: write; otherwise only count what is present and missing.
        include_diverged: also write threads whose target diverged.
    """

    def __init__(self, saver: Saver | None, *, apply: bool, include_diverged: bool) -> None:
        if apply and saver is None:
            raise ValueError("an applied migration needs a target saver")
        self.saver = saver
        self.apply = apply
        self.include_diverged = include_diverged

    def copy(self, history: ThreadHistory) -> ThreadReport:
        """Count, and when applying copy, one thread; return its report."""
        entry = ThreadReport(history.thread_id)
        checkpoints = self.saver.checkpoints if self.saver is not None else None
        heads = checkpoints.view.heads(history.thread_id) if checkpoints is not None else []
        held = {(h.checkpoint_ns, h.checkpoint_id) for h in heads}
        ours = [_ident(item) for item in history.checkpoints]
        ours += [
            {"checkpoint_ns": d["checkpoint_ns"], "checkpoint_id": d["checkpoint_id"]}
            for c, d in history.documents
            if c == CHECKPOINTS
        ]
        entry.checkpoints = len(ours)
        entry.writes = sum(len(item.pending_writes or ()) for item in history.checkpoints)
        entry.writes += sum(1 for c, _ in history.documents if c == WRITES)
        entry.present = sum(1 for d in ours if (d["checkpoint_ns"], d["checkpoint_id"]) in held)
        entry.missing = entry.checkpoints - entry.present
        theirs = [h._asdict() for h in heads]
        entry.diverged = diverged(ours, theirs)
        if entry.diverged and not self.include_diverged:
            entry.skipped = self.apply
            return entry
        if not self.apply or self.saver is None:
            return entry
        written = self.saver.checkpoints.view.write_keys(history.thread_id)
        try:
            for item in history.checkpoints:
                self._put(item, held, written, history.task_paths, entry)
            if history.documents:
                self._import(history.documents, held, written, entry)
        except CheckpointConflictError as exc:
            entry.conflict = f"{history.thread_id}: {exc}"
        if entry.copied or entry.writes_copied:
            # The puts dated the thread now; its history is older.
            self.saver.checkpoints.restamp([history.thread_id])
        return entry

    def _put(
        self,
        item: CheckpointTuple,
        held: set[tuple[str, str]],
        written: set[WriteKey],
        task_paths: Mapping[tuple[str, str], TaskPaths],
        entry: ThreadReport,
    ) -> None:
        assert self.saver is not None
        conf = item.config["configurable"]
        thread_id, ns = conf["thread_id"], conf["checkpoint_ns"]
        checkpoint_id = conf["checkpoint_id"]
        if (ns, checkpoint_id) not in held:
            target: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
            if item.parent_config is not None:
                target["checkpoint_id"] = item.parent_config["configurable"]["checkpoint_id"]
            # The owner the thread index records comes from the put's configurable; the
            # source recorded it in the metadata (get_checkpoint_metadata), so it is
            # given back from there (and, being there already, changes no metadata).
            for key in self.saver.checkpoints.scope.owner_keys:
                value = item.metadata.get(key) if isinstance(item.metadata, Mapping) else None
                if isinstance(value, str) and value:
                    target[key] = value
            self.saver.put(
                {"configurable": target},
                item.checkpoint,
                item.metadata,
                item.checkpoint.get("channel_versions", {}),
            )
            held.add((ns, checkpoint_id))
            entry.copied += 1
        paths = task_paths.get((ns, checkpoint_id), {})
        config: RunnableConfig = {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint_id,
            }
        }
        for task_id, writes in _by_task(item.pending_writes or ()).items():
            ordinary = [w for w in writes if w[0] not in WRITES_IDX_MAP]
            keys = [(ns, checkpoint_id, task_id, i) for i in range(len(ordinary))]
            lacking = [k for k in keys if k not in written]
            if lacking:
                self.saver.put_writes(config, ordinary, task_id, paths.get(task_id, ""))
                written.update(keys)
                entry.writes_copied += len(lacking)
            special = [
                w
                for w in writes
                if w[0] in WRITES_IDX_MAP
                and (ns, checkpoint_id, task_id, WRITES_IDX_MAP[w[0]]) not in written
            ]
            if special:
                self.saver.put_writes(config, special, task_id, paths.get(task_id, ""))
                written.update((ns, checkpoint_id, task_id, WRITES_IDX_MAP[w[0]]) for w in special)
                entry.writes_copied += len(special)

    def _import(
        self,
        documents: Sequence[tuple[str, dict[str, Any]]],
        held: set[tuple[str, str]],
        written: set[WriteKey],
        entry: ThreadReport,
    ) -> None:
        assert self.saver is not None
        lacking_checkpoints = sum(
            1
            for c, d in documents
            if c == CHECKPOINTS and (d["checkpoint_ns"], d["checkpoint_id"]) not in held
        )
        lacking_writes = sum(
            1
            for c, d in documents
            if c == WRITES
            and (d["checkpoint_ns"], d["checkpoint_id"], d["task_id"], int(d["index"]))
            not in written
        )
        if not lacking_checkpoints and not lacking_writes:
            return  # the thread's import committed whole before: its values are there too
        self.saver.checkpoints.view.import_documents(put_order(documents))
        entry.copied += lacking_checkpoints
        entry.writes_copied += lacking_writes


def _ident(item: CheckpointTuple) -> dict[str, Any]:
    conf = item.config["configurable"]
    return {"checkpoint_ns": conf["checkpoint_ns"], "checkpoint_id": conf["checkpoint_id"]}


def _by_task(pending: Sequence[tuple[str, str, Any]]) -> dict[str, list[tuple[str, Any]]]:
    """Pending writes grouped by task, in the order the source listed them."""
    grouped: dict[str, list[tuple[str, Any]]] = {}
    for task_id, channel, value in pending:
        grouped.setdefault(task_id, []).append((channel, value))
    return grouped
