"""Defaults shared by every ``sdr`` command, so that one flag means one value everywhere.

:data:`DEFAULT_MTU` is the payload bytes per packet of ``send``, ``write-bw``, ``sim``,
``select``, ``sweep`` and ``bitmap-demo``: 4096, the RoCE path MTU that the paper's model
and the simulator use, and :class:`sdr.QPAttr`'s own default (read from it here, so the
library and the CLI cannot drift apart). ``sdr demo`` alone uses 8192-byte packets on a
9000-byte (jumbo-frame) link by default: on a 2-core machine the sender, the receiver and
the emulator share the CPU, and the larger packet halves their per-packet work.

:data:`DEFAULT_RATE` is the line rate of ``send`` (its ``link_rate``), ``demo``,
``emulate``, ``sim``, ``select``, ``allreduce-sim`` and ``sweep`` (``--rates``): 1 Gbit/s,
the simulator's :data:`sdr.simulator.link.DEFAULT_RATE` and ``LinkSpec``'s. The paper's
figures run at 400 Gbit/s and say so (``--rate 400Gbit/s``).
"""

from __future__ import annotations

from sdr.config import QPAttr
from sdr.simulator.link import DEFAULT_RATE as _RATE
from sdr.units import format_rate

__all__ = ["DEFAULT_MTU", "DEFAULT_RATE"]

DEFAULT_MTU: int = QPAttr().mtu
DEFAULT_RATE: str = format_rate(_RATE)  # "1Gbit/s"
