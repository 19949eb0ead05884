"""Source URLs without their secrets: what a report or an error may show of them.

Adapter layer, pure. A PostgreSQL URL (`postgresql://user:password@host/db`, a
`?password=` parameter, or a libpq `key=value` string) is shown with its password as
`***`; error texts from drivers are scrubbed of the URL and of the password itself
(raw and percent-decoded), whatever they quote.
"""

from __future__ import annotations

import re
import urllib.parse

MASK = "***"
_KEYWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.I)


def passwords(url: str) -> list[str]:
    """Every form of the password `url` carries (none when it has none)."""
    found: list[str] = []
    try:
        parts = urllib.parse.urlsplit(url)
        if parts.password:
            found.append(parts.password)
        for key, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
            if key.lower() == "password" and value:
                found.append(value)
    except ValueError:  # not a URL (a libpq keyword string): the pattern below covers it
        pass
    for match in _KEYWORD.finditer(url):
        found.append(match.group(2).strip("'"))
    forms: list[str] = []
    for secret in found:
        for form in (secret, urllib.parse.quote(secret, safe=""), urllib.parse.unquote(secret)):
            if form and form not in forms:
                forms.append(form)
    return sorted(forms, key=len, reverse=True)


def redact(url: str) -> str:
    """`url` with its password replaced by `***` (user, host, port and database kept)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        parts = None
    if parts is not None and parts.scheme and parts.netloc:
        netloc = parts.netloc
        if parts.password is not None:
            userinfo, _, host = netloc.rpartition("@")
            user = userinfo.split(":", 1)[0]
            netloc = f"{user}:{MASK}@{host}"
        query = urllib.parse.urlencode(
            [
                (k, MASK if k.lower() == "password" else v)
                for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
            ],
            safe="*",
        )
        shown = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    else:
        shown = url
    return scrub(_KEYWORD.sub(lambda m: m.group(1) + MASK, shown), url)


def scrub(text: str, url: str) -> str:
    """`text` on one line, without `url` (shown redacted) and without any form of its
    password."""
    text = " ".join(text.split())
    secrets = passwords(url)
    if secrets and url in text:
        text = text.replace(url, _masked(url, secrets))
    for secret in secrets:
        text = text.replace(secret, MASK)
    return text


def _masked(url: str, secrets: list[str]) -> str:
    for secret in secrets:
        url = url.replace(secret, MASK)
    return url
