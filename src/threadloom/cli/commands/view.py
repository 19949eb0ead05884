"""`threadloom view PATH`: serve the read-only web viewer of a file (the `view` extra).

Binds 127.0.0.1 unless another host is asked for (then warns: anyone who can reach that
address can read the memory), prints the address once the socket is bound, serves with
uvicorn until Ctrl-C (or SIGTERM) and exits 0. Whatever the bind, requests must name an
allowed host (`allowed_hosts`): a bind of 0.0.0.0 listens on 127.0.0.1 too, where a
website rebound there by its DNS would otherwise read the memory. The web stack is
imported here only, so the other commands never load it.
"""

from __future__ import annotations

import argparse
import ipaddress
import signal
import socket
import sys
import threading
import webbrowser
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from threadloom.cli._files import one_file
from threadloom.errors import ThreadloomError

HELP = "serve a read-only web viewer of a file on 127.0.0.1 (the view extra)"

#: The port tried when none is given (pass --port 0 for any free one).
DEFAULT_PORT = 8765


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `threadloom view`."""
    parser.add_argument("path", nargs="?", help="the threadloom file (or --db)")
    parser.add_argument("--db", help="the threadloom file")
    parser.set_defaults(usage_error=parser.error)
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default: %(default)s; another one serves the memory to "
        "whoever can reach it)",
    )
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help="port (default: %(default)s; 0: a free one)"
    )
    parser.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="serve requests naming this host too (repeatable; the loopback names, the "
        "bound address and this machine's names are served)",
    )
    parser.add_argument("--open", action="store_true", help="open the address in a browser")
    parser.add_argument("--namespace", help="the scope's namespace (default: the engine's)")
    parser.add_argument("--agent-id", help="the scope's agent id (default: the engine's)")


def loopback(host: str) -> bool:
    """True when `host` is only reachable from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def allowed_hosts(host: str, extra: Sequence[str] = ()) -> list[str]:
    """The `Host` names served when bound to `host`: the loopback names, `host` itself,
    for another bind this machine's names (`socket.gethostname()`, `getfqdn()`), and
    `extra` (`--allow-host`). Never any name: against DNS rebinding."""
    from threadloom.viewer.app import LOOPBACK

    names = [*LOOPBACK, host.strip("[]")]
    if not loopback(host):
        names += [socket.gethostname(), socket.getfqdn()]
    names += extra
    return [name for name in dict.fromkeys(names) if name]


def _missing(name: str) -> int:
    print(f"error: the web viewer needs {name}, which is not installed", file=sys.stderr)
    print(
        "hint: install the view extra: pip install '.[view]' in threadloom's clone", file=sys.stderr
    )
    return 1


def run(args: argparse.Namespace) -> int:
    """Serve the viewer until interrupted; return the exit code."""
    path = one_file(args, args.path)
    if not path:
        print("error: no file to view", file=sys.stderr)
        print("hint: threadloom view memory.db (or --db memory.db)", file=sys.stderr)
        return 2
    try:
        import jinja2  # noqa: F401  (the extra's packages, checked before anything opens)
        import starlette  # noqa: F401
        import uvicorn
    except ImportError as exc:
        return _missing(exc.name or "its web stack")
    from threadloom.protocol import DEFAULT_AGENT_ID, DEFAULT_NAMESPACE
    from threadloom.viewer.app import create_app
    from threadloom.viewer.source import Source

    if not Path(path).is_file():
        raise ThreadloomError(f"{path!r} is not a file; give the path of a threadloom database")
    host = args.host
    hosts = allowed_hosts(host, args.allow_host)
    if not loopback(host):
        print(
            f"warning: serving on {host}: anyone who can reach this address can read the "
            "memory (the viewer has no login); use the default 127.0.0.1 unless you mean it",
            file=sys.stderr,
        )
        print(
            f"note: requests must name {', '.join(hosts)} (any port); "
            "add others with --allow-host NAME",
            file=sys.stderr,
        )
    source = Source(
        path,
        namespace=args.namespace or DEFAULT_NAMESPACE,
        agent_id=args.agent_id or DEFAULT_AGENT_ID,
    )
    try:
        sock = socket.create_server(
            (host.strip("[]"), args.port),
            family=socket.AF_INET6 if ":" in host else socket.AF_INET,
        )
    except OSError as exc:
        print(f"error: cannot listen on {host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        print("hint: pass another --port (0 picks a free one)", file=sys.stderr)
        source.close()
        return 1
    port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    address = f"http://{shown}:{port}/"
    app = create_app(source, allowed_hosts=hosts)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    server = uvicorn.Server(config)

    def stop(signum: int, frame: Any) -> None:
        server.should_exit = True

    # A Ctrl-C before uvicorn takes the signal over (as soon as the address is printed)
    # stops the server as uvicorn's own handler would, not with a KeyboardInterrupt
    # inside the event loop's set-up.
    main = threading.current_thread() is threading.main_thread()  # where signals go
    previous = signal.signal(signal.SIGINT, stop) if main else None
    print(f"threadloom view: {address} (read-only; Ctrl-C to stop)", flush=True)
    if args.open:
        threading.Timer(0.5, _open, (address,)).start()
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # a second Ctrl-C during shutdown
        pass
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)
        sock.close()
        source.close()  # after the lifespan closed it, a no-op
    return 0


def _open(address: str) -> Any:
    return webbrowser.open(address)
