"""Memory helpers: content keys, the profile merge rule, owner label encoding, their docs."""

from __future__ import annotations

import asyncio
import copy
import doctest
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langgraph.store.base import BaseStore

from threadloom.errors import InvalidArgumentError, ThreadloomError
from threadloom.langgraph import memories
from threadloom.langgraph.memories import (
    aupdate_profile,
    decode_label,
    encode_label,
    memory_key,
    merge_profile,
    normalize_memory_text,
    update_profile,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "store.md"
NS = ("acme", "user", "u-1", "facts")

# --- memory_key ----------------------------------------------------------------------------


def test_memory_key_is_pinned() -> None:
    """Keys are blake3-128 hex of the normalized UTF-8 and never change between versions."""
    assert memory_key("Prefers tea") == "2683be0326bf330448a57871973c10a4"
    text = "  Lives in ＭÜNCHEN,\tnear the\u00a0ﬁre station "
    assert normalize_memory_text(text) == "lives in münchen, near the fire station"
    assert memory_key(text) == "67083524e530e153c1316305d2b39319"


def test_memory_key_is_the_same_in_another_process() -> None:
    """A fresh interpreter with another hash seed computes the same key."""
    code = "from threadloom.langgraph.memories import memory_key; print(memory_key('Straße  Ａ'))"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert done.stdout.strip() == memory_key("strasse a")


@pytest.mark.parametrize(
    "variant",
    [
        "prefers tea",
        "PREFERS TEA",
        "  prefers\t\n tea  ",
        "prefers\u00a0tea",  # no-break space (NFKC: a space)
        "ｐｒｅｆｅｒｓ ｔｅａ",  # full-width letters
        "Prefers\u3000Tea",  # ideographic space
    ],
)
def test_memory_key_folds_case_width_and_whitespace(variant: str) -> None:
    """Case, compatibility forms and whitespace runs do not change the key."""
    assert memory_key(variant) == memory_key("Prefers tea")


@pytest.mark.parametrize(
    "other",
    ["Prefers tea.", "tea prefers", "Préfers tea", "Prefers\u200btea", "Prefers ’tea’"],
)
def test_memory_key_keeps_punctuation_order_accents_and_invisible_characters(other: str) -> None:
    """Punctuation, word order, accents, zero-width and quote characters give another key."""
    assert memory_key(other) != memory_key("Prefers tea")


def test_memory_key_folds_sharp_s_and_ligatures() -> None:
    """Casefolding maps ß to ss and NFKC maps the ﬁ ligature to fi."""
    assert normalize_memory_text("Straße ﬁle") == "strasse file"


def test_memory_key_refuses_empty_and_non_text() -> None:
    """Whitespace-only text is a ValueError, a non-str an InvalidArgumentError (a TypeError)."""
    with pytest.raises(ValueError, match="empty"):
        memory_key(" \t\u00a0\n")
    with pytest.raises(InvalidArgumentError):
        memory_key(b"tea")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        memory_key(None)  # type: ignore[arg-type]


@given(st.text())
def test_normalization_is_idempotent(text: str) -> None:
    """Normalizing normalized text changes nothing, so a stored text re-keys to its key."""
    once = normalize_memory_text(text)
    assert normalize_memory_text(once) == once
    assert once == once.strip() and "  " not in once


@given(st.text().filter(lambda t: normalize_memory_text(t) != ""))
def test_memory_keys_are_32_lowercase_hex_digits(text: str) -> None:
    """Every key is 32 lowercase hex digits (128 bits)."""
    assert re.fullmatch(r"[0-9a-f]{32}", memory_key(text))


def test_saving_a_fact_twice_upserts_one_item(store: BaseStore) -> None:
    """Putting two spellings of one fact under their memory keys leaves one item."""
    for text in ("Prefers tea", "  prefers TEA"):
        store.put(NS, memory_key(text), {"text": text})
    store.put(NS, memory_key("Prefers coffee"), {"text": "Prefers coffee"})
    found = store.search(NS, limit=10)
    assert sorted(item.value["text"] for item in found) == ["  prefers TEA", "Prefers coffee"]


# --- merge_profile -------------------------------------------------------------------------


def test_merge_profile_applies_the_written_rule() -> None:
    """Patch wins, None deletes, arrays union in order, nested objects are replaced."""
    current = {
        "name": "Ada",
        "tz": "UTC",
        "langs": ["en", "de"],
        "prefs": {"tea": True, "milk": False},
        "tags": "not an array",
    }
    patch = {
        "name": "Ada L.",
        "tz": None,
        "langs": ["fr", "en", "fr"],
        "prefs": {"coffee": True},
        "tags": ["a"],
        "missing": None,
        "new": 3,
    }
    assert merge_profile(current, patch) == {
        "name": "Ada L.",
        "langs": ["en", "de", "fr"],
        "prefs": {"coffee": True},
        "tags": ["a"],
        "new": 3,
    }


def test_merge_profile_compares_array_elements_as_json_values() -> None:
    """Dicts match whatever their key order, 1 matches 1.0, but true is not 1 and "1" is not 1."""
    current = {"xs": [{"a": 1, "b": 2}, 1, True]}
    patch = {"xs": [{"b": 2, "a": 1}, 1.0, 1, True, "1", False, 0, [1], [True]]}
    assert merge_profile(current, patch)["xs"] == [
        {"a": 1, "b": 2},
        1,
        True,
        "1",
        False,
        0,
        [1],
        [True],
    ]


def test_merge_profile_from_nothing_and_with_an_empty_patch() -> None:
    """None as current is an empty profile; an empty patch returns an equal copy."""
    assert merge_profile(None, {"a": 1, "b": None}) == {"a": 1}
    current = {"a": [1], "b": {"c": 2}}
    same = merge_profile(current, {})
    assert same == current and same is not current and same["b"] is not current["b"]


def test_merge_profile_result_shares_nothing_with_its_inputs() -> None:
    """Changing the result afterwards changes neither the current profile nor the patch."""
    current = {"langs": ["en"], "prefs": {"tea": True}, "keep": {"deep": [1]}}
    patch = {"langs": [{"x": 1}], "prefs": {"coffee": [1]}}
    before = copy.deepcopy((current, patch))
    merged = merge_profile(current, patch)
    merged["langs"][1]["x"] = 2
    merged["prefs"]["coffee"].append(2)
    merged["keep"]["deep"].append(2)
    merged["langs"].append("de")
    assert (current, patch) == before


JSON_SCALARS = st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["a", "b", "1"])
JSON = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from("xyz"), inner),
    max_leaves=8,
)
KEYS = st.sampled_from(["k1", "k2", "k3", "k4", "k5"])
PROFILES = st.dictionaries(KEYS, JSON, max_size=5)


