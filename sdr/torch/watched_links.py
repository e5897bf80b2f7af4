"""The ``sdr`` process group's SDR links, watched by the group's liveness.

A plain :class:`~sdr.backends.hierarchical.SdrLinks` wait ends at its condition or its
timeout; a group's wait must also end the moment a peer is gone, with the
:class:`~sdr.torch.liveness.PeerGone` error that names it, so that no rank sits out the
whole timeout on a peer that already died.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sdr.backends.hierarchical import SdrLinks
from sdr.torch.liveness import Liveness
from sdr.torch.operation_queue import OperationQueue

__all__ = ["WatchedLinks"]


class WatchedLinks(SdrLinks):
    """SDR links whose every wait also stops, with its error, when a peer is gone or the
    group failed otherwise (``operations.check()`` raises: an abort, say)."""

    def __init__(
        self, liveness: Liveness, operations: OperationQueue, *args: Any, **kwargs: Any
    ) -> None:
        self.liveness = liveness
        self.operations = operations
        self.closing = False
        super().__init__(*args, **kwargs)

    def drive(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        """Progress the QPs until ``condition()``; raise PeerGone as soon as a peer is
        (while closing, a peer that left on purpose is not an error: it drained first)."""

        def done() -> bool:
            error = self.liveness.error
            if error is not None and not (self.closing and error.left):
                raise error
            if not self.closing:
                self.operations.check()
            return condition()

        super().drive(done, timeout, what)
