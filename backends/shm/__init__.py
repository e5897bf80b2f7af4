"""CPU collective backend: shared memory + NumPy, one process per rank.

It runs the same plans as the GPU backend, so the whole collective layer is tested
without a GPU.
"""

from sdr.backends.shm.bootstrap import TcpBootstrap, free_port
from sdr.backends.shm.communicator import ShmCommunicator
from sdr.backends.shm.group import LocalGroup
from sdr.backends.shm.memory import Region, ShmMemoryChannel

__all__ = [
    "LocalGroup",
    "Region",
    "ShmCommunicator",
    "ShmMemoryChannel",
    "TcpBootstrap",
    "free_port",
]
