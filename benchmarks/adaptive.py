"""Adaptive scheme selection against every fixed scheme on a link whose loss changes.

Each run sends ``--messages`` reliable writes of ``--size`` bytes from namespace A to B
over a fresh TunLink (WAN emulator, root) whose forward loss follows a schedule of
(packets, drop rate) phases, e.g. 1e-6 for 10,000 packets, then 1e-2 for 10,000, then 1e-4
(``--phases 10000:1e-6,10000:1e-2,0:1e-4``). The reverse direction (ACKs, NACKs, CTS) drops
``--reverse-loss``. Sender and receiver are separate processes (real sockets, the UDP
backend); the total time is the sender's, from the first write to the last ACK. Runs go
one after another in the same invocation: sr-rto, sr-nack, ec-mds, ec-xor (k, m from
``--k/--m``) and adaptive (candidates: all four, plus MDS at k/2 parity), with the same
seeds. Phases count forward packets, so a scheme that sends more bytes per message (EC)
reaches the next phase after fewer messages. Needs root.

    python -m benchmarks.adaptive --size 2MiB --messages 120 --json out/adaptive.json

Writes are dependent (``--in-flight 1``: each starts when the previous is acknowledged, as
the stages of a ring allreduce): the per-message completion time the selector predicts is
what adds up. With deep pipelining SR's repair delays hide behind later messages.
"""

from __future__ import annotations

import argparse
import json
import platform
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import sdr
from sdr.units import parse_rate, parse_size

ROOT = Path(__file__).resolve().parents[1]
FIXED = ("sr-rto", "sr-nack", "ec-mds", "ec-xor")
_PORT = 18620


