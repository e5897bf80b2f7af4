"""Every registered loss model passes the same checks (the one extension idiom).

A model is built from its registry name and example parameters. It must be deterministic
for a seed, draw a batch exactly as that many single draws, give a drop fraction in [0, 1]
that matches its stated ``mean_rate`` within a statistical bound, handle empty batches and
refuse bad parameters with ConfigError. A new built-in needs an entry in CASES.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from sdr.errors import ConfigError
from sdr.simulator.loss import LossModel, draw_losses
from sdr.simulator.loss_registry import LOSS_MODELS, make_loss_model

_TRACE = [0] * 97 + [1, 1, 1]

# name -> (good parameters, dispersion: variance factor of the loss count vs i.i.d., bad ones)
CASES: dict[str, tuple[dict, float, list[dict]]] = {
    "bernoulli": ({"rate": 0.03}, 1.0, [{"rate": 1.5}, {"rate": -0.1}, {"rate": 0.1, "unit": "x"}]),
    "gilbert-elliott": (
        {"rate": 0.03, "burst": 6},
        2 * 6,
        [{"rate": 0.03, "burst": 0.5}, {"rate": 2.0, "burst": 4}, {"p_gb": 0.1, "p_bg": 0.0}],
    ),
    "size-dependent": (
        {"rate": 0.02, "ref_size": 1000},
        1.0,
        [{"rate": 1.0}, {"rate": 0.1, "ref_size": 0}],
    ),
    "trace": ({"values": _TRACE}, 0.0, [{"values": []}, {"values": [0, 2]}, {}]),
}

SIZES = np.random.default_rng(0).integers(64, 9000, 60_000).astype(np.float64)


def test_every_registered_model_has_a_case() -> None:
    assert set(LOSS_MODELS.names()) <= set(CASES), "add the new loss model to CASES"


@pytest.fixture(params=sorted(CASES))
def case(request):
    name = request.param
    params, dispersion, bad = CASES[name]
    return name, params, dispersion, bad


def _draws(name: str, params: dict, seed: int, sizes: np.ndarray = SIZES) -> np.ndarray:
    return draw_losses(make_loss_model(name, **params), np.random.default_rng(seed), sizes)


def test_is_a_loss_model(case) -> None:
    name, params, _, _ = case
    assert isinstance(make_loss_model(name, **params), LossModel)


def test_deterministic_for_a_seed(case) -> None:
    name, params, _, _ = case
    assert np.array_equal(_draws(name, params, 7), _draws(name, params, 7))


def test_a_batch_draws_as_single_packets_do(case) -> None:
    name, params, _, _ = case
    sizes = SIZES[:3000]
    batch = _draws(name, params, 3, sizes)
    model, rng = make_loss_model(name, **params), np.random.default_rng(3)
    single = [model.drop(rng, int(s)) for s in sizes.tolist()]
    assert batch.tolist() == single
    split_model, rng = make_loss_model(name, **params), np.random.default_rng(3)
    parts = [draw_losses(split_model, rng, part) for part in np.array_split(sizes, 7)]
    assert np.concatenate(parts).tolist() == single


def test_drop_fraction_matches_the_stated_mean_rate(case) -> None:
    name, params, dispersion, _ = case
    model = make_loss_model(name, **params)
    lost = _draws(name, params, 11)
    assert lost.dtype == bool and lost.shape == SIZES.shape
    fraction = float(lost.mean())
    assert 0.0 <= fraction <= 1.0
    # per-packet rates of this mix of sizes (size-dependent models differ per size)
    rates = np.array([model.mean_rate(int(s)) for s in SIZES[:2000].tolist()])
    expected = float(rates.mean()) if np.ptp(rates) else model.mean_rate()
    assert 0.0 <= expected <= 1.0
    n = len(SIZES)
    sigma = math.sqrt(max(dispersion, 1e-9) * expected * (1 - expected) / n)
    assert abs(fraction - expected) <= 5 * sigma + 2 / n + 0.01 * expected


def test_sampled_streams_match_too(case) -> None:
    name, params, dispersion, _ = case
    model = make_loss_model(name, **params)
    streams = model.sample(np.random.default_rng(5), 20, 3000, 1000)
    assert streams.shape == (20, 3000) and streams.dtype == bool
    expected, n = model.mean_rate(1000), streams.size
    sigma = math.sqrt(max(dispersion, 1e-9) * expected * (1 - expected) / n)
    assert abs(float(streams.mean()) - expected) <= 5 * sigma + 20 / n + 0.01 * expected


def test_handles_empty_batches(case) -> None:
    name, params, _, _ = case
    model = make_loss_model(name, **params)
    empty = draw_losses(model, np.random.default_rng(0), np.empty(0))
    assert empty.shape == (0,) and empty.dtype == bool
    assert model.sample(np.random.default_rng(0), 3, 0).shape == (3, 0)


def test_rejects_bad_parameters(case) -> None:
    name, _, _, bad = case
    for params in bad:
        with pytest.raises(ConfigError):
            make_loss_model(name, **params)
