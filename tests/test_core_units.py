import pytest
from hypothesis import given
from hypothesis import strategies as st

from sdr.errors import ConfigError, SDRError
from sdr.units import (
    format_size,
    parse_distance,
    parse_rate,
    parse_size,
    parse_time,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("64KiB", 65536), ("1MiB", 1 << 20), ("1.5MB", 1_500_000), ("4096", 4096), (4096, 4096),
     ("8 GiB", 8 << 30), ("0", 0)],
)  # fmt: skip
def test_parse_size(text, expected):
    assert parse_size(text) == expected


def test_parse_rate_time_distance():
    assert parse_rate("400Gbit/s") == 400e9
    assert parse_rate("1Gbps") == 1e9
    assert parse_rate("1GB/s") == 8e9
    assert parse_time("25ms") == pytest.approx(0.025)
    assert parse_time("3us") == pytest.approx(3e-6)
    assert parse_time(2) == 2.0
    assert parse_distance("3750km") == 3.75e6


@pytest.mark.parametrize("bad", ["64 parsecs", "", "-1KiB", "KiB", "1.5B", True, None, [1]])
def test_bad_sizes_name_the_value(bad):
    with pytest.raises(ConfigError) as info:
        parse_size(bad)
    assert isinstance(info.value, SDRError)
    assert isinstance(info.value, ValueError)


def test_error_message_says_what_was_expected():
    with pytest.raises(ConfigError, match=r"'25 lightyears'.*25ms"):
        parse_time("25 lightyears")


@given(st.integers(min_value=0, max_value=1 << 50))
def test_format_then_parse_round_trips_whole_units(n):
    text = format_size(n)
    if "." not in text:  # exact binary multiples print without a fraction
        assert parse_size(text) == n


@pytest.mark.parametrize("parse", [parse_size, parse_rate, parse_time, parse_distance])
def test_integers_beyond_float_range_are_config_errors(parse):
    """TOML integers are unbounded: 10**400 is an error that names the value, not a crash."""
    with pytest.raises(ConfigError, match=r" 100000000000\.\.\. \(401 digits\) is out of range"):
        parse(10**400)
