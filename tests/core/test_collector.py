"""The collector pause: off inside, restored after, nested and on errors alike."""

from __future__ import annotations

import gc
import threading

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


def test_a_small_batch_leaves_the_collector_alone() -> None:
    """Below `PAUSE_FROM` items the collector stays on (an agent's single put or search,
    a server's small batches back to back); from it, the batch pauses it."""
    with collector.paused(1), collector.paused(collector.PAUSE_FROM - 1):
        assert gc.isenabled()
    with collector.paused(collector.PAUSE_FROM):
        assert not gc.isenabled()
        with collector.paused(1):
            assert not gc.isenabled()
    assert gc.isenabled()


def test_a_pause_lasts_one_batch_however_many_threads_overlap() -> None:
    """The thread that paused the collector enables it when it leaves, even while another
    thread's batch is still inside: overlapping batches never keep it off for good."""
    inside, leave = threading.Event(), threading.Event()

    def other() -> None:
        with collector.paused():
            inside.set()
            leave.wait(10)

    with collector.paused():
        assert not gc.isenabled()
        worker = threading.Thread(target=other)
        worker.start()
        assert inside.wait(10)
    assert gc.isenabled()  # the owner left; the other batch runs on with it on
    leave.set()
    worker.join()
    assert gc.isenabled()
