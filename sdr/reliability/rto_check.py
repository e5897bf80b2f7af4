"""Telling the user that the configured RTT is shorter than the path's round trip.

SDR's RTO is ``rtt x (1 + alpha)`` from the configured ``rtt`` (the user knows the link;
the paper's model). When the path's round trip is longer (a wrong ``rtt``, a queue that
another flow keeps full, a host too loaded to answer in time), every chunk's RTO fires
before its ACK can come: each chunk is queued again and, once its first copy's ACK
arrives, the copy leaves anyway (the send table cannot take a queued range back). The
transfer still completes with every byte right, at up to twice the bytes on the wire.

The sender sees it exactly: a chunk acknowledged while its repair copy still waits in the
queue was repaired for nothing (``repairs_spurious`` in the write's stats). When that is
a tenth of the chunks sent, :func:`spurious_repair_warning` says so once per connection,
with the fix. Repairs of chunks whose RTO was armed before the connection's first RTT
sample (``repairs_spurious_unsampled``) are left out: from that sample on, the RTO
follows the measured round trip.
"""

from __future__ import annotations

from collections.abc import Mapping

from sdr.reliability.config import ReliabilityConfig
from sdr.units import format_time

__all__ = ["RtoWarning", "spurious_repair_warning"]

MIN_SPURIOUS = 16
"""Spurious repairs before a warning (a few are reordering or one slow ACK)."""

SPURIOUS_SHARE = 0.1
"""...and at least this share of the data chunks sent."""


class RtoWarning(UserWarning):
    """The RTO (from the configured ``rtt``) is shorter than the path's round trip."""


def spurious_repair_warning(
    counters: Mapping[str, int], config: ReliabilityConfig, largest_rtt: float | None
) -> str | None:
    """The warning's text when the connection's finished writes (``counters``: the
    connection's, ``write_*`` summed over them) repaired too many chunks for nothing;
    ``largest_rtt``: the longest RTT sample seen (seconds), if any. None: all is well."""
    # repairs timed by the configured rtt before the first sample do not count: the RTO
    # follows the measured round trip from that sample on (beside two busy loops the
    # first SACK takes 30-45 ms, and a 50 us rtt repaired 10-16 chunks before it)
    spurious = counters.get("write_repairs_spurious", 0) - counters.get(
        "write_repairs_spurious_unsampled", 0
    )
    sent = counters.get("write_chunks_sent_lane0", 0)
    if spurious < MIN_SPURIOUS or spurious < SPURIOUS_SHARE * sent:
        return None
    rtt, alpha = float(config.rtt), config.alpha
    rto = f"the RTO ({format_time(config.rto)} = rtt {format_time(rtt)} x (1 + alpha {alpha:g}))"
    head = (
        f"{spurious} of {sent} chunks were queued again by their RTO and then acknowledged "
        "before the copy left: "
    )
    if largest_rtt is not None and largest_rtt < float(config.rto):
        # a repaired chunk gives no RTT sample (Karn), so the late ACKs are not among
        # the samples: the path is fine, the answers came late
        return (
            f"{head}{rto} is above every RTT sample (up to {format_time(largest_rtt)}), "
            "so some ACKs came late: a receiver too loaded to answer in time, or a queue "
            "that fills now and then; raise alpha, or give each end a core"
        )
    seen = f" (RTT samples up to {format_time(largest_rtt)})" if largest_rtt else ""
    return (
        f"{head}{rto} is shorter than this path's round trip{seen}; set rtt "
        "to the path's round trip, or raise alpha for a queue that others fill"
    )
