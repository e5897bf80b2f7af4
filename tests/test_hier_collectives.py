"""Hierarchical collectives between processes: shared memory inside, SDR over UDP between.

Several "datacenters" share this host: each rank's SDR socket binds to loopback, each
datacenter has its own intra-datacenter group. Results are compared with NumPy; every
rank must hold bitwise the same allreduce result (data-parallel training relies on it).
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from sdr.backends.collectives.dtypes import bf16_to_f32, f32_to_bf16
from sdr.backends.hierarchical import SdrLinkOptions, connect, connect_from_env
from sdr.backends.hierarchical.local_job import run_ranks
from sdr.backends.shm import free_port

SIZES = (1, 1001, 40_000)


def _data(rank: int, n: int) -> np.ndarray:
    return np.random.default_rng(rank * 7 + n).standard_normal(n).astype(np.float32)


def _job(dcs: int, local: int, scheme: str, algorithm: str = "ring", slices: int = 2):
    port = free_port()
    world = dcs * local
    opts = SdrLinkOptions(scheme=scheme, rtt="2ms", rate="4Gbit/s", loss=1e-3, timeout=30)

    def body(rank: int) -> dict:
        comm = connect(
            rank, world, local, port=port, options=opts, algorithm=algorithm, slices=slices
        )
        try:
            out = {"scheme": comm.links.scheme}
            out["allreduce"] = [comm.allreduce(_data(rank, n)) for n in SIZES]
            x = _data(rank, 333)
            out["allreduce_inplace"] = comm.allreduce(x, out=x)
            out["allgather"] = comm.allgather(_data(rank, 37))
            out["reduce_scatter"] = comm.reduce_scatter(_data(rank, world * 50))
            half = np.float16
            out["f16"] = comm.allreduce(_data(rank, 500).astype(half))
            out["bf16"] = comm.allreduce(f32_to_bf16(_data(rank, 500)), dtype="bfloat16")
            out["counters"] = comm.links.counters()
            return out
        finally:
            comm.close()

    return world, run_ranks(world, body, timeout=120)


@pytest.mark.parametrize(
    ("dcs", "local", "scheme", "algorithm"),
    [
        (2, 2, "sr-nack", "ring"),
        (3, 1, "ec-xor", "ring"),
        (2, 2, "ec-mds", "mesh"),
    ],
)
def test_hierarchical_collectives_match_numpy(
    dcs: int, local: int, scheme: str, algorithm: str
) -> None:
    world, results = _job(dcs, local, scheme, algorithm)
    for i, n in enumerate(SIZES):
        ref = np.sum([_data(r, n) for r in range(world)], axis=0)
        for r in range(world):
            np.testing.assert_allclose(results[r]["allreduce"][i], ref, rtol=1e-5, atol=1e-5)
            # bitwise identical on every rank
            assert np.array_equal(results[r]["allreduce"][i], results[0]["allreduce"][i])
    ref = np.sum([_data(r, 333) for r in range(world)], axis=0)
    for r in range(world):
        np.testing.assert_allclose(results[r]["allreduce_inplace"], ref, rtol=1e-5, atol=1e-5)
        assert results[r]["scheme"] == scheme
    gathered = np.concatenate([_data(r, 37) for r in range(world)])
    for r in range(world):
        assert np.array_equal(results[r]["allgather"], gathered)
    total = np.sum([_data(r, world * 50) for r in range(world)], axis=0)
    for r in range(world):
        np.testing.assert_allclose(
            results[r]["reduce_scatter"], total[r * 50 : (r + 1) * 50], rtol=1e-5, atol=1e-5
        )
    ref16 = np.sum([_data(r, 500).astype(np.float16) for r in range(world)], axis=0)
    refbf = np.sum([bf16_to_f32(f32_to_bf16(_data(r, 500))) for r in range(world)], axis=0)
    for r in range(world):
        np.testing.assert_allclose(results[r]["f16"].astype(np.float32), ref16, atol=0.05)
        np.testing.assert_allclose(bf16_to_f32(results[r]["bf16"]), refbf, atol=0.1)
    # the data crossed the SDR links: every rank finished reliable writes and receives
    for r in range(world):
        c = results[r]["counters"]
        assert c["writes_completed"] > 0 and c["receives_completed"] > 0
        assert c.get("writes_failed", 0) == 0


def test_connect_from_env_with_auto_scheme() -> None:
    """A launcher's environment (torchrun style) sets everything; ``auto`` resolves alike."""
    port = free_port()

    def body(rank: int) -> dict:
        os.environ.update(
            RANK=str(rank),
            WORLD_SIZE="2",
            SDR_LOCAL_SIZE="1",
            SDR_PORT=str(port),
            SDR_SCHEME="auto",
            SDR_RTT="2ms",
            SDR_RATE="4Gbit/s",
            SDR_LOSS="0.001",
            SDR_SLICES="3",
        )
        comm = connect_from_env()
        try:
            return {"scheme": comm.links.scheme, "out": comm.allreduce(_data(rank, 5000))}
        finally:
            comm.close()

    results = run_ranks(2, body, timeout=60)
    schemes = {r["scheme"] for r in results}
    assert len(schemes) == 1 and schemes != {"auto"}
    ref = _data(0, 5000) + _data(1, 5000)
    np.testing.assert_allclose(results[1]["out"], ref, rtol=1e-5, atol=1e-5)


def test_an_idle_communicator_sleeps_until_woken() -> None:
    """Between collectives (a DiLoCo job's inner steps) the progress thread sleeps until a
    packet, a timer or the caller wakes it, instead of polling every 2 ms (4-5% of a core
    per rank); a collective after the pause still runs, and one right after another
    too (the caller's exit wakes the thread, which takes over what the caller left)."""
    port = free_port()
    opts = SdrLinkOptions(scheme="sr-nack", rtt="25ms", rate="1Gbit/s", timeout=30)

    def body(rank: int) -> dict:
        comm = connect(rank, 2, 1, port=port, options=opts)
        try:
            first = comm.allreduce(_data(rank, 1000))
            rounds = [0]
            for rqp in comm.links.rqps.values():
                inner = rqp.progress

                def counted(inner=inner) -> int:
                    rounds[0] += 1
                    return inner()

                rqp.progress = counted  # type: ignore[method-assign]
            time.sleep(1.0)  # the training thread computes; nothing is owed on the link
            idle_rounds = rounds[0]
            again = [comm.allreduce(_data(rank, 1000)) for _ in range(3)]
            return {"idle_rounds": idle_rounds, "first": first, "again": again}
        finally:
            comm.close()

    results = run_ranks(2, body, timeout=60)
    ref = _data(0, 1000) + _data(1, 1000)
    for r in results:
        assert r["idle_rounds"] < 100, r["idle_rounds"]  # polling every 2 ms: about 500
        for out in [r["first"], *r["again"]]:
            np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
