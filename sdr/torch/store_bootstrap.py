"""A bootstrap (all_gather / broadcast / barrier of small objects) over a torch c10d Store.

``init_process_group`` hands every backend the job's key-value store (torchrun's
TCPStore); the SDR links and the memory channels exchange their set-up information
through it instead of opening sockets of their own. Each call is one round: every rank
sets ``<prefix>/<round>/<rank>`` and reads everyone's key (a store ``get`` waits until the
key exists, up to the store's timeout).
"""

from __future__ import annotations

import pickle
from typing import Any

__all__ = ["StoreBootstrap"]


class StoreBootstrap:
    """``world_size`` ranks meeting through ``store`` under ``prefix`` (``rank`` is ours)."""

    def __init__(
        self, store: Any, rank: int, world_size: int, prefix: str, host: bool = False
    ) -> None:
        self.store = store
        self.rank = rank
        self.world_size = world_size
        self.prefix = prefix
        self.host = host
        """This process serves the store (torch rank 0 under ``env://``): it leaves a
        barrier only after every other rank has finished reading it."""
        self._round = 0

    def all_gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, by rank."""
        key = f"{self.prefix}/{self._round}"
        self._round += 1
        self.store.set(f"{key}/{self.rank}", pickle.dumps(obj))
        return [pickle.loads(self.store.get(f"{key}/{r}")) for r in range(self.world_size)]

    def broadcast(self, obj: Any, root: int = 0) -> Any:
        """``root``'s ``obj`` on every rank."""
        return self.all_gather(obj if self.rank == root else None)[root]

    def barrier(self) -> None:
        """Every rank arrives before any returns; the store's host returns last. (Before,
        a host that exited after the closing barrier cut the store from under a rank still
        reading it: "closed without draining: Connection reset by peer".)"""
        key = f"{self.prefix}/{self._round}"
        self.all_gather(None)
        if self.host:
            others = [f"{key}/read/{r}" for r in range(self.world_size) if r != self.rank]
            if others:
                self.store.wait(others)
        else:
            self.store.set(f"{key}/read/{self.rank}", b"1")

    def close(self) -> None:
        """Nothing to release: the store belongs to the process group."""
