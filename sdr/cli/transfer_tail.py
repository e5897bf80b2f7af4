"""The tail of a file under erasure coding: the last round trip of data repairs itself.

A loss in the bulk of a file costs Selective Repeat only the resent chunk: its repair
overlaps the data still being sent. A loss in the last round trip of data has nothing
left to overlap, and at loss 1e-3 over 100 ms at 1 Gbit/s one lands there in 95% of
transfers, adding most of an RTT to every one of them (2.27-2.45 s for 256 MiB where
the lossless transfer takes 2.18 s; docs/benchmarks.md). So when ``auto`` picks SR for
the stream, the file's last piece, one bandwidth-delay product, becomes a message of its
own, and the simulator's selector judges that message alone among low-overhead codes
(:data:`TAIL_CODES`): where a lost chunk would cost a round trip, it picks erasure coding
(with SR fallback), whose parity repairs it on arrival. The sender names the tail in its
hello; both ends cut the file the same way and run an adaptive QP whose plan gives the
tail's write the code and every other write the stream's scheme.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sdr.adaptive import AdaptivePolicy, Candidate, PlannedPolicy
from sdr.cli.transfer_options import TransferOptions, expected_loss
from sdr.config import QPAttr
from sdr.errors import RemoteProtocolError
from sdr.peer_info import check_keys, field_int, field_str, require_object
from sdr.reliability import ReliabilityConfig
from sdr.reliability.registry import available_schemes

__all__ = [
    "MAX_CODE",
    "REPAIRED_ONCE",
    "TAIL_CODES",
    "TAIL_FIXED_COST",
    "Tail",
    "file_tail",
    "tail_saving",
    "parse_tail",
    "plan_tail",
    "policies",
]

TAIL_CODES: tuple[tuple[int, int], ...] = (
    (32, 1),
    (64, 1),
    (32, 2),
    (64, 2),
    (128, 2),
    (32, 4),
    (64, 4),
    (128, 4),
    (64, 8),
)
"""(k, m) codes the tail may use: 0.8% to 12.5% parity (the stream's selector tries 20-25%:
a message judged alone would rather pay its parity than a round trip, but the tail's
parity delays the whole file)."""


MAX_CODE = 1024
"""The largest k or m a hello may name (the codes above stay far below it)."""


@dataclass(frozen=True)
class Tail:
    """The file's last ``nbytes`` bytes go as one message with ``candidate``'s scheme."""

    nbytes: int
    candidate: Candidate

    def as_dict(self) -> dict[str, Any]:
        """The hello's ``tail`` field."""
        c = self.candidate
        return {"bytes": self.nbytes, "scheme": c.scheme, "k": c.k, "m": c.m}


def file_tail(
    opts: TransferOptions, config: ReliabilityConfig, auto: bool, size: int, attr: QPAttr
) -> Tail | None:
    """The tail of a ``size``-byte file sent with ``opts``: :func:`plan_tail` when ``auto``
    chose the scheme (``config``) and ``opts.tail`` allows it; a scheme the user named
    runs every message."""
    if not auto or not opts.tail:
        return None
    return plan_tail(config, size, attr.max_message_size, expected_loss(opts, config), attr.mtu)


def plan_tail(
    config: ReliabilityConfig, size: int, message: int, loss: float, mtu: int
) -> Tail | None:
    """The tail for a ``size``-byte file sent as ``config`` (the scheme ``auto`` resolved
    to) in messages of ``message`` bytes of ``mtu``-byte packets at packet loss ``loss``,
    or None.

    None unless the stream runs SR, the link has a rate, one message holds a whole
    bandwidth-delay product (rounded up to whole chunks; a tail cut into several
    messages measured slower than none: 2.59-2.77 s against 2.48-2.55 for 256 MiB in 1
    MiB messages at 100 ms and 1e-3) and the file is larger than that: a smaller file is
    one message already, judged as such. Then the selector judges the tail alone
    among :data:`TAIL_CODES` and SR; the tail is planned only where :func:`tail_saving`
    exceeds what the chosen code costs (its predicted time beyond the lossless one) plus
    :data:`TAIL_FIXED_COST`.
    """
    if not config.scheme.startswith("sr-") or not config.link_rate or not config.chunk_size:
        return None
    chunk = int(config.chunk_size)
    rate, rtt = float(config.link_rate), float(config.rtt)
    nbytes = math.ceil(rate / 8 * rtt / chunk) * chunk
    if nbytes > message or size <= nbytes or loss <= 0:
        return None
    from sdr.simulator.link import Link  # noqa: PLC0415 - the simulator only when needed

    link = Link(rate=rate, rtt=rtt, mtu=mtu, chunk_size=chunk, alpha=config.alpha)
    saving = tail_saving(rate, rtt, chunk, link.chunk_drop(loss, "packet"))
    if saving <= TAIL_FIXED_COST:
        return None
    from sdr.simulator.select import select_scheme  # noqa: PLC0415 - loads SciPy

    best = select_scheme(link, nbytes, loss, drop_unit="packet", chunk_sizes=(chunk,),
                         ec_codes=TAIL_CODES)  # fmt: skip
    if not best.scheme.startswith("ec-"):
        return None
    cost = best.mean_s - link.ideal_time_s(nbytes)  # parity, and the odd fallback
    if saving <= cost + TAIL_FIXED_COST:
        return None
    return Tail(nbytes, Candidate(best.scheme, int(best.params["k"]), int(best.params["m"])))


