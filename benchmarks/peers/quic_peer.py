"""QUIC peer (aioquic) for side-by-side runs: one stream of N bytes, receiver-side times.

    python -m benchmarks.peers.quic_peer recv --bind 10.200.0.2 --port 4433
    python -m benchmarks.peers.quic_peer send --to 10.200.0.2 --port 4433 --size 8MiB --cc cubic

Datagrams up to 8972 bytes (MTU 9000), flow-control windows of 1 GiB so the windows never
limit; a self-signed certificate is made at start-up. The sender's start time is taken
after the handshake (CLOCK_MONOTONIC, shared by every process on one host).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import hashlib
import json
import tempfile
import time

from aioquic.asyncio import QuicConnectionProtocol, connect, serve
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import StreamDataReceived
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from benchmarks.peers.tcp_peer import payload
from sdr.units import parse_size

ALPN = ["sdr-bench"]
WINDOW = 1 << 30


def _config(is_client: bool, cc: str) -> QuicConfiguration:
    return QuicConfiguration(
        is_client=is_client,
        alpn_protocols=ALPN,
        max_datagram_size=8972,
        max_data=WINDOW,
        max_stream_data=WINDOW,
        idle_timeout=60,
        congestion_control_algorithm=cc,
    )


def _self_signed(directory: str) -> tuple[str, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sdr-bench")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = f"{directory}/cert.pem", f"{directory}/key.pem"
    with open(cert_path, "wb") as fh:
        fh.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as fh:
        fh.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return cert_path, key_path


class _Sink(QuicConnectionProtocol):
    done: asyncio.Future[dict[str, object]]

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._digest, self._bytes = hashlib.sha256(), 0

    def quic_event_received(self, event: object) -> None:
        if isinstance(event, StreamDataReceived):
            self._digest.update(event.data)
            self._bytes += len(event.data)
            if event.end_stream and not _Sink.done.done():
                _Sink.done.set_result(
                    {
                        "bytes": self._bytes,
                        "end": time.monotonic(),
                        "sha256": self._digest.hexdigest(),
                    }
                )
                self._quic.send_stream_data(event.stream_id, b"ok", end_stream=True)
                self.transmit()


async def _recv(bind: str, port: int, cc: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config = _config(False, cc)
        config.load_cert_chain(*_self_signed(tmp))
        _Sink.done = asyncio.get_running_loop().create_future()
        server = await serve(bind, port, configuration=config, create_protocol=_Sink)
        print(json.dumps({"ready": True}), flush=True)
        result = await asyncio.wait_for(_Sink.done, 300)
        await asyncio.sleep(0.2)  # let the "ok" reach the sender
        server.close()
        print(json.dumps(result), flush=True)


async def _send(to: str, port: int, size: int, cc: str) -> None:
    import ssl

    config = _config(True, cc)
    config.verify_mode = ssl.CERT_NONE
    data = payload(size)
    async with connect(to, port, configuration=config) as client:
        await client.wait_connected()
        start = time.monotonic()
        reader, writer = await client.create_stream()
        writer.write(data)
        writer.write_eof()
        await reader.read()  # the receiver's "ok": every byte arrived
    print(
        json.dumps(
            {"start": start, "bytes": size, "cc": cc, "sha256": hashlib.sha256(data).hexdigest()}
        ),
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="QUIC (aioquic) peer")
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("recv")
    r.add_argument("--bind", default="0.0.0.0")
    r.add_argument("--port", type=int, default=4433)
    r.add_argument("--cc", default="cubic")
    s = sub.add_parser("send")
    s.add_argument("--to", required=True)
    s.add_argument("--port", type=int, default=4433)
    s.add_argument("--size", default="8MiB")
    s.add_argument("--cc", default="cubic", choices=["cubic", "reno"])
    args = parser.parse_args()
    if args.cmd == "recv":
        asyncio.run(_recv(args.bind, args.port, args.cc))
    else:
        asyncio.run(_send(args.to, args.port, parse_size(args.size), args.cc))


if __name__ == "__main__":
    main()
