"""Hierarchical allreduce between two network namespaces joined by the WAN emulator (root).

Two "datacenters" of two ranks each: each namespace holds two processes that share memory
with each other, and the datacenters talk SDR over the emulated link (RTT, 2% packet
loss). The results must equal NumPy's, and the reliability layer must have repaired real
losses (retransmitted or decoded chunks), so the test cannot pass on a lossless path.
"""

from __future__ import annotations

import numpy as np
import pytest

from sdr.backends.hierarchical import SdrLinkOptions, connect
from sdr.backends.hierarchical.local_job import run_ranks
from sdr.backends.wan import LinkSpec, TunLink, can_use_namespaces

REASON = can_use_namespaces()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"WAN emulator: {REASON}")

ELEMS = 300_000  # 1.2 MB per rank: ~75 packets per WAN write per local rank


def _data(rank: int) -> np.ndarray:
    return np.random.default_rng(100 + rank).standard_normal(ELEMS).astype(np.float32)


@pytest.mark.parametrize(
    ("scheme", "repair"), [("sr-nack", "retransmitted"), ("ec-mds", "decoded")]
)
def test_allreduce_across_an_emulated_lossy_link(scheme: str, repair: str) -> None:
    spec = LinkSpec(rate="1Gbit/s", rtt="10ms", loss=0.02, seed=5)
    with TunLink(spec) as link:
        hosts = [link.addr_a, link.addr_b]
        opts = SdrLinkOptions(scheme=scheme, rate="1Gbit/s", rtt="10ms", loss=0.02, timeout=60)

        def body(rank: int) -> dict:
            comm = connect(
                rank, 4, 2, master=link.addr_a, port=29710, host=hosts[rank // 2], options=opts
            )
            try:
                outs = [comm.allreduce(_data(rank)) for _ in range(3)]
                return {"outs": outs, "counters": comm.links.counters()}
            finally:
                comm.close()

        results = run_ranks(4, body, namespaces=[link.ns_a] * 2 + [link.ns_b] * 2, timeout=180)
    ref = np.sum([_data(r) for r in range(4)], axis=0)
    for res in results:
        for out in res["outs"]:
            np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
            assert np.array_equal(out, results[0]["outs"][0])
    key = "write_chunks_retransmitted" if repair == "retransmitted" else "receive_chunks_decoded"
    assert sum(res["counters"].get(key, 0) for res in results) > 0
    assert link.summary["a_to_b"]["loss_drops"] + link.summary["b_to_a"]["loss_drops"] > 0
