"""A short run of every fuzz target (tools/fuzz) on random and structured inputs.

The long runs use atheris (``python tools/fuzz/run.py TARGET -runs=10000000``); here each
target gets a few hundred hypothesis inputs so a regression shows up in CI.
"""

import pathlib
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tools" / "fuzz"))
from targets import TARGETS  # noqa: E402


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_fuzz_target_survives_random_bytes(name):
    fn = TARGETS[name]

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.binary(max_size=2048))
    def run(data):
        fn(data)

    run()


def test_targets_cover_the_parsers():
    assert {
        "cts",
        "qp_info",
        "qp_attr",
        "completions",
        "key_table",
        "roce_decode",
        "udp_receive",
        "reliability_message",
        "reliability_config",
        "plan",
        "units",
        "oob_frame",
    } <= set(TARGETS)
