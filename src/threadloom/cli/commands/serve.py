"""`threadloom serve`: answer as the document service over NATS for a file, until SIGINT
or SIGTERM (the naas SDK saver can use it as its memory)."""

from __future__ import annotations

import argparse
import os

from threadloom.cli._files import file_arguments, file_of
from threadloom.cli._transfer import SECRET_ENV, need_nats
from threadloom.errors import InvalidArgumentError

HELP = (
    "answer as the document service over NATS for the file (the naas SDK saver "
    "can use it as its memory)"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `threadloom serve`."""
    file_arguments(parser, help="the threadloom file (created if missing)")
    parser.add_argument(
        "--nats", required=True, metavar="nats://HOST:PORT", help="the broker to serve on"
    )
    parser.add_argument(
        "--jwt-secret", help=f"the secret tokens must be signed with (or set {SECRET_ENV})"
    )
    parser.add_argument(
        "--grant",
        action="append",
        default=[],
        metavar="IDENTITY=NS[,NS...]",
        help="let IDENTITY (a token's sub, or * for any) use these namespaces (a trailing * "
        "is a prefix, * alone every one); repeatable. Without grants: api, engine and "
        "dagster on every namespace, nobody else",
    )
    parser.add_argument(
        "--grants",
        metavar="FILE",
        help="read grants from FILE, one IDENTITY=NS[,NS...] a line (# comments)",
    )
    parser.add_argument(
        "--max-token-lifetime",
        type=int,
        default=None,
        metavar="SECONDS",
        help="refuse tokens whose exp - iat exceeds this (default: 3900)",
    )


def run(args: argparse.Namespace) -> int:
    """Serve the file as the document service until SIGINT or SIGTERM."""
    import asyncio
    import contextlib
    import signal

    need_nats()
    from threadloom.nats.access import MAX_TOKEN_LIFETIME, Grants
    from threadloom.nats.serve import serve

    args.db = file_of(args)
    secret = args.jwt_secret or os.environ.get(SECRET_ENV)
    if not secret:
        raise InvalidArgumentError(f"give --jwt-secret (or set {SECRET_ENV})")
    lifetime = MAX_TOKEN_LIFETIME if args.max_token_lifetime is None else args.max_token_lifetime
    if lifetime <= 0:
        raise InvalidArgumentError("--max-token-lifetime must be a positive number of seconds")
    specs = list(args.grant)
    if args.grants:
        specs.extend(Grants.read(args.grants))
    grants = Grants.parse(specs) if specs else Grants.platform()
    if (args.grant or args.grants) and not specs:
        raise InvalidArgumentError(f"the grants file {args.grants!r} grants nothing")

    def ready() -> None:
        print(
            f"ready: serving {args.db} on {args.nats} "
            f"(grants: {' '.join(grants.describe())}; tokens up to {lifetime} s)",
            flush=True,
        )

    async def main() -> None:
        task = asyncio.ensure_future(
            serve(
                args.db,
                args.nats,
                secret,
                grants=grants,
                max_token_lifetime=lifetime,
                ready=ready,
            )
        )
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(main())
    return 0
