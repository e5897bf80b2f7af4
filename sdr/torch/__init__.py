"""SDR as a torch.distributed backend: ``import sdr.torch`` registers ``"sdr"``.

    import sdr.torch  # noqa: F401 - registers the backend
    import torch.distributed as dist

    dist.init_process_group("sdr")   # under torchrun; SDR_LOCAL_SIZE = ranks per datacenter

Inside a datacenter the ranks use shared-memory channels, between datacenters SDR
reliable writes (see docs/training.md). :class:`ProcessGroupSDR` is the group itself.
"""

from __future__ import annotations

import torch.distributed as dist

from sdr.torch.liveness import PeerGone
from sdr.torch.process_group import ProcessGroupSDR, link_options_from_env

__all__ = ["BACKEND", "PeerGone", "ProcessGroupSDR", "link_options_from_env"]

BACKEND = "sdr"


def _create(store: object, rank: int, world_size: int, timeout: object) -> ProcessGroupSDR:
    return ProcessGroupSDR(store, rank, world_size, timeout)  # type: ignore[arg-type]


if BACKEND not in dist.Backend.backend_list:
    dist.Backend.register_backend(BACKEND, _create, devices=["cpu", "cuda"])
