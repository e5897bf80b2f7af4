"""Online estimation pieces: gap counting on bitmaps, the decayed estimator, LOSS_REPORT."""

from __future__ import annotations

import numpy as np
import pytest

from sdr.adaptive import GapCounter, LinkEstimator, LossReport
from sdr.adaptive.report import is_loss_report
from sdr.errors import ConfigError, ProtocolError


def test_gap_counter_counts_first_pass_holes_and_runs():
    g = GapCounter(20, reorder=0)
    g.add(np.array([0, 1, 2]))
    g.add(np.array([5]))  # 3, 4 lost: one run of 2
    g.add(np.array([7, 8]))  # 6 lost: second run
    g.add(np.array([3, 4, 6]))  # retransmissions land below hi: not counted again
    g.add(np.array([12]))  # 9, 10, 11 lost: third run
    assert (g.trials, g.losses, g.runs, g.hi) == (13, 6, 3, 12)


def test_gap_counter_batch_out_of_order_and_out_of_range():
    g = GapCounter(8, reorder=0)
    g.add(np.array([4, 1, 0, 99, -1]))  # one batch, any order; 2, 3 missing
    assert (g.trials, g.losses, g.runs) == (5, 2, 1)
    g.add(np.array([2, 3]))
    assert (g.trials, g.losses) == (5, 2)


def test_gap_counter_tolerates_small_reordering():
    g = GapCounter(10, reorder=2)
    g.add(np.array([0, 1, 3]))  # 2 is late, not lost
    g.add(np.array([2]))
    g.add(np.array([4, 5]))
    assert (g.trials, g.losses) == (4, 0)
    g.add(np.array([9]))  # 6, 7 lost (settled); 8 not yet
    assert (g.trials, g.losses, g.runs) == (8, 2, 1)


def test_estimator_decays_old_evidence_by_chunks_observed():
    est = LinkEstimator(half_life_chunks=100)
    est.observe_loss(0.0, 100, 10, 10)
    assert est.estimate().chunk_drop == pytest.approx(0.1)
    est.observe_loss(1.0, 100, 0, 0)  # old counts halve: 5 / (50 + 100)
    assert est.estimate().chunk_drop == pytest.approx(5 / 150)
    assert est.estimate().trials == pytest.approx(150)


def test_estimator_burst_rtt_and_bandwidth():
    est = LinkEstimator(rtt_window=3, bw_weight=0.5)
    est.observe_loss(0.0, 1000, 12, 3)
    assert est.estimate().burst == pytest.approx(4.0)
    for sample in (0.030, 0.026, 0.040, 0.050, 0.041):
        est.observe_rtt(0.0, sample)
    assert est.estimate().rtt == pytest.approx(0.041)  # median of the last 3
    est.observe_delivery(0.0, 1_000_000, 0.008)  # 1 Gbit/s
    est.observe_delivery(0.0, 1_000_000, 0.016)  # 0.5 Gbit/s
    assert est.estimate().bandwidth == pytest.approx(0.75e9)


def test_estimate_packet_drop_inverts_the_chunk_rate():
    est = LinkEstimator()
    est.observe_loss(0.0, 10_000, 77, 77)
    p = est.estimate().packet_drop(8)
    assert 1 - (1 - p) ** 8 == pytest.approx(0.0077)
    assert "drop 7.70e-03/chunk" in est.estimate().describe()


def test_estimator_rejects_inconsistent_observations():
    est = LinkEstimator()
    with pytest.raises(ConfigError):
        est.observe_loss(0.0, 10, 11, 1)
    with pytest.raises(ConfigError):
        est.observe_loss(0.0, 10, 2, 0)
    with pytest.raises(ConfigError):
        LinkEstimator(half_life_chunks=0)


def test_no_evidence_means_unknown():
    e = LinkEstimator().estimate()
    assert (e.chunk_drop, e.rtt, e.bandwidth, e.trials) == (None, None, None, 0.0)
    assert e.packet_drop(8) is None


def test_loss_report_round_trip_and_damage():
    msg = LossReport(7, 1000, 12, 3, 2 << 20, 123_456_789)
    data = msg.encode()
    assert is_loss_report(data)
    assert LossReport.decode(data) == msg
    bad = bytearray(data)
    bad[20] ^= 1
    with pytest.raises(ProtocolError, match="checksum"):
        LossReport.decode(bytes(bad))
    with pytest.raises(ProtocolError):
        LossReport.decode(data[:-1])
