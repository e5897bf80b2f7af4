"""Local misuse and remote protocol violations are told apart (as h11 does), and both
are still a ProtocolError."""

from __future__ import annotations

import pytest

import sdr
from sdr.backends.inproc import InprocTransport
from sdr.control import decode_cts
from sdr.errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from sdr.peer_info import field_int
from sdr.reliability.wire import decode_message
from sdr.transport import MAX_CONTROL_SIZE


def test_both_kinds_are_protocol_errors_and_exported() -> None:
    assert issubclass(LocalProtocolError, ProtocolError)
    assert issubclass(RemoteProtocolError, ProtocolError)
    assert not issubclass(LocalProtocolError, RemoteProtocolError)
    assert sdr.LocalProtocolError is LocalProtocolError
    assert sdr.RemoteProtocolError is RemoteProtocolError


@pytest.mark.parametrize(
    "parse",
    [
        lambda: decode_message(b"\x00" * 3),  # a runt reliability message
        lambda: decode_cts(b"\x01"),  # a runt CTS
        lambda: field_int({"port": "x"}, "port", 1, 65535),  # peer info of the wrong type
    ],
)
def test_what_comes_from_the_peer_is_remote(parse) -> None:
    with pytest.raises(RemoteProtocolError):
        parse()


def test_an_oversize_control_message_is_this_ends_mistake() -> None:
    transport = InprocTransport()
    qp = transport.create_qp(sdr.QPAttr())
    with pytest.raises(LocalProtocolError, match="control message of"):
        qp.send_control(b"x" * (MAX_CONTROL_SIZE + 1))
