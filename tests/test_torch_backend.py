"""The ``sdr`` torch.distributed backend: every op against a reference, DDP against gloo,
failures named.

Each test starts real processes (forked, one per rank, with torchrun's environment:
RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) that call ``dist.init_process_group("sdr")``;
datacenters are ``SDR_LOCAL_SIZE`` consecutive ranks, SDR runs over loopback UDP between
them and shared memory inside. Inputs are small integers (also as floats), so every sum
is exact in any order and results are compared for equality.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import queue
import signal
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import sdr.torch  # noqa: E402, F401 - registers "sdr"
from sdr.backends.shm import free_port  # noqa: E402
from sdr.errors import ConfigError  # noqa: E402
from sdr.torch.topology import rank_map_from_env  # noqa: E402

LINK = {"SDR_SCHEME": "sr-nack", "SDR_RTT": "2ms", "SDR_RATE": "8Gbit/s"}
R = dist.ReduceOp
DTYPES = [
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.int64,
    torch.int32,
    torch.int8,
    torch.uint8,
]


def _job(
    world: int,
    local_size: int,
    body: Callable[[int], Any],
    *,
    env: dict[str, str] | None = None,
    timeout_s: float = 120.0,
    survivors: list[int] | None = None,
) -> list[Any]:
    """``body(rank)`` in ``world`` processes joined by ``init_process_group("sdr")``; the
    results of ``survivors`` (default: every rank), by rank."""
    port = free_port()

    def rank_main(rank: int) -> Any:
        os.environ.update(
            RANK=str(rank),
            WORLD_SIZE=str(world),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            SDR_LOCAL_SIZE=str(local_size),
            **LINK,
            **(env or {}),
        )
        dist.init_process_group("sdr", timeout=timedelta(seconds=timeout_s))
        try:
            return body(rank)
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()

    return _run(world, rank_main, survivors)


def _run(world: int, fn: Callable[[int], Any], survivors: list[int] | None) -> list[Any]:
    """Fork one process per rank; collect the survivors' results (each within 60 s)."""
    ctx = mp.get_context("fork")
    results: Any = ctx.Queue()

    def child(rank: int) -> None:
        try:
            # plain pickle: torch's multiprocessing pickler would share tensors by file
            # descriptor, which dies with the child
            results.put((rank, True, pickle.dumps(fn(rank))))
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            results.put((rank, False, f"{type(exc).__name__}: {exc}"))

    procs = [ctx.Process(target=child, args=(r,)) for r in range(world)]
    for p in procs:
        p.start()
    want = list(range(world)) if survivors is None else survivors
    got: dict[int, Any] = {}
    try:
        for _ in want:
            try:
                rank, ok, value = results.get(timeout=60.0)
            except queue.Empty:
                missing = sorted(set(want) - set(got))
                codes = {r: procs[r].exitcode for r in missing}
                raise AssertionError(
                    f"ranks {missing} gave no result in 60 s (exit {codes})"
                ) from None
            assert ok, f"rank {rank} failed: {value}"
            got[rank] = pickle.loads(value)
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
    return [got[r] for r in want]


def _values(rank: int, dtype: torch.dtype, n: int) -> torch.Tensor:
    """Rank ``rank``'s input: small integers (products of 4 ranks stay in int8)."""
    g = torch.Generator().manual_seed(1000 + rank)
    low = 0 if dtype == torch.uint8 else -2
    return torch.randint(low, 3, (n,), generator=g).to(dtype)


def _reference(op: Any, inputs: list[torch.Tensor]) -> torch.Tensor:
    wide = torch.stack([t.to(torch.float64) for t in inputs])
    if op == R.SUM:
        out = wide.sum(0)
    elif op == R.AVG:
        out = wide.mean(0)
    elif op == R.PRODUCT:
        out = wide.prod(0)
    elif op == R.MIN:
        out = wide.amin(0)
    else:
        out = wide.amax(0)
    return out.to(inputs[0].dtype)


