"""Wireshark reads our loopback traffic as RoCEv2 UC RDMA Write Only with Immediate.

tshark captures a real transfer on ``lo``. Its InfiniBand dissector must decode every
data packet with our opcode, destination QPN, rkey, virtual address and immediate. Our
ICRC is checked against the bytes on the wire (the kernel's real IP header) in two ways:
the value Wireshark shows, and a CRC recomputed here from the captured frame. (Wireshark
4.0's dissector shows the ICRC but has no preference to validate it; if a newer tshark
offers a status field, it is asserted too.)
"""

from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

import sdr
from sdr.backends.udp import UdpTransport
from sdr.backends.udp.roce import ROCE_PORT

pytestmark = pytest.mark.skipif(
    shutil.which("tshark") is None, reason="tshark not installed (make system installs it)"
)
MTU = 1024


def _fields() -> set[str]:
    out = subprocess.run(["tshark", "-G", "fields"], capture_output=True, text=True).stdout
    return {line.split("\t")[2] for line in out.splitlines() if line.startswith("F\t")}


def _icrc_of_frame(frame: bytes) -> tuple[int, int]:
    """(ICRC carried, ICRC recomputed) of an Ethernet-framed RoCEv2 IPv4 packet."""
    ip = bytearray(frame[14:])
    ip = ip[: struct.unpack_from("!H", ip, 2)[0]]
    ihl = (ip[0] & 0x0F) * 4
    carried = struct.unpack_from("<I", ip, len(ip) - 4)[0]
    ip[1], ip[8] = 0xFF, 0xFF
    ip[10:12] = b"\xff\xff"
    ip[ihl + 6 : ihl + 8] = b"\xff\xff"
    ip[ihl + 12] = 0xFF
    return carried, zlib.crc32(b"\xff" * 8 + bytes(ip[:-4]))


def _pcap_frames(path: Path) -> list[bytes]:
    data = path.read_bytes()
    assert struct.unpack_from("<I", data)[0] == 0xA1B2C3D4, "expected a little-endian pcap"
    frames, off = [], 24
    while off + 16 <= len(data):
        incl = struct.unpack_from("<IIII", data, off)[2]
        frames.append(data[off + 16 : off + 16 + incl])
        off += 16 + incl
    return frames


def _ours(pcap: Path, host: str) -> list[bytes]:
    """Captured frames from ``host`` to the RoCEv2 port."""
    if not pcap.exists() or pcap.stat().st_size < 24:
        return []
    src = bytes(map(int, host.split(".")))
    frames = [f for f in _pcap_frames(pcap) if len(f) > 38 and f[26:30] == src]
    return [f for f in frames if struct.unpack_from("!H", f, 36)[0] == ROCE_PORT]


def _wait_until_capturing(pcap: Path, transport: UdpTransport, peer: str) -> None:
    """tshark says "Capturing" before the kernel filter is attached: probe until one shows."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        transport.control_socket.sendto(b"probe", (peer, 9))
        time.sleep(0.05)
        if pcap.exists() and pcap.stat().st_size > 24:  # past the pcap file header
            return
    pytest.fail("tshark captured nothing on lo within 20 s")


def test_tshark_decodes_roce_uc_write_imm_with_our_qpn_imm_and_icrc(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("capturing on lo needs root (or capture capabilities)")
    # private loopback addresses, so parallel runs and other traffic stay out of the capture
    third, fourth = os.getpid() % 200 + 20, 11
    a_host, b_host = f"127.{third}.{fourth}.1", f"127.{third}.{fourth}.2"
    pcap = tmp_path / "roce.pcap"
    cap = subprocess.Popen(
        ["tshark", "-i", "lo", "-F", "pcap", "-w", str(pcap), "-f", f"udp and host {a_host}"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
    )
    try:
        assert cap.stderr is not None
        line = b""
        while b"Capturing on" not in line:
            line = cap.stderr.readline()
            if not line:
                pytest.skip(f"tshark could not capture on lo (exit {cap.wait()})")
        # gso=False: a capture sees a GSO send before the kernel cuts it (as tcpdump shows
        # TCP TSO super-packets), and tshark would decode only its first packet
        ta = UdpTransport(host=a_host, gso=False)
        tb = UdpTransport(host=b_host)  # both on port 4791
        _wait_until_capturing(pcap, ta, b_host)
        with sdr.Context(backend=ta) as a, sdr.Context(backend=tb) as b:
            attr = sdr.QPAttr(mtu=MTU, chunk_size=MTU, max_message_size="64KiB")
            qa, qb = a.create_qp(attr), b.create_qp(attr)
            qa.connect(qb.info())
            qb.connect(qa.info())
            src = np.arange(3 * MTU + 5, dtype=np.uint32).view(np.uint8)[: 3 * MTU + 5].copy()
            dst = np.zeros_like(src)
            rh = qb.post_recv(b.register(dst))
            sh = qa.post_send(a.register(src), imm=0xC0FFEE42)
            for _ in range(100_000):
                if rh.record.arrived and sh.record.done:
                    break
                a.progress()
                b.progress()
            assert np.array_equal(src, dst) and rh.imm == 0xC0FFEE42
            gen = rh.record.generation
            our_qpns = set(qb.transport_qp.qpns[gen])
            rkey = qb.transport_qp.rkeys[gen]
            slot_base = rh.record.slot * attr.max_message_size
            msg_id = rh.record.msg_id
            sent = qa.transport_qp.stats["wire_packets_sent"]
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(_ours(pcap, a_host)) < sent:
            time.sleep(0.05)  # dumpcap writes as it reads from the kernel
    finally:
        cap.send_signal(signal.SIGINT)
        cap.wait(timeout=30)

    names = ["infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.reth.r_key"]
    names += ["infiniband.reth.va", "infiniband.reth.dmalen", "infiniband.immdt"]
    names += ["infiniband.invariant.crc", "udp.dstport"]
    status_field = "infiniband.invariant.crc.status"
    has_status = status_field in _fields()
    if has_status:
        names.append(status_field)
    cmd = ["tshark", "-r", str(pcap), "-Y", f"ip.src == {a_host} && infiniband", "-T", "fields"]
    for name in names:
        cmd += ["-e", name]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rows = [line.split("\t") for line in out.splitlines() if line.strip()]
    assert len(rows) == sent >= 4  # 4 data packets plus immediate-only ones
    frames = _ours(pcap, a_host)
    assert len(frames) == len(rows)
    immediates = []
    for row, frame in zip(rows, frames, strict=True):
        opcode, qpn, key, va, dmalen, immdt, icrc, port = row[:8]
        assert int(opcode) == 43  # UC RDMA WRITE Only with Immediate
        assert int(qpn, 16) in our_qpns and int(port) == ROCE_PORT
        assert int(key, 16) == rkey
        imm = int(immdt.split(",")[0], 16)
        immediates.append(imm)
        assert imm >> 22 == msg_id
        packet = (imm >> 4) & 0x3FFFF
        if int(dmalen):
            assert int(va, 16) == slot_base + packet * MTU
        carried, recomputed = _icrc_of_frame(frame)
        assert carried == recomputed, "ICRC does not match the bytes on the wire"
        # Wireshark shows the 4 ICRC bytes as a big-endian number
        assert int(icrc, 16) == int.from_bytes(struct.pack("<I", carried), "big")
        if has_status:
            assert row[8] in ("1", "Good")
    user = 0
    for imm in immediates:
        fragment, index = imm & 0xF, ((imm >> 4) & 0x3FFFF) % 8
        user |= fragment << (4 * index)
    assert user == 0xC0FFEE42  # Wireshark's immediates reassemble the user's immediate
