"""The one parser of loss options (``sdr sim`` and ``sdr emulate`` both use it)."""

from __future__ import annotations

import pytest

from sdr.errors import ConfigError
from sdr.simulator.loss import Bernoulli, GilbertElliott, SizeDependent, TraceReplay
from sdr.simulator.loss_options import loss_model, parse_loss_spec
from sdr.simulator.loss_registry import LOSS_MODELS, make_loss_model, register_loss_model


def test_common_options() -> None:
    assert loss_model(0.01) == Bernoulli(0.01)
    assert loss_model(0.01, burst=0) == Bernoulli(0.01)  # 0: no bursts (emulate's default)
    bursty = loss_model(0.01, burst=8)
    assert isinstance(bursty, GilbertElliott)
    assert bursty.mean_rate() == pytest.approx(0.01) and bursty.p_bg == pytest.approx(1 / 8)
    assert loss_model(0.01, per_size=True) == SizeDependent(0.01)
    assert loss_model(0.01, burst=8, per_size=True) == bursty  # bursts first, as before


def test_trace_wins_and_bad_files_are_named(tmp_path) -> None:
    path = tmp_path / "t.txt"
    path.write_text("0 1 0 0\n")
    model = loss_model(0.5, burst=4, trace=str(path))
    assert isinstance(model, TraceReplay) and model.mean_rate() == 0.25
    with pytest.raises(ConfigError, match="cannot read loss trace"):
        loss_model(trace=str(tmp_path / "missing.txt"))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"loss": 1.5}, "probability"),
        ({"loss": 0.01, "burst": 0.5}, "burst length must be >= 1"),
        ({"loss": -0.1, "per_size": True}, "p_ref"),
    ],
)
def test_bad_values_are_config_errors(kwargs, match) -> None:
    with pytest.raises(ConfigError, match=match):
        loss_model(**kwargs)


def test_spec_strings_reach_every_registered_model(tmp_path) -> None:
    assert parse_loss_spec("bernoulli:rate=1e-3") == Bernoulli(1e-3)
    assert parse_loss_spec(" Gilbert-Elliott : rate=0.01, burst=8 ") == loss_model(0.01, 8)
    assert parse_loss_spec("size-dependent:rate=0.01,ref_size=1024") == SizeDependent(0.01, 1024)
    chain = parse_loss_spec("gilbert-elliott:p_gb=0.01,p_bg=0.5,loss_bad=0.5")
    assert chain == GilbertElliott(0.01, 0.5, 0.0, 0.5)
    path = tmp_path / "t.txt"
    path.write_text("1 0\n")
    assert parse_loss_spec(f"trace:path={path}").mean_rate() == 0.5


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "expected NAME"),
        ("nope:rate=1", r"unknown loss model 'nope'; expected one of \[.*'bernoulli'"),
        ("bernoulli:1e-3", "not key=value"),
        ("bernoulli:rate=1e-3,depth=2", "unexpected keyword argument 'depth'"),
        ("bernoulli", "missing 1 required positional argument: 'rate'"),
        ("gilbert-elliott:rate=0.01", "rate and burst"),
        ("trace", "exactly one of path"),
    ],
)
def test_bad_spec_strings(text, match) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_loss_spec(text)


def test_a_registered_plug_in_is_parsed_like_a_built_in() -> None:
    def every_nth(rate: float, n: int = 10) -> TraceReplay:
        return TraceReplay([1] + [0] * (n - 1))

    register_loss_model("every-nth", every_nth)
    try:
        assert parse_loss_spec("every-nth:rate=0.1,n=4").mean_rate() == 0.25
        with pytest.raises(ConfigError, match="already registered"):
            register_loss_model("EVERY-NTH", every_nth)
        register_loss_model("not-a-model", lambda: object())
        with pytest.raises(ConfigError, match="not a LossModel"):
            make_loss_model("not-a-model")
    finally:
        LOSS_MODELS.unregister("every-nth")
        LOSS_MODELS.unregister("not-a-model")
    assert LOSS_MODELS.group == "sdr.loss_models"
