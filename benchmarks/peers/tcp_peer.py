"""Kernel TCP peer for side-by-side runs: send N bytes, report receiver-side completion.

    python -m benchmarks.peers.tcp_peer recv --bind 10.200.0.2 --port 5201 [--out FILE]
    python -m benchmarks.peers.tcp_peer send --to 10.200.0.2 --port 5201 --size 64MiB --cc bbr

The sender prints its start time (CLOCK_MONOTONIC, shared by every process on one host,
namespaces included) taken after the connection is up; the receiver prints the time the
last byte arrived and a SHA-256 of what it got. Completion = end - start, handshake
excluded (as for SDR, whose QPs are connected before timing starts). With ``--out`` the
receiver also writes what it gets into a new file, as ``sdr recv`` does: where fresh pages
are expensive (a VM whose balloon reports free pages to its host) that is most of a
receiver's CPU, and at rates that fill two cores it decides who keeps up.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import socket
import time

from sdr.units import parse_size

_BUF = 32 << 20


def payload(size: int) -> bytes:
    block = bytes(range(256)) * 4096
    return (block * (size // len(block) + 1))[:size]


def recv(bind: str, port: int, out: str | None = None) -> None:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _BUF)
    srv.bind((bind, port))
    srv.listen(1)
    srv.settimeout(120)
    print(json.dumps({"ready": True}), flush=True)
    conn, _ = srv.accept()
    digest, total, end = hashlib.sha256(), 0, 0.0
    buf = bytearray(4 << 20)
    sink = open(out, "xb", buffering=0) if out else None  # noqa: SIM115 - closed below
    try:
        while n := conn.recv_into(buf):
            block = memoryview(buf)[:n]
            digest.update(block)
            while sink is not None and block:
                block = block[sink.write(block) :]
            total += n
            end = time.monotonic()
    finally:
        if sink is not None:
            sink.close()
    print(json.dumps({"bytes": total, "end": end, "sha256": digest.hexdigest()}), flush=True)


def send(to: str, port: int, size: int, cc: str) -> None:
    data = payload(size)
    for _ in range(100):
        try:
            conn = socket.socket()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _BUF)
            conn.connect((to, port))
            break
        except ConnectionRefusedError:
            conn.close()
            time.sleep(0.05)
    start = time.monotonic()
    conn.sendall(data)
    conn.shutdown(socket.SHUT_WR)
    conn.recv(1)  # wait for the receiver to close: every byte was read
    print(
        json.dumps(
            {"start": start, "bytes": size, "cc": cc, "sha256": hashlib.sha256(data).hexdigest()}
        ),
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="kernel TCP peer")
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("recv")
    r.add_argument("--bind", default="0.0.0.0")
    r.add_argument("--port", type=int, default=5201)
    r.add_argument("--out", help="also write what arrives into this new file")
    s = sub.add_parser("send")
    s.add_argument("--to", required=True)
    s.add_argument("--port", type=int, default=5201)
    s.add_argument("--size", default="64MiB")
    s.add_argument("--cc", default="cubic", choices=["cubic", "bbr", "reno"])
    args = parser.parse_args()
    if args.cmd == "recv":
        recv(args.bind, args.port, args.out)
    else:
        send(args.to, args.port, parse_size(args.size), args.cc)


if __name__ == "__main__":
    main()
