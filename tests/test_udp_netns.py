"""UDP backend across two network namespaces joined by veth, driven by ``sdr write-bw``."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
from netns import VethLink, netns_available, veth_pair
from server_client import client_after_server

pytestmark = pytest.mark.root

_REASON = netns_available()


@pytest.fixture
def link() -> Iterator[VethLink]:
    if _REASON:
        pytest.skip(_REASON)
    with veth_pair(mtu=9000) as created:
        yield created


def _write_bw(link: VethLink, *client_args: str) -> dict:
    cli = [sys.executable, "-m", "sdr.cli.main", "write-bw"]
    server = link.popen(
        "a",
        [*cli, "--bind", link.a_addr, "--port", "18515", "--json", "--timeout", "3s"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    client, out = client_after_server(
        server,
        lambda: link.run("b", [*cli, link.a_addr, "--port", "18515", "--json", *client_args]),
    )
    result = json.loads(client.stdout.strip().splitlines()[-1])
    assert json.loads(out.strip().splitlines()[-1]) == result  # both sides agree
    return result


def test_write_bw_across_namespaces_bit_exact(link: VethLink) -> None:
    result = _write_bw(link, "-s", "100000", "-n", "40", "-m", "4KiB", "-q", "2", "--verify")
    server, client = result["server"], result["client"]
    assert server["completed"] == 40 == client["completed"]
    assert server["mismatched"] == 0
    c = server["counters"]
    assert c["bytes_placed"] == 40 * 100000
    assert c["packets_placed"] == client["counters"]["wire_packets_sent"]
    assert c["bad_icrc"] == c["bad_rkey"] == c["late"] == c["out_of_range"] == 0


def test_rate_limited_write_across_namespaces(link: VethLink) -> None:
    result = _write_bw(
        link, "-s", "256KiB", "-n", "20", "-m", "8KiB", "--rate", "500Mbit/s", "--verify"
    )
    server = result["server"]
    assert server["completed"] == 20 and server["mismatched"] == 0
    assert server["counters"]["packets_placed"] == 20 * 32
