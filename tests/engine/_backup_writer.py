"""A writer process for the backup tests and bench: `python -m tests.engine._backup_writer
FILE STOP [THREADS]` puts checkpoints round-robin on THREADS threads (default 4), each
holding a fresh 4 KiB value, prints `ready` after the first round, and stops once the
file STOP exists, printing how many checkpoints it put."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint

from threadloom import Saver


def main(path: str, stop: str, threads: int = 4) -> int:
    """Write until `stop` exists; return the number of checkpoints put."""
    configs: dict[str, Any] = {
        f"t{n}": {"configurable": {"thread_id": f"t{n}", "checkpoint_ns": ""}}
        for n in range(threads)
    }
    puts = 0
    with Saver.from_conn_string(path) as saver:
        step = 0
        while not Path(stop).exists():
            step += 1
            for name, config in configs.items():
                made = empty_checkpoint()
                made["channel_values"] = {"step": step, "blob": os.urandom(2048).hex()}
                made["channel_versions"] = {"step": step, "blob": step}
                configs[name] = saver.put(
                    config, made, {"source": "loop", "step": step}, made["channel_versions"]
                )
                puts += 1
            if step == 1:
                print("ready", flush=True)
    return puts


if __name__ == "__main__":
    count = main(sys.argv[1], sys.argv[2], *(int(a) for a in sys.argv[3:4]))
    print(count, flush=True)
