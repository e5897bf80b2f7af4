"""In-process transport with seeded fault injection (tests, demos, the simulator)."""

from backends.inproc.network import Faults, InprocNetwork, ManualClock
from backends.inproc.transport import InprocQP, InprocTransport

__all__ = ["Faults", "InprocNetwork", "InprocQP", "InprocTransport", "ManualClock"]
