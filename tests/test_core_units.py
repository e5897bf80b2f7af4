import pytest
from hypothesis import given
from hypothesis import strategies as st

from sdr.errors import ConfigError, SDRError
from sdr.units import (
    format_size,
    parse_distance,
    parse_rate,
    parse_seconds,
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
    assert parse_size(format_size(n, exact=True)) == n  # exact: always parses back


def test_exact_format_is_what_suggestions_use():
    """format_size(48000) is "46.88KiB", which parse_size refuses; exact=True is bytes."""
    assert format_size(48000) == "46.88KiB"
    assert format_size(48000, exact=True) == "48000B"
    assert format_size(3 << 20, exact=True) == "3MiB"
    with pytest.raises(ConfigError, match=r"not a whole number of bytes.*'48006B'"):
        parse_size("46.88KiB")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("64K", 65536), ("64k", 65536), ("1M", 1 << 20), ("2G", 2 << 30), ("1T", 1 << 40),
     ("64KB", 64_000), ("64kB", 64_000)],
)  # fmt: skip
def test_bare_size_prefixes_are_binary_as_in_perftest_and_iperf3(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("10Gb/s", 1e10), ("10Gbit/s", 1e10), ("10 Gbps", 1e10), ("10Gbps", 1e10),
     ("1GB/s", 8e9), ("1GBps", 8e9), ("100Mb/s", 1e8), ("1KiB/s", 8192), ("1Gibit/s", 2**30)],
)  # fmt: skip
def test_rates_b_is_bits_and_B_is_bytes(text, expected):
    assert parse_rate(text) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("parse", "text", "suggestion"),
    [(parse_time, "25", "25ms"), (parse_rate, "10", "10Gbit/s"),
     (parse_distance, "3750", "3750km")],
)  # fmt: skip
def test_bare_number_strings_need_a_unit(parse, text, suggestion):
    """``--rtt 25`` meant 25 seconds; a string without a unit is ambiguous and refused."""
    with pytest.raises(ConfigError, match=rf"{text}'.*no unit.*'{suggestion}'"):
        parse(text)


def test_numbers_stay_internal_units_and_zero_needs_no_unit():
    assert parse_time(0.025) == 0.025 and parse_time(2) == 2.0
    assert parse_rate(1e9) == 1e9 and parse_size("4096") == 4096
    assert parse_time("0") == 0.0 and parse_rate("0") == 0.0


def test_negative_values_say_must_be_positive():
    with pytest.raises(ConfigError, match=r"rtt must be positive.*'-25ms'.*'25ms'"):
        parse_time("-25ms", field="rtt")
    with pytest.raises(ConfigError, match="size must be positive"):
        parse_size("-1KiB")


def test_errors_name_the_field_the_value_and_an_example():
    with pytest.raises(ConfigError, match=r"^rtt: cannot parse time 'fast'.*'25ms'"):
        parse_time("fast", field="rtt")
    with pytest.raises(ConfigError, match=r"^link_rate: cannot parse rate '10Gb'.*'400Gbit/s'"):
        parse_rate("10Gb", field="link_rate")
    with pytest.raises(ConfigError, match=r"^chunk_size: cannot parse size '64Kb'.*'64KiB'"):
        parse_size("64Kb", field="chunk_size")  # b is bits in rates: not a size unit


@pytest.mark.parametrize("parse", [parse_size, parse_rate, parse_time, parse_distance])
def test_integers_beyond_float_range_are_config_errors(parse):
    """TOML integers are unbounded: 10**400 is an error that names the value, not a crash."""
    with pytest.raises(ConfigError, match=r" 100000000000\.\.\. \(401 digits\) is out of range"):
        parse(10**400)


@pytest.mark.parametrize(
    ("text", "bps"),
    [("1G", 1e9), ("10M", 1e7), ("500k", 5e5), ("500K", 5e5), ("1g", 1e9), ("2T", 2e12)],
)
def test_rates_take_iperf3s_bare_prefixes_as_decimal_bits(text, bps):
    """``-b 1G`` is how iperf3 users write a rate: bits/s, decimal prefixes (a bare size
    prefix stays binary bytes: ``64K`` is 64 KiB, as in iperf3's ``-l``)."""
    assert parse_rate(text) == bps
    assert parse_size("64K") == 65536
    with pytest.raises(ConfigError, match="no unit"):
        parse_rate("10")  # a bare number is still ambiguous


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("2", 2.0), (2, 2.0), ("0.5", 0.5), ("2s", 2.0), ("500ms", 0.5), ("5min", 300.0)],
)
def test_seconds_take_bare_numbers_and_units(value, seconds):
    assert parse_seconds(value, field="--timeout") == seconds


@pytest.mark.parametrize("value", ["0", "-1", "-1s", "inf", "0ms"])
def test_seconds_refuse_what_is_not_a_positive_time(value):
    with pytest.raises(ConfigError, match=r"^--timeout .*expected a positive time"):
        parse_seconds(value, field="--timeout")
