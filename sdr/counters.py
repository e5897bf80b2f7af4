"""Per-QP counters: what was accepted and what was discarded, and why."""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = ["QPCounters"]


@dataclass
class QPCounters:
    """Counts kept by the core. Drivers add their own discards (see TransportQP.counters)."""

    packets_accepted: int = 0
    duplicates: int = 0
    late: int = 0
    stale_generation: int = 0
    malformed: int = 0
    out_of_range: int = 0
    imm_only_packets: int = 0
    packets_sent: int = 0
    bytes_sent: int = 0
    messages_sent: int = 0
    messages_received: int = 0
    cts_sent: int = 0
    cts_received: int = 0
    cts_requests_sent: int = 0
    cts_resent: int = 0
    control_malformed: int = 0
    control_dropped: int = 0
    """Control messages for the layer above dropped: its queue was full (tail drop)."""
    cts_timeouts: int = 0
    """Sends failed because no clear-to-send came within their ``cts_timeout``."""
    chunks_reopened: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)
