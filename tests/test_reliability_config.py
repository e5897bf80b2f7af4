"""Scheme parameters: validation, derived timers, the [reliability] TOML table, the registry."""

from __future__ import annotations

import numpy as np
import pytest

import sdr
from sdr.reliability import ReliabilityConfig, available_schemes, create_scheme
from sdr.reliability.config import load, loads
from sdr.reliability.registry import register_scheme


def test_defaults_and_derived_timers():
    cfg = ReliabilityConfig(rtt="25ms")
    assert cfg.rtt == pytest.approx(0.025)
    assert cfg.rto == pytest.approx(0.075)  # the paper's SR RTO: 3 RTT
    assert cfg.beta_value == pytest.approx(1.0)  # alpha / 2
    assert cfg.t_inj == 0.0  # no chunk size / link rate yet


def test_the_sack_interval_is_finer_where_a_controller_or_the_path_selector_feeds_on_it():
    fixed = ReliabilityConfig(rtt="25ms")  # fixed, one path: rtt/2 in order, rtt/4 with holes
    assert fixed.ack_delay == pytest.approx(0.025 / 2)
    assert fixed.ack_delay_gapped == pytest.approx(0.025 / 4)
    for cfg in (
        ReliabilityConfig(rtt="25ms", congestion="delay"),
        ReliabilityConfig(rtt="25ms", congestion="bbr"),
        ReliabilityConfig(rtt="25ms", multipath=True),
    ):
        assert cfg.ack_delay == cfg.ack_delay_gapped == pytest.approx(0.0025)
    own = ReliabilityConfig(rtt="25ms", ack_interval="1ms")  # the user's, with holes or not
    assert own.ack_delay == own.ack_delay_gapped == pytest.approx(0.001)


def test_fto_follows_the_paper_formula():
    cfg = ReliabilityConfig(rtt="25ms", chunk_size="64KiB", link_rate="400Gbit/s", alpha=1.0)
    t_inj = 65536 * 8 / 400e9
    # M = 128 data chunks, k=32, m=8: ceil(M/R) = 32 parity chunks
    assert cfg.fto(128, 32) == pytest.approx((128 + 32) * t_inj + 0.5 * 0.025)


def test_global_timeout_scales_with_the_message():
    cfg = ReliabilityConfig(rtt="25ms", link_rate="1Gbit/s")
    assert cfg.timeout_for(0) == pytest.approx(60.0)  # a minute without progress at least
    assert cfg.timeout_for(1 << 30) == pytest.approx(60 + 4 * (1 << 30) * 8 / 1e9)
    assert ReliabilityConfig(rtt="1s").timeout_for(0) == pytest.approx(100 * 3.0)  # 100 RTOs
    assert ReliabilityConfig(global_timeout="2s").timeout_for(1 << 30) == 2.0


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"rtt": 0}, r"rtt must be in \(0, 1 h\]"),
        ({"rtt": "120min"}, r"rtt must be in \(0, 1 h\]"),  # derived timers would overflow
        ({"rtt": "fast"}, "cannot parse time 'fast'"),
        ({"alpha": -1}, r"alpha must be in \[0.0, 1000.0\]"),
        ({"beta": 1e300}, r"beta must be in \[0.0, 1000.0\]"),
        ({"alpha": 10**400}, "alpha must be a finite number, got 401 digits"),
        ({"chunk_size": 1 << 50}, "chunk_size must be in"),
        ({"k": 0}, r"k must be an integer in \[1, 255\], got 0"),
        ({"m": 2.5}, "m must be an integer"),
        ({"link_rate": "0Gbit/s"}, "link_rate must be >= 1 kbit/s"),
        ({"link_rate": "1e-300bit/s"}, "link_rate must be >= 1 kbit/s"),
        ({"max_in_flight": 0}, "max_in_flight"),
        ({"scheme": ""}, "scheme must be a scheme name"),
        ({"global_timeout": 0}, "global_timeout must be > 0"),
        ({"params": 3}, "params must be a table"),
    ],
)
def test_bad_values_name_the_value_and_the_expectation(kw, match):
    with pytest.raises(sdr.ConfigError, match=match):
        ReliabilityConfig(**kw)


