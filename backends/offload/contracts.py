"""What an offload QP needs of its transport, typed by use.

``transport`` creates QPs (it imports ``qp``); a QP calls back into its transport through
this Protocol, so ``qp`` never imports ``transport`` and the two form no circle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from sdr.backends.offload.pool import WorkerPool
from sdr.config import QPAttr
from sdr.transport import MemoryRegion

__all__ = ["QPHost"]


class QPHost(Protocol):
    """The parts of :class:`sdr.backends.offload.transport.OffloadTransport` a QP uses."""

    host: str
    wire: str
    pool: WorkerPool | None
    local_segments: dict[int, memoryview]
    source: Callable[[QPAttr, int], tuple[Any, ...]]

    def new_id(self) -> int: ...

    def now(self) -> float: ...

    def placement_of(self, region: MemoryRegion) -> tuple[int, int]: ...

    def forget(self, qp: Any) -> None: ...
