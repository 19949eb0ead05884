"""Who may call `threadloom serve`, and on which namespaces (SPEC §7.3, plus grants).

Outer layer (nats). A token is an HS256 JWT with `sub`, `iat` and `exp`, no `aud`, signed
with the project secret, or (header `kid: "module"`) with the module key derived from it
for a non-first-party identity, and living at most `max_lifetime` seconds (`exp - iat`).
Every refusal of a token is UNAUTHENTICATED with the fixed text.

Grants say which identities may use which namespaces: `IDENTITY=NS[,NS...]`, where a
namespace ending in `*` is a prefix (`*` alone: every namespace) and the identity `*`
is every authenticated identity. Without grants only the engine's own identities (api,
engine, dagster) are allowed, on every namespace. A call outside its grant is
PERMISSION_DENIED.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import jwt

from threadloom.errors import DocumentServiceError, InvalidArgumentError
from threadloom.nats.codes import UNAUTHENTICATED

log = logging.getLogger("threadloom.nats")

#: The engine's own identities; a module key can never be one of them.
FIRST_PARTY = frozenset({"api", "engine", "dagster"})
#: The identities the engine lets list namespaces.
PLATFORM = frozenset({"api", "engine"})
#: Longest token lifetime (`exp - iat`) accepted by default: the engine issues tokens of
#: one hour; five minutes more for issuers that add a margin.
MAX_TOKEN_LIFETIME = 3600 + 300
#: Longest namespace name (UTF-8 bytes) by default; naas sets none, PostgreSQL and most
#: file systems stop at about this much.
MAX_NAMESPACE_BYTES = 255


def authenticate(token: str | None, secret: str, max_lifetime: int = MAX_TOKEN_LIFETIME) -> str:
    """Return the identity (`sub`) of a valid HS256 service or module token.

    Args:
        token: the request's `Nats-Auth-Token`.
        secret: the project secret.
        max_lifetime: most seconds between the token's `iat` and `exp`.

    Raises:
        DocumentServiceError: UNAUTHENTICATED for anything else (SPEC §7.3), also a token that
            lives longer than `max_lifetime` or lacks `iat` or `exp`.
    """
    if not token:
        raise DocumentServiceError("UNAUTHENTICATED", UNAUTHENTICATED)
    try:
        header = jwt.get_unverified_header(token)
        key = secret
        if header.get("kid") == "module":
            claimed = jwt.decode(token, options={"verify_signature": False}).get("sub")
            if not isinstance(claimed, str) or not claimed or claimed in FIRST_PARTY:
                raise DocumentServiceError("UNAUTHENTICATED", UNAUTHENTICATED)
            digest = hmac.new(
                secret.encode(), f"abi.module-key.v1:{claimed}".encode(), hashlib.sha256
            ).digest()
            key = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
        claims = jwt.decode(
            token,
            key,
            algorithms=["HS256"],
            options={"require": ["sub", "exp", "iat"], "verify_aud": False},
        )
    except jwt.PyJWTError:
        raise DocumentServiceError("UNAUTHENTICATED", UNAUTHENTICATED) from None
    if "aud" in claims or not isinstance(claims.get("sub"), str) or not claims["sub"]:
        raise DocumentServiceError("UNAUTHENTICATED", UNAUTHENTICATED)
    lifetime = claims["exp"] - claims["iat"]  # both integers (PyJWT checked them)
    if lifetime > max_lifetime:
        log.info(
            "refused a token of %r living %d s (at most %d s, --max-token-lifetime)",
            claims["sub"],
            lifetime,
            max_lifetime,
        )
        raise DocumentServiceError("UNAUTHENTICATED", UNAUTHENTICATED)
    return str(claims["sub"])


class Grants:
    """Which identities may use which namespaces.

    Args:
        rules: identity (or `*`) -> namespaces (exact, or a prefix ending in `*`).

    Raises:
        InvalidArgumentError: an empty identity or namespace, a `*` before the end, a
            namespace longer than `max_namespace_bytes`.
    """

    def __init__(
        self,
        rules: Mapping[str, Sequence[str]],
        *,
        max_namespace_bytes: int = MAX_NAMESPACE_BYTES,
    ) -> None:
        self._exact: dict[str, frozenset[str]] = {}
        self._prefixes: dict[str, tuple[str, ...]] = {}
        for identity, namespaces in rules.items():
            if not identity or "\0" in identity:
                raise InvalidArgumentError("a grant names an empty identity")
            exact: set[str] = set()
            prefixes: list[str] = []
            for namespace in namespaces:
                if not namespace or "\0" in namespace:
                    raise InvalidArgumentError(
                        f"the grant of {identity!r} names an empty namespace"
                    )
                if "*" in namespace[:-1]:
                    raise InvalidArgumentError(
                        f"grant {identity}={namespace}: only a trailing * is a pattern"
                    )
                if len(namespace.rstrip("*").encode()) > max_namespace_bytes:
                    raise InvalidArgumentError(
                        f"grant {identity}=...: namespaces are at most {max_namespace_bytes} bytes"
                    )
                if namespace.endswith("*"):
                    prefixes.append(namespace[:-1])
                else:
                    exact.add(namespace)
            self._exact[identity] = frozenset(exact) | self._exact.get(identity, frozenset())
            self._prefixes[identity] = (*self._prefixes.get(identity, ()), *prefixes)

    @classmethod
    def platform(cls) -> Grants:
        """The default: the engine's own identities, on every namespace."""
        return cls({identity: ["*"] for identity in sorted(FIRST_PARTY)})

    @classmethod
    def parse(cls, specs: Iterable[str], **options: int) -> Grants:
        """Grants from `IDENTITY=NS[,NS...]` texts (`--grant`, lines of a grants file).

        Raises:
            InvalidArgumentError: a text without `=` or with an empty side.
        """
        rules: dict[str, list[str]] = {}
        for spec in specs:
            identity, sep, namespaces = spec.partition("=")
            identity = identity.strip()
            names = [n.strip() for n in namespaces.split(",")]
            if not sep or not identity or not all(names):
                raise InvalidArgumentError(
                    f"grant {spec!r}: write IDENTITY=NAMESPACE[,NAMESPACE...] "
                    "(a trailing * is a prefix, * alone every namespace)"
                )
            rules.setdefault(identity, []).extend(names)
        return cls(rules, **options)

    @staticmethod
    def read(path: str | Path) -> list[str]:
        """The grant texts of a grants file: one `IDENTITY=NS[,NS...]` a line, `#` comments.

        Raises:
            InvalidArgumentError: the file cannot be read.
        """
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidArgumentError(
                f"cannot read the grants file {str(path)!r}: {exc}"
            ) from None
        lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
        return [line for line in lines if line]

    def _rules(self, identity: str) -> list[tuple[frozenset[str], tuple[str, ...]]]:
        return [
            (self._exact.get(who, frozenset()), self._prefixes.get(who, ()))
            for who in (identity, "*")
        ]

    def holds(self, identity: str) -> bool:
        """True when `identity` has any grant at all."""
        return any(exact or prefixes for exact, prefixes in self._rules(identity))

    def allows(self, identity: str, namespace: str) -> bool:
        """True when `identity` may use `namespace`."""
        return any(
            namespace in exact or any(namespace.startswith(p) for p in prefixes)
            for exact, prefixes in self._rules(identity)
        )

    def describe(self) -> list[str]:
        """The grants as `IDENTITY=NS,...` texts, sorted (for logs and `ready`)."""
        out = []
        for identity in sorted(set(self._exact) | set(self._prefixes)):
            names = sorted(self._exact.get(identity, ())) + [
                p + "*" for p in sorted(self._prefixes.get(identity, ()))
            ]
            if names:
                out.append(f"{identity}={','.join(names)}")
        return out
