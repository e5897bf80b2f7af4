"""The sdr process group's works: once wait() returns, the future holds the value."""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")

from sdr.torch.work import SdrWork  # noqa: E402


def test_wait_returns_only_once_the_future_is_set() -> None:
    """Before, the done flag was set before the future: a caller that waited and then read
    ``get_future().value()`` could find it empty (torch asserts: completed())."""
    for i in range(300):
        work = SdrWork("op")
        t = threading.Thread(target=work.settle, args=([i],))
        t.start()
        work.wait()
        assert work.get_future().done()
        assert work.get_future().value() == [i]
        t.join()


def test_a_work_settles_once() -> None:
    work = SdrWork("op")
    assert work.settle([1])
    assert not work.settle(error=RuntimeError("late"))
    assert work.wait() and work.get_future().value() == [1] and work.exception() is None
