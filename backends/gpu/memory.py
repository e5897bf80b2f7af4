"""GPU primitives: registered device memory shared over CUDA IPC, semaphores, channels.

Each rank allocates one device buffer (plain ``cudaMalloc``, so its IPC handle maps the
whole allocation) laid out as::

    [ semaphores: world_size x SEM_SLOTS x uint64 | scratch x 2 | packets x 2 ]

and exchanges its IPC handle through the bootstrap; every peer's buffer is opened here
(peer access over NVLink or PCIe). Kernels use these through the executor's pointer
table; :class:`GpuMemoryChannel` offers the host-launched verbs for tools and tests.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import numpy as np

from sdr.backends.gpu.kernels import HOST_SLOT, HOST_SOURCE, SEM_SLOTS
from sdr.errors import TransportError

log = logging.getLogger(__name__)

_IPC_LAZY_PEER_ACCESS = 1


def _cupy() -> Any:
    import cupy  # noqa: PLC0415 - optional dependency, imported on use

    return cupy


class GpuRegion:
    """This rank's registered buffer and the mapped buffers of its peers."""

    def __init__(self, bootstrap: Any, device: int, scratch: int, packets: int) -> None:
        cp = _cupy()
        rt = cp.cuda.runtime
        self.world_size = bootstrap.world_size
        self.rank = bootstrap.rank
        self.scratch_cap = scratch
        self.packets_cap = packets
        self.sem_bytes = self.world_size * SEM_SLOTS * 8
        self.size = self.sem_bytes + 2 * scratch + 2 * packets
        with cp.cuda.Device(device):
            self.ptr = int(rt.malloc(self.size))
            rt.memset(self.ptr, 0, self.size)
            rt.deviceSynchronize()
            handle = bytes(rt.ipcGetMemHandle(self.ptr)) if self.world_size > 1 else b""
            infos = bootstrap.all_gather((device, handle))
            self.bases: list[int] = []
            self._opened: list[int] = []
            for r, (dev, h) in enumerate(infos):
                if r == self.rank:
                    self.bases.append(self.ptr)
                    continue
                if dev != device:
                    with contextlib.suppress(cp.cuda.runtime.CUDARuntimeError):
                        rt.deviceEnablePeerAccess(dev)
                try:
                    p = int(rt.ipcOpenMemHandle(h, _IPC_LAZY_PEER_ACCESS))
                except cp.cuda.runtime.CUDARuntimeError as exc:
                    raise TransportError(
                        f"rank {self.rank}: cannot map rank {r}'s memory: {exc}"
                    ) from exc
                self.bases.append(p)
                self._opened.append(p)
        bootstrap.barrier()
        log.debug("rank %d registered %d B on device %d", self.rank, self.size, device)

    def scratch(self, rank: int) -> int:
        """Device address of ``rank``'s scratch (parity 0 half)."""
        return self.bases[rank] + self.sem_bytes

    def packets(self, rank: int) -> int:
        """Device address of ``rank``'s packet buffer (parity 0 half)."""
        return self.bases[rank] + self.sem_bytes + 2 * self.scratch_cap

    def sems(self, rank: int) -> int:
        """Device address of ``rank``'s semaphore array."""
        return self.bases[rank]

    def close(self) -> None:
        """Close peers' mappings and free this rank's buffer (after a device sync)."""
        rt = _cupy().cuda.runtime
        rt.deviceSynchronize()
        for p in self._opened:
            with contextlib.suppress(Exception):
                rt.ipcCloseMemHandle(p)
        self._opened = []
        if self.ptr:
            rt.free(self.ptr)
            self.ptr = 0


_HOST_MODULE: dict[int, Any] = {}


def _host_kernels(device: int) -> Any:
    if device not in _HOST_MODULE:
        _HOST_MODULE[device] = _cupy().RawModule(code=HOST_SOURCE)
    return _HOST_MODULE[device]


