"""The receiver's pieces are populated by a thread, ahead of the data and off the loop."""

from __future__ import annotations

import mmap
import threading
import time

import pytest

import sdr.cli.transfer_prefault as tp
from sdr.cli.transfer_prefault import STEP, PrefaultAhead


def _until(ahead: PrefaultAhead, populated: int) -> None:
    deadline = time.monotonic() + 10
    while ahead.populated < populated and time.monotonic() < deadline:
        time.sleep(0.001)


def test_every_added_range_is_populated_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    monkeypatch.setattr(tp, "prefault", lambda view: seen.append(len(view)))
    buf = bytearray(3 * STEP + 5)
    with PrefaultAhead(buf) as ahead:
        ahead.add(0, 2 * STEP)
        ahead.add(2 * STEP, STEP + 5)
        _until(ahead, len(buf))
    assert seen == [STEP, STEP, STEP, 5]
    assert ahead.populated == len(buf)


def test_posting_does_not_wait_for_the_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """add() returns while the thread is still inside a slow populate (before, the
    receiver populated each piece before posting it and held the sender meanwhile)."""
    inside, release = threading.Event(), threading.Event()

    def slow(view: memoryview) -> None:
        inside.set()
        assert release.wait(10)

    monkeypatch.setattr(tp, "prefault", slow)
    ahead = PrefaultAhead(bytearray(2 * STEP))
    ahead.add(0, STEP)
    assert inside.wait(10)
    ahead.add(STEP, STEP)  # returns at once: the first range is still being populated
    assert ahead.populated == 0
    release.set()
    _until(ahead, 2 * STEP)
    ahead.close()
    assert ahead.populated == 2 * STEP


def test_close_leaves_the_rest_and_the_mapping_can_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """close() stops after the step in progress; the thread holds no view of the
    mapping afterwards (closing it would raise BufferError)."""
    inside, release = threading.Event(), threading.Event()

    def slow(view: memoryview) -> None:
        inside.set()
        assert release.wait(10)

    monkeypatch.setattr(tp, "prefault", slow)
    m = mmap.mmap(-1, 4 * STEP)
    ahead = PrefaultAhead(m)
    ahead.add(0, 4 * STEP)
    assert inside.wait(10)
    threading.Timer(0.05, release.set).start()
    ahead.close()
    assert ahead.populated == STEP
    m.close()


def test_real_pages_keep_their_bytes() -> None:
    """Populating for write changes nothing already written."""
    m = mmap.mmap(-1, STEP + 4096)
    m[:5] = b"hello"
    m[-3:] = b"end"
    with PrefaultAhead(m) as ahead:
        ahead.add(0, len(m))
        _until(ahead, len(m))
    assert ahead.populated == len(m)
    assert m[:5] == b"hello" and m[-3:] == b"end"
    m.close()
