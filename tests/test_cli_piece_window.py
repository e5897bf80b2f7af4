"""PieceWindow.advance runs every progress round: it reports progress at most every
REPORT_EVERY_S (a bar needs no more), and always once more when the transfer ends."""

from __future__ import annotations

from typing import Any

import pytest

from sdr.cli import transfer_pieces
from sdr.cli.transfer_pieces import PieceWindow


class _Handle:
    def __init__(self, length: int) -> None:
        self.length, self.finished, self.done, self.stats = length, False, False, {}


def test_progress_is_reported_at_most_every_interval_and_at_the_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [100.0]
    monkeypatch.setattr(transfer_pieces.time, "monotonic", lambda: clock[0])
    posted: list[_Handle] = []

    def post(offset: int, length: int) -> Any:
        posted.append(_Handle(length))
        return posted[-1]

    calls: list[tuple[int, int]] = []
    window = PieceWindow(post, 4 << 20, 1 << 20, 2)
    assert not window.advance(lambda d, t: calls.append((d, t)))
    assert calls == [(0, 4 << 20)]  # the first round reports
    posted[0].finished = posted[0].done = True
    assert not window.advance(lambda d, t: calls.append((d, t)))
    assert len(calls) == 1  # within the interval: no report, however many rounds
    clock[0] += transfer_pieces.REPORT_EVERY_S
    window.advance(lambda d, t: calls.append((d, t)))
    assert calls[-1] == (1 << 20, 4 << 20)
    for h in posted:
        h.finished = h.done = True
    window.top_up()
    for h in posted:
        h.finished = h.done = True
    assert window.advance(lambda d, t: calls.append((d, t)))  # done: reported at once
    assert calls[-1] == (4 << 20, 4 << 20)
    assert window.advance(None)  # no progress callback: just the window


class _Watched(_Handle):
    """A handle that counts how often its state is read."""

    reads = 0

    @property  # type: ignore[override]
    def finished(self) -> bool:
        _Watched.reads += 1
        return self._finished

    @finished.setter
    def finished(self, value: bool) -> None:
        self._finished = value


def test_with_a_finished_count_a_round_where_nothing_finished_reads_no_handle() -> None:
    count = [0]
    posted: list[_Watched] = []

    def post(offset: int, length: int) -> Any:
        posted.append(_Watched(length))
        return posted[-1]

    window = PieceWindow(post, 8 << 20, 1 << 20, 4, lambda: count[0])
    assert len(posted) == 4
    _Watched.reads = 0
    for _ in range(100):
        window.top_up()
    assert _Watched.reads == 0  # the count did not move: nothing looked at
    posted[1].finished = posted[1].done = True
    count[0] += 1
    window.top_up()
    assert window.open == 4 and len(posted) == 5  # retired one, posted the next
    assert window.verified() == 1 << 20
    assert 0 < _Watched.reads <= 4
