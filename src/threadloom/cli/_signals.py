"""How a command ends when its reader or its user stops it, and the wait for a lock.

CLI layer. A closed pipe (`threadloom threads F | head -1`) ends the command quietly;
Ctrl-C ends it with one `error:` line saying how far it got and a `hint:` saying how
to resume, never a traceback. Every write is one transaction, so what an interrupted
command leaves is its finished steps, never half of one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys

from threadloom.cli import bar

#: Exit status after Ctrl-C (128 + SIGINT, as shells report it).
INTERRUPTED = 130
#: Exit status when the reader of the output went away (128 + SIGPIPE, as shells report it).
PIPE_CLOSED = 141

#: How to finish what an interrupted command started, per command that writes.
RESUME = {
    "migrate": "run the same command again: it skips the threads already copied and "
    "copies the rest",
    "import": "run the same command again: what was copied is skipped",
    "export": "run the same command again: what was copied is skipped",
    "sync": "run the same command again: it starts where this one stopped, and what "
    "arrived is found present",
    "delete": "run the same command again: threads already deleted are reported missing",
    "erase": "run the same command again to erase the rest",
    "prune": "run the same command again to prune the rest",
    "compact": "run the same command again (the file is sound, only less compact)",
    "demo": "run the demo again: it continues from the last stored turn",
}

#: Commands that run until Ctrl-C: for them it is the way to stop, not an interruption
#: (also when it comes before their server has taken the signal over).
SERVERS = frozenset({"view", "serve"})

#: Where the engine says it is waiting for another writer (see `engine.file`).
WAIT_LOGGER = "threadloom.engine.wait"


def pipe_closed() -> int:
    """End quietly after the reader of stdout went away; return `PIPE_CLOSED`.

    Python would otherwise fail again flushing stdout at exit: stdout is pointed at
    /dev/null first.
    """
    # OSError, ValueError: stdout has no descriptor (tests capture it).
    with open(os.devnull, "w") as null, contextlib.suppress(OSError, ValueError):
        os.dup2(null.fileno(), sys.stdout.fileno())
    return PIPE_CLOSED


def interrupted(name: str) -> int:
    """Say how far an interrupted command got and how to resume; return `INTERRUPTED`
    (0, silently, for a server: Ctrl-C is how it stops)."""
    if name in SERVERS:
        return 0
    reached = bar.last
    done = f" after {reached}" if reached is not None and reached.total else ""
    if name in RESUME:
        print(
            f"error: interrupted{done}; every finished step is kept, the one under way "
            "was rolled back",
            file=sys.stderr,
        )
        print(f"hint: {RESUME[name]}", file=sys.stderr)
    else:
        print(f"error: interrupted{done}; nothing was changed", file=sys.stderr)
    return INTERRUPTED


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]  # of any stream
    """A handler writing to `sys.stderr` as it is at each message (tests replace it)."""

    @property
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:
        pass


def watch_waits() -> None:
    """Print the engine's "waiting for another writer" notices on stderr, as they come."""
    logger = logging.getLogger(WAIT_LOGGER)
    if not any(getattr(h, "_threadloom_cli", False) for h in logger.handlers):
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler._threadloom_cli = True  # type: ignore[attr-defined]  # our own marker
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
