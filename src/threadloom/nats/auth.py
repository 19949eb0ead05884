"""Credentials for the document service: a token, or a secret that signs them (SPEC §7.3).

A token is an HS256 JWT with claims `sub` (the identity), `iat` and `exp`, signed with the
project's secret (`nats.jwt_secret`); the engine's own identities are `api`, `engine` and
`dagster`. With a secret, tokens are issued on demand and renewed before they expire.
"""

from __future__ import annotations

import threading
import time

try:
    import jwt
except ImportError as error:  # pragma: no cover - the `nats` extra is missing
    raise ImportError(
        "threadloom.nats needs the `nats` extra: pip install '.[nats]' in threadloom's clone"
    ) from error

from threadloom.errors import InvalidArgumentError

#: Lifetime of an issued token (the engine's default).
TOKEN_TTL = 3600
#: A token this close to its expiry is replaced.
RENEW_BEFORE = 120


def issue_token(secret: str, identity: str, ttl: int = TOKEN_TTL, now: float | None = None) -> str:
    """Return an HS256 token for `identity` signed with `secret`, valid `ttl` seconds."""
    issued = int(now if now is not None else time.time())
    return jwt.encode({"sub": identity, "iat": issued, "exp": issued + ttl}, secret, "HS256")


class Credentials:
    """What authenticates requests: a fixed `token`, or a `secret` and `identity`.

    Raises:
        InvalidArgumentError: neither or both of token and secret, or an empty identity.
    """

    def __init__(
        self,
        *,
        token: str | None = None,
        secret: str | None = None,
        identity: str = "api",
        ttl: int = TOKEN_TTL,
    ) -> None:
        if (token is None) == (secret is None):
            raise InvalidArgumentError(
                "give either a token or a JWT secret (with an identity), not both or neither"
            )
        if token is not None and not token:
            raise InvalidArgumentError("the token is empty")
        if secret is not None and not secret:
            raise InvalidArgumentError("the JWT secret is empty")
        if not identity:
            raise InvalidArgumentError("the identity (the token's subject) is empty")
        self._token = token
        self._secret = secret
        self.identity = identity
        self.ttl = ttl
        self._expires = 0.0
        self._lock = threading.Lock()

    def token(self) -> str:
        """The token to send now (issued again when the last one nears its expiry)."""
        if self._secret is None:
            assert self._token is not None
            return self._token
        with self._lock:
            now = time.time()
            if self._token is None or now > self._expires - RENEW_BEFORE:
                self._token = issue_token(self._secret, self.identity, self.ttl, now)
                self._expires = now + self.ttl
            return self._token

    def __repr__(self) -> str:  # never print a secret or a token
        kind = "secret" if self._secret is not None else "token"
        return f"Credentials({kind}, identity={self.identity!r})"
