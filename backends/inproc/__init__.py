"""In-process transport with seeded fault injection (tests, demos, the simulator)."""

from sdr.backends.inproc.network import Faults, InprocNetwork, ManualClock
from sdr.backends.inproc.transport import InprocQP, InprocTransport

__all__ = ["Faults", "InprocNetwork", "InprocQP", "InprocTransport", "ManualClock"]
