"""A user-registered scheme (the example of docs/reliability-schemes.md) and the doc's
runnable examples."""

from __future__ import annotations

import pathlib
import re

import numpy as np
from test_reliability_support import RTT, make_rpair, scripted, transfer

from sdr.reliability import (
    Lane,
    SelectiveRepeat,
    SelectiveRepeatSender,
    available_schemes,
    register_scheme,
)

DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "reliability-schemes.md"


class TailCopySender(SelectiveRepeatSender):
    def initial_sends(self, now: float) -> None:
        super().initial_sends(now)
        tail = int(self.config.params.get("tail", 2))
        self.queue_chunks(Lane.DATA, np.arange(max(0, self.n_chunks - tail), self.n_chunks))


class TailCopy(SelectiveRepeat):
    sender_class = TailCopySender


def test_a_registered_scheme_runs_over_the_reliable_qp():
    register_scheme("test-tailcopy", TailCopy, replace=True)
    assert "test-tailcopy" in available_schemes()
    last = 39 * 4096  # the last chunk of a 40-chunk message: lost on its first copy
    plain = make_rpair("sr-rto", net=scripted(lambda s, off, n: off == last and n == 0))
    tail = make_rpair(
        "test-tailcopy",
        net=scripted(lambda s, off, n: off == last and n == 0),
        params={"tail": 3},
    )
    for pair in (plain, tail):
        srcs, dsts, handles = transfer(pair, [40 * 4096])
        assert (srcs[0] == dsts[0]).all()
    # the second copy repairs the tail without waiting an RTO (3 RTT)
    assert tail.clock.t < 2 * RTT < 4 * RTT < plain.clock.t
    assert tail.s.counters["write_chunks_sent_lane0"] == 43


def test_doc_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 4
    namespace: dict = {"__name__": "__docs__"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
    assert "sr-tailcopy" in available_schemes()
