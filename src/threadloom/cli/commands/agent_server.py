"""`threadloom agent-server`: run LangGraph's Agent Server on the LangGraph project in the
current folder with threadloom's checkpointer, store and registry (the `server` extra).

Like `langgraph dev --no-reload --no-browser`; the server's threads, runs, assistants
and crons live in the threadloom file with its checkpoints (docs/agent-server.md).
Binds 127.0.0.1 unless another host is asked for. The server packages are imported
inside `run` only.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

HELP = "run LangGraph's Agent Server here with everything in one file (the server extra)"

#: The port `langgraph dev` uses too.
DEFAULT_PORT = 2024
#: The packages of the `server` extra this command needs.
NEEDED = ("langgraph_api", "langgraph_cli", "langgraph_runtime_inmem")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `threadloom agent-server`."""
    parser.add_argument(
        "--db",
        help="the threadloom file (default: $THREADLOOM_DB, else threadloom.db beside "
        "langgraph.json)",
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default: %(default)s)"
    )
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help="port (default: %(default)s)"
    )


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted; return the exit code."""
    missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    if missing:
        print(f"error: {', '.join(missing)} not installed", file=sys.stderr)
        print(
            "hint: install the server extra (pip install '/path/to/threadloom[server]')",
            file=sys.stderr,
        )
        return 1
    from threadloom.langgraph.server_run import run as serve

    serve(Path.cwd(), args.db, args.host, args.port)
    return 0
