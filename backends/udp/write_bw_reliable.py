"""The reliable side of ``sdr write-bw``: the same messages, through a reliability scheme.

With ``WriteBwParams.scheme`` set, both ends wrap their QP in a
:class:`~sdr.runtime.ReliableQP` (the scheme, ``rtt`` and the QP's rate and chunk
size: the client's parameters, which the server adopts) and a message counts once it
completed verified: on the client when the receiver acknowledged it, on the server when
every byte landed and matched its checksum. Memory to memory from reused buffers, as
iperf3 and perftest move data, so the CPU it costs is the reliable path's own (no file,
no digest of one: ``sdr send`` adds those). A message that fails (its no-progress
timeout, the peer gone) fails the run with its error.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from sdr.runtime import ReliableQP, drive
from sdr.runtime.handles import ReceiveHandle, WriteHandle
from sdr.runtime.qp import QP

__all__ = ["RELIABLE_MAX_MESSAGES", "counters", "reliable_qp", "receive_all", "write_all"]

RELIABLE_MAX_MESSAGES = 127
"""SDR messages a reliable run's QP may hold (odd, sdr.id_reuse): the schemes' lanes
(EC uses more than one per message) times the messages in flight."""

_DRAIN_S = 0.2  # after the last completion: answer the peer's last control messages


def reliable_qp(qp: QP, scheme: str, rtt: float, timeout: float) -> ReliableQP:
    """``qp`` wrapped in ``scheme`` (checked by ``WriteBwParams``); ``timeout``: a
    message's no-progress timeout (the run's ``--timeout``)."""
    return ReliableQP(qp, scheme, rtt=rtt, global_timeout=max(timeout, 1e-3))


def write_all(
    rqp: ReliableQP,
    region: Any,
    size: int,
    iterations: int,
    depth: int,
    on_done: Callable[[float], None],
    on_round: Callable[[float], None],
) -> None:
    """Write ``iterations`` messages of ``size`` bytes of ``region``, at most ``depth``
    unfinished; ``on_round(now)`` every progress round, then ``on_done(now)`` as each
    message completes, in order. Raises the first failure."""
    open_: deque[WriteHandle] = deque()
    posted = 0

    def step() -> bool:
        nonlocal posted
        now = rqp.ctx.now()
        on_round(now)
        while open_ and open_[0].finished:
            open_.popleft()._check()
            on_done(now)
        while posted < iterations and len(open_) < depth:
            open_.append(rqp.write(region, 0, size))
            posted += 1
        return not open_

    drive([rqp], step, None, "write-bw")
    _drain(rqp)


def receive_all(
    rqp: ReliableQP,
    regions: list[Any],
    size: int,
    iterations: int,
    on_done: Callable[[float, int], None],
    on_round: Callable[[float], None],
) -> None:
    """Receive ``iterations`` messages of ``size`` bytes into ``regions`` in turn, one
    posted per region; ``on_round(now)`` every progress round, then ``on_done(now, slot)``
    as each message completes, in order (before its region is posted again). Raises the
    first failure."""
    open_: deque[tuple[int, ReceiveHandle]] = deque()
    posted = 0

    def step() -> bool:
        nonlocal posted
        now = rqp.ctx.now()
        on_round(now)
        while open_ and open_[0][1].finished:
            slot, handle = open_.popleft()
            handle._check()
            on_done(now, slot)
        while posted < iterations and len(open_) < len(regions):
            slot = posted % len(regions)
            open_.append((slot, rqp.post_recv(regions[slot], 0, size)))
            posted += 1
        return not open_

    drive([rqp], step, None, "write-bw")
    _drain(rqp)


def _drain(rqp: ReliableQP) -> None:
    """Keep answering for a moment: the peer's last ACK or SACK may still need a reply."""
    end = rqp.ctx.now() + _DRAIN_S
    drive([rqp], lambda: rqp.ctx.now() >= end, None, "write-bw drain")


def counters(rqp: ReliableQP) -> dict[str, int]:
    """The reliable connection's counters, prefixed, for the run's report."""
    return {f"reliable_{k}": int(v) for k, v in rqp.counters.items()}
