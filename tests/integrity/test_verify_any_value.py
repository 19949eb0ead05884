"""`verify` runs every check to its end whatever one row holds, and calls any value the
saver and the Store accept sound (issue: a metadata key that is not a string ended the
row check with "the check could not finish", hiding damage in other threads)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.base import empty_checkpoint

from threadloom import Saver, Store
from threadloom.engine.checks import verify
from threadloom.engine.format import keys as format_keys
from threadloom.engine.items import MAX_NESTING
from threadloom.errors import InvalidValueError


def _put(saver: Saver, thread_id: str, metadata: dict[Any, Any], values: Any = None) -> None:
    checkpoint = empty_checkpoint()
    if values is not None:
        checkpoint["channel_values"] = {"state": values}
        checkpoint["channel_versions"] = {"state": 1}
    saver.put(
        {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}},
        checkpoint,
        metadata,
        {"state": 1} if values is not None else {},
    )


def test_metadata_with_an_integer_key_verifies_sound(tmp_path: Path) -> None:
    """The reported case: `{1: "x"}` is stored and read back exactly; verify exits 0."""
    path = tmp_path / "m.db"
    saver = Saver(str(path))
    try:
        _put(saver, "t", {1: "x", "source": "input", "step": -1})
        config = {"configurable": {"thread_id": "t"}}
        assert saver.get_tuple(config).metadata == {1: "x", "source": "input", "step": -1}
    finally:
        saver.close()
    done = subprocess.run(
        [sys.executable, "-m", "threadloom", "verify", "--db", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "sound" in done.stdout


def test_a_row_the_check_cannot_read_does_not_hide_other_damage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One row whose key check raises is one problem; the row check goes on to the next
    thread and still finds a value missing there."""
    path = tmp_path / "m.db"
    saver = Saver(str(path))
    try:
        _put(saver, "a-unreadable", {"source": "input", "step": 1})
        _put(
            saver,
            "b-damaged",
            {"source": "input", "step": 1},
            values={"text": "many words " * 2000},
        )
    finally:
        saver.close()
    saver = Saver(str(path))
    try:
        with saver.file.write() as conn:
            conn.execute(
                "DELETE FROM vals WHERE thread = "
                "(SELECT id FROM threads WHERE thread_id = 'b-damaged')"
            )
        real = format_keys.rows_of

        def rows_of(metadata: Any) -> Any:
            if metadata.get("step") == 1 and "unreadable" not in seen:
                seen.add("unreadable")
                raise ValueError("a row this check cannot read")
            return real(metadata)

        seen: set[str] = set()
        monkeypatch.setattr(format_keys, "rows_of", rows_of)
        report = verify(saver.file)
    finally:
        saver.close()
    checks = [p.check for p in report.problems]
    assert "rows" in checks, report.problems
    assert "references" in checks, report.problems
    assert not any("could not finish" in str(p) for p in report.problems)


_keys = st.one_of(
    st.text(max_size=8),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False),
)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.binary(max_size=8),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=12,
)
_metadata = st.dictionaries(_keys, _values, max_size=5)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(metadatas=st.lists(_metadata, min_size=1, max_size=4))
def test_any_metadata_the_saver_takes_verifies_sound(
    tmp_path_factory: pytest.TempPathFactory, metadatas: list[dict[Any, Any]]
) -> None:
    path = tmp_path_factory.mktemp("verify") / "m.db"
    saver = Saver(str(path))
    try:
        for n, metadata in enumerate(metadatas):
            _put(saver, f"t{n % 2}", metadata, values={"n": n})
        report = verify(saver.file)
    finally:
        saver.close()
    assert report.sound, report.problems


_json = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False),
        st.text(max_size=12),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=16,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(values=st.lists(st.dictionaries(st.text(max_size=6), _json, max_size=4), max_size=4))
def test_any_store_value_verifies_sound(
    tmp_path_factory: pytest.TempPathFactory, values: list[dict[str, Any]]
) -> None:
    path = tmp_path_factory.mktemp("verify") / "m.db"
    store = Store(str(path))
    try:
        for n, value in enumerate(values):
            store.put(("docs", str(n % 2)), f"k{n}", value)
    finally:
        store.close()
    saver = Saver(str(path))
    try:
        report = verify(saver.file)
    finally:
        saver.close()
    assert report.sound, report.problems


def _nested(levels: int) -> dict[str, Any]:
    """A value `levels` objects and lists deep (the value itself is level 1)."""
    value: Any = {"leaf": "deepest words"}
    for n in range(levels - 1):
        value = [value] if n == 5 else {"a": value}
    return {**value, "tag": "deep"}


def _depth(value: Any) -> int:
    depth = 0
    level = [value]
    while level:
        depth += 1
        level = [
            child
            for node in level
            if isinstance(node, (dict, list))
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, (dict, list))
        ]
    return depth


def _deep_stack(frames: int, then: Any) -> Any:
    """Call `then` with `frames` more frames on the stack (an agent's call depth)."""
    return then() if frames == 0 else _deep_stack(frames - 1, then)


def test_values_nested_to_the_limit_do_everything_and_one_more_is_refused(
    tmp_path: Path,
) -> None:
    """At MAX_NESTING a value is put, read, searched, deleted and verified even from a
    deep call stack; one level deeper `put` refuses it, naming the limit, and writes
    nothing."""
    deepest = _nested(MAX_NESTING)
    assert _depth(deepest) == MAX_NESTING
    path = tmp_path / "m.db"
    store = Store(str(path))
    try:
        _deep_stack(300, lambda: store.put(("deep",), "k", deepest))
        item = store.get(("deep",), "k")
        assert item is not None and item.value == deepest
        assert [i.key for i in store.search(("deep",), filter={"tag": "deep"})] == ["k"]
        with pytest.raises(InvalidValueError, match=f"at most {MAX_NESTING} levels"):
            store.put(("deep",), "too", {"x": deepest})
        assert store.get(("deep",), "too") is None
        saver = Saver(str(path))
        try:
            assert _deep_stack(300, lambda: verify(saver.file)).sound
        finally:
            saver.close()
        _deep_stack(300, lambda: store.delete(("deep",), "k"))
        assert store.get(("deep",), "k") is None
    finally:
        store.close()


def test_a_value_thousands_deep_is_refused_not_a_recursion_error(tmp_path: Path) -> None:
    value: Any = "x"
    for _ in range(50_000):
        value = [value]
    store = Store(str(tmp_path / "m.db"))
    try:
        with pytest.raises(InvalidValueError, match="flatten"):
            store.put(("deep",), "k", {"v": value})
    finally:
        store.close()
