"""Ring allreduce model and the offload (DPA-style workers) throughput model."""

from __future__ import annotations

import numpy as np
import pytest

from sdr.simulator.collective import ring_completion, ring_stage_size, simulate_ring_allreduce
from sdr.simulator.link import Link
from sdr.simulator.offload import PAPER_FIG16, OffloadModel, fit_scalability
from sdr.simulator.schemes import SchemeSpec

LINK = Link(400e9, 0.025)


def test_recurrence_by_hand() -> None:
    # 3 DCs, 2 stages; T(i, r) = max(T(i-1, r-1), T(i, r-1)) + t(i, r)
    t = np.array([[[1.0, 1.0], [5.0, 1.0], [1.0, 2.0]]])
    # stage 0: [1, 5, 1]; stage 1: DC0 max(T2=1, 1)+1 = 2, DC1 max(1, 5)+1 = 6, DC2 max(5, 1)+2 = 7
    assert ring_completion(t)[0] == 7.0


def test_lossless_ring_equals_stage_chain() -> None:
    res = simulate_ring_allreduce(LINK, 64 * 2**20, 4, 0.0, SchemeSpec("sr-rto"), samples=10)
    assert res.stages == 6 and res.stage_size_bytes == ring_stage_size(64 * 2**20, 4)
    assert res.summary.mean == pytest.approx(res.ideal_s)
    assert res.summary.mean == pytest.approx(res.lower_bound_s)


def test_ec_beats_sr_at_p999_and_bound_holds() -> None:
    out = {
        s: simulate_ring_allreduce(LINK, 256 * 2**20, 4, 1e-3, SchemeSpec(s), samples=4000, seed=2)
        for s in ("sr-rto", "ec-mds")
    }
    for res in out.values():
        assert res.summary.mean >= res.lower_bound_s * 0.999
    speedup = out["sr-rto"].summary.quantiles["p999"] / out["ec-mds"].summary.quantiles["p999"]
    assert speedup > 3.0  # the paper reports 3x to >6x


def test_offload_defaults_reproduce_fig16() -> None:
    model = OffloadModel.paper_defaults()
    threads = np.array(list(PAPER_FIG16))
    rates = model.packet_rate(threads, packets_per_chunk=16)
    assert rates == pytest.approx(list(PAPER_FIG16.values()), rel=0.02)
    assert model.packet_rate(16, packets_per_chunk=1) == pytest.approx(15e6, rel=1e-6)
    assert np.all(np.diff(model.packet_rate(np.arange(1, 33))) > 0)


def test_offload_goodput_reaches_line_rate_from_512k() -> None:
    model = OffloadModel.paper_defaults()
    good = model.goodput_bps(np.array([64, 256, 512, 8192]) * 1024, threads=20)
    assert good[2] == pytest.approx(400e9) and good[3] == pytest.approx(400e9)
    assert good[0] < 0.2 * 400e9 and good[1] < 400e9
    assert model.threads_for_line_rate() <= 20


def test_fit_recovers_known_parameters() -> None:
    n = np.array([1, 2, 4, 8, 16, 32, 64])
    rates = 3e6 * n / (1 + 0.02 * (n - 1) + 1e-4 * n * (n - 1))
    lam, sigma, kappa = fit_scalability(n, rates)
    assert (lam, sigma, kappa) == pytest.approx((3e6, 0.02, 1e-4), rel=1e-3)
