"""The EC fallback as the protocol repairs it (issue 19), and the paper's formula as an option.

The SDK's receiver NACKs only the *missing* data chunks of a submessage it cannot decode
and decodes it as soon as enough of them arrived; the paper's formula resends whole
submessages. The model's default (``fallback="protocol"``) follows the SDK; the paper
figures keep ``fallback="paper"``, which must give exactly the numbers it gave before.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from sdr.errors import ConfigError
from sdr.simulator import analytic
from sdr.simulator.des import packet_loss, simulate_writes
from sdr.simulator.des_paired import paired_model_time
from sdr.simulator.ec_model import (
    ECLayout,
    failed_missing_distribution,
    resend_distribution,
    submessage_failure,
)
from sdr.simulator.ec_repair import repair_levels
from sdr.simulator.link import Link
from sdr.simulator.montecarlo import sample_scheme
from sdr.simulator.schemes import SchemeSpec

MIB = 1 << 20
# the issue's point: ec-xor (32, 8), 4 MiB, 10 Gbit/s, 10 ms RTT, 2e-2 per chunk
ISSUE_LINK, ISSUE_SIZE, ISSUE_DROP = Link(10e9, 0.010), 4 * MIB, 2e-2


def _recoverable(code: str, k: int, m: int, data_lost: set[int], parity: tuple) -> bool:
    if code == "mds":
        return len(data_lost) + sum(parity) <= m
    for g in range(min(k, m)):
        if sum(1 for j in range(g, k, m) if j in data_lost) + parity[g] >= 2:
            return False
    return True


@pytest.mark.parametrize("code", ["mds", "xor"])
@pytest.mark.parametrize(("k", "m"), [(4, 2), (5, 2), (3, 4)])
def test_missing_chunks_and_repair_rounds_match_enumeration(code, k, m):
    p, rounds = 0.2, 2
    brute = np.zeros((rounds + 2, k + 1))  # last row: failed at all
    for pattern in itertools.product([0, 1], repeat=k + m):
        data, parity = pattern[:k], pattern[k:]
        lost = [j for j in range(k) if data[j]]
        weight = p ** sum(pattern) * (1 - p) ** (k + m - sum(pattern))
        if _recoverable(code, k, m, set(lost), parity):
            continue
        brute[-1, len(lost)] += weight
        # each resend arrives after z more losses: P(z) = p^z (1-p); beyond `rounds` lumped
        for zs in itertools.product(range(rounds + 2), repeat=len(lost)):
            wz = np.prod([p**z * (1 - p) if z <= rounds else p ** (rounds + 1) for z in zs])
            for j in range(rounds + 1):
                still = {c for c, z in zip(lost, zs, strict=True) if z > j}
                if _recoverable(code, k, m, still, parity):
                    brute[j, len(lost)] += weight * wz
    assert failed_missing_distribution(p, k, m, code) == pytest.approx(brute[-1], abs=1e-15)
    assert repair_levels(p, k, m, code, rounds) == pytest.approx(brute[:-1], abs=1e-15)
    assert brute[-1].sum() == pytest.approx(submessage_failure(p, k, m, code))


def test_the_protocol_resends_fewer_chunks_than_the_paper():
    layout = ECLayout(64 + 5, 32, 8)  # a partial last submessage too
    for code in ("mds", "xor"):
        for p in (1e-2, 1e-1):
            chunks, probs = resend_distribution(layout, p, code, "protocol")
            paper = layout.expected_resend_chunks(p, code, "paper")
            mean = float(np.dot(chunks, probs))
            assert probs.sum() == pytest.approx(1.0)
            assert mean == pytest.approx(layout.expected_resend_chunks(p, code, "protocol"))
            assert 0 < mean < 0.5 * paper
    with pytest.raises(ConfigError, match="fallback"):
        SchemeSpec("ec-mds", fallback="whole")


# (scheme, k, m, link, size, drop): the paper formula's mean and p99.9 before issue 19
PAPER_VALUES = [
    ("ec-xor", 32, 8, ISSUE_LINK, ISSUE_SIZE, 2e-2, 0.016354902884882984, 0.06686818912938285),
    ("ec-mds", 8, 2, ISSUE_LINK, ISSUE_SIZE, 1e-1, 0.03299434307524303, 0.12498077470688926),
    (
        "ec-mds",
        32,
        8,
        Link.from_distance(3.75e6, 400e9),
        128 * MIB + 3 * 65536,
        1e-1,
        0.12838683397274972,
        0.3784288442968778,
    ),
]


@pytest.mark.parametrize(("scheme", "k", "m", "link", "size", "drop", "mean", "p999"), PAPER_VALUES)
def test_the_paper_option_reproduces_the_old_formula(scheme, k, m, link, size, drop, mean, p999):
    paper = SchemeSpec(scheme, k=k, m=m, fallback="paper")
    assert analytic.ec_mean(link, size, drop, paper) == pytest.approx(mean, rel=1e-12)
    assert analytic.ec_quantile(0.999, link, size, drop, paper) == pytest.approx(p999, rel=1e-9)
    protocol = SchemeSpec(scheme, k=k, m=m)
    assert analytic.ec_mean(link, size, drop, protocol) < 0.95 * mean


@pytest.mark.parametrize(
    ("scheme", "k", "m", "drop"), [("ec-xor", 32, 8, 5e-2), ("ec-mds", 8, 2, 1e-1)]
)
def test_monte_carlo_samples_the_protocol_fallback_model(scheme, k, m, drop):
    spec = SchemeSpec(scheme, k=k, m=m)
    times, fell = sample_scheme(
        np.random.default_rng(2), ISSUE_LINK, ISSUE_SIZE, drop, spec, 40_000
    )
    mean = analytic.ec_mean(ISSUE_LINK, ISSUE_SIZE, drop, spec)
    assert abs(times.mean() - mean) < 4 * times.std() / np.sqrt(times.size)
    assert fell.mean() == pytest.approx(
        analytic.ec_fallback_probability(ISSUE_LINK, ISSUE_SIZE, drop, spec), abs=0.01
    )
    q = analytic.ec_quantile(0.999, ISSUE_LINK, ISSUE_SIZE, drop, spec)
    assert np.mean(times <= q) > 0.998 and np.mean(times < q - ISSUE_LINK.t_inj_s) < 0.9995


def test_the_fallback_cost_matches_the_simulated_protocol():
    link, size, drop = ISSUE_LINK, ISSUE_SIZE, ISSUE_DROP
    spec = SchemeSpec("ec-xor")
    run = simulate_writes(link, size, spec, packet_loss(link, drop), samples=200, seed=11)
    assert run.failed == 0
    fell = run.fell_back
    assert fell.sum() >= 5
    # write by write: the model on each fallback write's own losses (fallback writes are
    # no longer skipped); the protocol-aware pairing is exact to the NIC queue
    model = np.array([paired_model_time(link, size, spec, z, zp) for z, zp in run.chunk_losses])
    exact = np.array(
        [paired_model_time(link, size, spec, z, zp, protocol=True) for z, zp in run.chunk_losses]
    )
    assert np.isfinite(model).all() and np.isfinite(exact).all()
    assert np.abs(run.times_s - exact).max() < 2 * link.t_inj_s
    assert np.abs(run.times_s - model)[fell].max() < 3 * link.t_inj_s
    # on average: what a fallback costs beyond the lossless time, simulated vs the model's
    # expectation, in units of the model's own standard error for this many fallbacks
    lossless, _, _ = analytic.ec_parts(link, size, spec)
    p_fb = analytic.ec_fallback_probability(link, size, drop, spec)
    cost = {
        f: (analytic.ec_mean(link, size, drop, SchemeSpec("ec-xor", fallback=f)) - lossless) / p_fb
        for f in ("protocol", "paper")
    }
    samples, fb = sample_scheme(np.random.default_rng(5), link, size, drop, spec, 200_000)
    se = (samples[fb] - lossless).std() / np.sqrt(fell.sum())
    simulated = (run.times_s[fell] - lossless).mean()
    assert abs(simulated - cost["protocol"]) < 4 * se
    assert cost["paper"] - simulated > 10 * se  # the whole-submessage resend: far too slow
