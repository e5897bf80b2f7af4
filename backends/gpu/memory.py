"""GPU primitives: registered device memory shared over CUDA IPC, semaphores, channels.

Each rank allocates one device buffer (plain ``cudaMalloc``, so its IPC handle maps the
whole allocation) laid out as::

    [ semaphores: world_size x MAX_BLOCKS x uint64 | scratch x 2 | packets x 2 ]

and exchanges its IPC handle through the bootstrap; every peer's buffer is opened here
(peer access over NVLink or PCIe). Kernels use these through the executor's pointer
table; :class:`GpuMemoryChannel` offers the host-launched verbs for tools and tests.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from backends.gpu.kernels import MAX_BLOCKS
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
        self.sem_bytes = self.world_size * MAX_BLOCKS * 8
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


class GpuMemoryChannel:
    """Host-launched verbs on a peer's mapped scratch (the kernels use the same memory).

    ``put``/``get`` are device-to-device copies on the current stream; ``flush``
    synchronises the stream. In-kernel signal/wait and LL packets are the executor's.
    """

    def __init__(self, region: GpuRegion, peer: int) -> None:
        self.region = region
        self.peer = peer

    def put(self, dst_offset: int, src: Any, src_offset: int, nbytes: int) -> None:
        """Copy ``nbytes`` of CuPy array ``src`` into the peer's scratch (parity 0 half)."""
        cp = _cupy()
        dst = self.region.scratch(self.peer) + dst_offset
        cp.cuda.runtime.memcpyAsync(
            dst, src.data.ptr + src_offset, nbytes, 3, cp.cuda.get_current_stream().ptr
        )

    def get(self, dst: Any, dst_offset: int, src_offset: int, nbytes: int) -> None:
        """Copy ``nbytes`` of the peer's scratch into CuPy array ``dst``."""
        cp = _cupy()
        src = self.region.scratch(self.peer) + src_offset
        cp.cuda.runtime.memcpyAsync(
            dst.data.ptr + dst_offset, src, nbytes, 3, cp.cuda.get_current_stream().ptr
        )

    def flush(self) -> None:
        """Wait until prior copies on the current stream completed."""
        _cupy().cuda.get_current_stream().synchronize()
