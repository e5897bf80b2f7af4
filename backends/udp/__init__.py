"""Software RoCEv2 over UDP: SDR packets as UC RDMA WRITE Only with Immediate (port 4791)."""

from sdr.backends.udp.qp import UdpQP
from sdr.backends.udp.transport import UdpTransport, loopback_pair

__all__ = ["UdpQP", "UdpTransport", "loopback_pair"]
