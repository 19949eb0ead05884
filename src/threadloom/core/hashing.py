"""SHA-256 over concatenated byte strings, the digest every protocol ref uses.

Pure functions on hashlib, whichever backend `threadloom.core` uses: hashing parts in turn
avoids joining them, and OpenSSL already uses SHA-NI where the CPU has it. The batch
functions of `threadloom.core` (`list_refs`, `value_blob_refs`) are what the C core speeds up.
"""

from __future__ import annotations

import hashlib


def sha256_hex(*chunks: bytes) -> str:
    """Return the lowercase hex SHA-256 of the concatenation of `chunks`."""
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()
