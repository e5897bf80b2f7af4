"""Ring allreduce over 2-4 emulated datacenters, measured against the simulator's model.

    .venv/bin/python experiments/ring_allreduce_dcs.py        # no root needed; ~2-4 min

One process per datacenter runs the SDR port plan ``allreduce_ring`` (the inter-datacenter
half of the hierarchical allreduce). Every ring edge ``d -> d+1`` is its own emulated
long-haul link: a WAN-emulator relay on loopback (``RelayLink``: rate, RTT, random loss
per packet, both directions) with its own forwarder process. (TunLink joins exactly two
namespaces, so for 3-4 datacenters the relay is the emulator that composes into a ring.)

For every scheme and datacenter count it reports the measured completion time of the
allreduce (mean and p90 over repetitions, slowest rank) next to the simulator's ring
model (:func:`sdr.simulator.collective.simulate_ring_allreduce`: 2N-2 dependent stages,
Monte Carlo per-stage write times for the same link, size, drop rate and scheme), and
writes a table, JSON and a chart.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import platform
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sdr.backends.hierarchical import PortExecutor, SdrLinkOptions, SdrLinks  # noqa: E402
from sdr.backends.hierarchical.local_job import run_ranks  # noqa: E402
from sdr.backends.shm import TcpBootstrap, free_port  # noqa: E402
from sdr.backends.wan import LinkSpec, RelayLink  # noqa: E402
from sdr.collectives.port_plans import build_port_plan  # noqa: E402
from sdr.simulator.collective import simulate_ring_allreduce  # noqa: E402
from sdr.simulator.link import Link  # noqa: E402
from sdr.simulator.schemes import SchemeSpec  # noqa: E402
from sdr.units import parse_rate, parse_size, parse_time  # noqa: E402

HOST = "127.0.0.1"
MTU = 8192


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dcs", default="2,3,4")
    p.add_argument("--schemes", default="sr-rto,sr-nack,ec-mds,ec-xor")
    p.add_argument("--size", default="2MiB", help="allreduce size (float32 elements)")
    p.add_argument("--rate", default="300Mbit/s")
    p.add_argument("--rtt", default="50ms")
    p.add_argument("--loss", type=float, default=1e-2)
    p.add_argument(
        "--queue",
        default="4MiB",
        help="switch buffer of each link; the UDP backend's pacer starts a message with a "
        "burst of up to 128 packets (1 MiB at 8 KiB), which a one-BDP queue of a slow, "
        "short link would drop",
    )
    p.add_argument("--reps", type=int, default=8)
    p.add_argument("--slices", type=int, default=1, help="pipeline slices (1 = the model's)")
    p.add_argument("--out", default="out/ring_allreduce_dcs")
    p.add_argument("--figure", default=None, help="also copy the chart here")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def _udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _measure(n: int, scheme: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run ``reps`` ring allreduces over ``n`` relay-linked datacenters."""
    ports = [(_udp_port(), _udp_port()) for _ in range(n)]
    edges = sorted({tuple(sorted((d, (d + 1) % n))) for d in range(n)})
    routes: list[dict[int, Any]] = [{} for _ in range(n)]
    relays = []
    for i, (a, b) in enumerate(edges):
        spec = LinkSpec(
            rate=args.rate, rtt=args.rtt, loss=args.loss, queue=args.queue, seed=args.seed + 7 * i
        )
        relay = RelayLink(
            spec,
            a_ports=[(HOST, ports[a][0]), (HOST, ports[a][1])],
            b_ports=[(HOST, ports[b][0]), (HOST, ports[b][1])],
        )
        routes[a][b] = (relay.for_a(0), relay.for_a(1))
        routes[b][a] = (relay.for_b(0), relay.for_b(1))
        relays.append(relay)
    opts = SdrLinkOptions(
        scheme=scheme, rate=args.rate, rtt=args.rtt, loss=args.loss, mtu=MTU, chunk_size=MTU
    )
    boot_port = free_port()
    elems = parse_size(args.size) // 4
    plan = build_port_plan("allreduce_ring", n, args.slices)

    def body(rank: int) -> dict[str, Any]:
        boot = TcpBootstrap(rank, n, boot_port)
        links = SdrLinks(
            boot,
            {r: r for r in range(n)},
            HOST,
            opts,
            port=ports[rank][0],
            control_port=ports[rank][1],
            routes=routes[rank],
        )
        ex = PortExecutor(rank, n, links.channels, links.ctx)
        xs = [np.random.default_rng(r).standard_normal(elems).astype(np.float32) for r in range(n)]
        ref = np.sum(xs, axis=0)
        times, correct = [], True
        try:
            for rep in range(args.reps + 1):  # the first one warms up (not timed)
                out = np.empty_like(xs[rank])
                boot.barrier()
                start = time.monotonic()
                with links.exclusive():
                    ex.run(plan, xs[rank], out)
                end = time.monotonic()
                if rep:
                    times.append((start, end))
                correct &= bool(np.allclose(out, ref, rtol=1e-5, atol=1e-4))
            return {"times": times, "correct": correct, "counters": links.counters()}
        finally:
            links.close()
            boot.close()

    with contextlib.ExitStack() as stack:
        for relay in relays:
            stack.enter_context(relay)
        results = run_ranks(n, body, timeout=600)
    starts = np.array([[t[0] for t in r["times"]] for r in results])
    ends = np.array([[t[1] for t in r["times"]] for r in results])
    seconds = ends.max(axis=0) - starts.min(axis=0)
    counters: dict[str, int] = {}
    for r in results:
        for k, v in r["counters"].items():
            counters[k] = counters.get(k, 0) + v
    return {
        "seconds": seconds.tolist(),
        "correct": all(r["correct"] for r in results),
        "retransmitted_chunks": counters.get("write_chunks_retransmitted", 0),
        "link_drops": sum(
            d.get("loss_drops", 0) + d.get("queue_drops", 0)
            for relay in relays
            for d in relay.summary.values()
            if isinstance(d, dict)
        ),
    }


