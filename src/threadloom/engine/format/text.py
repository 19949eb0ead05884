"""The Store's text index: its tokenizer, query expressions and relevance score.

Engine layer, no I/O of its own. `store_text` (FTS5, contentless, rowid = item id)
holds the indexed text of each item, and `store_items.text_terms` how many distinct tokens
that text has. A text search matches every item holding at least one of the query's
tokens and scores it

    score = |Q ∩ D| / sqrt(|Q| · |D|)

with Q the distinct tokens of the query and D those of the item's indexed text: the
cosine similarity of the two token sets (Ochiai). It is in (0, 1]; it is 1.0 exactly when
the item's text has the same tokens as the query (same words, any order, case and
diacritics folded), and it falls as either side holds tokens the other lacks. So
"score >= 0.9 means the same fact" holds for texts that differ by at most a word in
ten-odd, and a long text containing the query's words scores low. Hits are ordered by
score, then newest first. |Q ∩ D| is counted in SQL, one FTS5 match per query token
grouped by item (engine/items/recall.py), so a common word costs no Python per match.

Hybrid search (engine/items/fusion.py) ranks the same matches by FTS5's BM25 instead,
which weighs a rare token (a code, an id) above common words, and matches the query as
a phrase (`phrase`) to find exact hits.
"""

from __future__ import annotations

from typing import Final

import blake3

#: The tokenizer `store_text` declares (and the one queries are split with).
TOKENIZER: Final = ("unicode61", ("remove_diacritics", "2"))


#: Bytes of an item's text digest (`store_items.text_digest`, format 13).
DIGEST_BYTES: Final = 8


def digest(text: str) -> bytes:
    """The digest of an item's indexed text as `store_text` holds it (its texts joined
    by newlines): a put whose text has the digest stored leaves the text entry as it is."""
    return blake3.blake3(text.encode("utf-8", "surrogatepass")).digest(length=DIGEST_BYTES)


def holds(terms: int | None, stored: bytes | None, found: bytes) -> bool:
    """Whether an item's text entry holds the text whose digest is `found`: the item has
    an entry (`text_terms` not NULL; a digest without one says nothing) and its recorded
    digest (`text_digest`) is `found`."""
    return terms is not None and stored is not None and bytes(stored) == found


def expression(tokens: list[str]) -> str:
    """An FTS5 query matching rows holding any of `tokens` (each quoted: no operators)."""
    quoted = ['"' + token.replace('"', '""') + '"' for token in dict.fromkeys(tokens)]
    return " OR ".join(quoted)


def phrase(tokens: list[str]) -> str:
    """An FTS5 query matching rows holding `tokens` adjacent and in this order."""
    return '"' + " ".join(tokens).replace('"', '""') + '"'
