"""The bootstrap over torch's store: the store's host leaves a barrier last."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from sdr.torch.store_bootstrap import StoreBootstrap  # noqa: E402


class _SlowReads:
    """A store whose ``get`` takes a while for one rank (a rank late to read)."""

    def __init__(self, store: object, delay: float) -> None:
        self._store, self._delay = store, delay

    def get(self, key: str) -> bytes:
        time.sleep(self._delay)
        return self._store.get(key)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)


def test_the_host_returns_only_after_every_rank_has_read() -> None:
    store = dist.HashStore()
    store.set_timeout(timedelta(seconds=10))
    done: dict[int, float] = {}

    def rank(r: int, boot: StoreBootstrap) -> None:
        boot.barrier()
        done[r] = time.monotonic()

    host = StoreBootstrap(store, 0, 2, "t", host=True)
    late = StoreBootstrap(_SlowReads(store, 0.2), 1, 2, "t")
    threads = [threading.Thread(target=rank, args=a) for a in ((0, host), (1, late))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert set(done) == {0, 1}
    assert done[0] >= done[1] - 0.01  # the host left last (it waited for the read mark)


def test_a_barrier_without_a_host_still_meets() -> None:
    store = dist.HashStore()
    store.set_timeout(timedelta(seconds=10))
    boots = [StoreBootstrap(store, r, 3, "u") for r in range(3)]
    threads = [threading.Thread(target=b.barrier) for b in boots]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads)
