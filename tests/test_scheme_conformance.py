"""The scheme conformance suite: every registered reliability scheme passes the same tests.

The schemes come from the registry (``sdr.reliability.available_schemes()``: the built-ins,
the ones registered in code before collection and every ``sdr.schemes`` entry point), so
a new scheme is tested without touching this file. Each runs the same fault matrix over
the in-process wire with a simulated clock: no loss, random loss, a burst, duplicates and
reordering, and the first copy of every control message type lost. A message must either
deliver exactly the sender's bytes or fail, at both ends, with a clear SDR error; nothing
may hang or complete with wrong bytes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from test_reliability_support import RTT, BurstyNetwork, ScriptedNetwork, make_rpair, random_bytes

import sdr
from sdr.backends.inproc import InprocNetwork, ManualClock
from sdr.reliability import ReliabilityConfig, Scheme, available_schemes, create_scheme
from sdr.runtime.handles import drive

SCHEMES = available_schemes()
SIZES = [150_000, 4096, 1, 65_536]  # several chunks, one chunk, one byte, a round size
_SIM_TIMEOUT_S = 120.0  # simulated seconds: far beyond every scheme's global timeout
_LIVENESS_S = 60.0  # wall seconds: a guard against livelock only; nothing asserts on time


def _first_copy_of_each_type_lost() -> ScriptedNetwork:
    seen: set[int] = set()

    def drop(data: bytes, _index: int) -> bool:
        first = data[0] not in seen
        seen.add(data[0])
        return first

    return ScriptedNetwork(
        sdr.QPAttr(max_message_size="2MiB").max_message_size,
        drop_control=drop,
        clock=ManualClock(),
        delay=RTT / 2,
    )


@dataclass(frozen=True)
class Fault:
    name: str
    network: Callable[[], InprocNetwork]
    must_deliver: bool = False  # a clean wire leaves no excuse


FAULTS = [
    Fault("clean", lambda: InprocNetwork(seed=1, clock=ManualClock(), delay=RTT / 2), True),
    Fault(
        "random-loss",
        lambda: InprocNetwork(
            seed=7, clock=ManualClock(), delay=RTT / 2, drop=0.05, control_drop=0.05
        ),
    ),
    Fault("burst", lambda: BurstyNetwork(0.02, 12, seed=4, clock=ManualClock(), delay=RTT / 2)),
    Fault(
        "duplicate-reorder",
        lambda: InprocNetwork(
            seed=5, clock=ManualClock(), delay=RTT / 2, reorder=0.2, duplicate=0.2, drop=0.02
        ),
    ),
    Fault("lost-control", _first_copy_of_each_type_lost),
]


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_factory_builds_a_scheme_with_the_declared_interface(scheme: str) -> None:
    built = create_scheme(ReliabilityConfig(scheme=scheme, rtt=RTT, chunk_size=4096))
    assert isinstance(built, Scheme)
    assert isinstance(built.nack_holes, bool)  # declared by the interface, never probed
    assert isinstance(built.describe(), str) and built.describe()
    for length in (0, 1, 4096, 150_000):
        lanes = built.lanes(length)
        assert lanes[0] == length, "lane 0 is the user's data at its natural offsets"
        assert all(isinstance(n, int) and n >= 0 for n in lanes)
        assert lanes == built.lanes(length), "both ends must derive the same lanes"


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.name)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_delivers_the_exact_bytes_or_fails_clearly(scheme: str, fault: Fault) -> None:
    net = fault.network()
    pair = make_rpair(scheme, net=net)
    srcs = [random_bytes(n, seed=i) for i, n in enumerate(SIZES)]
    dsts = [np.zeros(n, dtype=np.uint8) for n in SIZES]
    receives = [pair.r.post_recv(pair.r.ctx.register(d)) for d in dsts]
    writes = [pair.s.write(pair.s.ctx.register(s)) for s in srcs]
    handles = [*writes, *receives]
    guard = time.monotonic() + _LIVENESS_S

    def finished() -> bool:
        if time.monotonic() > guard:
            pytest.fail(f"{scheme} under {fault.name}: no progress in simulated time (livelock)")
        return all(h.finished for h in handles)

    drive([pair.s, pair.r], finished, _SIM_TIMEOUT_S)

    for i, (src, dst, wh, rh) in enumerate(zip(srcs, dsts, writes, receives, strict=True)):
        if rh.done:
            assert np.array_equal(src, dst), f"message {i}: completed with wrong bytes"
        for h in (wh, rh):
            if not h.done:
                assert isinstance(h.error, sdr.SDRError), f"message {i}: {h!r} {h.error!r}"
                assert str(h.error), f"message {i}: an error must say what went wrong"
        if fault.must_deliver:
            assert wh.done and rh.done, f"message {i} failed on a clean wire: {rh.error!r}"
        if wh.done:
            assert rh.done, f"message {i}: the write completed but the receive did not"
    if fault.name == "lost-control":
        assert net.scripted_drops >= 2  # CTS and at least one of the scheme's own
