"""What `export`, `import`, `migrate --from nats` and `serve` share: moving threads to and
from the shared engine over NATS, and the service credentials (options or environment)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path
from typing import Any

from threadloom.cli._files import file_arguments, file_of
from threadloom.cli.bar import shown
from threadloom.errors import EngineError, InvalidArgumentError

TOKEN_ENV = "THREADLOOM_NATS_TOKEN"
SECRET_ENV = "THREADLOOM_NATS_JWT_SECRET"


def add_arguments(parser: argparse.ArgumentParser, direction: str) -> None:
    """The options of `export` (direction "to") or `import` (direction "from")."""
    file_arguments(parser)
    parser.add_argument(
        f"--{direction}",
        dest="url",
        required=True,
        metavar="nats://HOST:PORT",
        help="the NATS broker of the document service",
    )
    parser.add_argument(
        "--thread",
        action="append",
        dest="threads",
        metavar="T",
        help="a thread id (repeatable; default: every thread)",
    )
    service_arguments(parser)
    parser.add_argument(
        "--apply", action="store_true", help="write (default: a dry run that only reads)"
    )
    parser.add_argument(
        "--include-diverged",
        action="store_true",
        help="also write threads whose other side has diverged",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def service_arguments(parser: argparse.ArgumentParser) -> None:
    """The scope and credential options of `export`, `import` and `sync`."""
    from threadloom.protocol import DEFAULT_AGENT_ID, DEFAULT_NAMESPACE

    parser.add_argument(
        "--namespace", help="the document namespace on the service (default: the local one)"
    )
    parser.add_argument(
        "--agent-id",
        help="the agent id on the service (default: the local one); documents are re-keyed",
    )
    parser.add_argument(
        "--local-namespace",
        default=DEFAULT_NAMESPACE,
        help="the scope's namespace in the file (default: %(default)s)",
    )
    parser.add_argument(
        "--local-agent-id",
        default=DEFAULT_AGENT_ID,
        help="the scope's agent id in the file (default: %(default)s)",
    )
    parser.add_argument(
        "--token",
        help=f"a service token (or set {TOKEN_ENV}); visible to `ps`, prefer the variable",
    )
    parser.add_argument("--jwt-secret", help=f"the secret that signs tokens (or set {SECRET_ENV})")
    parser.add_argument(
        "--identity", default="api", help="the token's subject with --jwt-secret (default: api)"
    )


def run_transfer(args: argparse.Namespace, direction: str) -> int:
    """Run an export ("to") or import ("from"); print the report; 1 on a conflict."""
    args.db = file_of(args)
    if direction == "to" and not Path(args.db).is_file():
        raise EngineError(f"{args.db!r} is not a file; give the threadloom file to export")
    with shown(quiet=args.json) as progress:
        found = transfer(args, direction, progress)
    if args.json:
        print(json.dumps(found, indent=2))
    else:
        _print(found)
    return 1 if found["conflicts"] else 0


def transfer(args: argparse.Namespace, direction: str, progress: Any = None) -> dict[str, Any]:
    """The report of an export ("to") or import ("from") with these options (also what
    `threadloom migrate --from nats` runs)."""
    need_nats()
    from threadloom.engine import CheckpointStore, File
    from threadloom.nats import DocumentClient
    from threadloom.nats.transfer import export_threads, import_threads

    given = credentials(args)
    file = File.open(args.db)
    store = CheckpointStore(file, namespace=args.local_namespace, agent_id=args.local_agent_id)

    async def main() -> dict[str, Any]:
        async with await DocumentClient.connect(
            args.url, args.namespace or args.local_namespace, given
        ) as client:
            move = export_threads if direction == "to" else import_threads
            report = await move(
                store,
                client,
                threads=args.threads,
                agent_id=args.agent_id,
                apply=args.apply,
                include_diverged=args.include_diverged,
                progress=progress,
            )
            return report.as_dict()

    try:
        return asyncio.run(main())
    finally:
        file.close()


def need_nats() -> None:
    """Check that the `nats` extra is installed (`export`, `import`, `serve`, `migrate
    --from nats` speak NATS).

    Raises:
        EngineError: it is not, naming the install command.
    """
    try:
        import nats  # noqa: F401  (only whether it imports)
    except ImportError:
        raise EngineError(
            "this command speaks NATS and needs the nats extra (nats-py), which is not "
            "installed; install it: pip install '.[nats]' in threadloom's clone"
        ) from None


def credentials(args: argparse.Namespace) -> Any:
    """The service credentials the options (or the environment) give."""
    from threadloom.nats import Credentials

    token = args.token or os.environ.get(TOKEN_ENV)
    secret = args.jwt_secret or os.environ.get(SECRET_ENV)
    if not token and not secret:
        raise InvalidArgumentError(
            f"give --token or --jwt-secret (or set {TOKEN_ENV} or {SECRET_ENV})"
        )
    if token:
        return Credentials(token=token)
    return Credentials(secret=secret, identity=args.identity)


def _print(found: dict[str, Any]) -> None:
    print(
        f"{found['mode']}: {found['threads']} threads, {found['checkpoints']} checkpoints "
        f"({found['present']} present, {found['missing']} missing), "
        f"{found['copied']} checkpoints and {found['documents_copied']} documents copied"
    )
    for thread in found["per_thread"]:
        flags = [k for k in ("diverged", "skipped") if thread[k]]
        print(
            f"  {thread['thread_id']}: {thread['present']} present, {thread['missing']} missing"
            + (f" [{', '.join(flags)}]" if flags else "")
        )
    for conflict in found["conflicts"]:
        print(f"conflict: {conflict}")
