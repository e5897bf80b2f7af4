"""The runtime: the blocking shells above the sans-I/O core and below the tools.

The only layer that loops, blocks or asks a driver for time: :class:`Context` (a backend
and its progress loop), :class:`QP` (the core joined to a transport QP), the handles of
plain SDR sends and receives, :class:`ReliableQP` over a
:class:`~sdr.reliability.ReliableConnection` with its write and receive handles, and the
waits that drive several QPs together (:func:`wait_all`, :func:`drive`).
"""

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
