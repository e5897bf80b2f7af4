"""Defaults shared by every ``sdr`` command, so that one flag means one value everywhere.

:data:`DEFAULT_MTU` is the payload bytes per packet of ``send``, ``write-bw``, ``sim``,
``select``, ``sweep`` and ``bitmap-demo``: 4096, the RoCE path MTU that the paper's model
and the simulator use, and :class:`sdr.QPAttr`'s own default (read from it here, so the
library and the CLI cannot drift apart). ``sdr demo`` alone uses 8192-byte packets on a
9000-byte (jumbo-frame) link by default: on a 2-core machine the sender, the receiver and
the emulator share the CPU, and the larger packet halves their per-packet work.
"""

from __future__ import annotations

from sdr.config import QPAttr

__all__ = ["DEFAULT_MTU"]

DEFAULT_MTU: int = QPAttr().mtu
