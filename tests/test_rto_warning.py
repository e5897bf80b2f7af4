"""The RtoWarning's text says what the numbers show: a path longer than the RTO, or ACKs
that came late on a path whose every RTT sample is below it (seen in train_wan on a
loaded host: the old text called a 75 ms RTO "shorter than this path's round trip
(RTT samples up to 40.15ms)")."""

from sdr.reliability import ReliabilityConfig
from sdr.reliability.rto_check import spurious_repair_warning

COUNTERS = {"write_repairs_spurious": 245, "write_chunks_sent_lane0": 1583}
CONFIG = ReliabilityConfig(scheme="sr-nack", rtt="25ms", alpha=2)


def test_samples_below_the_rto_blame_late_acks_not_the_path() -> None:
    text = spurious_repair_warning(COUNTERS, CONFIG, 0.04015)
    assert text is not None and text.startswith("245 of 1583 chunks were queued again")
    assert "is above every RTT sample (up to 40.15ms)" in text and "ACKs came late" in text
    assert "shorter than this path's round trip" not in text


def test_a_sample_above_the_rto_says_the_path_is_longer() -> None:
    text = spurious_repair_warning(COUNTERS, CONFIG, 0.120)
    assert text is not None and "is shorter than this path's round trip" in text
    assert "RTT samples up to 120ms" in text and "set rtt to the path's round trip" in text
    assert "shorter than this path's round trip;" in spurious_repair_warning(COUNTERS, CONFIG, None)


def test_few_spurious_repairs_say_nothing() -> None:
    assert spurious_repair_warning({**COUNTERS, "write_repairs_spurious": 15}, CONFIG, 0.04) is None
    few = {"write_repairs_spurious": 100, "write_chunks_sent_lane0": 1001}
    assert spurious_repair_warning(few, CONFIG, 0.04) is None
