"""threadloom as LangGraph's Agent Server's checkpointer and store (`langgraph dev`).

In langgraph.json (the dotted form; langgraph-api 0.16 does not load `module:function`)::

    "checkpointer": {"path": "threadloom.langgraph_server.checkpointer"},
    "store": {"path": "threadloom.langgraph_server.store"}

The file is `THREADLOOM_DB`, else `threadloom.db` beside langgraph.json. The names live in
the adapters' wing (`threadloom.langgraph.server`); docs/agent-server.md says what is kept
where and what a crash keeps. Needs the `server` extra.
"""

from threadloom.langgraph.server import (
    DB_ENV,
    PER_REQUEST_KEYS,
    TESTED,
    ServerConfigError,
    ServerSaver,
    check_versions,
    checkpointer,
    database_path,
    store,
)

__all__ = [
    "DB_ENV",
    "PER_REQUEST_KEYS",
    "TESTED",
    "ServerConfigError",
    "ServerSaver",
    "check_versions",
    "checkpointer",
    "database_path",
    "store",
]
