"""Loss models by name: the one extension idiom (:class:`sdr.registry.Registry`).

A loss model factory takes keyword parameters and returns a
:class:`~sdr.simulator.loss.LossModel`; it raises :class:`~sdr.errors.ConfigError` for
bad ones. Register one in code::

    from sdr.simulator.loss_registry import register_loss_model
    register_loss_model("my-loss", MyLoss)     # MyLoss(rate=..., ...) -> LossModel

or from an installed distribution, as an entry point in the ``sdr.loss_models`` group::

    [project.entry-points."sdr.loss_models"]
    my-loss = "my_package.loss:MyLoss"

:func:`sdr.simulator.loss_options.parse_loss_spec` then builds it from
``"my-loss:rate=1e-3,depth=4"``. Built in: ``bernoulli``, ``gilbert-elliott``,
``size-dependent`` and ``trace``. Every registered model must pass the conformance suite
(``tests/test_loss_model_conformance.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from sdr.errors import ConfigError
from sdr.registry import Registry
from sdr.simulator.loss import Bernoulli, GilbertElliott, LossModel, SizeDependent, TraceReplay

__all__ = ["LOSS_MODELS", "LossModelFactory", "make_loss_model", "register_loss_model"]

LossModelFactory = Callable[..., LossModel]

LOSS_MODELS: Registry[LossModelFactory] = Registry("loss model", "sdr.loss_models")
"""Every known loss model factory, by name (case-insensitive)."""


def register_loss_model(name: str, factory: LossModelFactory, *, replace: bool = False) -> None:
    """Make ``factory`` (keyword parameters -> LossModel) known as loss model ``name``."""
    LOSS_MODELS.register(name, factory, replace=replace)


def make_loss_model(name: str, **params: object) -> LossModel:
    """The loss model ``name`` built with ``params``; ConfigError for a bad name or value."""
    factory = LOSS_MODELS.get(name)
    try:
        model = factory(**params)
    except TypeError as exc:  # unknown or missing parameter: name them, not a traceback
        raise ConfigError(f"loss model {name!r}: {exc}") from None
    if not isinstance(model, LossModel):
        raise ConfigError(f"loss model {name!r} built {model!r}, which is not a LossModel")
    return model


def _bernoulli(rate: float, unit: str = "packet") -> Bernoulli:
    """I.i.d. losses at ``rate`` per ``unit`` ("packet" or "chunk")."""
    return Bernoulli(rate, unit)


def _gilbert_elliott(
    rate: float | None = None,
    burst: float | None = None,
    *,
    p_gb: float | None = None,
    p_bg: float | None = None,
    loss_good: float = 0.0,
    loss_bad: float = 1.0,
) -> GilbertElliott:
    """Bursts of mean ``burst`` packets at long-run ``rate``, or the chain's own
    ``p_gb``/``p_bg``/``loss_good``/``loss_bad``."""
    if rate is not None or burst is not None:
        if rate is None or burst is None or p_gb is not None or p_bg is not None:
            raise ConfigError("gilbert-elliott takes rate and burst, or p_gb and p_bg (not a mix)")
        return GilbertElliott.from_rate(rate, mean_burst=burst)
    if p_gb is None or p_bg is None:
        raise ConfigError("gilbert-elliott needs rate and burst, or p_gb and p_bg")
    return GilbertElliott(p_gb, p_bg, loss_good, loss_bad)


def _size_dependent(rate: float, ref_size: int = 4096) -> SizeDependent:
    """I.i.d. losses at ``rate`` for packets of ``ref_size`` bytes, growing with size."""
    return SizeDependent(rate, int(ref_size))


def _trace(path: str | Path | None = None, *, values: Sequence[int] | None = None) -> TraceReplay:
    """Replay a 0/1 loss trace: a file (``path``) or the ``values`` themselves."""
    if (path is None) == (values is None):
        raise ConfigError("trace needs exactly one of path (a 0/1 file) or values")
    return TraceReplay.from_file(path) if path is not None else TraceReplay(values)  # type: ignore[arg-type]


for _name, _factory in (
    ("bernoulli", _bernoulli),
    ("gilbert-elliott", _gilbert_elliott),
    ("size-dependent", _size_dependent),
    ("trace", _trace),
):
    register_loss_model(_name, _factory)
