"""What the link decides for packets (:class:`Decisions`, :class:`Verdict`), how it
counts them (:class:`LinkStats`), and how a decided corruption is applied (:func:`flip_bit`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

__all__ = [
    "BLACKOUT",
    "CAUSES",
    "DELIVERED",
    "LOSS",
    "QUEUE",
    "Decisions",
    "LinkStats",
    "Verdict",
    "flip_bit",
]

#: Codes of :attr:`Decisions.cause`.
DELIVERED, QUEUE, BLACKOUT, LOSS = 0, 1, 2, 3
#: The cause names, indexed by code (``Verdict.reason`` uses them; "" for delivered).
CAUSES = ("", "queue", "blackout", "loss")


@dataclass
class LinkStats:
    """Counters of one direction. ``packets``/``bytes``/``loss_drops`` are data packets;
    control messages are counted in ``control_packets``/``control_lost``."""

    packets: int = 0
    bytes: int = 0
    delivered: int = 0
    queue_drops: int = 0
    loss_drops: int = 0
    blackout_drops: int = 0
    duplicated: int = 0
    reordered: int = 0
    corrupted: int = 0
    control_packets: int = 0
    control_lost: int = 0
    max_backlog_bytes: float = 0.0

    def __getitem__(self, name: str) -> int | float:
        if name not in self._names():
            raise KeyError(name)
        return getattr(self, name)

    def as_dict(self) -> dict[str, int | float]:
        """The counters as a plain dict (JSON, summaries)."""
        return {name: getattr(self, name) for name in self._names()}

    @classmethod
    def _names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


@dataclass(frozen=True, slots=True)
class Decisions:
    """What the link decided for a batch of offered packets (one entry per packet).

    ``arrive``: arrival time at the far end, NaN where dropped; ``cause``: DELIVERED,
    QUEUE, BLACKOUT or LOSS; ``duplicate_at``: arrival of the second copy, NaN where none
    (None: no duplicates in the batch); ``corrupt``: flip one bit (None: none in the batch),
    at byte ``where`` (a fraction of the corruptible bytes) and bit ``bit``.
    """

    arrive: np.ndarray
    cause: np.ndarray
    duplicate_at: np.ndarray | None = None
    corrupt: np.ndarray | None = None
    where: np.ndarray | None = None
    bit: np.ndarray | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    """What happens to one packet: delivered at these times (empty: lost, see ``reason``)."""

    deliver_at: tuple[float, ...]
    corrupt: bool = False
    reason: str = ""


def flip_bit(packet: bytearray, skip: int, where: float, bit: int) -> None:
    """Flip bit ``bit`` of the byte at fraction ``where`` of ``packet[skip:]`` (a decided
    corruption; ``skip`` keeps headers routable). Nothing happens to a packet of <= skip."""
    if len(packet) > skip:
        pos = skip + min(int(where * (len(packet) - skip)), len(packet) - skip - 1)
        packet[pos] ^= 1 << int(bit)