def canon(value: Any) -> str:
    """A JSON text that is equal for equal JSON values (no floats are generated)."""
    return json.dumps(value, sort_keys=True)


@given(PROFILES, PROFILES)
def test_merge_profile_rule_holds_key_by_key(
    current: dict[str, Any], patch: dict[str, Any]
) -> None:
    """Every key of the result follows the rule, and the inputs are left as they were."""
    before = canon([current, patch])
    merged = merge_profile(current, patch)
    assert canon([current, patch]) == before
    deleted = {key for key, value in patch.items() if value is None}
    assert set(merged) == (set(current) | set(patch)) - deleted
    for key, value in merged.items():
        if key not in patch:
            assert canon(value) == canon(current[key])
        elif not isinstance(patch[key], list):
            assert canon(value) == canon(patch[key])
        else:
            old = current.get(key)
            old = old if isinstance(old, list) else []
            assert canon(value[: len(old)]) == canon(old)
            added = [canon(element) for element in value[len(old) :]]
            assert len(added) == len(set(added))
            assert not set(added) & {canon(element) for element in old}
            assert set(added) | {canon(e) for e in old} == {canon(e) for e in old + patch[key]}


@given(PROFILES, PROFILES)
def test_merge_profile_is_idempotent(current: dict[str, Any], patch: dict[str, Any]) -> None:
    """Applying the same patch twice gives what applying it once gives."""
    once = merge_profile(current, patch)
    assert canon(merge_profile(once, patch)) == canon(once)


@given(PROFILES)
def test_merge_profile_with_none_is_merge_with_empty(patch: dict[str, Any]) -> None:
    """A missing profile is an empty one."""
    assert canon(merge_profile(None, patch)) == canon(merge_profile({}, patch))


def test_update_profile_reads_merges_and_writes(store: BaseStore) -> None:
    """update_profile stores the merged profile under the key and returns a copy of it."""
    ns = ("acme", "user", "u-1")
    update_profile(store, ns, {"name": "Ada", "langs": ["en"], "tz": "UTC"})
    got = update_profile(store, ns, {"langs": ["fr"], "tz": None})
    assert got == {"name": "Ada", "langs": ["en", "fr"]}
    item = store.get(ns, "profile")
    assert item is not None and item.value == got
    got["langs"].append("xx")
    stored = store.get(ns, "profile")
    assert stored is not None and stored.value["langs"] == ["en", "fr"]
    update_profile(store, ns, {"other": 1}, key="settings")
    settings_item = store.get(ns, "settings")
    assert settings_item is not None and settings_item.value == {"other": 1}