def test_load_from_toml_text_file_and_mapping(tmp_path):
    text = """
[reliability]
scheme = "ec-xor"
rtt = "25ms"
k = 16
m = 4
link_rate = "100Gbit/s"

[reliability.params]
tail = 3
"""
    path = tmp_path / "sdr.toml"
    path.write_text(text)
    for cfg in (loads(text), load(path), load(str(path))):
        assert (cfg.scheme, cfg.k, cfg.m, cfg.link_rate) == ("ec-xor", 16, 4, 100e9)
        assert cfg.params == {"tail": 3}
    assert not hasattr(sdr.reliability, "load_config")  # the guessing loader is gone
    cfg = ReliabilityConfig.from_mapping({"scheme": "sr-nack", "alpha": 1.0})
    assert cfg.rto == pytest.approx(0.002)


def test_load_reads_any_file_name_and_loads_parses_text(tmp_path):
    """load(path) reads the file, whatever its name; loads(text) never takes a name."""
    path = tmp_path / "sdr.conf"
    path.write_text('[reliability]\nscheme = "sr-nack"\nrtt = "25ms"\n')
    assert load(path).scheme == "sr-nack"
    assert load(str(path)).rtt == pytest.approx(0.025)  # the file, not its name
    with pytest.raises(sdr.ConfigError, match="cannot read"):
        load(tmp_path / "missing.conf")
    with pytest.raises(sdr.ConfigError, match="not valid TOML"):
        loads("sdr.conf")


def test_unknown_scheme_fails_at_load_with_the_known_names():
    with pytest.raises(sdr.ConfigError, match=r"scheme 'ec-rs' is not a known.*'ec-mds'.*'auto'"):
        loads('[reliability]\nscheme = "ec-rs"\n')
    with pytest.raises(sdr.ConfigError, match="not a known reliability scheme"):
        ReliabilityConfig.from_mapping({"scheme": 3})
    assert loads('[reliability]\nscheme = "auto"\nrtt = "25ms"\n').scheme == "auto"
    assert loads('scheme = "EC-MDS"\n').scheme == "EC-MDS"  # names are case-insensitive


def test_bare_numbers_in_the_table_need_units():
    with pytest.raises(sdr.ConfigError, match=r"^rtt: time '25' has no unit.*'25ms'"):
        loads('[reliability]\nrtt = "25"\n')
    with pytest.raises(sdr.ConfigError, match=r"^link_rate: rate '10' has no unit"):
        ReliabilityConfig(link_rate="10")
    with pytest.raises(sdr.ConfigError, match=r"^ack_interval must be positive.*'-1ms'"):
        ReliabilityConfig(ack_interval="-1ms")
    assert loads("rtt = 0.025\n").rtt == 0.025  # TOML numbers stay seconds


def _qp_pair(**attr_kw):
    from sdr.backends.inproc import InprocNetwork, InprocTransport, ManualClock

    net = InprocNetwork(seed=1, clock=ManualClock(), delay=0.0125, drop=1e-3)
    a, b = sdr.Context(InprocTransport(net)), sdr.Context(InprocTransport(net))
    attr = sdr.QPAttr(mtu=4096, chunk_size="64KiB", max_message_size="8MiB", **attr_kw)
    qa, qb = a.create_qp(attr), b.create_qp(attr)
    qa.connect(qb.info())
    qb.connect(qa.info())
    return (a, qa), (b, qb)


def test_reliable_qp_resolves_auto_through_the_selector():
    """ReliableQP(qp, "auto") was "not registered"; now both ends get the same scheme."""
    from sdr.runtime import ReliableQP, wait_all

    (a, qa), (b, qb) = _qp_pair()
    kw = {"rtt": "25ms", "link_rate": "10Gbit/s", "drop": 1e-3}
    sender, receiver = ReliableQP(qa, "auto", **kw), ReliableQP(qb, "auto", **kw)
    assert sender.config.scheme in set(available_schemes())
    assert sender.config == receiver.config and sender.config.chunk_size == 65536
    assert sender.scheme.fingerprint == receiver.scheme.fingerprint
    src = np.random.default_rng(0).integers(0, 256, 1 << 20, dtype=np.uint8)
    dst = np.zeros_like(src)
    r = receiver.post_recv(b.register(dst))
    w = sender.write(a.register(src))
    wait_all([w, r], timeout=60)
    assert (src == dst).all()


