"""Every collective algorithm on CPU ranks (shared memory + NumPy) against a NumPy reference.

One pool of 8 worker processes serves every test (forming groups of 2..8 ranks), because
starting processes is the slow part. Inputs are small integers so that every summation
order gives the exact same float16/bfloat16/float32 result, and results are compared
exactly; one float32 test uses random reals with a tolerance.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from sdr.backends.collectives.dtypes import bf16_to_f32, f32_to_bf16, storage_dtype
from sdr.backends.shm import LocalGroup
from sdr.collectives import algorithms_for

WORLDS = (2, 3, 5, 8)
DTYPES = ("float32", "float16", "bfloat16")
COUNT = 1001  # elements per rank for allreduce/allgather/broadcast: odd, ragged chunks


@pytest.fixture(scope="module")
def group():
    with LocalGroup(max(WORLDS)) as g:
        yield g


def ints(rng: np.random.Generator, n: int, dtype: str) -> np.ndarray:
    vals = rng.integers(-8, 9, size=n).astype(np.float32)
    return f32_to_bf16(vals) if dtype == "bfloat16" else vals.astype(storage_dtype(dtype))


def as_f32(a: np.ndarray, dtype: str) -> np.ndarray:
    return bf16_to_f32(a) if dtype == "bfloat16" else a.astype(np.float32)


def _dt(dtype: str) -> str | None:
    return "bfloat16" if dtype == "bfloat16" else None


def run_allreduce(comm, alg, x, dtype, in_place):
    out = x if in_place else np.full_like(x, 7)
    return comm.allreduce(x, out, dtype=_dt(dtype), algorithm=alg)


def run_allgather(comm, alg, x, dtype, in_place):
    n, r, s = comm.world_size, comm.rank, x.size
    out = np.full(n * s, 7, x.dtype)
    if in_place:
        out[r * s : (r + 1) * s] = x
        x = out[r * s : (r + 1) * s]
    return comm.allgather(x, out, dtype=_dt(dtype), algorithm=alg)


def run_reduce_scatter(comm, alg, x, dtype, in_place):
    k = x.size // comm.world_size
    out = x[comm.rank * k : (comm.rank + 1) * k] if in_place else np.full(k, 7, x.dtype)
    return comm.reduce_scatter(x, out, dtype=_dt(dtype), algorithm=alg).copy()


def run_broadcast(comm, alg, x, dtype, root):
    return comm.broadcast(x, root, dtype=_dt(dtype), algorithm=alg)


@pytest.mark.parametrize("in_place", [False, True], ids=["oop", "inplace"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("alg", algorithms_for("allreduce"))
def test_allreduce(group, alg, world, dtype, in_place):
    rng = np.random.default_rng(world)
    xs = [ints(rng, COUNT, dtype) for _ in range(world)]
    outs = group.run(world, run_allreduce, [(alg, x, dtype, in_place) for x in xs])
    ref = np.sum([as_f32(x, dtype) for x in xs], axis=0)
    for r, out in enumerate(outs):
        np.testing.assert_array_equal(as_f32(out, dtype), ref, err_msg=f"rank {r}")


@pytest.mark.parametrize("in_place", [False, True], ids=["oop", "inplace"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("alg", algorithms_for("allgather"))
def test_allgather(group, alg, world, dtype, in_place):
    rng = np.random.default_rng(world + 10)
    xs = [ints(rng, COUNT, dtype) for _ in range(world)]
    outs = group.run(world, run_allgather, [(alg, x, dtype, in_place) for x in xs])
    for r, out in enumerate(outs):
        np.testing.assert_array_equal(out, np.concatenate(xs), err_msg=f"rank {r}")


@pytest.mark.parametrize("in_place", [False, True], ids=["oop", "inplace"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("alg", algorithms_for("reduce_scatter"))
def test_reduce_scatter(group, alg, world, dtype, in_place):
    rng = np.random.default_rng(world + 20)
    k = 333  # odd chunk per rank
    xs = [ints(rng, k * world, dtype) for _ in range(world)]
    outs = group.run(world, run_reduce_scatter, [(alg, x, dtype, in_place) for x in xs])
    ref = np.sum([as_f32(x, dtype) for x in xs], axis=0).reshape(world, k)
    for r, out in enumerate(outs):
        np.testing.assert_array_equal(as_f32(out, dtype), ref[r], err_msg=f"rank {r}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("alg", algorithms_for("broadcast"))
def test_broadcast(group, alg, world, dtype):
    rng = np.random.default_rng(world + 30)
    root = world - 1
    xs = [ints(rng, COUNT, dtype) for _ in range(world)]
    outs = group.run(world, run_broadcast, [(alg, x, dtype, root) for x in xs])
    for r, out in enumerate(outs):
        np.testing.assert_array_equal(out, xs[root], err_msg=f"rank {r}")


def run_selected(comm, x):
    """Default selection, several calls in a row (exercises both parities and growth)."""
    a = comm.allreduce(x)
    b = comm.allreduce(x[:5])
    c = comm.allgather(x)
    return a, b, c


@pytest.mark.parametrize("count", [1, 3, 70_000, 600_001])
def test_selected_real_values_and_growth(group, count):
    world = 3
    rng = np.random.default_rng(count)
    xs = [rng.standard_normal(count).astype(np.float32) for _ in range(world)]
    outs = group.run(world, run_selected, [(x,) for x in xs])
    ref = np.sum(np.array(xs, np.float64), axis=0)
    for a, b, c in outs:
        np.testing.assert_allclose(a, ref, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(b, ref[:5], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(c, np.concatenate(xs))


def run_wrong_plan(comm):
    from sdr.collectives import build_plan

    x = np.zeros(8, np.float32)
    comm.run_plan(build_plan("allreduce_ring", comm.world_size + 1), x, x, "float32")


def test_wrong_world_size_is_reported(group):
    from sdr.errors import TransportError

    with pytest.raises(TransportError, match="ConfigError"):
        group.run(2, run_wrong_plan)


def run_primitives(comm):
    """Rank 0 puts bytes and LL packets into rank 1; rank 1 reads them after wait/flags."""
    from sdr.backends.shm.memory import read_packets

    data = np.arange(37, dtype=np.uint8)
    flag = 0xABCD0001  # never a call counter here
    if comm.rank == 0:
        ch = comm.channel(1)
        ch.parity = 0  # collectives alternate halves; this test writes half 0
        ch.put(8, data, 0, data.size)
        ch.signal()
        ch.put_packets(0, data, 0, data.size, flag)
        ch.flush()
        ch.wait()  # rank 1's acknowledgement
        return None
    ch = comm.channel(0)
    ch.wait()
    got = comm.region.scratch(0)[8 : 8 + data.size].copy()
    pk = read_packets(comm.region.packets(0), data.size, flag, timeout=10)
    ch.signal()
    return got, pk.copy()


def test_memory_channel_primitives(group):
    _, (got, pk) = group.run(2, run_primitives)
    np.testing.assert_array_equal(got, np.arange(37, dtype=np.uint8))
    np.testing.assert_array_equal(pk, np.arange(37, dtype=np.uint8))


def test_a_wait_ends_with_what_its_check_raises() -> None:
    """A wait for a peer that will never signal ends at the caller's check, not its timeout
    (the torch backend's check raises once a peer is known gone)."""
    import secrets

    from sdr.backends.shm.memory import Region, ShmMemoryChannel, read_packets

    class Gone(Exception):
        pass

    calls = []

    def check() -> None:
        calls.append(1)
        if len(calls) >= 3:
            raise Gone("peer rank 1 is gone")

    region = Region(f"sdrtest{secrets.token_hex(4)}", 2, 4096, 4096, create=True)
    try:
        channel = ShmMemoryChannel(0, 1, region, region, timeout=600.0, check=check)
        with pytest.raises(Gone):
            channel.wait()  # nobody signals: only the check can end it
        calls.clear()
        with pytest.raises(Gone):
            read_packets(region.packets(0), 64, flag=7, timeout=600.0, check=check)
    finally:
        region.close()


def _segment_names(comm) -> list[str]:
    return [n for n in os.listdir("/dev/shm") if n.startswith(f"sdr{comm._token}")]


def _allreduce_and_names(comm, x):
    return comm.allreduce(x), _segment_names(comm)


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="POSIX shared memory in /dev/shm")
def test_a_groups_segments_have_no_names_once_mapped_so_a_killed_rank_leaks_nothing(group):
    # every rank maps every segment before the barrier; a name kept after it was left
    # behind in /dev/shm by any rank that died by SIGKILL (6 MiB per test run, for good)
    xs = [np.full(COUNT, r + 1, np.float32) for r in range(3)]
    for out, names in group.run(3, _allreduce_and_names, [(x,) for x in xs]):
        np.testing.assert_array_equal(out, np.full(COUNT, 6, np.float32))
        assert names == []