def test_aupdate_profile_reads_merges_and_writes(store: BaseStore) -> None:
    """The async twin follows the same rule through aget and aput."""
    ns = ("acme", "user", "u-2")

    async def run() -> dict[str, Any]:
        await aupdate_profile(store, ns, {"langs": ["en"], "pet": {"cat": 1}})
        return await aupdate_profile(store, ns, {"langs": ["en", "de"], "pet": {"dog": 1}})

    assert asyncio.run(run()) == {"langs": ["en", "de"], "pet": {"dog": 1}}
    item = store.get(ns, "profile")
    assert item is not None and item.value == {"langs": ["en", "de"], "pet": {"dog": 1}}


# --- owner label encoding ------------------------------------------------------------------

LABELS = st.text() | st.sampled_from(["", ".", "~", "~~", "*", "%", "%2E", "~%2E", "a.b", "~a%2Eb"])


@given(LABELS)
def test_encoding_is_reversible_and_a_valid_label(label: str) -> None:
    """An encoded owner label decodes back, is never empty and never holds '.' or NUL."""
    encoded = encode_label(label)
    assert decode_label(encoded) == label
    assert encoded and "." not in encoded and "\x00" not in encoded and encoded != "*"


@given(LABELS, LABELS)
def test_encoding_is_injective(a: str, b: str) -> None:
    """Two different owner labels never encode alike."""
    if a != b:
        assert encode_label(a) != encode_label(b)


@given(LABELS)
def test_plain_labels_stay_plain_and_the_rest_are_marked(label: str) -> None:
    """A label that needs no encoding is unchanged; every other one starts with the mark."""
    needs = not label or label == "*" or label.startswith("~") or "." in label or "\x00" in label
    encoded = encode_label(label)
    assert (encoded != label) == needs
    assert encoded.startswith("~") == needs


def test_encoding_examples() -> None:
    """The documented examples: an email, the empty label, '*', and a label that looks encoded."""
    assert encode_label("ada@example.com") == "~ada@example%2Ecom"
    assert encode_label("") == "~"
    assert encode_label("*") == "~*"
    assert encode_label("50%.off") == "~50%25%2Eoff"
    assert encode_label("~ada@example%2Ecom") == "~~ada@example%252Ecom"


@pytest.mark.parametrize("bad", ["~abc", "~%41", "~%2e", "~%", "~a.b", "a.b", "", "*"])
def test_decoding_refuses_what_encoding_never_produces(bad: str) -> None:
    """decode_label raises ValueError on text encode_label cannot produce."""
    with pytest.raises(ValueError):
        decode_label(bad)


def test_encoding_refuses_non_text() -> None:
    """An owner label that is not a str is an InvalidArgumentError."""
    with pytest.raises(InvalidArgumentError):
        encode_label(7)  # type: ignore[arg-type]


# --- docs ----------------------------------------------------------------------------------


def test_the_docstring_examples_run() -> None:
    """Every `>>>` example in threadloom.langgraph.memories gives the output it shows."""
    failed, tried = doctest.testmod(memories, optionflags=doctest.ELLIPSIS)
    assert tried >= 20 and failed == 0


def test_the_store_doc_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every python block of docs/store.md runs, and its asserts hold (in a fresh folder:
    the blocks may create files)."""
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S)
    assert len(blocks) >= 3
    for number, block in enumerate(blocks, 1):
        exec(compile(block, f"{DOCS} (python block {number})", "exec"), {})


def test_the_store_doc_has_its_sections() -> None:
    """docs/store.md has the "Memory helpers" and "Isolation: one owner's view" sections."""
    headings = re.findall(r"^#+ (.+)$", DOCS.read_text(), re.M)
    assert "Memory helpers" in headings and "Isolation: one owner's view" in headings


def test_errors_share_the_root() -> None:
    """OutsideOwnerError is a ThreadloomError and a LangGraph InvalidNamespaceError."""
    from langgraph.store.base import InvalidNamespaceError

    assert issubclass(memories.OutsideOwnerError, ThreadloomError)
    assert issubclass(memories.OutsideOwnerError, InvalidNamespaceError)
    assert issubclass(memories.OutsideOwnerError, ValueError)


def test_the_package_exports_the_helpers() -> None:
    """`threadloom.OwnerStore`, `memory_key` and the profile helpers are the memories ones."""
    import threadloom

    for name in ("OwnerStore", "OutsideOwnerError", "memory_key", "merge_profile"):
        assert getattr(threadloom, name) is getattr(memories, name) and name in dir(threadloom)
    assert threadloom.update_profile is update_profile
    assert threadloom.aupdate_profile is aupdate_profile
