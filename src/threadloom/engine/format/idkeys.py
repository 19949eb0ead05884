"""Task ids as the `writes` table stores them: a UUID as 17 bytes (format 12, docs/FORMAT.md).

Engine layer, pure functions (no SQL). LangGraph names a task by a UUID in its canonical
text (36 characters: 32 lowercase hex digits in groups of 8-4-4-4-12), and every pending
write's row and its place in the table's key held those 36 characters. Stored as a key
it takes 17 bytes: `\\x01`, then the 16 bytes the hex digits spell.

    key("1ef4f797-8335-6428-8001-8a1503f9b875") == b"\\x01" + bytes.fromhex("1ef4...b875")

Any other task id (uppercase hex, braces, another length, "task-1") stays text in the
same column (`writes.task_key` has no type of its own: `ANY` in a STRICT table), so
`text(key(task_id)) == task_id` for every string. The prefix byte keeps these keys apart
from `vals` ref keys (refkeys.py: a letter or NUL first), so a seal turns either kind of
blob back into its text (`seal._part`).

SQLite orders a BLOB after every TEXT, so the table no longer orders a checkpoint's
writes by task id when UUIDs and other ids mix in one checkpoint: readers order by the
text (`tl_task_id` in SQL, or in Python), never by the stored key.

Documents never see keys: every statement binds `key(task_id)` and reads back
`text(stored)`; seals bind the text, so a row's seal does not depend on how its task id
is stored.
"""

from __future__ import annotations

from typing import Final

#: Name of the SQL function `tl_task_key(task_id)`: `key` (the format-12 migration's).
SQL_KEY: Final = "tl_task_key"
#: Name of the SQL function `tl_task_id(stored)`: `text` (what readers order by).
SQL_TEXT: Final = "tl_task_id"
#: The first byte of a stored UUID.
UUID: Final = 1
_PREFIX: Final = bytes((UUID,))
_LENGTH: Final = 17


def key(task_id: str) -> bytes | str:
    """The stored form of `task_id`: 17 bytes for a canonical UUID, else the text itself."""
    if (
        len(task_id) == 36
        and task_id[8] == "-"
        and task_id[13] == "-"
        and task_id[18] == "-"
        and task_id[23] == "-"
    ):
        digits = task_id.replace("-", "")
        try:
            raw = bytes.fromhex(digits)
        except ValueError:
            return task_id
        # bytes.fromhex takes uppercase and spaces too, and more dashes leave fewer
        # digits: only the canonical form (exactly 32 lowercase digits) converts.
        if len(raw) == 16 and raw.hex() == digits:
            return _PREFIX + raw
    return task_id


def is_key(stored: object) -> bool:
    """Whether `stored` is a stored UUID (a blob of the key's shape)."""
    return type(stored) is bytes and len(stored) == _LENGTH and stored[0] == UUID


def text(stored: bytes | str) -> str:
    """The task id `stored` holds. A damaged value still yields a string (never an
    exception): the row's seal, bound to the id as written, then fails and names it."""
    if isinstance(stored, str):
        return stored
    if len(stored) == _LENGTH and stored[0] == UUID:
        h = stored[1:].hex()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    return bytes(stored).decode("utf-8", "replace")


def sql_key(task_id: object) -> object:
    """`tl_task_key` as SQL sees it, given a task id's bytes (`CAST(task_id AS BLOB)`):
    the key of the text they spell. Bytes that are not UTF-8 (a damaged row) are kept as
    they are, so the migration goes through and the row's seal fails on the text they
    read as (`text` replaces what cannot be decoded): `verify` then names the row."""
    if isinstance(task_id, bytes):
        try:
            return key(task_id.decode("utf-8", "surrogatepass"))
        except UnicodeDecodeError:
            return task_id
    return key(task_id) if type(task_id) is str else task_id


def sql_text(stored: object) -> object:
    """`tl_task_id` as SQL sees it: the text of a stored id (NULL stays NULL)."""
    if stored is None or type(stored) is str:
        return stored
    return text(stored) if isinstance(stored, bytes) else str(stored)
