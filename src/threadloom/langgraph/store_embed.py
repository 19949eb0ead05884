"""The Store's embedder: who it is, and embedding through the file's cache.

Adapter layer, beside `store.py`. `Embedder.embed` embeds only the texts the file's
embedding cache (engine/items/embedded.py) does not hold for this embedder, each distinct
text once, outside any transaction; the keys it returns go with the vectors to the write,
which records them. The cache is keyed by the embedder's identity (`identity`), formed
once when the store opens:

- `index["embed_id"]`, when given: the application's name for the embedder (change it
  when the embedder's output changes);
- a provider string (`"openai:text-embedding-3-small"`): that string;
- a module-level function: its module, name and a digest of its code (constants and
  nested code included, not line numbers), so editing it changes the identity;
- an `Embeddings` object of a module-level class: its class, a digest of its
  `embed_documents` code and its public settings of plain types (str, int, float, bool,
  None; never one named like a key, token, secret or password), e.g. `model`, `dimensions`.

A lambda, a function defined inside another or holding a closure, or any other callable
has no identity that survives a restart: its texts are not cached (embedded every time,
as before), unless `embed_id` names it. The dims are part of every identity.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Mapping, Sequence
from typing import Any, Final

import blake3
from langgraph.store.base.embed import EmbeddingsLambda

from threadloom.engine import File
from threadloom.engine.items import READS, cached_vectors, embedding_key
from threadloom.errors import InvalidArgumentError

#: Settings of an embedder left out of its identity: they name credentials, not models.
_SECRET: Final = ("key", "token", "secret", "password", "credential", "auth")
_PLAIN: Final = (str, int, float, bool, type(None))


def _code_digest(code: types.CodeType) -> str:
    """A digest of what a code object does: its bytecode, names and constants (nested
    code objects by their own digests), not its file or line numbers."""
    hasher = blake3.blake3(code.co_code)
    hasher.update(repr((code.co_names, code.co_varnames, code.co_freevars)).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            hasher.update(_code_digest(const).encode())
        else:
            hasher.update(repr(const).encode("utf-8", "surrogatepass"))
    return hasher.hexdigest(length=16)


def _function(func: Any) -> str | None:
    if not isinstance(func, types.FunctionType):
        return None
    if "<" in func.__qualname__ or func.__closure__:
        return None  # a lambda, a nested function, a closure: nothing names it
    return f"function {func.__module__}.{func.__qualname__} {_code_digest(func.__code__)}"


def _object(embeddings: Any) -> str | None:
    cls = type(embeddings)
    if "<" in cls.__qualname__:
        return None
    parts = [f"class {cls.__module__}.{cls.__qualname__}"]
    method = getattr(cls, "embed_documents", None)
    if isinstance(method, types.FunctionType):
        parts.append(_code_digest(method.__code__))
    settings = getattr(embeddings, "__dict__", {})
    for name in sorted(settings):
        value = settings[name]
        if name.startswith("_") or any(word in name.lower() for word in _SECRET):
            continue
        if isinstance(value, _PLAIN):
            parts.append(f"{name}={value!r}")
    return " ".join(parts)


def identity(index: Mapping[str, Any], embeddings: Any) -> str | None:
    """The identity of the index config's embedder, or None when it cannot be known."""
    dims = f" dims={int(index['dims'])}"
    given = index.get("embed_id")
    if given is not None:
        if not isinstance(given, str) or not given:
            raise InvalidArgumentError(
                f"index 'embed_id' names the embedder: a non-empty str, not {given!r}"
            )
        return f"named {given}{dims}"
    embed = index.get("embed")
    if isinstance(embed, str):
        return f"provider {embed}{dims}"
    if isinstance(embeddings, EmbeddingsLambda):
        found = _function(getattr(embeddings, "func", None) or getattr(embeddings, "afunc", None))
    else:
        found = _object(embeddings)
    return None if found is None else found + dims


class Embedder:
    """A Store's embedder with its identity (None: nothing is cached)."""

    def __init__(self, embeddings: Any, name: str | None) -> None:
        self.embeddings = embeddings
        self.identity = name

    def _plan(
        self, file: File, texts: Sequence[str]
    ) -> tuple[list[bytes] | None, dict[Any, Sequence[float]], list[str]]:
        """(keys or None, vectors known by key or text, the distinct texts to embed)."""
        if self.identity is None:
            return None, {}, list(dict.fromkeys(texts))
        keys = [embedding_key(self.identity, text) for text in texts]
        # One statement, a snapshot by itself: no BEGIN and COMMIT around it.
        with file.connection(READS) as conn:
            known: dict[Any, Sequence[float]] = dict(cached_vectors(conn, keys))
        missing = [t for k, t in zip(keys, texts, strict=True) if k not in known]
        return keys, known, list(dict.fromkeys(missing))

    @staticmethod
    def _done(
        texts: Sequence[str],
        keys: list[bytes] | None,
        known: dict[Any, Sequence[float]],
        asked: list[str],
        got: Sequence[Sequence[float]],
    ) -> tuple[list[Sequence[float]], list[bytes] | None]:
        if len(got) != len(asked):
            raise InvalidArgumentError(
                f"the embedder returned {len(got)} vectors for {len(asked)} texts"
            )
        fresh = dict(zip(asked, got, strict=True))
        if keys is None:
            return [fresh[t] for t in texts], None
        return [known.get(k) or fresh[t] for k, t in zip(keys, texts, strict=True)], keys

    def embed(
        self, file: File, texts: Sequence[str]
    ) -> tuple[list[Sequence[float]], list[bytes] | None]:
        """The vectors of `texts` (the cache's, else `embed_documents` of each distinct
        text once) and their cache keys (None: not cached)."""
        keys, known, asked = self._plan(file, texts)
        got = self.embeddings.embed_documents(asked) if asked else []
        return self._done(texts, keys, known, asked, got)

    async def aembed(
        self, file: File, texts: Sequence[str]
    ) -> tuple[list[Sequence[float]], list[bytes] | None]:
        """`embed` with `aembed_documents` (the cache read on a worker thread)."""
        keys, known, asked = await asyncio.to_thread(self._plan, file, texts)
        got = await self.embeddings.aembed_documents(asked) if asked else []
        return self._done(texts, keys, known, asked, got)
