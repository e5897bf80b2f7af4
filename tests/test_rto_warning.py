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


def test_repairs_before_the_first_sample_say_nothing() -> None:
    # a 50 us rtt on a host whose first SACK takes 30-45 ms (two busy loops): the chunks
    # sent before it were repaired for nothing, and from the sample on the RTO follows
    # the path. Before, 16 of the first 160 chunks warned (a flaky CLI test)
    early = {"write_repairs_spurious": 16, "write_chunks_sent_lane0": 160}
    assert spurious_repair_warning(early, CONFIG, 0.038) is not None
    unsampled = {**early, "write_repairs_spurious_unsampled": 11}
    assert spurious_repair_warning(unsampled, CONFIG, 0.038) is None  # 5 after it
    text = spurious_repair_warning({**unsampled, "write_repairs_spurious": 40}, CONFIG, 0.038)
    assert text is not None and text.startswith("29 of 160 chunks")


def test_the_connection_reports_the_advice_as_an_event_and_warns_nothing(monkeypatch) -> None:
    """The sans-I/O connection called warnings.warn itself; now it reports RtoAdvice
    through next_event() (once), and the blocking shell is the one that warns."""
    import warnings

    import numpy as np
    from test_reliable_connection import Side, Wire, _payload, _register

    from sdr.reliability import connection
    from sdr.reliability.events import RtoAdvice, WriteCompleted

    monkeypatch.setattr(connection, "spurious_repair_warning", lambda *a: "the advice")
    a, b = Side("sr-nack"), Side("sr-nack")
    wire = Wire(a, b)
    src = [_payload(70_000, seed=i) for i in range(2)]
    dst = [np.zeros_like(s) for s in src]
    for d in dst:
        b.conn.post_recv(wire.now, _register(d))
    for s in src:
        a.conn.post_write(wire.now, _register(s))
    done: list[object] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the connection itself warns nothing
        wire.run(
            lambda: done.extend(a.events()) or sum(isinstance(e, WriteCompleted) for e in done) == 2
        )
    assert [e for e in done if isinstance(e, RtoAdvice)] == [RtoAdvice("the advice")]  # once


def test_the_reliable_qp_turns_the_advice_into_a_warning_not_a_finished_message() -> None:
    import pytest

    import sdr
    from sdr.reliability.events import RtoAdvice
    from sdr.reliability.rto_check import RtoWarning

    ctx_a, ctx_b = (
        sdr.Context("udp", host="127.0.0.1", port=0),
        sdr.Context("udp", host="127.0.0.1", port=0),
    )
    try:
        qa, qb = ctx_a.create_qp(), ctx_b.create_qp()
        qa.connect(qb.info())
        qb.connect(qa.info())
        rqp = sdr.ReliableQP(qa, "sr-nack", rtt="5ms")
        rqp.connection._events.append(RtoAdvice("raise alpha"))
        with pytest.warns(RtoWarning, match="raise alpha"):
            rqp.progress()
        assert rqp.finished_count == 0
    finally:
        ctx_a.close()
        ctx_b.close()
