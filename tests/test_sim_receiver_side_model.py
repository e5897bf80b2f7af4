"""The model's completion times put beside emulated runs are the receiver's, as theirs are."""

from __future__ import annotations

import pytest

from sdr.cli.demo_report import lossless_at_receiver, predict
from sdr.simulator.evaluate import evaluate
from sdr.simulator.link import Link
from sdr.simulator.schemes import SchemeSpec


@pytest.mark.parametrize("scheme", ["sr-nack", "ec-mds"])
def test_predict_is_the_models_mean_less_the_acknowledgements_way_back(scheme) -> None:
    link = Link(1e9, 0.025, mtu=4096, chunk_size=65536)
    config = {"scheme": scheme, "chunk_size": 65536, "k": 32, "m": 8}
    at_sender = evaluate(link, 8 << 20, 1e-3, SchemeSpec(scheme), drop_unit="packet").mean_s
    assert predict(link, 8 << 20, 1e-3, config) == pytest.approx(at_sender - 0.0125, rel=1e-12)


def test_lossless_at_receiver_is_the_bytes_plus_the_one_way_delay() -> None:
    assert lossless_at_receiver(1 << 20, 1e9, 0.025) == pytest.approx(8 * 2**20 / 1e9 + 0.0125)
    # the model's lossless sender-side time is one half RTT later
    link = Link(1e9, 0.025, mtu=4096, chunk_size=65536)
    assert link.ideal_time_s(1 << 20) - lossless_at_receiver(1 << 20, 1e9, 0.025) == (
        pytest.approx(0.0125)
    )
