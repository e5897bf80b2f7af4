"""The ``hivemind`` variant of experiments/diloco_wan.py: the outer average through
hivemind's decentralized averager.

Each datacenter runs a DHT node (libp2p over TCP, through the emulated link) and a
:class:`hivemind.averaging.DecentralizedAverager` over one buffer the size of the
pseudo-gradient; every outer step is one ``step()``: matchmaking finds the other peer,
then a butterfly all-reduce averages the buffer. Datacenter 0's node is the one the
other joins (its address is handed over through a file). hivemind's unit of failure is
the peer: a step whose group did not form leaves each peer with its own pseudo-gradient,
which this variant zeroes (the step counts as nothing in). hivemind is not a dependency
of SDR: ``pip install -e '.[hivemind]'`` (1.1.12 was measured); without it the variant
says so.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

__all__ = ["HivemindAverager"]

MATCHMAKING_S = 0.5
"""hivemind's ``min_matchmaking_time``: how long a step looks for its group first (its
default is 5 s; 0.5 s is the smallest that formed groups reliably over the 100 ms link)."""


class HivemindAverager:
    """One datacenter's side of hivemind's averaging (see the module docstring)."""

    def __init__(self, dc: int, host: str, port: int, rendezvous: str, numel: int,
                 timeout_s: float = 120.0) -> None:  # fmt: skip
        import hivemind
        import torch
        from hivemind.averaging import DecentralizedAverager

        where = Path(rendezvous)
        if dc == 0:
            self.dht = hivemind.DHT(host_maddrs=[f"/ip4/{host}/tcp/{port}"], start=True)
            maddrs = [str(m) for m in self.dht.get_visible_maddrs() if host in str(m)]
            where.write_text(maddrs[0])
        else:
            deadline = time.monotonic() + timeout_s
            while not where.exists() or not where.read_text():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no hivemind peer address in {where}")
                time.sleep(0.05)
            self.dht = hivemind.DHT(host_maddrs=[f"/ip4/{host}/tcp/{port}"],
                                    initial_peers=[where.read_text()], start=True)  # fmt: skip
        self.timeout_s = timeout_s
        self.averager = DecentralizedAverager(
            [torch.zeros(numel)], dht=self.dht, prefix="diloco", target_group_size=2,
            min_group_size=2, min_matchmaking_time=MATCHMAKING_S,
            request_timeout=MATCHMAKING_S / 2, start=True,
        )  # fmt: skip

    def average(self, delta: Any) -> bool:
        """Average ``delta`` in place with the other datacenter; False when no group
        formed (``delta`` is then zero)."""
        with self.averager.get_tensors() as tensors:
            tensors[0].copy_(delta)
        group = self.averager.step(timeout=self.timeout_s)
        if not group or len(group) < 2:
            delta.zero_()
            return False
        with self.averager.get_tensors() as tensors:
            delta.copy_(tensors[0])
        return True

    def close(self) -> None:
        self.averager.shutdown()
        self.dht.shutdown()