def _model(n: int, scheme: str, args: argparse.Namespace) -> dict[str, Any]:
    link = Link(
        rate=parse_rate(args.rate),
        rtt=parse_time(args.rtt),
        mtu=MTU,
        chunk_size=MTU,
        alpha=2.0,
    )
    res = simulate_ring_allreduce(
        link,
        parse_size(args.size),
        n,
        args.loss,
        SchemeSpec(scheme),
        drop_unit="packet",
        samples=4000,
        seed=args.seed,
    )
    d = res.to_dict()
    return {"mean_s": d["mean_s"], "p99_s": d["p99_s"], "ideal_s": d["ideal_s"]}


def _chart(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    schemes = list(dict.fromkeys(r["scheme"] for r in rows))
    fig, axes = plt.subplots(1, len(schemes), figsize=(2.6 * len(schemes), 3.2), sharey=True)
    for ax, scheme in zip(np.atleast_1d(axes), schemes, strict=True):
        mine = [r for r in rows if r["scheme"] == scheme]
        dcs = [r["dcs"] for r in mine]
        ax.plot(dcs, [r["measured_mean_s"] * 1e3 for r in mine], "o-", label="measured mean")
        ax.plot(dcs, [r["model_mean_s"] * 1e3 for r in mine], "s--", label="model mean")
        ax.plot(dcs, [r["ideal_s"] * 1e3 for r in mine], ":", color="gray", label="lossless ideal")
        ax.plot(
            dcs,
            [r["measured_lossless_s"] * 1e3 for r in mine],
            "^:",
            color="gray",
            label="measured lossless",
        )
        ax.set_title(scheme, fontsize=9)
        ax.set_xlabel("datacenters")
        ax.set_xticks(dcs)
    np.atleast_1d(axes)[0].set_ylabel("allreduce time (ms)")
    np.atleast_1d(axes)[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main() -> int:
    args = _args()
    logging.basicConfig(level=logging.WARNING)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    started = time.time()
    for n in [int(x) for x in args.dcs.split(",")]:
        print(f"{n} datacenters, no loss (the floor of this machine) ...", flush=True)
        floor = np.array(
            _measure(n, "sr-nack", argparse.Namespace(**{**vars(args), "loss": 0.0}))["seconds"]
        )
        for scheme in [s.strip() for s in args.schemes.split(",") if s.strip()]:
            print(f"{n} datacenters, {scheme} ...", flush=True)
            measured = _measure(n, scheme, args)
            model = _model(n, scheme, args)
            secs = np.array(measured["seconds"])
            rows.append(
                {
                    "dcs": n,
                    "scheme": scheme,
                    "measured_mean_s": float(secs.mean()),
                    "measured_p90_s": float(np.quantile(secs, 0.9)),
                    "model_mean_s": model["mean_s"],
                    "model_p99_s": model["p99_s"],
                    "ideal_s": model["ideal_s"],
                    "measured_lossless_s": float(floor.mean()),
                    "ratio": float(secs.mean() / model["mean_s"]),
                    "correct": measured["correct"],
                    "retransmitted_chunks": measured["retransmitted_chunks"],
                    "link_drops": measured["link_drops"],
                    "seconds": measured["seconds"],
                }
            )
    title = f"ring allreduce {args.size}, {args.rate}, RTT {args.rtt}, loss {args.loss:g}"
    print(f"\n{title}, {args.reps} repetitions, {args.slices} slice(s)\n")
    print(
        "| DCs | scheme | measured mean ms | measured p90 ms | model mean ms | model p99 ms |"
        " lossless ideal ms | measured / model | correct |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['dcs']} | {r['scheme']} | {r['measured_mean_s'] * 1e3:.0f} | "
            f"{r['measured_p90_s'] * 1e3:.0f} | {r['model_mean_s'] * 1e3:.0f} | "
            f"{r['model_p99_s'] * 1e3:.0f} | {r['ideal_s'] * 1e3:.0f} | "
            f"{r['measured_lossless_s'] * 1e3:.0f} | {r['ratio']:.2f} | "
            f"{r['correct']} |"
        )
    report = {
        "command": " ".join(sys.argv),
        "machine": {"platform": platform.platform(), "python": platform.python_version()},
        "versions": {"numpy": np.__version__},
        "parameters": vars(args),
        "results": rows,
        "seconds": time.time() - started,
    }
    (out / "results.json").write_text(json.dumps(report, indent=1))
    chart = out / "ring_allreduce_dcs.png"
    _chart(rows, chart, title)
    if args.figure:
        shutil.copyfile(chart, args.figure)
    print(f"\nwrote {out / 'results.json'} and {chart}")
    return 0 if all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