def _ops(dtype: torch.dtype) -> list[Any]:
    ops = [R.SUM, R.MIN, R.MAX, R.PRODUCT]
    return ops + [R.AVG] if dtype.is_floating_point else ops


def test_every_op_and_dtype_matches_the_reference_on_2x2_ranks() -> None:
    n = 1001  # not a multiple of the local size, the datacenters or the slices

    def body(rank: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for dtype in DTYPES:
            for op in _ops(dtype):
                t = _values(rank, dtype, n)
                dist.all_reduce(t, op=op)
                out[f"allreduce {dtype} {op}"] = t
        b = _values(rank, torch.int64, 7) if rank == 3 else torch.zeros(7, dtype=torch.int64)
        dist.broadcast(b, src=3)
        out["broadcast"] = b
        gathered = [torch.empty(5, dtype=torch.bfloat16) for _ in range(4)]
        dist.all_gather(gathered, _values(rank, torch.bfloat16, 5))
        out["all_gather"] = torch.stack(gathered)
        into = torch.empty(4 * 6, dtype=torch.int32)
        dist.all_gather_into_tensor(into, _values(rank, torch.int32, 6))
        out["all_gather_into_tensor"] = into
        chunk = torch.empty(3, dtype=torch.float32)
        dist.reduce_scatter_tensor(chunk, _values(rank, torch.float32, 12))
        out["reduce_scatter_tensor"] = chunk
        work = dist.all_reduce(_values(rank, torch.int64, 9), async_op=True)
        out["async"] = work.get_future().wait()[0]
        work = dist.all_reduce(_values(rank, torch.float32, 9), async_op=True)
        assert work.wait(timedelta(seconds=60)) and work.is_completed()
        dist.barrier()
        return out

    results = _job(4, 2, body)
    for dtype in DTYPES:
        inputs = [_values(r, dtype, n) for r in range(4)]
        for op in _ops(dtype):
            want = _reference(op, inputs)
            for rank, res in enumerate(results):
                got = res[f"allreduce {dtype} {op}"]
                assert got.dtype == dtype and torch.equal(got, want), (rank, dtype, op)
    for rank, res in enumerate(results):
        assert torch.equal(res["broadcast"], _values(3, torch.int64, 7))
        assert torch.equal(
            res["all_gather"], torch.stack([_values(r, torch.bfloat16, 5) for r in range(4)])
        )
        assert torch.equal(
            res["all_gather_into_tensor"], torch.cat([_values(r, torch.int32, 6) for r in range(4)])
        )
        total = sum(_values(r, torch.float32, 12) for r in range(4))
        assert torch.equal(res["reduce_scatter_tensor"], total[3 * rank : 3 * rank + 3])
        assert torch.equal(res["async"], sum(_values(r, torch.int64, 9) for r in range(4)))


def test_interleaved_datacenters_from_a_rank_map_keep_rank_order() -> None:
    # ranks 0 and 2 in one datacenter, 1 and 3 in the other: the hierarchical order
    # (0, 2, 1, 3) must not leak into results
    def body(rank: int) -> dict[str, Any]:
        gathered = [torch.empty(4, dtype=torch.int64) for _ in range(4)]
        dist.all_gather(gathered, _values(rank, torch.int64, 4))
        b = _values(rank, torch.int16, 3)
        dist.broadcast(b, src=2)
        t = _values(rank, torch.float32, 100)
        dist.all_reduce(t)
        group = dist.distributed_c10d._get_default_group()
        paces = [rqp.qp.attr.rate_limit for rqp in group._links.rqps.values()]
        return {"gathered": torch.stack(gathered), "b": b, "t": t, "dc": group.datacenter,
                "paces": paces}  # fmt: skip

    results = _job(4, 2, body, env={"SDR_DATACENTERS": "a,b,a,b"})
    assert [r["dc"] for r in results] == [0, 1, 0, 1]
    # two ranks of a datacenter cross the one link at once: each paces at half of SDR_RATE
    assert all(r["paces"] == [4e9] for r in results)
    for r in results:
        assert torch.equal(
            r["gathered"], torch.stack([_values(q, torch.int64, 4) for q in range(4)])
        )
        assert torch.equal(r["b"], _values(2, torch.int16, 3))
        assert torch.equal(r["t"], sum(_values(q, torch.float32, 100) for q in range(4)))


def test_allreduce_by_on_the_sdr_group_averages_what_arrived_and_carries_the_rest() -> None:
    def body(rank: int) -> dict[str, Any]:
        t = _values(rank, torch.float32, 1000)
        late = (0,) if rank == 1 else ()  # datacenter 0, local rank 1: its shard's slice 0
        first = sdr.torch.allreduce_by(
            t, 1.0, slices=2, key="grads", withhold=late, average="arrived"
        )
        z = torch.zeros(1000)
        second = sdr.torch.allreduce_by(z, 10.0, slices=2, key="grads")
        with pytest.raises(ConfigError, match="expected float32"):
            sdr.torch.allreduce_by(torch.zeros(3, dtype=torch.int32), 1.0)
        own = _values(rank, torch.float32, 1000).view(10, 100)
        with pytest.raises(ConfigError, match=r"kept_out must be a torch.float32 tensor"):
            sdr.torch.allreduce_by(own.clone(), 1.0, carry="local", kept_out=torch.zeros(3))
        buffer = torch.full((10, 100), 7.0)  # reused from an earlier step
        local = sdr.torch.allreduce_by(own.clone(), 1.0, slices=2, withhold=late, carry="local",
                                       kept_out=buffer)  # fmt: skip
        strided = torch.full((100, 10), 7.0).t()  # like own, not contiguous: copied into
        again = sdr.torch.allreduce_by(own.clone(), 1.0, slices=2, withhold=late,
                                       carry="local", kept_out=strided)  # fmt: skip
        return {"t": t, "z": z, "in": first.included.tolist(), "counts": first.counts.tolist(),
                "second": second.complete, "kept": local.kept, "buffer": buffer,
                "again": again.kept, "strided": strided}  # fmt: skip

    results = _job(4, 2, body)
    for r in results[1:]:
        assert torch.equal(r["t"], results[0]["t"]) and torch.equal(r["z"], results[0]["z"])
    everyone = sum(_values(q, torch.float32, 1000) for q in range(4)) / 4
    dc1 = sum(_values(q, torch.float32, 1000) for q in (2, 3)) / 2
    missed = slice(500, 750)  # shard 1 (elements 500..999), its slice 0
    rest = torch.ones(1000, dtype=torch.bool)
    rest[missed] = False
    torch.testing.assert_close(results[0]["t"][rest], everyone[rest])
    torch.testing.assert_close(results[0]["t"][missed], dc1[missed])
    assert results[1]["in"] == [[False, True], [True, True]] and results[1]["counts"] == [1, 2]
    # the next call brings datacenter 0's missed slice: its sum over 4 ranks
    dc0 = sum(_values(q, torch.float32, 1000) for q in (0, 1))
    torch.testing.assert_close(results[0]["z"][missed], dc0[missed] / 4)
    assert float(results[0]["z"][rest].abs().max()) == 0.0
    assert all(r["second"] for r in results)
    # carry="local": both ranks of datacenter 0 get their own missed part, as a tensor
    for rank in (0, 1):
        kept = results[rank]["kept"]
        assert kept is results[rank]["buffer"]  # written into the tensor it was given
        assert results[rank]["again"] is results[rank]["strided"]
        assert torch.equal(results[rank]["strided"], kept)
        assert isinstance(kept, torch.Tensor) and kept.shape == (10, 100)
        own = _values(rank, torch.float32, 1000)
        assert torch.equal(kept.reshape(-1)[missed], own[missed])
        assert float(kept.reshape(-1)[rest].abs().max()) == 0.0
    assert results[2]["kept"] is None and results[3]["kept"] is None
    assert results[2]["again"] is None and bool((results[2]["strided"] == 7.0).all())


def test_int_average_is_refused_in_one_line() -> None:
    def body(rank: int) -> str:
        try:
            dist.all_reduce(torch.ones(3, dtype=torch.int64), op=R.AVG)
        except Exception as exc:  # noqa: BLE001 - the message is the result
            return str(exc)
        return "no error"

    for message in _job(2, 1, body):
        assert "ReduceOp.AVG of torch.int64" in message and "\n" not in message.strip()


def test_a_67_mb_tensor_crosses_in_segments_below_max_message_size() -> None:
    # the 4096 x 4096 layer plus its bias: one 67 MB DDP bucket; with 4 MiB SDR messages
    # it needs many segments (a single write of it would be refused)
    n = 4096 * 4096 + 4096
    env = {"SDR_MAX_MESSAGE_SIZE": "4MiB"}

    def body(rank: int) -> tuple[bool, int]:
        t = torch.full((n,), float(rank + 1))
        t[::4097] = -3.0 * rank
        dist.all_reduce(t)
        want = torch.full((n,), 3.0)
        want[::4097] = -3.0
        group = dist.distributed_c10d._get_default_group()
        return torch.equal(t, want), group.ops.reduce_segment

    for ok, segment in _job(2, 1, body, env=env):
        assert ok
        assert segment < n * 4  # the tensor really was cut


def _mlp() -> Any:
    torch.manual_seed(7)
    return torch.nn.Sequential(
        torch.nn.Linear(32, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 10),
    )


def test_ddp_over_sdr_matches_ddp_over_gloo_bitwise() -> None:
    def train(group: Any, rank: int) -> torch.Tensor:
        model = torch.nn.parallel.DistributedDataParallel(
            _mlp(), process_group=group, bucket_cap_mb=0.01
        )
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        g = torch.Generator().manual_seed(rank)
        for _ in range(5):
            x, y = torch.randn(16, 32, generator=g), torch.randint(0, 10, (16,), generator=g)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        return torch.cat([p.detach().reshape(-1) for p in model.parameters()])

    def body(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
        gloo = dist.new_group(backend="gloo")
        return train(None, rank), train(gloo, rank)  # None: the default group, "sdr"

    results = _job(2, 1, body)
    start = torch.cat([p.detach().reshape(-1) for p in _mlp().parameters()])
    for over_sdr, over_gloo in results:
        assert torch.equal(over_sdr, over_gloo)
        assert not torch.equal(over_sdr, start)  # it trained: the comparison means something
    assert torch.equal(results[0][0], results[1][0])


def test_fsdp2_over_sdr_matches_fsdp2_over_gloo() -> None:
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    def train(mesh: Any, rank: int) -> torch.Tensor:
        model = _mlp()
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        before = _local_shards(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        g = torch.Generator().manual_seed(rank)
        for _ in range(3):
            x, y = torch.randn(16, 32, generator=g), torch.randint(0, 10, (16,), generator=g)
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
        after = _local_shards(model)
        assert not torch.equal(before, after)  # it trained: the comparison means something
        return after

    def body(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
        gloo = dist.new_group(backend="gloo")
        over_sdr = train(DeviceMesh.from_group(dist.group.WORLD, "cpu"), rank)
        return over_sdr, train(DeviceMesh.from_group(gloo, "cpu"), rank)

    for over_sdr, over_gloo in _job(2, 1, body):
        torch.testing.assert_close(over_sdr, over_gloo, rtol=1e-6, atol=1e-7)


def _local_shards(model: Any) -> torch.Tensor:
    """This rank's shards of ``model``'s parameters (full_tensor() goes through torch's
    functional collectives, which find no C++ backend in a Python process group)."""
    return torch.cat([p.to_local().detach().clone().reshape(-1) for p in model.parameters()])


def test_a_killed_rank_is_named_by_the_survivor_in_one_line() -> None:
    def body(rank: int) -> str:
        if rank == 1:
            dist.barrier()
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            dist.barrier()  # may already see rank 1 gone (its last acknowledgement)
            dist.all_reduce(torch.ones(1000))  # rank 1 never joins
        except Exception as exc:  # noqa: BLE001 - the message is the result
            return str(exc)
        return "no error"

    # the group's timeout (600 s) is not what ends it: the bound is the runner's 60 s
    (message,) = _job(2, 1, body, timeout_s=600, survivors=[0])
    assert "peer rank 1 (datacenter 1) is gone" in message, message
    assert "control connection closed" in message and "\n" not in message


def test_a_rank_killed_inside_allreduce_by_fails_the_callers_own_call() -> None:
    # allreduce_by runs on the caller's thread (no worker hand-off): a peer that dies in
    # the middle of it must still end it with the one-line error, not the group timeout
    def body(rank: int) -> str:
        dist.barrier()
        if rank == 1:
            threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGKILL)).start()
        started = time.monotonic()
        late = (0,)  # a slice of each misses: both wait for the cut, then for the notes
        try:
            sdr.torch.allreduce_by(torch.ones(1000), 1.0, slices=2, withhold=late, carry=False)
        except Exception as exc:  # noqa: BLE001 - the message is the result
            return f"{time.monotonic() - started:.1f} {exc}"
        return "no error"

    (message,) = _job(2, 1, body, timeout_s=600, survivors=[0])
    assert "peer rank 1 (datacenter 1) is gone" in message, message
    assert "\n" not in message
    assert float(message.split()[0]) < 30  # the liveness, not the group's 600 s


def test_a_rank_killed_during_ddp_training_fails_the_survivors_backward() -> None:
    def body(rank: int) -> str:
        model = torch.nn.parallel.DistributedDataParallel(_mlp())
        x = torch.randn(8, 32)
        try:
            # one step together: rank 1 may finish it (and die) while rank 0 still waits
            # for its last acknowledgement, so rank 0 may see the death in this step
            model(x).sum().backward()
            if rank == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            for _ in range(3):
                model(x).sum().backward()  # the gradient allreduce needs rank 1
        except Exception as exc:  # noqa: BLE001 - the error is the result
            return f"{type(exc).__name__}: {exc}"
        return "no error"

    (message,) = _job(2, 1, body, timeout_s=600, survivors=[0])
    # PeerGone itself where a wait raised it (the next forward's bucket broadcast), torch's
    # RuntimeError around it where DDP's reducer read the failed gradient allreduce
    assert "PeerGone: sdr process group: peer rank 1 (datacenter 1) is gone" in message, message


def test_a_failed_gradient_allreduce_raises_from_backward_and_does_not_crash() -> None:
    """DDP's reducer reads an allreduce's future in C++. A future failed with
    ``set_exception`` was, to C++, a success whose value was the exception: the reducer
    took it for the bucket and crashed (SIGSEGV in parseCppCommHookResult) or asserted.
    The failure must reach backward() as an error, on every rank, every time."""

    def body(rank: int) -> str:
        pg = dist.distributed_c10d._get_default_group()
        model = torch.nn.parallel.DistributedDataParallel(_mlp())
        x = torch.randn(8, 32)
        model(x).sum().backward()  # one good step (and DDP's bucket rebuild) first

        def broken(host: Any, op: Any) -> None:
            raise ConfigError("injected allreduce failure")

        pg.ops.allreduce = broken
        try:
            model(x).sum().backward()
        except Exception as exc:  # noqa: BLE001 - the error is the result
            return f"{type(exc).__name__}: {exc}"
        return "no error"

    for message in _job(2, 1, body):
        assert "injected allreduce failure" in message, message


def test_a_rank_killed_inside_a_datacenter_is_named_by_every_survivor() -> None:
    def body(rank: int) -> str:
        if rank == 1:  # shares datacenter 0 (shared memory) with rank 0
            dist.barrier()
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            dist.barrier()
            dist.all_reduce(torch.ones(1000))
        except Exception as exc:  # noqa: BLE001 - the message is the result
            return str(exc)
        return "no error"

    for message in _job(4, 2, body, timeout_s=600, survivors=[0, 2, 3]):
        assert "peer rank 1 (datacenter 0) is gone" in message, message


def test_a_busy_peer_is_not_dead_and_a_silent_one_is() -> None:
    env = {"SDR_PEER_SILENCE_S": "2", "SDR_HEARTBEAT_S": "0.2"}
    resume = mp.get_context("fork").Event()

    def body(rank: int) -> str:
        import time

        dist.barrier()
        if rank == 1:
            time.sleep(4.0)  # busy (a checkpoint) for twice the silence bound
        t = torch.ones(100)
        dist.all_reduce(t)
        assert torch.equal(t, torch.full((100,), 2.0))
        pids = [None, None]
        dist.all_gather_object(pids, os.getpid())
        if rank == 1:
            os.kill(os.getpid(), signal.SIGSTOP)  # silent: heartbeats stop, the socket stays
            resume.wait()
            return "resumed"
        try:
            dist.all_reduce(t)
        except Exception as exc:  # noqa: BLE001 - the message is the result
            os.kill(pids[1], signal.SIGCONT)
            resume.set()
            return str(exc)
        return "no error"

    messages = _job(2, 1, body, env=env)
    assert "peer rank 1 (datacenter 1) is gone: no heartbeat for" in messages[0], messages
    assert messages[1] == "resumed"


def test_an_op_past_the_group_timeout_raises() -> None:
    released = mp.get_context("fork").Event()

    def body(rank: int) -> str:
        dist.barrier()
        if rank == 1:
            released.wait()  # alive and heartbeating, never joins the allreduce
            return "waited"
        try:
            dist.all_reduce(torch.ones(10))
        except Exception as exc:  # noqa: BLE001 - the message is the result
            return str(exc)
        finally:
            released.set()
        return "no error"

    messages = _job(2, 1, body, timeout_s=2.0)
    assert "allreduce of torch.float32 (10,) failed" in messages[0], messages
    assert "within 2.0 s" in messages[0]


def test_a_peer_that_finished_closing_first_does_not_spoil_the_others_close() -> None:
    # closing is collective (the links drain, then meet); the first rank through says
    # goodbye while the other may still be meeting: that goodbye is not a failure
    def body(rank: int) -> bool:
        t = torch.ones(10)
        dist.all_reduce(t)
        group = dist.distributed_c10d._get_default_group()
        dist.destroy_process_group()
        return group.drained

    assert _job(2, 1, body) == [True, True]


def test_a_subgroup_on_the_sdr_backend_is_refused_in_one_line() -> None:
    def body(rank: int) -> str:
        try:
            dist.new_group(ranks=[0, 1])  # of 3 ranks; the default backend, "sdr"
        except Exception as exc:  # noqa: BLE001 - the message is the result
            return str(exc)
        return "no error"

    members = _job(3, 1, body)[:2]  # rank 2 is no member: torch makes no group there
    for message in members:
        assert "subgroups are not supported" in message and "\n" not in message, message


def test_topology_from_the_environment() -> None:
    env = {"SDR_DATACENTERS": "a,b,a,b"}
    rmap = rank_map_from_env(4, env)
    assert rmap.order == (0, 2, 1, 3) and rmap.local_size == 2
    assert [rmap.datacenter(r) for r in range(4)] == [0, 1, 0, 1]
    assert rank_map_from_env(4, {"SDR_LOCAL_SIZE": "2"}).order == (0, 1, 2, 3)
    assert rank_map_from_env(4, {"LOCAL_WORLD_SIZE": "4"}).local_size == 4
    assert rank_map_from_env(3, {}).local_size == 1
    with pytest.raises(ConfigError, match="every datacenter needs as many ranks"):
        rank_map_from_env(3, {"SDR_DATACENTERS": "a,a,b"})
    with pytest.raises(ConfigError, match="SDR_LOCAL_SIZE=3 does not divide WORLD_SIZE = 4"):
        rank_map_from_env(4, {"SDR_LOCAL_SIZE": "3"})