def _candidates(k: int, m: int) -> list[Any]:
    from sdr.adaptive import Candidate

    return [
        Candidate("sr-nack"),
        Candidate("sr-rto"),
        Candidate("ec-mds", k, m),
        Candidate("ec-mds", k, max(1, m // 2)),
        Candidate("ec-xor", k, m),
    ]


def _setup(args: argparse.Namespace, peer: str) -> tuple[Any, Any, Any]:
    from sdr.backends import oob
    from sdr.backends.udp import UdpTransport
    from sdr.runtime import ReliableQP

    size = parse_size(args.size)
    attr = sdr.QPAttr(
        mtu=8192,
        chunk_size=args.chunk,
        max_message_size=size,
        max_messages=63,  # odd: see sdr.id_reuse
        channels=2,
        rate_limit=args.rate,
    )
    if args.role == "send":
        sock = oob.connect(peer, _PORT)
    else:
        srv = oob.listen(peer, _PORT)
        print("listening", flush=True)
        sock, _ = srv.accept()
        srv.close()
    host = sock.getsockname()[0]
    ctx = sdr.Context(UdpTransport(host=host, port=0))
    qp = ctx.create_qp(attr)
    oob.send_obj(sock, qp.info().decode())
    qp.connect(oob.recv_obj(sock).encode())
    config, policy = _reliability(args, args.scheme, sender=args.role == "send")
    return ctx, ReliableQP(qp, config, adaptive=policy), sock


def _reliability(args: argparse.Namespace, scheme: str, sender: bool) -> tuple[Any, Any]:
    """The reliability config and, for ``adaptive``, the policy of one end."""
    from sdr.adaptive import AdaptivePolicy, LinkEstimator
    from sdr.reliability import ReliabilityConfig

    config = ReliabilityConfig(
        scheme="sr-nack" if scheme == "adaptive" else scheme,
        rtt=args.rtt,
        link_rate=args.rate,
        k=args.k,
        m=args.m,
        max_in_flight=args.in_flight,
    )
    if scheme != "adaptive":
        return config, None
    selector = None
    if sender:
        from sdr.simulator.adaptive_select import analytic_selector

        selector = analytic_selector(
            link_rate=args.rate, rtt=args.rtt, mtu=8192, chunk_size=args.chunk
        )
    policy = AdaptivePolicy(
        selector,
        _candidates(args.k, args.m),
        interval=args.interval,
        gain=args.gain,
        estimator=LinkEstimator(half_life_chunks=args.half_life),
    )
    return config, policy


def _policy_report(policy: Any, start: float) -> dict[str, Any]:
    if policy is None:
        return {}
    return {
        "switches": [
            {"t": s.time - start, "from": s.old.label(), "to": s.new.label(), "why": s.reason}
            for s in policy.switches
        ],
        "choices": {c.label(): n for c, n in policy.choices.items()},
        "evaluations": policy.evaluations,
        "final_estimate": policy.estimator.estimate().describe(),
        "last_scores_ms": {c.label(): v * 1e3 for c, v in policy.last_scores.items()},
    }


def _payload(size: int) -> np.ndarray:
    return np.random.default_rng(7).integers(0, 256, size, dtype=np.uint8)


def role_send(args: argparse.Namespace) -> None:
    """Write the messages, report the total and per-message times as one JSON line."""
    from sdr.backends import oob
    from sdr.runtime.handles import drive

    ctx, rqp, sock = _setup(args, args.peer)
    try:
        mr = ctx.register(_payload(parse_size(args.size)))
        oob.recv_obj(sock)  # receiver posted
        start = time.monotonic()
        handles = [rqp.write(mr) for _ in range(args.messages)]
        done: dict[int, float] = {}

        def finished() -> bool:
            for i, h in enumerate(handles):
                if i not in done and h.finished:
                    done[i] = time.monotonic() - start
            return len(done) == len(handles)

        drive([rqp], finished, args.timeout, "adaptive benchmark sends")
        total = time.monotonic() - start
        for h in handles:
            h._check()
        oob.send_obj(sock, {"done": True})
        verdict = oob.recv_obj(sock)
        policy = rqp.adaptive
        out: dict[str, Any] = {
            "scheme": args.scheme,
            "total_s": total,
            "finish_s": [done[i] for i in range(len(handles))],
            "retransmissions": sum(h.retransmissions for h in handles),
            "intact": verdict["intact"],
            "wire_bytes": rqp.qp.counters()["bytes_sent"],
        }
        out.update(_policy_report(policy, start))
        print(json.dumps(out), flush=True)
    finally:
        ctx.close()
        sock.close()


def role_recv(args: argparse.Namespace) -> None:
    """Post the receives into a ring of buffers; check every message's bytes."""
    from sdr.backends import oob
    from sdr.runtime.handles import drive

    ctx, rqp, sock = _setup(args, args.peer)
    try:
        size = parse_size(args.size)
        expected = _payload(size)
        ring = [np.zeros(size, dtype=np.uint8) for _ in range(40)]
        mrs = [ctx.register(b) for b in ring]
        handles = [rqp.post_recv(mrs[i % len(ring)]) for i in range(args.messages)]
        oob.send_obj(sock, {"posted": True})
        checked = [False] * len(handles)
        bad = 0

        def finished() -> bool:
            nonlocal bad
            for i, h in enumerate(handles):
                if not checked[i] and h.finished:
                    checked[i] = True
                    bad += int(not np.array_equal(ring[i % len(ring)], expected))
            return all(checked)

        drive([rqp], finished, args.timeout, "adaptive benchmark receives")
        # keep acknowledging until the sender has every ACK (a last one may be lost)
        drive([rqp], lambda: bool(select.select([sock], [], [], 0)[0]), args.timeout, "sender")
        oob.recv_obj(sock)
        oob.send_obj(sock, {"intact": bad == 0})
    finally:
        ctx.close()
        sock.close()


def _schedule(args: argparse.Namespace) -> Any:
    from sdr.simulator.loss import Bernoulli, Schedule

    phases = [x.split(":") for x in args.phases.split(",")]
    if args.phase_unit == "seconds":  # one packet per phase: the driver picks it by time
        return Schedule([(1, Bernoulli(float(p))) for _, p in phases])
    return Schedule([(int(float(n)), Bernoulli(float(p))) for n, p in phases])


def run_inproc(scheme: str, args: argparse.Namespace) -> dict[str, Any]:
    """The same run over the in-process wire with a simulated clock: the real protocol
    code, the modelled link's times, independent of this machine's load."""
    from sdr.backends.inproc import InprocNetwork, InprocTransport, ManualClock
    from sdr.runtime import ReliableQP, drive
    from sdr.units import parse_time

    schedule, loss_rng = _schedule(args), np.random.default_rng(args.seed + 7)
    clock = ManualClock()
    ends = np.cumsum([float(x.split(":")[0]) for x in args.phases.split(",")][:-1])
    start = 0.0  # phases in seconds of simulated time from the first write
    sent_packets = [0]

    class ScheduledNetwork(InprocNetwork):
        """Forward data packets lose by the schedule (per packet or by simulated time)."""

        def send(self, dst: int, item: Any, control: bool = False) -> None:
            if not control:
                sent_packets[0] += 1
                if args.phase_unit == "seconds":
                    phase = int(np.searchsorted(ends, clock.t - start, side="right"))
                    schedule.position = int(sum(n for n, _ in schedule.phases[:phase]))
                if schedule.drop(loss_rng):
                    return
            super().send(dst, item, control)

    rtt = parse_time(args.rtt)
    net = ScheduledNetwork(
        seed=args.seed, clock=clock, delay=rtt / 2, control_drop=args.reverse_loss
    )
    size = parse_size(args.size)
    attr = sdr.QPAttr(
        mtu=8192, chunk_size=args.chunk, max_message_size=size, max_messages=63,
        channels=2, rate_limit=args.rate,
    )  # fmt: skip
    a, b = sdr.Context(InprocTransport(net)), sdr.Context(InprocTransport(net))
    qa, qb = a.create_qp(attr), b.create_qp(attr)
    qa.connect(qb.info())
    qb.connect(qa.info())
    s_cfg, s_policy = _reliability(args, scheme, sender=True)
    r_cfg, r_policy = _reliability(args, scheme, sender=False)
    s, r = ReliableQP(qa, s_cfg, adaptive=s_policy), ReliableQP(qb, r_cfg, adaptive=r_policy)
    payload = _payload(size)
    ring = [np.zeros(size, dtype=np.uint8) for _ in range(40)]
    rmrs = [b.register(x) for x in ring]
    rhs = [r.post_recv(rmrs[i % len(ring)]) for i in range(args.messages)]
    drive([s, r], lambda: clock.t >= rtt, what="CTS")  # receives posted ahead
    start = clock.t
    smr = a.register(payload)
    whs = [s.write(smr) for _ in range(args.messages)]
    done: dict[int, float] = {}
    bad = 0

    def finished() -> bool:
        nonlocal bad
        for i, (wh, rh) in enumerate(zip(whs, rhs, strict=True)):
            if i not in done and wh.finished and rh.finished:
                done[i] = clock.t - start
                bad += int(not np.array_equal(ring[i % len(ring)], payload))
        return len(done) == len(whs)

    drive([s, r], finished, timeout=1e6, what="messages")
    out: dict[str, Any] = {
        "scheme": scheme,
        "total_s": max(done.values()),
        "finish_s": [done[i] for i in range(len(whs))],
        "retransmissions": sum(h.retransmissions for h in whs),
        "intact": bad == 0,
        "wire_bytes": qa.counters()["bytes_sent"],
        "link": {"forward_packets": sent_packets[0]},
    }
    out.update(_policy_report(s_policy, start))
    return out


def run_one(scheme: str, args: argparse.Namespace) -> dict[str, Any]:
    """One transfer of every message with ``scheme`` over a fresh link."""
    if args.link == "inproc":
        return run_inproc(scheme, args)
    from sdr.backends.wan import LinkSpec, TunLink, netns_exec

    spec = LinkSpec(rate=args.rate, rtt=args.rtt, loss=_schedule(args), seed=args.seed)

    reverse = LinkSpec(rate=args.rate, rtt=args.rtt, loss=args.reverse_loss, seed=args.seed + 1)
    common = [
        "--scheme", scheme, "--size", args.size, "--messages", str(args.messages),
        "--rate", args.rate, "--rtt", args.rtt, "--chunk", args.chunk, "--k", str(args.k),
        "--m", str(args.m), "--in-flight", str(args.in_flight), "--timeout", str(args.timeout),
        "--interval", str(args.interval), "--gain", str(args.gain),
        "--half-life", str(args.half_life),
    ]  # fmt: skip
    with TunLink(spec, reverse, mtu=9000) as link:
        py = [sys.executable, "-m", "benchmarks.adaptive"]
        recv = subprocess.Popen(
            netns_exec(link.ns_b, *py, "--role", "recv", "--peer", link.addr_b, *common),
            stdout=subprocess.PIPE, text=True, cwd=ROOT,
        )  # fmt: skip
        try:
            assert recv.stdout is not None
            recv.stdout.readline()  # "listening"
            send = subprocess.run(
                netns_exec(link.ns_a, *py, "--role", "send", "--peer", link.addr_b, *common),
                capture_output=True, text=True, cwd=ROOT, timeout=args.timeout + 30,
            )  # fmt: skip
            recv.wait(30)
        finally:
            if recv.poll() is None:
                recv.kill()
        if send.returncode != 0:
            raise RuntimeError(f"{scheme} sender failed: {send.stderr[-2000:]}")
    result = json.loads(send.stdout.strip().splitlines()[-1])
    result["link"] = link.summary
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--role", choices=("bench", "send", "recv"), default="bench")
    p.add_argument("--peer", default="")
    p.add_argument("--scheme", default="adaptive")
    p.add_argument("--link", choices=("tun", "inproc"), default="tun")
    p.add_argument(
        "--phase-unit",
        choices=("packets", "seconds"),
        default="packets",
        help="phase lengths in forward packets, or seconds of simulated time (inproc only)",
    )
    p.add_argument("--schemes", default=",".join((*FIXED, "adaptive")))
    p.add_argument("--size", default="2MiB")
    p.add_argument("--messages", type=int, default=120)
    p.add_argument("--phases", default="10000:1e-6,10000:1e-2,0:1e-4")
    p.add_argument("--reverse-loss", type=float, default=1e-4)
    p.add_argument("--rate", default="250Mbit/s")
    p.add_argument("--rtt", default="50ms")
    p.add_argument("--chunk", default="64KiB")
    p.add_argument("--k", type=int, default=32)
    p.add_argument("--m", type=int, default=8)
    p.add_argument("--in-flight", type=int, default=1)
    p.add_argument("--interval", type=float, default=0.1)
    p.add_argument("--gain", type=float, default=0.05)
    p.add_argument("--half-life", type=float, default=128.0, help="estimator, in chunks")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--json", default="")
    args = p.parse_args()
    if args.role == "send":
        role_send(args)
        return
    if args.role == "recv":
        role_recv(args)
        return
    results = {s: run_one(s, args) for s in args.schemes.split(",")}
    best_fixed = min(
        ((r["total_s"], s) for s, r in results.items() if s != "adaptive"), default=(None, None)
    )
    print(
        f"{args.messages} x {args.size} on {args.rate}, RTT {args.rtt}, phases {args.phases}, "
        f"link {args.link}"
    )
    print(f"{'scheme':<10}{'total s':>9}{'vs adaptive':>13}{'retx':>7}{'intact':>8}")
    ada = results.get("adaptive", {}).get("total_s")
    for s, r in results.items():
        ratio = f"{r['total_s'] / ada:.2f}x" if ada else "-"
        print(f"{s:<10}{r['total_s']:>9.2f}{ratio:>13}{r['retransmissions']:>7}{r['intact']!s:>8}")
    for sw in results.get("adaptive", {}).get("switches", []):
        print(f"  t={sw['t']:.2f}s {sw['from']} -> {sw['to']}: {sw['why']}")
    doc = {
        "machine": {"platform": platform.platform(), "python": sys.version.split()[0]},
        "command": sys.argv,
        "params": {k: v for k, v in vars(args).items() if k not in ("role", "peer", "scheme")},
        "rate_bps": parse_rate(args.rate),
        "best_fixed": {"scheme": best_fixed[1], "total_s": best_fixed[0]},
        "results": results,
    }
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