TAIL_FIXED_COST = 0.010
"""Seconds a tail costs beyond its parity: at 25 ms, 1 Gbit/s and 1e-3, tails that lost
nothing still finished 5-7 ms later than the same file without one (docs/benchmarks.md)."""
REPAIRED_ONCE = 0.1
"""The tail is planned only where the repairs of the last round trip of data are lost
again with at most this probability (:func:`tail_saving`)."""


def tail_saving(rate: float, rtt: float, chunk: int, q: float) -> float:
    """Seconds an erasure-coded last BDP saves SR on average, at chunk loss ``q``.

    Chunks leave at ``lam = rate / 8 / chunk`` per second; a loss at ``x`` seconds before
    the last one is repaired ``rtt - x`` after the file would have been done (later data
    hides an earlier loss). With losses a Poisson process at ``lam * q`` per second the
    expected wait for the last one in the final RTT is ``rtt - (1 - exp(-lam q rtt)) /
    (lam q)``, which parity saves. Where those repairs are themselves lost (the chance
    that any of the ``lam q rtt`` repairs is lost again) a second round follows, tail or
    no tail; above :data:`REPAIRED_ONCE` the saving counts as none (measured at 1e-2:
    as often slower as faster, docs/benchmarks.md).
    """
    events = rate / 8 / chunk * q  # chunk losses per second
    if events <= 0 or rtt <= 0:
        return 0.0
    wait = rtt - (1.0 - math.exp(-events * rtt)) / events
    again = 1.0 - (1.0 - q) ** (events * rtt)
    return 0.0 if again > REPAIRED_ONCE else wait * (1.0 - again)


def parse_tail(obj: Any, size: int, message: int) -> Tail:
    """The hello's ``tail``, checked: a registered EC scheme, k and m in range with m <= k
    (parity no larger than the data it protects, so every message's parity lane stays
    within one message; ``ReliabilityConfig`` checks the code further when the QP is
    built) and fewer bytes than the file, at most one ``message`` (RemoteProtocolError
    naming the field)."""
    body = require_object(obj, "hello.tail")
    check_keys(body, "hello.tail", ("bytes", "scheme", "k", "m"))
    if size < 2:
        raise RemoteProtocolError(f"hello.tail for a {size}-byte file: nothing to cut")
    nbytes = field_int(body, "bytes", 1, min(size - 1, message), path="hello.tail")
    scheme = field_str(body, "scheme", path="hello.tail", max_len=64)
    if not scheme.startswith("ec-") or scheme not in available_schemes():
        raise RemoteProtocolError(f"hello.tail.scheme must be an EC scheme, got {scheme!r}")
    k = field_int(body, "k", 1, MAX_CODE, path="hello.tail")
    m = field_int(body, "m", 1, k, path="hello.tail")
    return Tail(nbytes, Candidate(scheme, k, m))


def policies(
    config: ReliabilityConfig, size: int, message: int, tail: Tail | None
) -> tuple[AdaptivePolicy | None, AdaptivePolicy | None]:
    """The sender's and the receiver's policies for ``ReliableQP(adaptive=...)``: None
    without a tail; else the stream's scheme for every write but the tail's."""
    if tail is None:
        return None, None
    stream = Candidate(config.scheme)
    candidates = (stream, tail.candidate)
    last = -(-(size - tail.nbytes) // message)  # the tail's write comes after the bulk's

    def plan(index: int) -> Candidate:
        return tail.candidate if index == last else stream

    return PlannedPolicy(candidates, plan), AdaptivePolicy(None, candidates)
