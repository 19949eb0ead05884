"""`threadloom agent-server`: LangGraph's Agent Server on a project folder, with
threadloom's checkpointer, store and registry (docs/agent-server.md).

Adapter layer. What `langgraph dev` does, without reload and browser: the folder's
langgraph.json is validated by LangGraph's own CLI, the folder and its dependencies go
on `sys.path`, and `langgraph_api.cli.run_server` serves in this process. The
checkpointer and store entries are set to threadloom's (their other settings, `ttl`,
`serde`, `index`, are kept); a langgraph.json naming another checkpointer or store is
refused rather than silently replaced.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from threadloom.langgraph.server import DB_ENV, ServerConfigError, check_versions, database_path

__all__ = ["CHECKPOINTER", "STORE", "project_config", "run"]

#: The factories langgraph.json names (the dotted form the server loads).
CHECKPOINTER = "threadloom.langgraph_server.checkpointer"
STORE = "threadloom.langgraph_server.store"


def _ours(config: dict[str, Any], key: str, path: str) -> dict[str, Any]:
    entry = dict(config.get(key) or {})
    named = entry.get("path")
    if named not in (None, path):
        raise ServerConfigError(
            f'langgraph.json names the {key} "{named}", and threadloom agent-server serves '
            f'with threadloom\'s; remove its "path" (or set it to "{path}"), or start this '
            "project with langgraph dev"
        )
    entry["path"] = path
    return entry


def project_config(folder: Path) -> dict[str, Any]:
    """The folder's langgraph.json as LangGraph's CLI validates it, with threadloom's
    checkpointer and store.

    Raises:
        ServerConfigError: no langgraph.json, one LangGraph refuses, or one naming
            another checkpointer or store.
    """
    path = folder / "langgraph.json"
    if not path.is_file():
        raise ServerConfigError(
            f"no langgraph.json in {folder}; run threadloom agent-server in your LangGraph "
            "project's folder (the one langgraph dev runs in)"
        )
    import click
    from langgraph_cli.config import validate_config_file

    try:
        config: dict[str, Any] = dict(validate_config_file(path))
    except (click.ClickException, ValueError) as exc:
        raise ServerConfigError(
            f"{path} is not a langgraph.json LangGraph accepts ({exc}); fix it as "
            "langgraph dev's message says"
        ) from None
    if config.get("node_version"):
        raise ServerConfigError(
            f"{path} describes a JavaScript project; threadloom serves Python graphs only, "
            "start it with npx @langchain/langgraph-cli dev"
        )
    config["checkpointer"] = _ours(config, "checkpointer", CHECKPOINTER)
    config["store"] = _ours(config, "store", STORE)
    return config


def run(folder: Path, db: str | None, host: str, port: int) -> None:
    """Serve the project in `folder` until interrupted (the caller's working directory
    must be `folder`: the server reads files relative to it).

    Raises:
        ServerConfigError: untested server packages, a project threadloom cannot serve,
            or a file in a folder that does not exist.
    """
    check_versions()
    config = project_config(folder)
    if db:
        os.environ[DB_ENV] = str((folder / Path(db).expanduser()).resolve())
    target = database_path(cwd=folder)
    if not target.parent.is_dir():
        raise ServerConfigError(
            f"{target.parent} (the folder of the file {target.name}) does not exist; create "
            "it, or give --db a path in an existing folder"
        )
    os.environ[DB_ENV] = str(target)
    sys.path.append(str(folder))
    for dependency in config.get("dependencies", []):
        where = folder / dependency
        if where.is_dir():
            sys.path.append(str(where))
    from langgraph_api.cli import run_server

    run_server(
        host,
        port,
        False,
        config.get("graphs", {}),
        open_browser=False,
        env=config.get("env"),
        store=config["store"],
        auth=config.get("auth"),
        http=config.get("http"),
        ui=config.get("ui"),
        ui_config=config.get("ui_config"),
        webhooks=config.get("webhooks"),
        checkpointer=config["checkpointer"],
        disable_persistence=config.get("disable_persistence", False),
    )
