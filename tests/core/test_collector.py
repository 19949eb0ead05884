"""The collector pause: off inside, restored after, nested and on errors alike."""

from __future__ import annotations

import gc

import pytest

from threadloom.core import collector


def test_the_collector_is_off_inside_and_on_again_after() -> None:
    """Inside `paused` (nested too) the collector is disabled; leaving the outermost
    enables it again, also when the body raised."""
    assert gc.isenabled()
    with collector.paused():
        assert not gc.isenabled()
        with collector.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(KeyError), collector.paused():
        raise KeyError("x")
    assert gc.isenabled()


def test_an_application_that_disabled_the_collector_keeps_it_disabled() -> None:
    """A pause entered with the collector already disabled leaves it disabled."""
    gc.disable()
    try:
        with collector.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
