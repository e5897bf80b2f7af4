"""The runtime: the blocking shells above the sans-I/O core and below the tools.

The only layer that loops, blocks or asks a driver for time: :class:`Context` (a backend
and its progress loop), :class:`QP` (the core joined to a transport QP), the handles of
plain SDR sends and receives, :class:`ReliableQP` over a
:class:`~sdr.reliability.ReliableConnection` with its write and receive handles, and the
waits that drive several QPs together (:func:`wait_all`, :func:`drive`).

NumPy 2 imports ``numpy.ma`` on the first ``np.unique`` call (``_unique1d`` asks
``np.ma.is_masked``): 7-20 ms, paid inside the receiver's first progress round, where it
held the first SACK back and the sender's RTO, still the configured one, repaired the
chunks it sent meanwhile for nothing. The runtime imports it up front instead.
"""

import numpy.ma  # noqa: F401  (see below)

from sdr.runtime.context import Context
from sdr.runtime.handles import HandleState, ReceiveHandle, WriteHandle, drive, wait_all
from sdr.runtime.qp import QP
from sdr.runtime.qp_handles import RecvHandle, SendHandle, SendStream
from sdr.runtime.reliable_qp import ReliableQP

__all__ = [
    "Context",
    "QP",
    "RecvHandle",
    "SendHandle",
    "SendStream",
    "ReliableQP",
    "WriteHandle",
    "ReceiveHandle",
    "HandleState",
    "drive",
    "wait_all",
]
