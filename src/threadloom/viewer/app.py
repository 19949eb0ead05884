"""The viewer's web application: routes, the JSON twins, the headers that keep it safe.

Outer layer (Starlette + Jinja2). Every route is GET (HEAD): nothing the viewer serves
can change the file, which `Source` opens read-only as well. Every page is rendered on
the server from one JSON-ready dict (`pages`, `checkpoints`, `memory`), and that dict is
the page's JSON twin: the same URL with `.json`, or `Accept: application/json`.

Markup can never run from stored data: templates autoescape everything, the pages have
no inline script or event handler, and the Content-Security-Policy allows scripts and
styles from the viewer only (`default-src 'self'`), so a value that escaped escaping
would still not run. Requests must name an allowed host (`Host`, checked by `_Hosts`):
a DNS-rebinding page, whose own name resolves to this machine, cannot read the memory
through the browser.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import math
import re
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any, Final

import jinja2
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from threadloom import __version__
from threadloom.engine.threads import STATUSES
from threadloom.errors import ThreadloomError
from threadloom.viewer import checkpoints, memory, pages
from threadloom.viewer.source import BadRequest, NotFound, Source
from threadloom.viewer.values import human_bytes, pretty, short_time, tilde, untilde

HERE: Final = Path(__file__).parent
#: What the pages may load: their own scripts, styles and images only; no frames, no
#: plugins, no form posting elsewhere.
CSP: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)
_HEADERS: Final = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
}
_JSON: Final = "threadloom.json"
#: The loopback names, always served (`host_name` form; `[::1]` is `::1`).
LOOPBACK: Final = ("localhost", "127.0.0.1", "::1")
_PORT: Final = re.compile(r"(?::[0-9]*)?")


def host_name(host: str) -> str | None:
    """A `Host` header's name, compared as `_Hosts` does: the port dropped, lowercased,
    without a trailing dot, an IPv6 literal without its brackets in its short form
    (`[0:0::1]:8765` is `::1`); None for a header that is not a host.

    Also the form of the names `_Hosts` is given (a port there is ignored)."""
    text = host.strip().lower()
    if text.startswith("["):
        name, bracket, rest = text[1:].partition("]")
        try:
            name = ipaddress.IPv6Address(name).compressed
        except ValueError:
            return None
        if not bracket:
            return None
    elif text.count(":") > 1:  # a bare IPv6 address (a name given to `_Hosts`)
        try:
            return ipaddress.IPv6Address(text).compressed
        except ValueError:
            return None
    else:
        name, colon, port = text.partition(":")
        rest = colon + port
    if not _PORT.fullmatch(rest):
        return None
    name = name[:-1] if name.endswith(".") else name
    return name or None


class _Hosts:
    """ASGI middleware: only requests whose `Host` names one of `names` (any port) are
    served; others get 400. Against DNS rebinding: a website whose name its DNS points
    at this machine sends its own name, which is not one of them."""

    def __init__(self, app: ASGIApp, names: Sequence[str]) -> None:
        self.app = app
        self.names = {found for name in names if (found := host_name(name)) is not None}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            values = [v for k, v in scope.get("headers", []) if k == b"host"]
            name = host_name(values[0].decode("latin-1")) if len(values) == 1 else None
            if name not in self.names:
                refused = PlainTextResponse("Invalid host header", status_code=400)
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)


class _Twins:
    """ASGI middleware: `/any/path.json` is `/any/path` answered as JSON, and every
    response carries the security headers (and `no-store`: the file changes under us)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        if path.endswith(".json") and not path.startswith("/static/"):
            scope = {**scope, "path": path[: -len(".json")] or "/", _JSON: True}
            scope["raw_path"] = scope["path"].encode("utf-8")

        async def headed(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(k.encode(), v.encode()) for k, v in _HEADERS.items()]
                if not scope["path"].startswith("/static/"):
                    headers.append((b"cache-control", b"no-store"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, headed)


def wants_json(request: Request) -> bool:
    """The `.json` twin, or a client that asks for JSON rather than HTML."""
    if request.scope.get(_JSON):
        return True
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/html" not in accept


def url(path: str, **query: Any) -> str:
    """`path` with the query parameters that are not None."""
    given = {k: v for k, v in query.items() if v is not None and v != ""}
    return path + ("?" + urllib.parse.urlencode(given) if given else "")


def local(path: str) -> str:
    """A request's (decoded) path as a link that stays on the viewer: percent-encoded
    (a `\\` would read as `/`) with one leading `/`, so `//evil.example/x`, which a
    browser would follow to evil.example, is `/evil.example/x`."""
    return "/" + urllib.parse.quote(path.lstrip("/"), safe="/~")


def thread_url(thread_id: str, *rest: str, **query: Any) -> str:
    """The URL of a thread's page (or a page under it)."""
    path = "/threads/" + tilde(thread_id) + "".join("/" + tilde(part) for part in rest)
    return url(path, **query)


def _jsonable(value: Any) -> Any:
    """Non-finite floats as strings: JSON has no NaN (plain keeps the float)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def json_body(data: Any) -> bytes:
    """The JSON twin's body (UTF-8, non-finite floats as strings)."""
    try:
        text = json.dumps(data, ensure_ascii=False, allow_nan=False)
    except ValueError:
        text = json.dumps(_jsonable(data), ensure_ascii=False, allow_nan=False)
    return text.encode("utf-8")


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(bytes=human_bytes, when=short_time, pretty=pretty, tilde=tilde)
    env.globals.update(url=url, thread_url=thread_url, version=__version__, statuses=STATUSES)
    return env


Build = Callable[[Request], dict[str, Any]]


class Viewer:
    """The routes over one `Source`.

    Args:
        source: the file and scope shown.
        allowed_hosts: the `Host` names served, any port (default: the loopback names;
            `host_name` says how they compare).
        owns_source: close the source when the application shuts down.
    """

    def __init__(
        self,
        source: Source,
        *,
        allowed_hosts: Sequence[str] = LOOPBACK,
        owns_source: bool = True,
    ) -> None:
        if any("*" in name for name in allowed_hosts):
            raise ValueError("allowed_hosts are names: a wildcard would serve any website")
        self.source = source
        self.env = _environment()
        self.env.globals.update(path=source.path, scope=source.scope)
        self.owns_source = owns_source
        s = self.source
        routes = [
            Route("/", lambda request: RedirectResponse("/threads", 303)),
            # Browsers ask for it on pages without a <link rel=icon> (a JSON twin).
            Route("/favicon.ico", lambda request: FileResponse(HERE / "static" / "favicon.svg")),
            self.page("/threads", "threads.html", lambda r: pages.threads(s, r.query_params)),
            self.page(
                "/threads/{thread}",
                "thread.html",
                lambda r: pages.conversation(s, self.arg(r, "thread"), r.query_params),
            ),
            self.page(
                "/threads/{thread}/messages/{index:int}",
                "message.html",
                lambda r: pages.one_message(
                    s, self.arg(r, "thread"), r.path_params["index"], r.query_params
                ),
            ),
            self.page(
                "/threads/{thread}/history",
                "history.html",
                lambda r: pages.history(s, self.arg(r, "thread"), r.query_params),
            ),
            self.page(
                "/threads/{thread}/checkpoints/{checkpoint}",
                "checkpoint.html",
                lambda r: checkpoints.checkpoint(
                    s, self.arg(r, "thread"), self.arg(r, "checkpoint"), r.query_params
                ),
            ),
            self.page(
                "/threads/{thread}/checkpoints/{checkpoint}/raw",
                "raw.html",
                lambda r: checkpoints.raw(
                    s, self.arg(r, "thread"), self.arg(r, "checkpoint"), r.query_params
                ),
            ),
            self.page(
                "/threads/{thread}/documents/{ref}",
                "document.html",
                lambda r: checkpoints.document(
                    s, self.arg(r, "thread"), self.arg(r, "ref"), r.query_params
                ),
            ),
            self.page("/store", "store.html", lambda r: memory.store(s, r.query_params)),
            self.page("/store/item", "item.html", lambda r: memory.store_item(s, r.query_params)),
            self.page("/file", "file.html", lambda r: memory.file(s, r.query_params)),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ]
        self.app = Starlette(
            routes=routes,
            middleware=[
                Middleware(_Twins),
                Middleware(_Hosts, names=list(allowed_hosts)),
            ],
            exception_handlers={404: self.http_error, 405: self.http_error},
            lifespan=self.lifespan,
        )

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if self.owns_source:
                self.source.close()

    @staticmethod
    def arg(request: Request, name: str) -> str:
        """A path segment, tilde-decoded (`values.tilde`)."""
        try:
            return untilde(request.path_params[name])
        except ValueError:
            raise BadRequest(f"the {name} in the URL is not valid UTF-8") from None

    def page(self, path: str, template: str, build: Build) -> Route:
        """A route answering with the page `template` renders from `build`'s dict, or
        that dict itself as the JSON twin."""

        def endpoint(request: Request) -> Response:
            started = time.perf_counter()
            try:
                data = build(request)
                status = 200
            except NotFound as exc:
                data, status, template_used = self.error(404, str(exc))
            except BadRequest as exc:
                data, status, template_used = self.error(400, str(exc))
            except ThreadloomError as exc:  # a damaged file: say what, never a traceback
                data, status, template_used = self.error(500, str(exc))
            else:
                template_used = template
            response = self.respond(request, data, status, template_used)
            elapsed = (time.perf_counter() - started) * 1000
            response.headers["server-timing"] = f"render;dur={elapsed:.2f}"
            response.headers["vary"] = "Accept"
            return response

        return Route(path, endpoint, methods=["GET"])

    @staticmethod
    def error(status: int, message: str) -> tuple[dict[str, Any], int, str]:
        return {"page": "error", "status": status, "error": message}, status, "error.html"

    def respond(
        self, request: Request, data: dict[str, Any], status: int, template: str
    ) -> Response:
        if wants_json(request):
            return Response(json_body(data), status, media_type="application/json")
        path, query = request.url.path, request.url.query
        html = self.env.get_template(template).render(
            data=data,
            request_path=path,
            json_url=local(path) + ".json" + ("?" + query if query else ""),
            request_checkpoint=request.query_params.get("checkpoint") or None,
        )
        return HTMLResponse(html, status)

    async def http_error(self, request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        message = {404: "no such page", 405: "the viewer is read-only: only GET is served"}
        data, status, template = self.error(status, message.get(status, "error"))
        response = self.respond(request, data, status, template)
        if status == 405:
            response.headers["allow"] = "GET, HEAD"
        return response


def create_app(
    source: Source, *, allowed_hosts: Sequence[str] = LOOPBACK, owns_source: bool = True
) -> Starlette:
    """The viewer's ASGI application over `source` (see `Viewer`)."""
    return Viewer(source, allowed_hosts=allowed_hosts, owns_source=owns_source).app
