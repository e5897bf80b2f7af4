"""Train a small model across two emulated datacenters, two ranks each, once per scheme.

    sudo .venv/bin/python experiments/train_two_dcs.py            # ~2-4 min on 2 cores

The two datacenters are network namespaces joined by the WAN emulator (TunLink: rate,
RTT and random loss applied to every packet in user space). In each datacenter two ranks
train with PyTorch DDP; the SDR communication hook averages gradients: reduce-scatter
over shared memory inside the datacenter, SDR ring allreduce of each shard across the
link, allgather inside. The same training runs on one site (one process, whole batch) as
the reference. For every reliability scheme (and ``auto``) it prints and writes:

- the largest difference between the loss curve and the single-site curve;
- time per training step (median and mean over the steps after the first two);
- a chart (loss curves and step times) and JSON with every number;
- the same on the link without loss (``no loss``: the floor set by RTT and compute).

Without root (no namespaces) it runs the same job over loopback with no emulated link and
says so: the loss comparison holds, step times then measure no WAN.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

# c10d warns once per socket that a namespace's client hostname cannot be looked up (24
# lines a run); torch reads this when it loads, so set it before anything imports torch
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments.dc_training import TrainSpec, run_job, train_single_site  # noqa: E402
from sdr.backends.hierarchical import SdrLinkOptions  # noqa: E402
from sdr.backends.shm import free_port  # noqa: E402
from sdr.backends.wan import LinkSpec, TunLink, can_use_namespaces  # noqa: E402

SCHEMES = ["sr-rto", "sr-nack", "ec-mds", "ec-xor", "auto"]


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--schemes", default=",".join(SCHEMES))
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rate", default="1Gbit/s")
    p.add_argument("--rtt", default="25ms")
    p.add_argument("--loss", type=float, default=1e-2, help="packet drop rate of the link")
    p.add_argument("--slices", type=int, default=2, help="pipeline slices of the WAN ring")
    p.add_argument(
        "--size-hint",
        default="32KiB",
        help="typical WAN write for 'auto': bucket / (local ranks x datacenters x slices)",
    )
    p.add_argument("--out", default="out/train_two_dcs")
    p.add_argument("--figure", default=None, help="also copy the chart here (docs/figures/..)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--no-baseline",
        dest="baseline",
        action="store_false",
        help="skip the extra run on the same link without loss (the floor)",
    )
    return p.parse_args()


def _run_scheme(
    spec: TrainSpec, scheme: str, args: argparse.Namespace, link: TunLink | None
) -> dict[str, Any]:
    opts = SdrLinkOptions(
        scheme=scheme, rate=args.rate, rtt=args.rtt, loss=args.loss, size_hint=args.size_hint
    )
    if link is None:
        return run_job(spec, datacenters=2, local_size=2, options=opts, port=free_port())
    assert link.pair.tun_a is not None and link.pair.tun_b is not None
    return run_job(
        spec,
        datacenters=2,
        local_size=2,
        options=opts,
        port=29500 + (int(time.monotonic() * 1000) % 2000) * 16,
        hosts=[link.addr_a, link.addr_b],
        master=link.addr_a,
        namespaces=[link.ns_a, link.ns_b],
        ifnames=[link.pair.tun_a.name, link.pair.tun_b.name],
        slices=args.slices,
    )


def _summarize(scheme: str, job: dict[str, Any], reference: list[float]) -> dict[str, Any]:
    steps = np.array(job["step_s"][2:] or job["step_s"])
    ranks = job["ranks"]
    counters: dict[str, int] = {}
    for r in ranks:
        for k, v in r["counters"].items():
            counters[k] = counters.get(k, 0) + v
    return {
        "scheme": scheme,
        "resolved": ranks[0]["scheme"],
        "losses": job["losses"],
        "max_loss_diff": float(np.max(np.abs(np.array(job["losses"]) - reference))),
        "params_identical": all(np.array_equal(r["params"], ranks[0]["params"]) for r in ranks),
        "step_median_s": float(np.median(steps)),
        "step_mean_s": float(np.mean(steps)),
        "step_s": job["step_s"],
        "wan_share": float(np.mean([r["wan_s"] / max(sum(r["step_s"]), 1e-9) for r in ranks])),
        "retransmitted_chunks": counters.get("write_chunks_retransmitted", 0),
        "buckets_per_rank": ranks[0]["buckets"],
    }


def _chart(rows: list[dict[str, Any]], reference: list[float], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    ax1.plot(reference, "k-", lw=3, alpha=0.35, label="single site")
    for row in rows:
        ax1.plot(row["losses"], "--", lw=1, label=f"2 DCs, {row['scheme']}")
    ax1.set_xlabel("step")
    ax1.set_ylabel("training loss")
    ax1.legend(fontsize=7)
    names = [r["scheme"] if r["scheme"] != "auto" else f"auto\n({r['resolved']})" for r in rows]
    x = np.arange(len(rows))
    ax2.bar(x - 0.2, [r["step_median_s"] * 1e3 for r in rows], 0.4, label="median")
    ax2.bar(x + 0.2, [r["step_mean_s"] * 1e3 for r in rows], 0.4, label="mean")
    ax2.set_xticks(x, names, fontsize=8)
    ax2.set_ylabel("time per step (ms)")
    ax2.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main() -> int:
    args = _args()
    logging.basicConfig(level=logging.WARNING)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    spec = TrainSpec(steps=args.steps, seed=args.seed)
    schemes = [s.strip() for s in args.schemes.split(",") if s.strip()]
    reason = can_use_namespaces()
    reference = train_single_site(spec)
    rows: list[dict[str, Any]] = []
    started = time.time()
    if reason:
        print(f"no emulated link ({reason}): running over loopback without WAN emulation")
        for scheme in schemes:
            rows.append(_summarize(scheme, _run_scheme(spec, scheme, args, None), reference))
        summary: dict[str, Any] = {}
    else:
        spec_link = LinkSpec(rate=args.rate, rtt=args.rtt, loss=args.loss, seed=args.seed)
        with TunLink(spec_link) as link:
            for scheme in schemes:
                print(f"training with {scheme} ...", flush=True)
                rows.append(_summarize(scheme, _run_scheme(spec, scheme, args, link), reference))
        summary = link.summary
        if args.baseline:
            print("training with sr-nack on the same link without loss ...", flush=True)
            lossless = LinkSpec(rate=args.rate, rtt=args.rtt, loss=0.0, seed=args.seed)
            with TunLink(lossless) as link0:
                job = _run_scheme(spec, "sr-nack", args, link0)
            row = _summarize("sr-nack", job, reference)
            row["scheme"] = "no loss"
            rows.append(row)
    link_text = "none (loopback)" if reason else f"{args.rate}, RTT {args.rtt}, loss {args.loss:g}"
    print(f"\nlink: {link_text}; 2 datacenters x 2 ranks; {args.steps} steps\n")
    print(
        "| scheme | used | max loss diff vs single site | params equal | step median ms |"
        " step mean ms | WAN share | retransmitted chunks |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['scheme']} | {r['resolved']} | {r['max_loss_diff']:.2e} | "
            f"{r['params_identical']} | {r['step_median_s'] * 1e3:.0f} | "
            f"{r['step_mean_s'] * 1e3:.0f} | {r['wan_share']:.0%} | {r['retransmitted_chunks']} |"
        )
    chart = out / "train_two_dcs.png"
    _chart(rows, reference, chart, f"2 DCs x 2 ranks, link {link_text}")
    if args.figure:
        Path(args.figure).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(chart, args.figure)
    import torch

    report = {
        "command": " ".join(sys.argv),
        "machine": {"platform": platform.platform(), "python": platform.python_version()},
        "versions": {"torch": torch.__version__, "numpy": np.__version__},
        "link": {"rate": args.rate, "rtt": args.rtt, "loss": args.loss, "emulated": not reason},
        "train": spec.to_dict(),
        "reference_losses": reference,
        "results": rows,
        "link_summary": summary,
        "seconds": time.time() - started,
    }
    (out / "results.json").write_text(json.dumps(report, indent=1, default=str))
    print(f"\nwrote {out / 'results.json'} and {chart}")
    bad = [r["scheme"] for r in rows if r["max_loss_diff"] > 1e-4 or not r["params_identical"]]
    if bad:
        print(f"loss differs from single-site training for {bad}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
