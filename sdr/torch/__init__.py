"""SDR as a torch.distributed backend: ``import sdr.torch`` registers ``"sdr"``.

    import sdr.torch  # noqa: F401 - registers the backend
    import torch.distributed as dist

    dist.init_process_group("sdr")   # under torchrun; SDR_LOCAL_SIZE = ranks per datacenter

Inside a datacenter the ranks use shared-memory channels, between datacenters SDR
reliable writes (see docs/training.md). :class:`ProcessGroupSDR` is the group itself.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from sdr.collectives.deadline import DeadlineReport
from sdr.errors import ConfigError
from sdr.torch.liveness import PeerGone
from sdr.torch.process_group import ProcessGroupSDR, link_options_from_env

__all__ = [
    "BACKEND",
    "DeadlineReport",
    "PeerGone",
    "ProcessGroupSDR",
    "allreduce_by",
    "link_options_from_env",
]

BACKEND = "sdr"


def allreduce_by(
    tensor: torch.Tensor,
    deadline: float,
    *,
    group: Any = None,
    slices: int = 8,
    key: object = None,
    withhold: tuple[int, ...] = (),
    average: str | None = None,
    carry: bool | float | str = True,
    kept_out: torch.Tensor | None = None,
) -> DeadlineReport:
    """Average ``tensor`` in place over what crossed the WAN within ``deadline`` seconds.

    Every rank gets bitwise the same result: each of the ``slices`` slices of a rank's
    shard is in when every datacenter had it at the deadline (one agreement round after
    it settles which), and each slice is the mean over the contributions that are in.
    What missed stays with its rank and is added to its next call with the same ``key``
    (error feedback: nothing is lost, only delayed; ``carry=False`` drops it, a weight in
    (0, 1) carries that part of it: a staleness weight; ``carry="local"`` carries nothing
    and hands this rank's own missed part back as ``report.kept``, a tensor like
    ``tensor``, for the training loop to keep: the carry that fits DiLoCo).
    ``average``: ``"arrived"`` divides each slice by the ranks that are in, ``"all"`` by
    every rank (default: ``"all"`` with carry-over, which keeps the mean exact over a
    run; ``"arrived"`` without; ``"all"`` with ``"local"``). For DiLoCo's pseudo-gradients
    use ``carry="local"`` (and start the next inner steps from the shared model less
    ``report.kept``) or ``carry=False``: plain carry-over counts a missed slice about twice
    there (docs/training.md). ``kept_out``: a tensor like ``tensor`` that
    ``report.kept`` is written into (pass the same one every step: its memory is in
    place, where a fresh tensor's pages fault in between the decision and the result;
    when ``report.kept`` is None, what it holds is not promised).
    Needs the ``sdr`` backend (``group``: default, the default group). Returns this
    rank's report.
    """
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if not isinstance(pg, ProcessGroupSDR):
        raise ConfigError(
            f"allreduce_by needs the 'sdr' backend, the group is {type(pg).__name__}: "
            "dist.init_process_group('sdr')"
        )
    # on this thread when the group is idle: a deadline step counts the hand-offs
    work = pg.allreduce_by(tensor, deadline, slices=slices, key=key, withhold=withhold,
                           average=average, carry=carry, kept_out=kept_out,
                           here=True)  # fmt: skip
    work.wait()
    return work.get_future().value()[0]


def _create(store: object, rank: int, world_size: int, timeout: object) -> ProcessGroupSDR:
    return ProcessGroupSDR(store, rank, world_size, timeout)  # type: ignore[arg-type]


if BACKEND not in dist.Backend.backend_list:
    dist.Backend.register_backend(BACKEND, _create, devices=["cpu", "cuda"])
