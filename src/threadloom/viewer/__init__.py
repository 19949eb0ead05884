"""`threadloom view`: a local, read-only web viewer of a threadloom file (the `view` extra).

Outer layer: reads through the engine and `protocol.plain` only (never LangGraph, never
an application class), opens the file read-only and serves GET only. `source.Source` is
what it reads, `app.create_app` the ASGI application (Starlette + Jinja2; uvicorn serves
it from the CLI, `cli/commands/view.py`), and `pages`, `documents`, `memory` build each page's
data, which is also its JSON twin (docs/cli.md).
"""