def test_auto_needs_a_drop_rate_and_a_link_rate():
    from sdr.runtime import ReliableQP

    (_, qa), _ = _qp_pair()
    with pytest.raises(sdr.ConfigError, match="needs the expected drop rate: drop=1e-3"):
        ReliableQP(qa, "auto", rtt="25ms", link_rate="10Gbit/s")
    with pytest.raises(sdr.ConfigError, match="needs link_rate"):
        ReliableQP(qa, {"scheme": "auto", "params": {"drop": 1e-3}})
    with pytest.raises(sdr.ConfigError, match=r"drop must be in \[0, 1\)"):
        ReliableQP(qa, "auto", link_rate="10Gbit/s", drop=2.0)
    assert ReliableQP(qa, "sr-rto", drop=1e-3).config.scheme == "sr-rto"  # ignored there


def test_unknown_keys_and_bad_toml_are_config_errors(tmp_path):
    with pytest.raises(sdr.ConfigError, match=r"unknown \[reliability\] keys \['alhpa'\]"):
        ReliabilityConfig.from_mapping({"alhpa": 1})
    with pytest.raises(sdr.ConfigError, match="not valid TOML"):
        loads("[reliability\nscheme = 1\n")
    with pytest.raises(sdr.ConfigError, match="cannot read"):
        load(tmp_path / "missing.toml")


def test_resolved_takes_the_qp_chunk_size_and_rate():
    cfg = ReliabilityConfig().resolved(4096, 1e9)
    assert cfg.chunk_size == 4096 and cfg.link_rate == 1e9
    assert cfg.t_inj == pytest.approx(4096 * 8 / 1e9)
    with pytest.raises(sdr.ConfigError, match="must equal the QP's chunk_size 4096"):
        ReliabilityConfig(chunk_size="8KiB").resolved(4096, None)


def test_registry_knows_the_builtins_and_refuses_duplicates():
    assert {"sr-rto", "sr-nack", "ec-mds", "ec-xor"} <= set(available_schemes())
    with pytest.raises(sdr.ConfigError, match="already registered"):
        register_scheme("sr-rto", lambda cfg: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(sdr.ConfigError, match="'nope' is not registered; expected one of"):
        create_scheme(ReliabilityConfig(scheme="nope", chunk_size=4096))


def test_ec_scheme_lanes_and_fingerprints():
    mds = create_scheme(ReliabilityConfig(scheme="ec-mds", k=4, m=2, chunk_size=1024))
    assert mds.lanes(10 * 1024 - 1) == (10 * 1024 - 1, 3 * 2 * 1024)  # 3 submessages
    other = create_scheme(ReliabilityConfig(scheme="ec-mds", k=4, m=3, chunk_size=1024))
    sr = create_scheme(ReliabilityConfig(scheme="sr-rto", chunk_size=1024))
    assert sr.lanes(5000) == (5000,)
    assert len({mds.fingerprint, other.fingerprint, sr.fingerprint}) == 3


@pytest.mark.parametrize("value", ["30", "2", "250.0", "6" * 400])
def test_a_unitless_rtt_of_seconds_in_a_file_is_refused_with_the_fix(value: str) -> None:
    """Before, ``rtt = 30`` was a 30 s RTT without a word (issue 32, item 5)."""
    with pytest.raises(sdr.ConfigError, match=r'a bare number is seconds\): write rtt = ".*ms"'):
        loads(f"[reliability]\nrtt = {value}\n")


def test_an_rtt_with_units_or_a_plausible_bare_one_is_kept() -> None:
    assert loads('[reliability]\nrtt = "30s"\n').rtt == 30.0
    assert loads("[reliability]\nrtt = 0.03\n").rtt == 0.03
