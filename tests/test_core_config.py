import pytest

import sdr
from sdr.errors import ConfigError
from sdr.units import parse_size


def test_defaults_are_the_papers():
    attr = sdr.QPAttr()
    assert (attr.mtu, attr.chunk_size, attr.max_message_size) == (4096, 65536, 8 << 20)
    assert attr.packets_per_chunk == 16
    assert attr.layout.fragments == 8


def test_units_accepted():
    attr = sdr.QPAttr(mtu="4KiB", chunk_size="64KiB", max_message_size="1GiB", rate_limit="1Gbit/s")
    assert attr.max_message_size == 1 << 30
    assert attr.rate_limit == 1e9


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"chunk_size": 5000}, "multiple of the mtu"),
        ({"mtu": 16}, "mtu"),
        ({"max_message_size": "2GiB"}, "8\\+22\\+2"),
        ({"max_messages": 2000}, "max_messages"),
        ({"channels": 0}, "channels"),
        ({"generations": 17}, "generations"),
        ({"rate_limit": "0Gbit/s"}, "rate_limit"),
        ({"id_bits": 9}, "add up to 32"),
        ({"max_messages": 1.5}, "integer"),
    ],
)
def test_invalid_attributes_are_clear(changes, match):
    with pytest.raises(ConfigError, match=match):
        sdr.QPAttr(**changes)


def test_bigger_messages_with_another_split():
    attr = sdr.QPAttr(max_message_size="8GiB", max_messages=256, id_bits=8, offset_bits=22,
                      user_imm_bits=2)  # fmt: skip
    assert attr.layout.max_packets * attr.mtu >= 8 << 30


def test_unknown_backend():
    with pytest.raises(sdr.BackendNotFound, match="inproc"):
        sdr.Context(backend="no-such-backend")
    assert "inproc" in sdr.available_backends()


def test_suggested_chunk_size_parses_and_works():
    """The suggestion was format_size(mtu * 16) = '46.88KiB', which parse_size refuses."""
    with pytest.raises(ConfigError, match="multiple of the mtu") as info:
        sdr.QPAttr(mtu=3000, chunk_size=5000)
    suggestion = str(info.value).rsplit("e.g. ", 1)[1].strip("'")
    assert parse_size(suggestion) == 48000
    assert sdr.QPAttr(mtu=3000, chunk_size=suggestion).chunk_size == 48000


def test_unit_errors_name_the_attribute():
    with pytest.raises(ConfigError, match=r"^rate_limit: rate '10' has no unit.*'10Gbit/s'"):
        sdr.QPAttr(rate_limit="10")
    with pytest.raises(ConfigError, match=r"^mtu: cannot parse size '4 kb'"):
        sdr.QPAttr(mtu="4 kb")
    assert sdr.QPAttr(mtu="4K", chunk_size="64K", rate_limit="10Gb/s").chunk_size == 65536
