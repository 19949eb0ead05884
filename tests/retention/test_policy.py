"""RetentionPolicy: the defaults are naas's, and a policy that makes no sense is refused
with a message saying what to pass, before anything is read or changed."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from tests.engine.test_graphs import agent_graph, thread
from tests.retention._helpers import counts, file_state
from threadloom import Saver
from threadloom.errors import InvalidArgumentError, InvalidValueError
from threadloom.langgraph.retention import RetentionPolicy, parse_duration


def test_the_defaults_are_naas_prune_memory_ones() -> None:
    """keep_last 20, min_age 60 s, no expiry."""
    policy = RetentionPolicy()
    assert (policy.keep_last, policy.min_age, policy.max_age) == (20, 60.0, None)


@pytest.mark.parametrize(
    ("options", "error", "says"),
    [
        ({"keep_last": 0}, InvalidValueError, "at least 1"),
        ({"keep_last": -3}, InvalidValueError, "at least 1"),
        ({"keep_last": True}, InvalidArgumentError, "must be an int"),
        ({"keep_last": 2.0}, InvalidArgumentError, "must be an int"),
        ({"keep_last": "20"}, InvalidArgumentError, "must be an int"),
        ({"min_age": -1}, InvalidValueError, ">= 0"),
        ({"min_age": math.nan}, InvalidValueError, ">= 0"),
        ({"min_age": math.inf}, InvalidValueError, ">= 0"),
        ({"min_age": "60s"}, InvalidArgumentError, "parse_duration"),
        ({"max_age": -1.0}, InvalidValueError, ">= 0"),
        ({"max_age": 0}, InvalidValueError, "more than 0"),
        ({"max_age": 30, "min_age": 60}, InvalidValueError, "at least min_age"),
        ({"keep_last": None}, InvalidValueError, "keeps everything"),
    ],
)
def test_a_policy_that_makes_no_sense_is_refused(
    options: dict[str, Any], error: type[Exception], says: str
) -> None:
    """keep-last below 1, negative or non-finite ages, an expiry shorter than min_age, a
    policy that keeps everything, and values of the wrong type each raise a clear error."""
    with pytest.raises(error, match=says):
        RetentionPolicy(**options)


def test_bad_arguments_change_nothing(tmp_path: Path) -> None:
    """apply_retention with something that is not a policy, or one thread id where a list
    is due, raises before touching the file: its bytes stay as they were."""
    path = tmp_path / "memory.db"
    with Saver.from_conn_string(str(path)) as saver:
        graph = agent_graph().compile(checkpointer=saver)
        graph.invoke({"messages": [HumanMessage("what is 6 x 2?", id="h")]}, thread())
        before, rows = file_state(path), counts(saver)
        with pytest.raises(InvalidArgumentError, match="RetentionPolicy"):
            saver.apply_retention({"keep_last": 1})
        with pytest.raises(InvalidArgumentError, match=r"\['t'\]"):
            saver.apply_retention(RetentionPolicy(keep_last=1), threads="t")
        with pytest.raises(InvalidValueError):
            saver.apply_retention(RetentionPolicy(keep_last=0))
        assert file_state(path) == before and counts(saver) == rows


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90),
        ("90s", 90),
        ("15m", 900),
        ("12h", 43200),
        ("30d", 2592000),
        ("1.5h", 5400),
        ("2w", 1209600),
        (" 7D ", 604800),
    ],
)
def test_durations_read_as_seconds(text: str, seconds: float) -> None:
    """Seconds, or a number with s, m, h, d or w."""
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "-5", "3x", "d", "1e3", "5 days"])
def test_other_text_is_not_a_duration(text: str) -> None:
    """Anything else raises, naming the accepted forms."""
    with pytest.raises(InvalidValueError, match="30d"):
        parse_duration(text)
