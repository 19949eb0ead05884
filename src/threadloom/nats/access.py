"""Who may call `threadloom serve`: the tokens it accepts (SPEC §7.3).

Outer layer (nats). A token is an HS256 JWT with `sub`, `iat` and `exp`, no `aud`, signed
with the project secret, or (header `kid: "module"`) with the module key derived from it
for a non-first-party identity. Every refusal is UNAUTHENTICATED with the fixed text.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

import jwt

from threadloom.nats.codes import UNAUTHENTICATED, ServiceError

#: The engine's own identities; a module key can never be one of them.
FIRST_PARTY = frozenset({"api", "engine", "dagster"})
#: The identities the engine lets list namespaces.
PLATFORM = frozenset({"api", "engine"})


def authenticate(token: str | None, secret: str) -> str:
    """Return the identity (`sub`) of a valid HS256 service or module token.

    Raises:
        ServiceError: UNAUTHENTICATED for anything else (SPEC §7.3).
    """
    if not token:
        raise ServiceError("UNAUTHENTICATED", UNAUTHENTICATED)
    try:
        header = jwt.get_unverified_header(token)
        key = secret
        if header.get("kid") == "module":
            claimed = jwt.decode(token, options={"verify_signature": False}).get("sub")
            if not isinstance(claimed, str) or not claimed or claimed in FIRST_PARTY:
                raise ServiceError("UNAUTHENTICATED", UNAUTHENTICATED)
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
        raise ServiceError("UNAUTHENTICATED", UNAUTHENTICATED) from None
    if "aud" in claims or not isinstance(claims.get("sub"), str) or not claims["sub"]:
        raise ServiceError("UNAUTHENTICATED", UNAUTHENTICATED)
    return str(claims["sub"])
