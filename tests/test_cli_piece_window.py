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
