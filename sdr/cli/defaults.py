"""Defaults shared by every ``sdr`` command, so that one flag means one value everywhere.

:data:`DEFAULT_MTU` is the payload bytes per packet of ``send``, ``write-bw``, ``sim``,
``select``, ``sweep`` and ``bitmap-demo``: 4096, the RoCE path MTU that the paper's model
and the simulator use, and :class:`sdr.QPAttr`'s own default (read from it here, so the
library and the CLI cannot drift apart). ``sdr demo`` alone uses larger packets by default,
since the Python TUN forwarder's per-packet cost caps it (docs/wan-emulator.md).
"""

from __future__ import annotations

import dataclasses

from sdr.config import QPAttr

__all__ = ["DEFAULT_MTU"]

DEFAULT_MTU: int = int(next(f.default for f in dataclasses.fields(QPAttr) if f.name == "mtu"))
