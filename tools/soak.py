"""Soak test: reliable messages between two processes across an impaired emulated link.

    sudo .venv/bin/python tools/soak.py --minutes 30 --out soak.json --png soak.png

Two processes, one in each network namespace of a :class:`sdr.backends.wan.TunLink`, talk
over the UDP backend (software RoCEv2). Every scheme (sr-rto, sr-nack, ec-mds, ec-xor)
has its own QP; messages of varied sizes go round-robin over them with a few in flight
per scheme. The link loses packets at random and in bursts (Gilbert-Elliott), reorders,
duplicates and corrupts them, and goes dark periodically. The receiver checks every
completed message byte for byte against what the sender wrote; both sides sample their
counters and resident memory every few seconds. The result (JSON, and a PNG of memory
and throughput over time) says how many messages were sent, completed, verified, failed
and corrupted, and how memory moved after warm-up.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing as mp
import os
import pathlib
import socket
import sys
import time
from multiprocessing.connection import Connection, wait
from typing import Any

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "tools"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from soak_report import plot, summarize  # noqa: E402

__all__ = ["SoakConfig", "run_soak", "plot", "summarize"]

SCHEMES = ("sr-rto", "sr-nack", "ec-mds", "ec-xor")
SIZES = (4096, 100_000, 1 << 20, (3 << 20) + 17)
_BLOCK = 8 << 20
_PAGE = os.sysconf("SC_PAGE_SIZE")
_SO_NO_CHECK = 11  # Linux: send UDP/IPv4 with checksum 0 (not checked by the receiver)


@dataclasses.dataclass
class SoakConfig:
    """What the soak runs. Times in seconds, rates in bits/s."""

    duration: float = 1800.0
    rate: float = 200e6
    rtt: float = 0.02
    queue: int = 4 << 20  # bytes of link buffer (the pacers' bursts of 4 QPs fit)
    loss_good: float = 5e-4  # random loss outside bursts
    burst_start: float = 2e-4  # per packet: chance a loss burst starts
    burst_len: float = 5.0  # mean packets lost per burst
    reorder: float = 0.01
    duplicate: float = 0.005
    corrupt: float = 0.002
    blackout_every: float = 60.0
    blackout_for: float = 1.5
    window: int = 2  # reliable messages in flight per scheme
    global_timeout: float = 20.0
    sample_every: float = 5.0
    udp_checksum: bool = False  # off: corruption reaches SDR's own checks, not the kernel's
    seed: int = 1

    def link_spec(self) -> Any:
        """The LinkSpec of one direction."""
        from sdr.backends.wan import LinkSpec
        from sdr.simulator.loss import GilbertElliott

        loss = GilbertElliott(self.burst_start, 1.0 / self.burst_len, self.loss_good, 1.0)
        starts = np.arange(self.blackout_every, self.duration + 60.0, self.blackout_every)
        blackouts = tuple((float(s), float(s + self.blackout_for)) for s in starts)
        return LinkSpec(
            rate=self.rate,
            rtt=self.rtt,
            queue=self.queue,
            loss=loss,
            reorder=self.reorder,
            reorder_delay="2ms",
            duplicate=self.duplicate,
            corrupt=self.corrupt,
            blackouts=blackouts if self.blackout_for > 0 else (),
            seed=self.seed,
        )


def message_size(seed: int, scheme: int, seq: int) -> int:
    """Size of reliable message ``seq`` of scheme ``scheme`` (both sides agree)."""
    return SIZES[int(np.random.default_rng([seed, scheme, seq]).integers(len(SIZES)))]


def payload(block: np.ndarray, scheme: int, seq: int, size: int) -> np.ndarray:
    """The bytes of that message: a slice of a random block, mixed with the message id."""
    start = ((seq * 7919 + scheme * 104_729) * 4096) % (len(block) - size)
    return np.bitwise_xor(block[start : start + size], np.uint8((seq * 31 + scheme) & 0xFF))


def rss_bytes() -> int:
    """Resident set size of this process."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * _PAGE


# --- one side ----------------------------------------------------------------------------


