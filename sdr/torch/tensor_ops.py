"""torch tensors through the hierarchical communicator: every dtype, op and size.

The hierarchical communicator sums float32, float16 and bfloat16 arrays (NumPy) and
moves bytes; this module maps torch's operations onto it:

- SUM / AVG of float32, float16, bfloat16: the communicator's allreduce (reduce-scatter
  in the datacenter, SDR ring across, allgather in); AVG then divides by the world size;
- every other (dtype, op) pair: an allgather of the raw bytes, then the same reduction in
  job-rank order on every rank (exact for integers, bitwise identical on every rank for
  floats). It moves ``world_size`` times the bytes: meant for small tensors (metrics,
  counters, flags), not gradients;
- broadcast: an allgather of the bytes, keeping the root's block (bitwise exact);
- tensors of any size are cut into segments so that no SDR write exceeds the links'
  ``max_message_size``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import torch
import torch.distributed as dist

from sdr.backends.hierarchical import HierarchicalCommunicator
from sdr.errors import ConfigError
from sdr.torch.topology import RankMap
from sdr.units import parse_size

__all__ = ["TensorOps"]

R = dist.ReduceOp.RedOpType
# The members are read as ReduceOp.SUM etc. (the same objects as RedOpType.SUM): torch's
# stubs declare them on ReduceOp and leave the RedOpType enum empty.
Op = dist.ReduceOp
_SUMMED = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
_VIEW = {torch.float32: torch.float32, torch.float16: torch.float16, torch.bfloat16: torch.int16}


def _bitwise(fn: Callable) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda stacked: functools.reduce(fn, stacked.unbind(0))


_REDUCE: dict[R, Callable[[torch.Tensor], torch.Tensor]] = {
    Op.SUM: lambda s: functools.reduce(torch.add, s.unbind(0)),
    Op.PRODUCT: lambda s: functools.reduce(torch.mul, s.unbind(0)),
    Op.MIN: lambda s: torch.amin(s, dim=0),
    Op.MAX: lambda s: torch.amax(s, dim=0),
    Op.BAND: _bitwise(torch.bitwise_and),
    Op.BOR: _bitwise(torch.bitwise_or),
    Op.BXOR: _bitwise(torch.bitwise_xor),
}


def red_op_type(op: object) -> R:
    """The RedOpType of a ReduceOp (or of a RedOpType)."""
    return op if isinstance(op, R) else op.op  # type: ignore[attr-defined]


class TensorOps:
    """Collectives on CPU tensors for one rank (``rmap`` translates job ranks)."""

    def __init__(self, comm: HierarchicalCommunicator, rmap: RankMap, rank: int) -> None:
        self.comm = comm
        self.rmap = rmap
        self.rank = rank
        self.world_size = rmap.world_size
        mms = parse_size(comm.links.options.max_message_size)
        # a ring allreduce writes (segment / world / slices) bytes at once; allgather
        # writes (block / slices): keep both at half the largest message
        self.reduce_segment = max(mms * self.world_size * comm.slices // 2, 1024)
        self.gather_segment = max(mms * comm.slices // 2, 1024)

    # --- allreduce ---------------------------------------------------------------------
    def allreduce(self, t: torch.Tensor, op: object) -> None:
        """``t`` becomes the reduction of every rank's ``t`` (in place)."""
        kind = red_op_type(op)
        if kind == Op.AVG and not t.dtype.is_floating_point:
            raise ConfigError(f"ReduceOp.AVG of {t.dtype}; expected a floating-point tensor")
        if t.dtype in _SUMMED and kind in (Op.SUM, Op.AVG):
            self._sum(t)
            if kind == Op.AVG:
                t.div_(self.world_size)
            return
        if kind not in _REDUCE and kind != Op.AVG:
            raise ConfigError(f"reduce op {kind}; expected SUM, AVG, MIN, MAX, PRODUCT or B*")
        if t.dtype.is_complex or t.dtype == torch.bool and kind in (Op.SUM, Op.PRODUCT):
            raise ConfigError(f"reduce op {kind.name} of {t.dtype} is not supported")
        stacked = self.allgather(t)
        if kind == Op.AVG:  # float64 and other floats the communicator does not sum
            t.copy_(_REDUCE[Op.SUM](stacked).div_(self.world_size))
        else:
            t.copy_(_REDUCE[kind](stacked))

    def _sum(self, t: torch.Tensor) -> None:
        flat = t.view(-1)
        arr = flat.view(_VIEW[t.dtype]).numpy()
        dtype = _SUMMED[t.dtype]
        if dtype == "bfloat16":
            arr = arr.view(np.uint16)
        step = max(self.reduce_segment // t.element_size(), 1)
        for start in range(0, arr.size, step):
            piece = arr[start : start + step]
            self.comm.allreduce(piece, out=piece, dtype=dtype)

    # --- byte movement -----------------------------------------------------------------
    def allgather(self, t: torch.Tensor) -> torch.Tensor:
        """Every rank's ``t``, stacked in job-rank order (shape ``[world, *t.shape]``)."""
        raw = t.contiguous().view(-1).view(torch.uint8).numpy()
        n = raw.size
        even = n + (n & 1)
        gathered = np.empty((self.world_size, even), np.uint8)
        step = max(self.gather_segment & ~1, 2)
        for start in range(0, max(even, 2), step):
            stop = min(start + step, even)
            piece = np.zeros(stop - start, np.uint8)
            piece[: max(min(stop, n) - start, 0)] = raw[start : min(stop, n)]
            out = np.empty((self.world_size, stop - start), np.uint8)
            self.comm.allgather(
                piece.view(np.uint16), out.view(np.uint16).reshape(-1), dtype="bfloat16"
            )  # bfloat16 storage: moved, never summed
            gathered[:, start:stop] = out
        by_rank = gathered[[self.rmap.position(r) for r in range(self.world_size)], :n]
        blocks = torch.from_numpy(np.ascontiguousarray(by_rank))
        return blocks.view(t.dtype).reshape(self.world_size, *t.shape)

    def broadcast(self, t: torch.Tensor, root: int) -> None:
        """``t`` becomes ``root``'s ``t`` on every rank (bitwise)."""
        if not 0 <= root < self.world_size:
            raise ConfigError(f"broadcast root {root}; expected 0 <= root < {self.world_size}")
        t.copy_(self.allgather(t)[root])

    def barrier(self) -> None:
        """Every rank of the group meets."""
        self.comm.barrier()
