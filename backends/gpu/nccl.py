"""NCCL through CuPy, for the sizes where the selection says NCCL is faster than our plans.

NVLink multicast (NVLS) is switched off before NCCL starts: it can take shared GPUs out of
service, and our deployment rules forbid it.
"""

from __future__ import annotations

import logging
import os
from typing import Any

log = logging.getLogger(__name__)

_DTYPES = {"float32": "NCCL_FLOAT32", "float16": "NCCL_FLOAT16", "bfloat16": "NCCL_BFLOAT16"}
_NCCL_BFLOAT16 = 9  # ncclBfloat16 in NCCL >= 2.10, if CuPy lacks the constant


def nccl_module() -> Any | None:
    """``cupy.cuda.nccl`` if NCCL can be loaded, else None."""
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    try:
        from cupy.cuda import nccl  # noqa: PLC0415 - optional

        nccl.get_version()
    except Exception as exc:  # noqa: BLE001 - any failure means "no NCCL here"
        log.info("NCCL unavailable through CuPy: %s", exc)
        return None
    return nccl


class NcclComm:
    """A NCCL communicator over the same ranks, set up through our bootstrap."""

    def __init__(self, nccl: Any, bootstrap: Any) -> None:
        self.nccl = nccl
        uid = nccl.get_unique_id() if bootstrap.rank == 0 else None
        uid = bootstrap.all_gather(uid)[0]
        self.comm = nccl.NcclCommunicator(bootstrap.world_size, uid, bootstrap.rank)

    def _dtype(self, dtype: str) -> int:
        return int(getattr(self.nccl, _DTYPES[dtype], _NCCL_BFLOAT16))

    def allreduce(self, x: Any, out: Any, dtype: str, stream: int) -> None:
        """Sum allreduce of CuPy arrays on ``stream`` (a raw stream pointer)."""
        self.comm.allReduce(
            x.data.ptr, out.data.ptr, x.size, self._dtype(dtype), self.nccl.NCCL_SUM, stream
        )

    def allgather(self, x: Any, out: Any, dtype: str, stream: int) -> None:
        """Allgather of CuPy arrays."""
        self.comm.allGather(x.data.ptr, out.data.ptr, x.size, self._dtype(dtype), stream)

    def reduce_scatter(self, x: Any, out: Any, dtype: str, stream: int) -> None:
        """Sum reduce-scatter of CuPy arrays."""
        self.comm.reduceScatter(
            x.data.ptr, out.data.ptr, out.size, self._dtype(dtype), self.nccl.NCCL_SUM, stream
        )

    def broadcast(self, x: Any, root: int, dtype: str, stream: int) -> None:
        """In-place broadcast of a CuPy array."""
        self.comm.broadcast(x.data.ptr, x.data.ptr, x.size, self._dtype(dtype), root, stream)
