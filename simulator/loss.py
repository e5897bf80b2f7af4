"""Loss models: Bernoulli, Gilbert-Elliott bursts, size-dependent loss and trace replay.

Every model can be used two ways:

* per packet, by the link (:mod:`sdr.simulator.link_model`, which the simulator and the WAN
  emulator share): ``model.drop(rng, size_bytes)`` draws one loss event from a seeded
  :class:`numpy.random.Generator` (stateful models such as Gilbert-Elliott and traces advance
  their state on each call); ``model.drops(rng, sizes)`` draws a batch, exactly as that many
  ``drop`` calls would (:func:`draw_losses` falls back to them for models without it);
* vectorized, by Monte Carlo: ``model.sample(rng, streams, length, size_bytes)`` returns a
  boolean array of shape ``(streams, length)``, one independent packet stream per row, each
  starting from the model's stationary state (a random offset for traces).

``chunk_drop_probability`` gives the per-chunk loss probability when losses are i.i.d. (then
the exact analytic models apply), and ``None`` when they are not (use the trace sampler).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from sdr.errors import ConfigError

__all__ = [
    "LossModel",
    "Bernoulli",
    "GilbertElliott",
    "SizeDependent",
    "TraceReplay",
    "Schedule",
    "draw_losses",
]


@runtime_checkable
class LossModel(Protocol):
    """What the simulator and the WAN emulator need from a loss model."""

    def drop(self, rng: np.random.Generator, size_bytes: int = 4096) -> bool:
        """Draw whether the next packet of ``size_bytes`` is lost."""
        ...

    def sample(
        self, rng: np.random.Generator, streams: int, length: int, size_bytes: int = 4096
    ) -> np.ndarray:
        """Losses of ``streams`` independent packet streams, shape ``(streams, length)``."""
        ...

    def mean_rate(self, size_bytes: int = 4096) -> float:
        """Long-run fraction of packets of ``size_bytes`` that are lost."""
        ...

    def chunk_drop_probability(
        self, packets_per_chunk: int, size_bytes: int = 4096
    ) -> float | None:
        """Per-chunk loss probability if losses are i.i.d., else ``None``."""
        ...


def _check_probability(name: str, p: float, *, allow_one: bool = False) -> float:
    ok = 0.0 <= p <= 1.0 if allow_one else 0.0 <= p < 1.0
    if not ok or isinstance(p, bool):
        bound = "[0, 1]" if allow_one else "[0, 1)"
        raise ConfigError(f"{name} must be a probability in {bound}, got {p!r}")
    return float(p)


@dataclass
class Bernoulli:
    """I.i.d. losses with probability ``p`` per ``unit`` (``"packet"`` or ``"chunk"``).

    With ``unit="chunk"`` (the paper's model) ``drop`` draws one chunk-loss event; with
    ``unit="packet"`` it draws one packet-loss event and a chunk of N packets is lost with
    probability ``1 - (1 - p)^N``.
    """

    p: float
    unit: str = "packet"

    def __post_init__(self) -> None:
        self.p = _check_probability("drop probability", self.p)
        if self.unit not in ("packet", "chunk"):
            raise ConfigError(f"Bernoulli unit must be 'packet' or 'chunk', got {self.unit!r}")

    def drop(self, rng: np.random.Generator, size_bytes: int = 4096) -> bool:
        return bool(rng.random() < self.p)

    def drops(self, rng: np.random.Generator, sizes: np.ndarray) -> np.ndarray:
        return rng.random(len(sizes)) < self.p

    def sample(
        self, rng: np.random.Generator, streams: int, length: int, size_bytes: int = 4096
    ) -> np.ndarray:
        return rng.random((streams, length)) < self.p

    def mean_rate(self, size_bytes: int = 4096) -> float:
        return self.p

    def chunk_drop_probability(self, packets_per_chunk: int, size_bytes: int = 4096) -> float:
        if self.unit == "chunk":
            return self.p
        return float(-math.expm1(packets_per_chunk * math.log1p(-self.p)))


@dataclass
class GilbertElliott:
    """Two-state Markov (Gilbert-Elliott) burst losses.

    The chain moves good->bad with probability ``p_gb`` and bad->good with ``p_bg`` per
    packet; a packet is lost with ``loss_good`` in the good state and ``loss_bad`` in the bad
    state. Mean burst length (in the bad state) is ``1 / p_bg`` packets.
    """

    p_gb: float
    p_bg: float
    loss_good: float = 0.0
    loss_bad: float = 1.0
    bad: bool | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.p_gb = _check_probability("p_gb", self.p_gb, allow_one=True)
        self.p_bg = _check_probability("p_bg", self.p_bg, allow_one=True)
        if self.p_bg == 0.0:
            raise ConfigError("p_bg must be > 0 (otherwise the bad state never ends)")
        self.loss_good = _check_probability("loss_good", self.loss_good, allow_one=True)
        self.loss_bad = _check_probability("loss_bad", self.loss_bad, allow_one=True)

    @classmethod
    def from_rate(cls, loss_rate: float, mean_burst: float) -> GilbertElliott:
        """Bursts of mean length ``mean_burst`` packets, all lost, at long-run ``loss_rate``."""
        _check_probability("loss rate", loss_rate)
        if mean_burst < 1:
            raise ConfigError(f"mean burst length must be >= 1 packet, got {mean_burst!r}")
        p_bg = 1.0 / mean_burst
        # stationary bad share pi_b = p_gb / (p_gb + p_bg) = loss_rate
        p_gb = loss_rate * p_bg / (1.0 - loss_rate)
        return cls(p_gb=min(p_gb, 1.0), p_bg=p_bg)

    @property
    def stationary_bad(self) -> float:
        """Long-run share of packets sent in the bad state."""
        return self.p_gb / (self.p_gb + self.p_bg)

    def mean_rate(self, size_bytes: int = 4096) -> float:
        pi_b = self.stationary_bad
        return (1.0 - pi_b) * self.loss_good + pi_b * self.loss_bad

    def reset(self) -> None:
        """Forget the chain's state; the next ``drop`` starts from the stationary law."""
        self.bad = None

    def drop(self, rng: np.random.Generator, size_bytes: int = 4096) -> bool:
        if self.bad is None:
            self.bad = bool(rng.random() < self.stationary_bad)
        else:
            flip = self.p_bg if self.bad else self.p_gb
            if rng.random() < flip:
                self.bad = not self.bad
        return bool(rng.random() < (self.loss_bad if self.bad else self.loss_good))

    def states(self, rng: np.random.Generator, streams: int, length: int) -> np.ndarray:
        """Bad-state indicator of ``streams`` independent chains, shape ``(streams, length)``.

        Built from geometric sojourn times, so the cost is per state change, not per packet.
        """
        out = np.zeros((streams, length), dtype=bool)
        start_bad = rng.random(streams) < self.stationary_bad
        for s in range(streams):
            bad = bool(start_bad[s])
            pos = 0
            while pos < length:
                leave = self.p_bg if bad else self.p_gb
                run = int(rng.geometric(leave)) if leave > 0 else length
                if bad:
                    out[s, pos : pos + run] = True
                pos += run
                bad = not bad
        return out

    def sample(
        self, rng: np.random.Generator, streams: int, length: int, size_bytes: int = 4096
    ) -> np.ndarray:
        bad = self.states(rng, streams, length)
        rate = np.where(bad, self.loss_bad, self.loss_good)
        return rng.random((streams, length)) < rate

    def chunk_drop_probability(self, packets_per_chunk: int, size_bytes: int = 4096) -> None:
        return None


@dataclass
class SizeDependent:
    """I.i.d. packet losses whose probability grows with the packet size.

    ``p(size) = 1 - (1 - p_ref) ** (size / ref_size)``: a fixed per-byte corruption rate,
    so a 4 KiB packet is lost about 4x as often as a 1 KiB one (the paper's observation
    that larger packets drop more on ISP paths).
    """

    p_ref: float
    ref_size: int = 4096

    def __post_init__(self) -> None:
        self.p_ref = _check_probability("p_ref", self.p_ref)
        if self.ref_size <= 0:
            raise ConfigError(f"reference size must be > 0 bytes, got {self.ref_size!r}")

    def probability(self, size_bytes: int) -> float:
        """Loss probability of one packet of ``size_bytes``."""
        return float(-math.expm1(size_bytes / self.ref_size * math.log1p(-self.p_ref)))

    def drop(self, rng: np.random.Generator, size_bytes: int = 4096) -> bool:
        return bool(rng.random() < self.probability(size_bytes))

    def drops(self, rng: np.random.Generator, sizes: np.ndarray) -> np.ndarray:
        exponent = np.asarray(sizes, np.float64) / self.ref_size * math.log1p(-self.p_ref)
        return rng.random(len(sizes)) < -np.expm1(exponent)

    def sample(
        self, rng: np.random.Generator, streams: int, length: int, size_bytes: int = 4096
    ) -> np.ndarray:
        return rng.random((streams, length)) < self.probability(size_bytes)

    def mean_rate(self, size_bytes: int = 4096) -> float:
        return self.probability(size_bytes)

    def chunk_drop_probability(self, packets_per_chunk: int, size_bytes: int = 4096) -> float:
        return float(-math.expm1(packets_per_chunk * math.log1p(-self.probability(size_bytes))))


@dataclass
class TraceReplay:
    """Replays a recorded loss trace (1 = lost, 0 = delivered), looping at the end.

    ``drop`` walks the trace from ``position``; ``sample`` starts each stream at a random
    offset so that Monte Carlo streams are not all the same.
    """

    trace: Sequence[int] | np.ndarray
    position: int = 0

    def __post_init__(self) -> None:
        arr = np.asarray(self.trace)
        if arr.ndim != 1 or arr.size == 0:
            raise ConfigError("a loss trace must be a non-empty 1-D sequence of 0/1")
        if not np.isin(arr, (0, 1)).all():
            raise ConfigError("a loss trace may only hold 0 (delivered) and 1 (lost)")
        self.trace = arr.astype(bool)

    @classmethod
    def from_file(cls, path: str | Path) -> TraceReplay:
        """Read a trace of whitespace-separated 0/1 values (``#`` starts a comment)."""
        try:
            text = Path(path).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read loss trace {str(path)!r}: {exc}") from None
        return cls.from_text(text, str(path))

    @classmethod
    def from_text(cls, text: str, name: str = "<trace>") -> TraceReplay:
        """Parse trace text: whitespace-separated 0/1 values, ``#`` starts a comment."""
        values: list[int] = []
        for lineno, line in enumerate(text.splitlines(), 1):
            for tok in line.split("#", 1)[0].split():
                if tok not in ("0", "1"):
                    raise ConfigError(
                        f"{name}:{lineno}: {tok[:40]!r} in a loss trace; expected 0 "
                        "(delivered) or 1 (lost)"
                    )
                values.append(int(tok))
        return cls(values)

    @classmethod
    def from_events(cls, lost: Iterable[bool]) -> TraceReplay:
        """A trace from any iterable of booleans (e.g. a capture's loss indicators)."""
        return cls([int(bool(x)) for x in lost])

    def drop(self, rng: np.random.Generator, size_bytes: int = 4096) -> bool:
        trace = np.asarray(self.trace)
        lost = bool(trace[self.position % trace.size])
        self.position = (self.position + 1) % trace.size
        return lost

    def drops(self, rng: np.random.Generator, sizes: np.ndarray) -> np.ndarray:
        trace = np.asarray(self.trace)
        idx = (self.position + np.arange(len(sizes))) % trace.size
        self.position = int((self.position + len(sizes)) % trace.size)
        return trace[idx]

    def sample(
        self, rng: np.random.Generator, streams: int, length: int, size_bytes: int = 4096
    ) -> np.ndarray:
        trace = np.asarray(self.trace)
        offsets = rng.integers(0, trace.size, size=streams)
        idx = (offsets[:, None] + np.arange(length)[None, :]) % trace.size
        return trace[idx]

    def mean_rate(self, size_bytes: int = 4096) -> float:
        return float(np.asarray(self.trace).mean())

    def chunk_drop_probability(self, packets_per_chunk: int, size_bytes: int = 4096) -> None:
        return None


@dataclass
class Schedule:
    """A loss model that changes along the packet stream: ``phases`` of (packets, model).

    Phase ``i`` covers the next ``packets_i`` packets, then the next phase starts; the last
    phase lasts forever (its count is ignored). Driven by packet count, not a clock, so a
    run is reproducible: e.g. ``Schedule([(20_000, Bernoulli(1e-6)), (20_000,
    Bernoulli(1e-2)), (0, Bernoulli(1e-4))])`` is a link whose loss changes during a run.
    ``sample`` starts every stream at the first phase.
    """

    phases: Sequence[tuple[int, LossModel]]
    position: int = 0

    def __post_init__(self) -> None:
        if not self.phases:
            raise ConfigError("a loss schedule needs at least one (packets, model) phase")
        for count, model in self.phases:
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ConfigError(f"phase length must be a packet count >= 0, got {count!r}")
            if not isinstance(model, LossModel):
                raise ConfigError(f"phase model must be a loss model, got {model!r}")
        self.phases = list(self.phases)
        self._ends = np.cumsum([count for count, _ in self.phases[:-1]])

    def phase_at(self, packet: int) -> int:
        """Index of the phase that packet number ``packet`` (0-based) falls in."""
        return int(np.searchsorted(self._ends, packet, side="right"))

    def drop(self, rng: np.random.Generator, size_bytes: int = 4096) -> bool:
        model = self.phases[self.phase_at(self.position)][1]
        self.position += 1
        return model.drop(rng, size_bytes)

    def sample(
        self, rng: np.random.Generator, streams: int, length: int, size_bytes: int = 4096
    ) -> np.ndarray:
        out = np.zeros((streams, length), dtype=bool)
        start = 0
        for i, (count, model) in enumerate(self.phases):
            stop = length if i == len(self.phases) - 1 else min(length, start + count)
            if stop > start:
                out[:, start:stop] = model.sample(rng, streams, stop - start, size_bytes)
            start = stop
        return out

    def mean_rate(self, size_bytes: int = 4096) -> float:
        """The last phase's rate (the one that lasts)."""
        return self.phases[-1][1].mean_rate(size_bytes)

    def chunk_drop_probability(self, packets_per_chunk: int, size_bytes: int = 4096) -> None:
        return None  # not stationary


def draw_losses(model: LossModel, rng: np.random.Generator, sizes: np.ndarray) -> np.ndarray:
    """Losses of consecutive packets of ``sizes`` bytes: ``model.drops`` when the model has
    it (vectorized), else one ``drop`` per packet. Same draws, same result, either way."""
    drops = getattr(model, "drops", None)
    if drops is not None:
        return np.asarray(drops(rng, sizes), dtype=bool)
    return np.fromiter((model.drop(rng, int(s)) for s in np.asarray(sizes).tolist()), bool)
