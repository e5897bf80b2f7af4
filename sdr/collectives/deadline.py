"""Deadline-bounded allreduce: which contributions are in, the result, what carries over.

Pure NumPy, no I/O: the driver (:mod:`sdr.backends.hierarchical.deadline_exchange`) moves
the bytes and the masks; this module decides. ``D`` contributors (datacenters) each cut
their contribution into ``S`` slices and send every slice to every other contributor.
At the deadline each contributor ``y`` knows ``arrived[y][x][s]``: slice ``s`` of ``x``
landed, verified, at ``y`` (its own slices are always there: ``arrived[y][y] = True``).
After one exchange of those masks every contributor holds the same ``arrived`` array
and computes, with the same code, the same answer:

- **included**: ``x``'s slice ``s`` is in iff it arrived at every contributor
  (:func:`agree`). Then every contributor has every included slice, so all of them can
  compute the same result.
- **result**: per slice, the mean over the included contributions (``counts`` of them),
  summed in contributor order so that the result is bitwise identical everywhere
  (:func:`combine`). A slice no contribution made is zero (no update) and says so in the
  counts.
- **carry-over** (error feedback): a contributor's slice that is not in stays with it
  and is added to its next contribution (:class:`CarryOver`, plain accumulation: over a
  run, everything applied plus what is still carried equals everything produced).
- **local carry**: a contributor's own part where its datacenter's slices are not in,
  handed back to the caller instead (:func:`missed_part`), for training loops whose next
  contribution re-derives what was missed (DiLoCo: see docs/training.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from sdr.errors import ConfigError

__all__ = [
    "AVERAGES",
    "CarryOver",
    "DeadlineReport",
    "agree",
    "combine",
    "missed_part",
    "slice_bounds",
]

AVERAGES = ("arrived", "all")
"""How a slice is averaged: over the contributions that are in, or over all of them."""


def slice_bounds(n: int, slices: int) -> np.ndarray:
    """Element offsets of ``slices`` near-equal slices of ``n`` elements (length slices + 1)."""
    if slices < 1:
        raise ConfigError(f"slices must be >= 1, got {slices}")
    return np.linspace(0, n, slices + 1).round().astype(np.int64)


def agree(arrived: np.ndarray) -> np.ndarray:
    """``included[x, s]``: slice ``s`` of contributor ``x`` arrived at every contributor.

    ``arrived[y, x, s]`` is contributor ``y``'s view (shape ``(D, D, S)``); the diagonal
    (a contributor's own slices) is taken as arrived whatever it says.
    """
    arrived = np.asarray(arrived, dtype=bool)
    if arrived.ndim != 3 or arrived.shape[0] != arrived.shape[1]:
        raise ConfigError(f"arrived must have shape (D, D, S), got {arrived.shape}")
    d = arrived.shape[0]
    views = arrived.copy()
    views[np.arange(d), np.arange(d)] = True
    # ndim == 3 is checked above, so reducing axis 0 leaves a (D, S) array, never a scalar.
    return cast(np.ndarray, views.all(axis=0))


def combine(
    contributions: list[np.ndarray | None],
    included: np.ndarray,
    bounds: np.ndarray,
    weight: float = 1.0,
    average: str = "arrived",
    *,
    out: np.ndarray | None = None,
    only: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per slice, the mean of the included contributions; and how many were included.

    ``average="arrived"`` divides by the contributions that are in (never diluted by
    zeros); ``"all"`` by all of them, as if the missing ones were zero (with carry-over
    that keeps the mean exact over a run: a missed contribution counts when it comes).

    ``contributions[x]`` is contributor ``x``'s flat array (``None`` only where none of
    its slices is included: a missing peer's bytes are never read). The sum runs in
    contributor order whatever the caller, so every contributor gets the same bits. Each
    contribution counts as ``weight`` (the ranks it already sums; the mean divides by
    ``weight * count``). A slice with no contribution in is zero.

    ``out``: where to write (default a new array); ``only``: the slices to compute (a
    boolean mask; the others of ``out`` are left as they are): a result combined from a
    guess of ``included`` is put right where the guess was wrong, with the same bits as
    combining afresh.
    """
    if average not in AVERAGES:
        raise ConfigError(f"average must be one of {', '.join(AVERAGES)}, got {average!r}")
    d, slices = included.shape
    first = next(c for c in contributions if c is not None)
    out = np.empty_like(first) if out is None else out
    counts = included.sum(axis=0).astype(np.int64)
    for s in range(slices) if only is None else np.flatnonzero(only):
        lo, hi = int(bounds[s]), int(bounds[s + 1])
        acc = out[lo:hi]
        parts = []
        for x in range(d):  # contributor order: the same additions everywhere
            if included[x, s]:
                part = contributions[x]
                assert part is not None, f"contributor {x}'s slice {s} is in but missing"
                parts.append(part[lo:hi])
        if not parts:
            acc.fill(0)
            continue
        over = out.dtype.type(weight * (counts[s] if average == "arrived" else d))
        if len(parts) == 1:  # no zeroed start, no copy: one pass per part, one to divide
            np.divide(parts[0], over, out=acc)
            continue
        np.add(parts[0], parts[1], out=acc)
        for part in parts[2:]:
            acc += part
        acc /= over
    return out, counts


def missed_part(
    own: np.ndarray,
    mine_in: np.ndarray,
    shard: int,
    out: np.ndarray | None = None,
    only: np.ndarray | None = None,
) -> np.ndarray | None:
    """``own`` (a rank's flat contribution) where its datacenter's contribution is not in,
    zero elsewhere; None when all of it is in.

    ``mine_in[l, s]``: slice ``s`` of shard ``l`` (elements ``[l * shard, (l + 1) * shard)``
    of the contribution padded to ``local * shard``) is in, as :func:`agree` decided for
    this datacenter on the rank that carries shard ``l``. ``out``: an array like ``own``
    to write it into (every element: whatever it held before is gone) and return; left
    untouched when all of it is in. A buffer reused from call to call has its pages
    already: a fresh one faults in the pages of every missed slice between the decision
    and the result (2-13 ms in the DiLoCo example on a busy two-core host).

    ``only`` (like ``mine_in``): redo just those slices; ``out`` holds this function's
    result for a mask that differs from ``mine_in`` at most there (the kept part made
    from a guess while the notes crossed), and ends as the result for ``mine_in``: the
    same bits as made afresh.
    """
    mine_in = np.asarray(mine_in, dtype=bool)
    if mine_in.ndim != 2:
        raise ConfigError(f"mine_in must have shape (local, S), got {mine_in.shape}")
    if only is not None and (out is None or np.shape(only) != mine_in.shape):
        raise ConfigError(f"only= needs out= and the shape of mine_in, {mine_in.shape}")
    if out is not None and (out.shape != own.shape or out.dtype != own.dtype):
        raise ConfigError(
            f"the kept part's buffer is {out.dtype}{list(out.shape)}; expected "
            f"{own.dtype}{list(own.shape)}"
        )
    if mine_in.all():
        return None
    bounds = slice_bounds(shard, mine_in.shape[1])
    if only is not None:
        assert out is not None
        for local, s in zip(*np.nonzero(only), strict=True):
            lo = min(own.size, int(local) * shard + int(bounds[s]))
            hi = min(own.size, int(local) * shard + int(bounds[s + 1]))
            out[lo:hi] = 0 if mine_in[local, s] else own[lo:hi]
        return out
    if out is None:
        # np.zeros, not zeros_like: calloc's pages are zero until written, so only the
        # missed slices are touched here (zeros_like writes every byte: up to 14 ms for
        # the example's 4.8 MB of fresh memory on a busy host)
        kept = np.zeros(own.shape, own.dtype)
    else:
        kept = out
        kept.fill(0)
    for local, s in zip(*np.nonzero(~mine_in), strict=True):
        lo = min(own.size, int(local) * shard + int(bounds[s]))
        hi = min(own.size, int(local) * shard + int(bounds[s + 1]))
        kept[lo:hi] = own[lo:hi]
    return kept


@dataclass
class CarryOver:
    """What a contributor still owes: its slices that missed a deadline, added to its next
    contribution (error feedback by plain accumulation)."""

    residual: np.ndarray | None = None
    weight: float = 1.0
    """The part of a missed slice carried to the next call: 1 is plain accumulation (exact
    over a run), less is a staleness weight (a late slice counts for less each time it
    misses: steadier for an optimizer with momentum, no longer exact)."""

    def add_to(self, contribution: np.ndarray) -> np.ndarray:
        """``contribution`` plus what is carried (a new array; the residual is kept until
        :meth:`settle` says what went in)."""
        if self.residual is None:
            return contribution.copy()
        if self.residual.shape != contribution.shape or self.residual.dtype != contribution.dtype:
            raise ConfigError(
                f"carried residual is {self.residual.dtype}{list(self.residual.shape)}; this "
                f"call's tensor is {contribution.dtype}{list(contribution.shape)} (a deadline "
                "allreduce carries over between calls of the same shape and type)"
            )
        return contribution + self.residual

    def settle(self, sent: np.ndarray, mine_in: np.ndarray, bounds: np.ndarray) -> None:
        """After the call: the slices of ``sent`` (what :meth:`add_to` returned) that were
        not in (``mine_in[s]`` False) are carried to the next call; the rest is paid."""
        residual = np.zeros(sent.shape, sent.dtype)  # only missed slices touched (missed_part)
        for s in np.flatnonzero(~np.asarray(mine_in, dtype=bool)):
            lo, hi = int(bounds[s]), int(bounds[s + 1])
            residual[lo:hi] = sent[lo:hi]
        if self.weight != 1.0:
            residual *= residual.dtype.type(self.weight)
        self.residual = residual if residual.any() else None

    def clear(self) -> np.ndarray | None:
        """Forget what is carried (e.g. between training phases); what it was."""
        residual, self.residual = self.residual, None
        return residual


@dataclass
class DeadlineReport:
    """What one deadline-bounded allreduce did, as this rank saw it."""

    deadline_s: float
    """The deadline the call had, from its start."""
    seconds: float
    """The call's duration (its agreement round included)."""
    slices: int
    included: np.ndarray
    """``included[x, s]`` of this rank's shard: contributor (datacenter) ``x``'s slice ``s``
    is in the result (the same on every contributor)."""
    counts: np.ndarray = field(repr=False)
    """Per slice, how many contributions the mean is over."""
    bytes_in: int = 0
    bytes_total: int = 0
    repairs: int = 0
    """Data chunks retransmitted or repaired on this rank's links during the call."""
    carried: bool = False
    """Some of this rank's own contribution missed and is carried to the next call."""
    timeline: dict[str, Any] = field(default_factory=dict)
    """When the call's phases ended, seconds from its start (across datacenters; empty
    within one): ``setup``, ``entered`` (the last peer's entry as dated), ``cut``,
    ``stopped``, ``agreed``, ``done`` (the result ready) and the ``decision``
    (``unanimous``, ``alone``, ``notes``). Where a late step's time went."""
    kept: Any = field(default=None, repr=False)
    """With ``carry="local"``: this rank's own contribution where its datacenter's is not
    in the result (zero elsewhere), shaped like the call's input (a NumPy array, or a
    tensor from :func:`sdr.torch.allreduce_by`); None when all of it is in."""

    @property
    def fraction_in(self) -> float:
        """Bytes of all contributions that are in the result, over all bytes."""
        return self.bytes_in / self.bytes_total if self.bytes_total else 1.0

    @property
    def complete(self) -> bool:
        """Every contribution is in: the result equals the reliable allreduce's mean."""
        return bool(self.included.all())
