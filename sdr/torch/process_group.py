"""``ProcessGroupSDR``: a torch.distributed process group over SDR (registered as ``"sdr"``).

One instance per rank, made by ``dist.init_process_group("sdr")`` (``import sdr.torch``
registers the backend). Set-up goes through the job's c10d store: the rank map from the
environment (:mod:`sdr.torch.topology`, settings: :mod:`sdr.torch.env_settings`), a
control connection to every peer (:mod:`sdr.torch.liveness`), the memory channels of this
rank's datacenter and its SDR links to the other datacenters
(:mod:`sdr.backends.hierarchical`, watched by :mod:`sdr.torch.watched_links`).

Every operation is queued to one worker thread per group, in call order (every rank
issues collectives in the same order, as torch requires), and returns an
:class:`~sdr.torch.work.SdrWork` at once; a synchronous call is torch waiting on it. The
first failure (an operation's error, its timeout, or a peer gone) fails every pending
and later operation of the group with the same one-line error: no rank carries on with
results the others did not get (:mod:`sdr.torch.operation_queue`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from sdr.backends.hierarchical import HierarchicalCommunicator
from sdr.backends.shm import ShmCommunicator
from sdr.errors import ConfigError, SDRError
from sdr.torch.env_settings import default_host, link_options_from_env, seconds_from_env
from sdr.torch.liveness import Liveness
from sdr.torch.operation_queue import OperationQueue
from sdr.torch.store_bootstrap import StoreBootstrap
from sdr.torch.tensor_ops import TensorOps
from sdr.torch.topology import rank_map_from_env
from sdr.torch.watched_links import WatchedLinks
from sdr.torch.work import SdrWork

__all__ = ["ProcessGroupSDR", "link_options_from_env"]

log = logging.getLogger(__name__)


class ProcessGroupSDR(dist.ProcessGroup):
    """The ``sdr`` backend for one rank (see module docs). ``timeout``: every operation's
    bound, torch's group timeout (default 30 minutes; ``init_process_group(timeout=...)``).

    Environment: SDR_DATACENTERS or SDR_LOCAL_SIZE (topology), SDR_HOST (this rank's
    address for SDR and control traffic; default: the one that routes to MASTER_ADDR),
    SDR_SCHEME / SDR_RATE / SDR_RTT / SDR_LOSS / SDR_SIZE_HINT / SDR_MAX_MESSAGE_SIZE (the
    SDR links), SDR_SLICES (WAN pipeline depth, default 4), SDR_HEARTBEAT_S (0.5) and
    SDR_PEER_SILENCE_S (5: a peer silent that long is gone).
    """

    def __init__(self, store: Any, rank: int, world_size: int, timeout: timedelta) -> None:
        # torch's stubs list only the (store, rank, size) constructor; the C++ class also
        # has (rank, size), the one a backend that keeps its own store uses
        super().__init__(rank, world_size)  # type: ignore[call-arg]
        self._timeout_s = timeout.total_seconds()
        job_size = os.environ.get("WORLD_SIZE")
        if job_size is not None and job_size.isdigit() and int(job_size) != world_size:
            # the datacenter map describes the job's ranks; a subgroup's ranks are renumbered
            raise ConfigError(
                f"sdr backend: a group of {world_size} of the job's {job_size} ranks; "
                "subgroups are not supported: new_group(ranks, backend='gloo') for them"
            )
        rmap = rank_map_from_env(world_size)
        topo = rmap.topology(rank)
        self.rank_map = rmap
        self.datacenter = topo.datacenter
        host = os.environ.get("SDR_HOST") or default_host()
        self.liveness = Liveness(
            StoreBootstrap(store, rank, world_size, "sdr/live"),
            host,
            interval=seconds_from_env("SDR_HEARTBEAT_S", 0.5),
            silence=seconds_from_env("SDR_PEER_SILENCE_S", 5.0),
            names=lambda r: f"rank {r} (datacenter {rmap.datacenter(r)})",
            connect_timeout=self._timeout_s,
        )
        # the group's first failure (a peer gone, an abort) ends every wait of the running
        # operation at its next poll: shared memory and SDR links alike
        self._operations = OperationQueue()
        self.liveness.on_failure(self._operations.fail)
        # env:// makes rank 0 the store's host: it leaves the closing barrier last
        world = StoreBootstrap(store, topo.rank, world_size, "sdr/world", host=rank == 0)
        intra = None
        if topo.local_size > 1:
            local = StoreBootstrap(
                store, topo.local_rank, topo.local_size, f"sdr/dc{topo.datacenter}"
            )
            intra = ShmCommunicator(
                local,  # type: ignore[arg-type]
                timeout=self._timeout_s,
                check=self._operations.check,
            )
        # the datacenter's ranks cross the link at once: each paces at its share of it
        options = link_options_from_env(self._timeout_s).replace(sharers=topo.local_size)
        links = WatchedLinks(
            self.liveness, self._operations, world, topo.wan_peers(), host, options
        )
        self._links = links
        slices = int(os.environ.get("SDR_SLICES", "4"))
        self.comm = HierarchicalCommunicator(topo, intra, links, slices=slices)
        self.ops = TensorOps(self.comm, rmap, rank)
        log.info(
            "sdr process group: rank %d of %d, datacenter %d of %d, WAN scheme %s",
            rank,
            world_size,
            topo.datacenter,
            topo.datacenters,
            links.scheme,
        )

    # --- torch's ProcessGroup API ------------------------------------------------------
    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        """The name ``init_process_group`` knows this backend by."""
        return "sdr"

    # torch names every group (DeviceMesh and the functional collectives look groups up by
    # name); a Python group keeps its own
    def _set_group_name(self, name: str) -> None:
        self._name = name

    def getGroupName(self) -> str:  # noqa: N802 - torch's name
        """The group's name, as torch set it."""
        return getattr(self, "_name", "")

    def _set_group_desc(self, desc: str) -> None:
        self._desc = desc

    def getGroupDesc(self) -> str:  # noqa: N802 - torch's name
        """The group's description, as torch set it."""
        return getattr(self, "_desc", "")

    # torch calls a Python backend's collectives in their (tensors, opts) form only; the
    # stubs' other overloads are conveniences of the C++ class, not what a backend overrides
    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> SdrWork:  # type: ignore[override]
        """Reduce every tensor of ``tensors`` over all ranks, in place."""
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM

        def run() -> list[torch.Tensor]:
            for t in tensors:
                _in_place(t, lambda host: self.ops.allreduce(host, op))
            return tensors

        return self._operations.submit(f"allreduce of {_describe(tensors)}", run)

    def allreduce_by(
        self,
        tensor: torch.Tensor,
        deadline: float,
        *,
        slices: int = 8,
        key: object = None,
        withhold: tuple[int, ...] = (),
        average: str | None = None,
        carry: bool | float | str = True,
        kept_out: torch.Tensor | None = None,
        here: bool = False,
    ) -> SdrWork:
        """SDR's own collective: ``tensor`` becomes (in place) the mean over every rank's
        contribution that crossed the WAN within ``deadline`` s, bitwise the same on every
        rank; the work's future holds ``[DeadlineReport]``. What missed is carried to the
        next call with the same ``key`` (see :func:`sdr.torch.allreduce_by`). ``here``:
        run it on the calling thread when no other operation is queued (it returns
        settled), for a caller that waits for it at once."""
        if tensor.dtype not in (torch.float32, torch.float64, torch.float16):
            raise ConfigError(
                f"allreduce_by of {tensor.dtype}; expected float32, float64 or float16"
            )
        if kept_out is not None and (
            kept_out.dtype != tensor.dtype or kept_out.shape != tensor.shape
        ):
            raise ConfigError(
                f"kept_out must be a {tensor.dtype} tensor of shape {list(tensor.shape)}, got "
                f"{kept_out.dtype} {list(kept_out.shape)}"
            )
        # the kept part lands in kept_out itself where it is a contiguous CPU tensor
        direct = kept_out is not None and kept_out.device.type == "cpu"
        direct = direct and kept_out.is_contiguous()  # type: ignore[union-attr]
        reports: list[Any] = []

        def one(host: torch.Tensor) -> None:
            arr = host.view(-1).numpy()
            _, report = self.comm.allreduce_by(
                arr,
                deadline,
                slices=slices,
                key=key,
                withhold=withhold,
                average=average,
                carry=carry,
                out=arr,
                kept_out=kept_out.detach().view(-1).numpy() if direct else None,  # type: ignore[union-attr]
            )
            reports.append(report)

        def run() -> list[Any]:
            _in_place(tensor, one)
            kept = reports[0].kept
            if kept is None:
                return reports
            # the caller's own missed part, shaped and placed like it
            if direct:
                reports[0].kept = kept_out
            elif kept_out is not None:
                reports[0].kept = kept_out.copy_(torch.from_numpy(kept).view_as(tensor))
            else:
                reports[0].kept = torch.from_numpy(kept).view_as(tensor).to(tensor.device)
            return reports

        what = f"allreduce_by of {_describe([tensor])} within {deadline:g} s"
        if here:
            return self._operations.run_here(what, run)
        return self._operations.submit(what, run)

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> SdrWork:  # type: ignore[override]
        """Copy rank ``opts.rootRank``'s tensors to every rank."""
        root = opts.rootRank if opts is not None else 0

        def run() -> list[torch.Tensor]:
            for t in tensors:
                _in_place(t, lambda host: self.ops.broadcast(host, root))
            return tensors

        return self._operations.submit(f"broadcast of {_describe(tensors)} from rank {root}", run)

    def allgather(  # type: ignore[override]  # (tensors, opts) form only: see allreduce
        self,
        output_tensors: list[list[torch.Tensor]],
        input_tensors: list[torch.Tensor],
        opts: Any = None,
    ) -> SdrWork:
        """``output_tensors[i][r]`` becomes rank ``r``'s ``input_tensors[i]``."""

        def run() -> list[list[torch.Tensor]]:
            for outs, t in zip(output_tensors, input_tensors, strict=True):
                if len(outs) != self.size():
                    raise ConfigError(f"allgather into {len(outs)} tensors; expected {self.size()}")
                stacked = self.ops.allgather(_host(t))
                for r, out in enumerate(outs):
                    out.copy_(stacked[r].reshape(out.shape))
            return output_tensors

        return self._operations.submit(f"allgather of {_describe(input_tensors)}", run)

    def _allgather_base(
        self, output: torch.Tensor, input: torch.Tensor, opts: Any = None
    ) -> SdrWork:  # noqa: A002
        """``output`` (``world`` times ``input``'s elements) becomes every rank's ``input``."""

        def run() -> list[torch.Tensor]:
            if output.numel() != input.numel() * self.size():
                raise ConfigError(
                    f"all_gather_into_tensor output of {output.numel()} elements; "
                    f"expected {input.numel() * self.size()}"
                )
            output.copy_(self.ops.allgather(_host(input)).reshape(output.shape))
            return [output]

        return self._operations.submit(f"all_gather_into_tensor of {_describe([input])}", run)

    def _reduce_scatter_base(
        self, output: torch.Tensor, input: torch.Tensor, opts: Any = None
    ) -> SdrWork:  # noqa: A002
        """``output`` becomes this rank's chunk of the reduction of every rank's ``input``."""
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM

        def run() -> list[torch.Tensor]:
            if input.numel() != output.numel() * self.size():
                raise ConfigError(
                    f"reduce_scatter_tensor input of {input.numel()} elements; "
                    f"expected {output.numel() * self.size()}"
                )
            whole = input.detach().to("cpu", copy=True).contiguous()
            self.ops.allreduce(whole, op)
            n = output.numel()
            output.copy_(whole.view(-1)[self.rank() * n : (self.rank() + 1) * n].view(output.shape))
            return [output]

        return self._operations.submit(f"reduce_scatter_tensor of {_describe([input])}", run)

    def reduce_scatter(  # type: ignore[override]  # (tensors, opts) form only: see allreduce
        self,
        output_tensors: list[torch.Tensor],
        input_tensors: list[list[torch.Tensor]],
        opts: Any = None,
    ) -> SdrWork:
        """``output_tensors[i]``: the reduction of every rank's ``input_tensors[i][rank]``."""
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM

        def run() -> list[torch.Tensor]:
            for out, ins in zip(output_tensors, input_tensors, strict=True):
                whole = torch.cat([t.detach().to("cpu").reshape(-1) for t in ins])
                self.ops.allreduce(whole, op)
                n = out.numel()
                out.copy_(whole[self.rank() * n : (self.rank() + 1) * n].view(out.shape))
            return output_tensors

        return self._operations.submit(f"reduce_scatter of {_describe(output_tensors)}", run)

    # torch 2.13 names the two tensor forms *_single (the *_base names are the older ones)
    all_gather_single = _allgather_base
    # torch passes these positionally; the stubs name the parameters outputTensor/inputTensor
    reduce_scatter_single = _reduce_scatter_base  # type: ignore[assignment]

    def barrier(self, opts: Any = None) -> SdrWork:
        """Every rank of the group meets."""

        def run() -> list[torch.Tensor]:
            self.ops.barrier()
            return []

        return self._operations.submit("barrier", run)

    # --- shutdown ----------------------------------------------------------------------
    def shutdown(self) -> None:
        """Finish queued operations, drain the SDR links (when healthy) and tell peers we
        leave; ``destroy_process_group`` calls it."""
        if getattr(self, "_closed", False):
            return
        self._closed = True
        # after a failure the worker leaves any wait at its next poll: wait a little, not
        # the group's timeout
        self._operations.stop(timeout=self._timeout_s if self._operations.failure is None else 5.0)
        self._links.closing = True
        self.drained = False
        """Whether shutdown drained the SDR links collectively (False after a failure)."""
        if self._operations.running:
            # it still uses the SDR context or polls the shared memory: freeing either under
            # it crashes this process (SIGSEGV); both go with the process
            log.warning("sdr process group: an operation still waits; links left open")
            self.liveness.close(drained=False)
            return
        gone = self.liveness.error
        healthy = self._operations.failure is None and (gone is None or gone.left)
        try:
            try:
                self.comm.links.close(drain=healthy)
            except Exception as exc:  # noqa: BLE001 - a peer vanished while we drained
                healthy = False
                log.warning("sdr process group: closed without draining: %s", exc)
            if self.comm.intra is not None:
                self.comm.intra.close()  # type: ignore[attr-defined]
        finally:
            self.drained = healthy
            self.liveness.close(drained=healthy)

    def abort(self) -> None:
        """Give up at once (no drain)."""
        self._operations.fail(SDRError("sdr process group aborted"))
        self.shutdown()


def _describe(tensors: list[torch.Tensor]) -> str:
    return ", ".join(f"{t.dtype} {tuple(t.shape)}" for t in tensors) or "no tensors"


def _host(t: torch.Tensor) -> torch.Tensor:
    """``t`` on the CPU, contiguous (a copy only when needed)."""
    return t.detach().to("cpu").contiguous()


def _in_place(t: torch.Tensor, op: Callable[[torch.Tensor], None]) -> None:
    """Run ``op`` on a contiguous CPU view of ``t`` (staged through a copy if needed)."""
    host = t.detach()
    staged = host.device.type != "cpu" or not host.is_contiguous()
    if staged:
        host = host.to("cpu").contiguous()
    op(host)
    if staged:
        t.copy_(host)
