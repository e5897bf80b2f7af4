"""Helpers for core tests: two connected QPs over the in-process wire."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import sdr
from sdr.backends.inproc import InprocNetwork, ManualClock


@dataclass
class Pair:
    net: InprocNetwork
    clock: ManualClock
    a: sdr.Context
    b: sdr.Context
    qa: sdr.QP
    qb: sdr.QP

    def pump(self, rounds: int = 50, step: float = 1e-4) -> None:
        """Progress both sides, advancing the clock, for a fixed number of rounds."""
        for _ in range(rounds):
            self.a.progress()
            self.b.progress()
            self.clock.advance(step)

    def close(self) -> None:
        self.a.close()
        self.b.close()


def make_pair(attr: sdr.QPAttr | None = None, seed: int = 1, **faults: float) -> Pair:
    clock = ManualClock()
    net = InprocNetwork(seed=seed, clock=clock, **faults)
    a, b = sdr.Context("inproc", network=net), sdr.Context("inproc", network=net)
    attr = attr or sdr.QPAttr(mtu=1024, chunk_size="4KiB", max_message_size="1MiB", channels=2)
    qa, qb = a.create_qp(attr), b.create_qp(attr)
    qa.connect(qb.info())
    qb.connect(qa.info())
    return Pair(net, clock, a, b, qa, qb)


def random_bytes(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)