class _Side:
    """One process's QPs, messages in flight and tallies."""

    def __init__(self, role: str, cfg: SoakConfig, host: str, parent: Connection) -> None:
        import sdr
        from sdr.backends.udp import UdpTransport

        self.role, self.cfg, self.parent = role, cfg, parent
        self.ctx = sdr.Context(UdpTransport(host=host, port=0))
        attr = sdr.QPAttr(
            mtu=8192,
            chunk_size="64KiB",
            max_message_size="4MiB",
            max_messages=31,
            channels=2,
            rate_limit=cfg.rate / len(SCHEMES) * 0.8,
        )
        if not cfg.udp_checksum:  # let corrupted datagrams reach the ICRC and chunk CRCs
            for sock in (self.ctx.transport.data_socket, self.ctx.transport.control_socket):
                sock.setsockopt(socket.SOL_SOCKET, _SO_NO_CHECK, 1)
        self.qps = [self.ctx.create_qp(attr) for _ in SCHEMES]
        self.block = np.random.default_rng(cfg.seed).integers(0, 256, _BLOCK, dtype=np.uint8)
        self.flight: list[list[tuple[int, Any, np.ndarray]]] = [[] for _ in SCHEMES]
        self.next_seq = [0] * len(SCHEMES)
        self.tally = dict(started=0, completed=0, failed=0, verified=0, corrupt=0, bytes=0)
        self.errors: dict[str, int] = {}
        self.messages: list[str] = []  # the first few failures, verbatim
        self.rqps: list[Any] = []
        self.start = 0.0
        self.last_sample = 0.0
        self.stop_at: float | None = None

    def connect(self, infos: list[bytes]) -> None:
        from sdr.runtime import ReliableQP

        for qp, info in zip(self.qps, infos, strict=True):
            qp.connect(info)
        self.rqps = [
            ReliableQP(
                qp,
                scheme,
                rtt=self.cfg.rtt,
                k=16,
                m=4,
                global_timeout=self.cfg.global_timeout,
                max_in_flight=self.cfg.window,
            )
            for qp, scheme in zip(self.qps, SCHEMES, strict=True)
        ]

    def _issue(self, s: int) -> None:
        seq = self.next_seq[s]
        self.next_seq[s] += 1
        size = message_size(self.cfg.seed, s, seq)
        rqp = self.rqps[s]
        if self.role == "send":
            buf = payload(self.block, s, seq, size)
            handle = rqp.write(self.ctx.register(buf))
        else:
            buf = np.zeros(size, dtype=np.uint8)
            handle = rqp.post_recv(self.ctx.register(buf))
        self.flight[s].append((seq, handle, buf))
        self.tally["started"] += 1

    def _reap(self, s: int) -> None:
        keep = []
        for seq, handle, buf in self.flight[s]:
            if not handle.finished:
                keep.append((seq, handle, buf))
                continue
            if handle.error is not None:
                self.tally["failed"] += 1
                name = type(handle.error).__name__
                self.errors[name] = self.errors.get(name, 0) + 1
                if len(self.messages) < 10:
                    self.messages.append(f"{SCHEMES[s]} seq {seq}: {handle.error}")
                continue
            self.tally["completed"] += 1
            self.tally["bytes"] += len(buf)
            if self.role == "recv":
                good = np.array_equal(buf, payload(self.block, s, seq, len(buf)))
                self.tally["verified" if good else "corrupt"] += 1
        self.flight[s] = keep

    def tick(self) -> bool:
        """Bookkeeping between progress rounds; True when this side is done."""
        now = time.monotonic()
        for s in range(len(SCHEMES)):
            self._reap(s)
            issuing = (
                self.stop_at is None
                if self.role == "recv"
                else now < self.start + self.cfg.duration
            )
            while issuing and len(self.flight[s]) < self.cfg.window + (self.role == "recv"):
                self._issue(s)
        if now - self.last_sample >= self.cfg.sample_every:
            self.last_sample = now
            self.parent.send(("sample", self.sample(now)))
        if self.role == "send":
            return now >= self.start + self.cfg.duration and not any(self.flight)
        if self.stop_at is None and self.parent.poll():
            self.stop_at = now + self.cfg.global_timeout
            self.target = self.parent.recv()[1]
        if self.stop_at is None:
            return False
        done = self.tally["completed"] + self.tally["failed"]
        return done >= self.target or now >= self.stop_at

    def sample(self, now: float) -> dict[str, Any]:
        counters: dict[str, int] = {}
        for qp, rqp in zip(self.qps, self.rqps, strict=True):
            for key, value in {**qp.counters(), **rqp.counters}.items():
                counters[key] = counters.get(key, 0) + int(value)
        return {
            "t": round(now - self.start, 3),
            "rss": rss_bytes(),
            "in_flight": sum(len(f) for f in self.flight),
            **self.tally,
            "errors": dict(self.errors),
            "error_messages": list(self.messages),
            "counters": counters,
        }


