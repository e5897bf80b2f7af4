"""How long before a receive's (message id, slot, generation) comes round again.

A data packet lands only in the receive whose key-table entry (generation, slot) is bound
and whose message id its immediate names. Receive n takes

    message id  = n mod 2^id_bits
    slot        = n mod max_messages
    generation  = (n div max_messages) mod generations

so the triple repeats every ``lcm(max_messages * generations, 2^id_bits)`` receives. A
packet that outlives that many messages in the network (a straggler) would be taken for a
packet of the later message. With the paper's 128 slots that period is only 1,024
receives (1.3 ms of 64 KiB messages at 400 Gbit/s); an odd slot count is coprime with
the id space, so the default 127 slots give 127 x 1024 = 130,048 receives (170 ms at
400 Gbit/s with 64 KiB messages).

The straggler bound: a packet lives at most one one-way propagation plus one
bandwidth-delay product of queueing at the bottleneck (a buffer of one BDP, the usual
sizing rule), i.e. 1.5 RTT. The triple must not come round within that time at line rate.
"""

from __future__ import annotations

import math
import warnings

from sdr.config import QPAttr
from sdr.units import format_rate, format_size, format_time

__all__ = [
    "StragglerWarning",
    "receive_triple",
    "reuse_period",
    "reuse_window",
    "straggler_lifetime",
    "straggler_shortfall",
    "warn_if_short",
    "DESIGN_RTT",
]

DESIGN_RTT = 0.1
"""The longest RTT of the design range (seconds); the bound at ``create_qp`` uses it."""

LIFETIME_RTTS = 1.5
"""A packet's longest life in the network, in RTTs: one-way delay plus one BDP of queue."""


class StragglerWarning(UserWarning):
    """The QP's attributes let a straggler of one message land in a later one."""


def receive_triple(attr: QPAttr, seq: int) -> tuple[int, int, int]:
    """(message id, slot, generation) of receive number ``seq``."""
    slots = attr.max_messages
    return (
        seq % attr.layout.max_message_ids,
        seq % slots,
        (seq // slots) % attr.generations,
    )


def reuse_period(attr: QPAttr) -> int:
    """Receives between two uses of the same (message id, slot, generation)."""
    return math.lcm(attr.max_messages * attr.generations, attr.layout.max_message_ids)


def reuse_window(attr: QPAttr, rate_bps: float, message_bytes: int) -> float:
    """Seconds before a triple comes round when messages of ``message_bytes`` arrive
    back to back at ``rate_bps``: the receive that reuses it is posted up to
    max_messages receives ahead, so the window is (period - max_messages) messages."""
    per_message = max(message_bytes, 1) * 8 / rate_bps
    return (reuse_period(attr) - attr.max_messages) * per_message


def straggler_lifetime(rtt: float) -> float:
    """The longest a packet can survive in the network on a path of this RTT (seconds)."""
    return LIFETIME_RTTS * rtt


def straggler_shortfall(
    attr: QPAttr, rtt: float, rate_bps: float, message_bytes: int
) -> str | None:
    """Why a straggler could land in a later receive, and which attribute fixes it; None
    when the triple outlives every straggler at this RTT, rate and message size."""
    window = reuse_window(attr, rate_bps, message_bytes)
    life = straggler_lifetime(rtt)
    if window >= life:
        return None
    need = math.ceil(life / (max(message_bytes, 1) * 8 / rate_bps)) + attr.max_messages
    ids = attr.layout.max_message_ids
    if attr.max_messages % 2 == 0 and (attr.max_messages - 1) * ids >= need:
        fix = f"use an odd max_messages (e.g. {attr.max_messages - 1}): it is coprime with the ids"
    else:
        bits = attr.id_bits
        while (1 << bits) * _odd_part(attr.max_messages * attr.generations) < need and bits < 16:
            bits += 1
        fix = f"raise id_bits to {bits} (taking the bits from offset_bits) or send larger messages"
    return (
        f"receive ids repeat every {reuse_period(attr)} messages, {format_time(window)} of "
        f"{format_size(message_bytes)} messages at {format_rate(rate_bps)}, but a straggler "
        f"can live {format_time(life)} ({LIFETIME_RTTS} RTT of {format_time(rtt)}): {fix}"
    )


def warn_if_short(
    attr: QPAttr, rtt: float, rate_bps: float | None, message_bytes: int | None = None
) -> str | None:
    """Emit a :class:`StragglerWarning` when the bound is not met; returns its text."""
    if not rate_bps:
        return None
    text = straggler_shortfall(attr, rtt, rate_bps, message_bytes or attr.chunk_size)
    if text is not None:
        warnings.warn(text, StragglerWarning, stacklevel=3)
    return text


def _odd_part(n: int) -> int:
    while n and n % 2 == 0:
        n //= 2
    return max(n, 1)
