"""The multipath emulator benchmark: its options and its summary (no root needed)."""

from __future__ import annotations

import pytest

from benchmarks import multipath_emulated as bench


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--bad", "nope"], "--bad: unknown ['nope']"),
        (["--paths", "1"], "--paths must be in [2, 16]"),
        (["--loss", "0"], "--loss must be in (0, 1)"),
        (["--path-rate", "fast"], "--path-rate"),
        (["--repeats", "0"], "--repeats must be >= 1"),
    ],
)
def test_bad_options_are_one_line_errors(argv, words, capsys) -> None:
    with pytest.raises(SystemExit):
        bench._args(argv)
    assert words in capsys.readouterr().err


def _row(bad: str, cc: str, seconds: float, **extra) -> dict:
    row = {"bad": bad, "controller": cc, "completion_s": seconds, "vs_ideal": seconds / 2.0}
    row |= {"moved_off_rtts": None, "good_paths_moved_off": [], "share_on_bad": 0.25}
    return row | {"met": False} | extra


def test_the_summary_compares_with_the_same_controllers_all_good_runs() -> None:
    rows = [
        _row("none", "delay", 2.0),
        _row("none", "delay", 2.2),
        _row("loss", "delay", 2.52, moved_off_rtts=7.0, share_on_bad=0.05, met=True),
        _row("loss", "delay", 3.0, good_paths_moved_off=[1]),
        {"bad": "loss", "controller": "delay", "error": "sender failed", "met": False},
    ]
    loss, none = bench._median_rows(rows)
    assert loss["bad"] == "loss" and none["bad"] == "none"  # the table's order
    assert loss["runs"] == 3 and loss["failed"] == 1 and loss["met"] == "1 of 3"
    assert loss["median_vs_all_good"] == pytest.approx(2.76 / 2.1)
    assert loss["moved_off_rtts"] == [7.0] and loss["good_paths_moved_off"] == 1
    assert none["median_vs_all_good"] == pytest.approx(1.0)