def _peer(role: str, cfg: SoakConfig, ns: str, host: str, parent: Connection) -> None:
    from sdr.backends.wan import enter_namespace
    from sdr.runtime.handles import drive

    try:
        enter_namespace(ns)
        side = _Side(role, cfg, host, parent)
        parent.send(("info", [qp.info() for qp in side.qps]))
        side.connect(parent.recv())
        side.start = time.monotonic()
        limit = cfg.duration + 10 * cfg.global_timeout + 60
        drive(side.rqps, side.tick, limit, f"soak {role}")
        parent.send(("final", side.sample(time.monotonic())))
        side.ctx.close()
    except BaseException as exc:  # report, do not die silently
        parent.send(("error", f"{role}: {exc!r}"))


# --- the driver -----------------------------------------------------------------------------


def run_soak(cfg: SoakConfig, progress: Any = None) -> dict[str, Any]:
    """Run one soak; returns samples of both sides, final tallies and the link's summary."""
    from sdr.backends.wan import TunLink, reverse_of

    spec = cfg.link_spec()
    ctx = mp.get_context("fork")
    result: dict[str, Any] = {
        "config": dataclasses.asdict(cfg),
        "samples": {"send": [], "recv": []},
    }
    wall = time.monotonic()
    with TunLink(spec, reverse_of(spec)) as link:
        conns, procs = {}, {}
        for role, ns, host in (("recv", link.ns_b, link.addr_b), ("send", link.ns_a, link.addr_a)):
            here, there = ctx.Pipe()
            proc = ctx.Process(target=_peer, args=(role, cfg, ns, host, there), daemon=True)
            proc.start()
            conns[role], procs[role] = here, proc
        try:
            _exchange(conns)
            _collect(cfg, conns, procs, result, progress)
        finally:
            for proc in procs.values():
                proc.join(10)
                if proc.is_alive():
                    proc.kill()
    result["link"] = link.summary
    result["wall_s"] = round(time.monotonic() - wall, 1)
    result["summary"] = summarize(result)
    return result


def _receive(conn: Connection, kind: str, timeout: float = 60.0) -> Any:
    if not conn.poll(timeout):
        raise TimeoutError(f"soak peer sent no {kind} within {timeout} s")
    tag, body = conn.recv()
    if tag == "error":
        raise RuntimeError(body)
    assert tag == kind, (tag, kind)
    return body


def _exchange(conns: dict[str, Connection]) -> None:
    infos = {role: _receive(conn, "info") for role, conn in conns.items()}
    conns["send"].send(infos["recv"])
    conns["recv"].send(infos["send"])


def _collect(
    cfg: SoakConfig, conns: dict[str, Connection], procs: dict, result: dict, progress: Any
) -> None:
    finals: dict[str, Any] = {}
    deadline = time.monotonic() + cfg.duration + 12 * cfg.global_timeout + 120
    by_conn = {id(c): role for role, c in conns.items()}
    while len(finals) < 2:
        if time.monotonic() > deadline:
            raise TimeoutError("soak did not finish in time")
        for conn in wait(list(conns.values()), timeout=5.0):
            role = by_conn[id(conn)]
            try:
                tag, body = conn.recv()
            except EOFError:
                raise RuntimeError(f"soak {role} process died") from None
            if tag == "error":
                raise RuntimeError(body)
            if tag == "sample":
                result["samples"][role].append(body)
                if progress:
                    progress(role, body)
            elif tag == "final":
                finals[role] = body
                result["samples"][role].append(body)
                if role == "send":  # the receiver finishes what the sender finished
                    done = body["completed"] + body["failed"]
                    conns["recv"].send(("stop", done))
    result["final"] = finals


def main(argv: list[str] | None = None) -> int:
    """CLI: run a soak, write JSON (and a PNG), print the summary; 1 on a corrupt message."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("soak.json"))
    parser.add_argument("--png", type=pathlib.Path, default=None)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--blackout-every", type=float, default=60.0)
    parser.add_argument("--blackout-for", type=float, default=1.5)
    args = parser.parse_args(argv)
    cfg = SoakConfig(
        duration=args.minutes * 60,
        seed=args.seed,
        blackout_every=args.blackout_every,
        blackout_for=args.blackout_for,
    )

    def progress(role: str, sample: dict) -> None:
        print(
            f"{sample['t']:8.0f} s {role:<4} rss {sample['rss'] / 2**20:7.1f} MiB  "
            f"completed {sample['completed']:6d} failed {sample['failed']:4d} "
            f"corrupt {sample['corrupt']}",
            flush=True,
        )

    result = run_soak(cfg, progress)
    result["command"] = " ".join(["tools/soak.py", *(argv or sys.argv[1:])])
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    if args.png:
        plot(result, args.png)
    print(json.dumps(result["summary"], indent=2))
    return 1 if any(s.get("corrupt") for s in result["summary"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