class GpuMemoryChannel:
    """Host-launched verbs on a peer's mapped memory, on the current CuPy stream.

    ``put``/``get`` are device-to-device copies into/out of the peer's scratch; ``signal``/
    ``wait`` use a semaphore slot of their own (not the executor's per-block slots);
    ``put_packets``/``read_packets`` move LL packets with a caller-chosen flag. They use the
    parity-0 halves that collectives also use: do not interleave them with collective calls
    in flight. Kernels use the same memory through the executor.
    """

    def __init__(self, region: GpuRegion, peer: int, device: int) -> None:
        cp = _cupy()
        self.region = region
        self.peer = peer
        self.device = device
        self._sent = 0
        self._expected = 0
        with cp.cuda.Device(device):
            self._err = cp.zeros(1, cp.uint32)

    def _stream(self) -> int:
        return int(_cupy().cuda.get_current_stream().ptr)

    def put(self, dst_offset: int, src: Any, src_offset: int, nbytes: int) -> None:
        """Copy ``nbytes`` of CuPy array ``src`` into the peer's scratch."""
        dst = self.region.scratch(self.peer) + dst_offset
        _cupy().cuda.runtime.memcpyAsync(dst, src.data.ptr + src_offset, nbytes, 3, self._stream())

    def get(self, dst: Any, dst_offset: int, src_offset: int, nbytes: int) -> None:
        """Copy ``nbytes`` of the peer's scratch into CuPy array ``dst``."""
        src = self.region.scratch(self.peer) + src_offset
        _cupy().cuda.runtime.memcpyAsync(dst.data.ptr + dst_offset, src, nbytes, 3, self._stream())

    def signal(self) -> None:
        """After prior work on the stream, bump the peer's host semaphore for this rank."""
        self._sent += 1
        slot = self.region.sems(self.peer) + (self.region.rank * SEM_SLOTS + HOST_SLOT) * 8
        fn = _host_kernels(self.device).get_function("sdr_signal")
        fn((1,), (1,), (np.uint64(slot), np.uint64(self._sent)))

    def wait(self, timeout: float | None = None) -> None:
        """Make the stream wait for the peer's next host signal (``timeout`` is ~20 s fixed)."""
        del timeout
        self._expected += 1
        slot = self.region.sems(self.region.rank) + (self.peer * SEM_SLOTS + HOST_SLOT) * 8
        fn = _host_kernels(self.device).get_function("sdr_wait")
        fn((1,), (1,), (np.uint64(slot), np.uint64(self._expected), self._err))

    def flush(self) -> None:
        """Wait until prior copies and signals on the current stream completed."""
        _cupy().cuda.get_current_stream().synchronize()

    def put_packets(self, dst_offset: int, src: Any, src_offset: int, nbytes: int, flag: int):
        """Write ``nbytes`` of ``src`` as LL packets carrying ``flag`` into the peer."""
        dst = self.region.packets(self.peer) + dst_offset
        fn = _host_kernels(self.device).get_function("sdr_put_packets")
        args = (np.uint64(dst), np.uint64(src.data.ptr + src_offset), np.int64(nbytes))
        fn((32,), (256,), (*args, np.uint32(flag)))

    def read_packets(self, dst: Any, dst_offset: int, src_offset: int, nbytes: int, flag: int):
        """Wait for ``nbytes`` of LL packets with ``flag`` in this rank's buffer, unpack them."""
        src = self.region.packets(self.region.rank) + src_offset
        fn = _host_kernels(self.device).get_function("sdr_read_packets")
        args = (np.uint64(dst.data.ptr + dst_offset), np.uint64(src), np.int64(nbytes))
        fn((32,), (256,), (*args, np.uint32(flag), self._err))

    def check(self) -> None:
        """Raise TransportError if a host wait or packet read timed out (synchronises)."""
        if int(self._err[0].get()):
            raise TransportError(f"rank {self.region.rank}: host verb timed out on {self.peer}")
