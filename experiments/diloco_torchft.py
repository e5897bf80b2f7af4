"""The ``torchft`` variant of experiments/diloco_wan.py: the outer average through torchft.

Each datacenter is one torchft replica group of one rank (its own TCPStore and manager);
datacenter 0 also runs the lighthouse that forms the quorum. Every outer step asks for
a quorum, averages the pseudo-gradient with the manager's fault-tolerant allreduce (gloo
over the same emulated link) and asks whether to commit: torchft's unit of failure is
the whole step, so a step that fails is discarded on every replica (its pseudo-gradient
zeroed: the outer optimizer sees nothing that step). torchft is not a dependency of SDR:
``pip install -e '.[torchft]'`` (0.2.0 was measured); without it the variant says so.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

__all__ = ["TorchftAverager"]


class TorchftAverager:
    """One replica group's side of torchft's averaging (see the module docstring)."""

    def __init__(self, dc: int, host: str, lighthouse: tuple[str, int], store_port: int,
                 replicas: int = 2, timeout_s: float = 120.0) -> None:  # fmt: skip
        import os

        import torch.distributed as dist

        # torchft's manager logs every quorum and commit at INFO (about 190 lines per run)
        os.environ.setdefault("RUST_LOG", "warn")
        from torchft import Manager, ProcessGroupGloo
        from torchft.coordination import LighthouseServer

        timeout = timedelta(seconds=timeout_s)
        self._server = None
        if dc == 0:
            self._server = LighthouseServer(
                bind=f"[::]:{lighthouse[1]}", min_replicas=replicas, join_timeout_ms=10_000,
                quorum_tick_ms=20, heartbeat_timeout_ms=int(timeout_s * 1000),
            )  # fmt: skip
        self._store = dist.TCPStore(host, store_port, is_master=True, wait_for_workers=False)
        self.manager = Manager(
            pg=ProcessGroupGloo(timeout=timeout), load_state_dict=lambda _: None,
            state_dict=lambda: {}, min_replica_size=replicas, use_async_quorum=False,
            timeout=timeout, quorum_timeout=timeout, connect_timeout=timeout, rank=0,
            world_size=1, store_addr=host, store_port=store_port,
            lighthouse_addr=f"http://{lighthouse[0]}:{lighthouse[1]}", replica_id=f"dc{dc}",
            hostname=host, init_sync=False,  # every replica starts from the same seed
        )  # fmt: skip

    def average(self, delta: Any) -> bool:
        """Average ``delta`` in place across the replica groups; False when torchft
        discarded the step (``delta`` is then zero)."""
        self.manager.start_quorum()
        self.manager.allreduce(delta).wait()
        if self.manager.should_commit():
            return True
        delta.zero_()
        return False

    def close(self) -> None:
        self.manager.shutdown(wait=False)
        if self._server is not None:
            self._server.shutdown()
