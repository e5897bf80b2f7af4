"""A deadline allreduce across the WAN emulator (root): acknowledgements that are still on
the way when the writes stop.

Rank 1 withholds every slice of its own; rank 0's slices cross the 25 ms link within a few
ms, so they arrive at rank 1 before its cut while their acknowledgements, half a round
trip behind, may not be back at rank 0 when it stops its writes (half a round trip
before the cut). Rank 0 then holds nothing of the peer's and has no write in flight, yet
the peer was in the call: it must wait for the peer's note. Several deadlines move the
stop across the acknowledgements' return; the results must be the same bits on both
ranks in every call.
"""

from __future__ import annotations

import numpy as np
import pytest

from sdr.backends.hierarchical import SdrLinkOptions, connect
from sdr.backends.hierarchical.local_job import run_ranks
from sdr.backends.shm import free_port
from sdr.backends.wan import LinkSpec, TunLink, can_use_namespaces

REASON = can_use_namespaces()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"WAN emulator: {REASON}")

SLICES, N = 4, 20_000  # 20 KB slices: each crosses 1 Gbit/s in 0.2 ms
DEADLINES = (0.035, 0.04, 0.045, 0.05, 0.06)


def test_acknowledgements_on_the_way_at_the_stop_leave_the_ranks_agreed() -> None:
    spec = LinkSpec(rate="1Gbit/s", rtt="25ms", loss=0, seed=3)
    with TunLink(spec) as link:
        hosts, port = [link.addr_a, link.addr_b], free_port()
        opts = SdrLinkOptions(scheme="sr-nack", rate="1Gbit/s", rtt="25ms", loss=0, timeout=30)

        def body(rank: int) -> list[dict]:
            comm = connect(rank, 2, 1, master=link.addr_a, port=port, host=hosts[rank],
                           options=opts)  # fmt: skip
            x = np.random.default_rng(rank).standard_normal(N).astype(np.float32)
            late = tuple(range(SLICES)) if rank == 1 else ()
            calls = []
            try:
                for deadline in DEADLINES:
                    out, report = comm.allreduce_by(
                        x, deadline, slices=SLICES, withhold=late, carry=False
                    )
                    calls.append({"out": out, "report": report})
            finally:
                comm.close()
            return calls

        ranks = run_ranks(2, body, namespaces=[link.ns_a, link.ns_b], timeout=120)
    for a, b in zip(*ranks, strict=True):
        assert a["out"].tobytes() == b["out"].tobytes()
        assert (a["report"].included == b["report"].included).all()
        assert not a["report"].included[1].any()  # rank 1 withheld all of its own
        # rank 0 heard rank 1 (its clear-to-sends came): it never decides alone
        assert a["report"].timeline["decision"] != "alone"
