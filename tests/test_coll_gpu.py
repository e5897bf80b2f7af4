"""GPU collectives on every visible GPU (2 or more), checked against NumPy references.

Skipped without CuPy and at least 2 CUDA devices. The checks run inside the rank
processes (sdr.backends.gpu.selftest) and come back as failure strings.
"""

from __future__ import annotations

import pytest

from sdr.backends.gpu import cuda_available

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not cuda_available(2), reason="needs CuPy and >= 2 CUDA devices"),
]


def _world() -> int:
    import cupy

    return int(cupy.cuda.runtime.getDeviceCount())


def test_every_algorithm_matches_numpy_on_gpus():
    from sdr.backends.gpu.launch import spawn_ranks
    from sdr.backends.gpu.selftest import check_all

    failures = spawn_ranks(_world(), check_all, timeout=500)
    assert failures == [[] for _ in failures], failures


def test_graph_captured_allreduce_replays_correctly():
    from sdr.backends.gpu.launch import spawn_ranks
    from sdr.backends.gpu.selftest import check_graph

    failures = spawn_ranks(_world(), check_graph, timeout=300)
    assert failures == [[] for _ in failures], failures


def test_host_channel_verbs_between_two_gpus():
    from sdr.backends.gpu.launch import spawn_ranks
    from sdr.backends.gpu.selftest import check_channels

    failures = spawn_ranks(_world(), check_channels, timeout=120)
    assert failures == [[] for _ in failures], failures
