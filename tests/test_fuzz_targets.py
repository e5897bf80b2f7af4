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
from seeds import seeds  # noqa: E402
from targets import TARGETS  # noqa: E402

SEEDS = seeds()


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_fuzz_target_survives_random_bytes(name):
    fn = TARGETS[name]

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.binary(max_size=2048))
    def run(data):
        fn(data)

    run()


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_fuzz_target_survives_mutated_seeds(name):
    """Valid inputs with a few bytes changed: these reach the deep checks."""
    fn = TARGETS[name]
    for seed in SEEDS[name]:
        fn(seed)

    @settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        st.sampled_from(SEEDS[name]),
        st.lists(st.tuples(st.integers(0, 4095), st.integers(0, 255)), max_size=6),
        st.integers(0, 4096),
    )
    def run(seed, edits, cut):
        data = bytearray(seed)
        for at, value in edits:
            if data:
                data[at % len(data)] = value
        fn(bytes(data[: max(cut, 1)] if cut < len(data) else data))

    run()


REGRESSIONS = {
    "qp_info": [
        b"[" * 5000,  # RecursionError from json
        b'{"version": 1, "backend": "inproc", "attr": "}2:{", "transport": {"": 1}}',
    ],
    "plan": [b"", b"[" * 5000, b"[1, 2]"],
    "reliability_config": [
        b"a = " + b"[" * 5000,
        b"rtt = " + b"6" * 400,  # OverflowError
        b"rtt = " + b"6" * 307,  # a finite RTT whose global timeout overflowed to inf
    ],
    "oob_frame": [b"[" * 5000],
    "cts": [bytes.fromhex("010101060005000300000000000000050000000000001000")],  # pad byte set
    "reliability_message": [bytes.fromhex("011201000100000000000000042b0000030000000305")],
    # an HMAC of non-ASCII text: compare_digest raised TypeError (auth.verify_info)
    "transfer_setup": [bytes.fromhex("0121004652edc0ac6710d02e6f7b86cc267f53ee2dc64bcee15c")],
    # a receive of no packets with kept checksums: the target built them as float64
    "arrivals_native": [bytes.fromhex("0a000600ff49")],
}


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_inputs_that_once_crashed_a_target(name):
    for data in REGRESSIONS[name]:
        TARGETS[name](data)


def test_targets_cover_the_parsers():
    assert {
        "cts",
        "cts_request",
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
        "offload_header",
        "loss_trace",
        "transfer_setup",
    } <= set(TARGETS)
