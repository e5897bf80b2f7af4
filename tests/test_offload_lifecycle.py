"""Offload lifecycle: configuration, worker errors, and clean shutdown with no leaks.

Every test compares /dev/shm and the worker processes before and after: nothing the
backend created may outlive its close().
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import numpy as np
import pytest

import sdr
from sdr.backends.offload import OffloadTransport, WorkerPool
from sdr.backends.offload.shared_state import layout_for, segment_prefix
from sdr.transport import Bind

ATTR = sdr.QPAttr(mtu=512, chunk_size=2048, max_message_size="32KiB", channels=3)


def _our_segments() -> set[str]:
    return {n for n in os.listdir("/dev/shm") if n.startswith(segment_prefix())}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def pool() -> Iterator[WorkerPool]:
    with WorkerPool(2) as shared:
        yield shared


def _round_trip(ta: OffloadTransport, tb: OffloadTransport) -> None:
    a, b = sdr.Context(backend=ta), sdr.Context(backend=tb)
    qa, qb = a.create_qp(ATTR), b.create_qp(ATTR)
    qa.connect(qb.info())
    qb.connect(qa.info())
    src, dst = ta.alloc(20_000), tb.alloc(20_000)
    src[:] = np.arange(20_000) % 251
    rh = qb.post_recv(b.register(dst))
    qa.post_send(a.register(src), imm=42)
    b.wait_until(lambda: a.progress() >= 0 and rh.record.arrived, 20.0, "round trip")
    assert rh.imm == 42 and np.array_equal(src, dst)
    bits = qb.transport_qp.chunk_bitmap(rh.record.slot, rh.length)  # type: ignore[attr-defined]
    assert bits.tolist() == rh.bitmap.tolist() == [True] * len(bits)
    rh.complete()
    b.progress()


def test_owned_pool_stops_and_unlinks_everything_on_close() -> None:
    before = _our_segments()
    ta, tb = OffloadTransport(workers=2), OffloadTransport(workers=1)
    pids = ta.pool.pids + tb.pool.pids  # type: ignore[union-attr]
    assert all(_alive(p) for p in pids)
    _round_trip(ta, tb)
    assert len(_our_segments() - before) >= 4  # 2 QP states + 2 buffers
    ta.close()
    tb.close()
    assert _our_segments() == before
    assert not any(_alive(p) for p in pids)
    ta.close()  # idempotent


def test_shared_pool_outlives_its_transports(pool: WorkerPool) -> None:
    before = _our_segments()
    for _ in range(2):
        ta, tb = OffloadTransport(pool=pool), OffloadTransport(pool=pool)
        _round_trip(ta, tb)
        ta.close()
        tb.close()
        assert pool.alive
    assert _our_segments() == before


def test_closed_pool_is_an_error_not_a_hang() -> None:
    with WorkerPool(1) as own:
        pids = own.pids
    assert not own.alive and not any(_alive(p) for p in pids)
    with pytest.raises(sdr.TransportError, match="stopped"):
        own.broadcast(("fence",))


def test_worker_errors_surface_as_transport_errors(pool: WorkerPool) -> None:
    layout = layout_for(ATTR).as_dict()
    with pytest.raises(sdr.TransportError, match="unknown packet source"):
        pool.call([0], ("attach", 999, "nope", layout, [(0, ("pigeon",))]))
    with pytest.raises(sdr.TransportError, match="No such file"):
        pool.call([1], ("attach", 999, "sdr_off_missing", layout, [(0, ("udp", "127.0.0.1"))]))
    assert pool.broadcast(("fence",)) == {0: "ok", 1: "ok"}  # still serving


@pytest.mark.parametrize(
    "kwargs",
    [{"progress": "gpu"}, {"workers": 0}, {"workers": "4"}, {"workers": True}],
)
def test_bad_configuration_is_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(sdr.ConfigError):
        OffloadTransport(**kwargs)  # type: ignore[arg-type]


def test_config_table_chooses_progress_and_workers() -> None:
    import tomllib

    table = tomllib.loads('[backend]\nname = "offload"\nprogress = "cpu"\nworkers = 3\n')
    transport = OffloadTransport.from_config(table["backend"])
    try:
        assert transport.progress == "cpu" and transport.pool is None
    finally:
        transport.close()
    with pytest.raises(sdr.ConfigError, match="threads"):
        OffloadTransport.from_config({"progress": "offload", "threads": 4})


def test_receive_into_a_private_buffer_needs_alloc(pool: WorkerPool) -> None:
    before = _our_segments()
    transport = OffloadTransport(pool=pool)
    try:
        qp = transport.create_qp(ATTR)
        mr = transport.register(np.zeros(4096, dtype=np.uint8))
        with pytest.raises(sdr.ConfigError, match="alloc"):
            qp.bind(Bind(generation=0, slot=0, region=mr, offset=0, length=4096, msg_id=0))
        view = transport.alloc(8192)[4096:]  # a view into shared memory is fine
        mr = transport.register(view)
        qp.bind(Bind(generation=0, slot=0, region=mr, offset=0, length=4096, msg_id=0))
    finally:
        transport.close()
    assert _our_segments() == before


def test_mtu_must_fit_a_datagram() -> None:
    transport = OffloadTransport(progress="cpu")
    try:
        with pytest.raises(sdr.ConfigError, match="mtu"):
            transport.create_qp(sdr.QPAttr(mtu=65536, chunk_size=65536))
    finally:
        transport.close()


def test_a_dead_worker_is_reported_not_waited_on() -> None:
    before = _our_segments()
    transport = OffloadTransport(workers=2)
    try:
        transport.create_qp(ATTR)
        os.kill(transport.pool.pids[1], signal.SIGKILL)  # type: ignore[union-attr]
        with pytest.raises(sdr.TransportError, match="worker exited"):
            for _ in range(10_000):  # the kill lands within a few waits
                transport.wait(0.001)
    finally:
        transport.close()
    assert _our_segments() == before


def test_forgotten_transport_leaves_no_segments_at_exit() -> None:
    import subprocess
    import sys

    script = (
        "from sdr.backends.offload import OffloadTransport\n"
        "import sdr\n"
        "t = OffloadTransport(workers=1)\n"
        "t.create_qp(sdr.QPAttr())\n"
        "buf = t.alloc(1 << 20)\n"
        "import os\n"
        "print(os.getpid(), t.pool.pids[0])\n"  # no close(): exit must still clean up
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    pid, worker = (int(x) for x in out.stdout.split()[-2:])
    assert not _alive(worker)
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"sdr_off_{pid}_")]
    assert "leaked" not in out.stderr
