"""DDP step time over an emulated long-haul link: ``init_process_group("sdr")`` against gloo.

    sudo .venv/bin/python benchmarks/train_wan.py --steps 6 --plot docs/figures/train_wan.png

Two emulated datacenters (network namespaces joined by the WAN emulator, TunLink), with
``--ranks-per-dc`` ranks in each (default 2). Every rank trains the same 4.3 M-parameter
MLP (1024-2048-1024-100, 17 MB of float32 gradients per step) with plain DDP (25 MB
buckets) twice, step by step in turn: one DDP over the default group (the ``sdr``
backend) and one over a gloo group made with ``new_group(backend="gloo")`` whose TCP
traffic crosses the same emulated link. So both see the same link, the same load and the
same data, in the same run.

Per RTT and link loss it reports the median step time of each (the slowest rank's, over
the steps after the warm-up), their ratio, the floor of SDR's hierarchical allreduce (the
gradient's bytes once per direction over the link rate, plus two round trips) and of
gloo's ring (2(W-1)/W of the gradient per direction), the compute-only step, the loss
curves (the global loss of both trainings against the same training on one site, one
process, whole batch) and whether the replicas ended bitwise identical; and the
emulator's report. JSON goes to ``--out``, a figure to ``--plot``. Compute is real but
small (batch 32 per rank): the steps are communication-bound. A point stops early once a
backend has spent ``--budget`` seconds in it (gloo over a lossy long link can take
minutes a step); the steps it ran are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sdr.backends.hierarchical.local_job import run_ranks  # noqa: E402
from sdr.backends.shm import free_port  # noqa: E402
from sdr.backends.wan import LinkSpec, TunLink, can_use_namespaces  # noqa: E402
from sdr.units import parse_rate, parse_time  # noqa: E402

WIDTHS = (1024, 2048, 1024, 100)
LR, MOMENTUM = 0.01, 0.9


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--losses", default="0,1e-4,1e-3,1e-2", help="packet drop rates of the link")
    p.add_argument("--rtts", default="25ms,100ms", help="round-trip times of the link")
    p.add_argument("--rate", default="1Gbit/s")
    p.add_argument("--ranks-per-dc", type=int, default=2, help="ranks in each datacenter")
    p.add_argument("--scheme", default="auto", help="SDR_SCHEME of the sdr backend")
    p.add_argument("--size-hint", default="2MiB", help="a WAN write: bucket / (2 ranks x 4)")
    p.add_argument("--steps", type=int, default=8, help="steps per backend, warm-up included")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--budget", type=float, default=60.0, help="seconds per backend and point")
    p.add_argument("--bucket-mb", type=float, default=25.0)
    p.add_argument("--batch", type=int, default=32, help="samples per rank and step")
    p.add_argument("--out", default="out/train_wan.json", help="JSON (committed: docs/results/)")
    p.add_argument("--plot", default=None, help="PNG: step times against loss, per RTT")
    args = p.parse_args()
    if args.ranks_per_dc < 1 or args.steps <= args.warmup:
        p.error("need --ranks-per-dc >= 1 and --steps > --warmup")
    return args


def _model() -> Any:
    import torch

    torch.manual_seed(0)
    layers: list[Any] = []
    for a, b in zip(WIDTHS, WIDTHS[1:], strict=False):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def _batches(rank: int, steps: int, batch: int) -> list[tuple[Any, Any]]:
    import torch

    gen = torch.Generator().manual_seed(100 + rank)
    return [
        (
            torch.randn(batch, WIDTHS[0], generator=gen),
            torch.randint(0, WIDTHS[-1], (batch,), generator=gen),
        )
        for _ in range(steps)
    ]


def _rank(rank: int, job: dict[str, Any]) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import sdr.torch  # noqa: F401 - registers "sdr"

    torch.set_num_threads(1)
    os.environ.update(job["env"][rank])
    dist.init_process_group("sdr")
    gloo = dist.new_group(backend="gloo")
    models = {
        "sdr": DDP(_model(), bucket_cap_mb=job["bucket_mb"]),
        "gloo": DDP(_model(), bucket_cap_mb=job["bucket_mb"], process_group=gloo),
    }
    opts = {k: torch.optim.SGD(m.parameters(), lr=LR, momentum=MOMENTUM) for k, m in models.items()}
    times: dict[str, list[float]] = {k: [] for k in models}
    losses: dict[str, list[float]] = {k: [] for k in models}
    spent = dict.fromkeys(models, 0.0)
    for x, y in _batches(rank, job["steps"], job["batch"]):
        # the two in turn: same link, same moment; both stop once either is over budget
        # (every rank decides alike: the slowest rank's time, agreed over gloo)
        over = torch.tensor([max(spent.values()) > job["budget"]], dtype=torch.int32)
        dist.all_reduce(over, op=dist.ReduceOp.MAX, group=gloo)
        if over.item():
            break
        for name, model in models.items():
            start = time.perf_counter()
            opts[name].zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opts[name].step()
            took = time.perf_counter() - start
            times[name].append(took)
            spent[name] += took
            losses[name].append(float(loss.detach()))
    local = _model()  # the same step without communication
    compute = []
    for _ in range(4):
        start = time.perf_counter()
        local.zero_grad()
        torch.nn.functional.cross_entropy(local(x), y).backward()
        compute.append(time.perf_counter() - start)
    flat = {
        k: torch.cat([p.detach().reshape(-1) for p in m.parameters()]) for k, m in models.items()
    }
    comm = dist.distributed_c10d._get_default_group().comm
    timings, scheme, counters = dict(comm.timings), comm.links.scheme, comm.links.counters()
    dist.destroy_process_group()
    return {
        "times": times,
        "losses": losses,
        "compute_s": statistics.median(compute[1:]),
        "same_params": bool(torch.equal(flat["sdr"], flat["gloo"])),
        "params": flat["sdr"].numpy().copy(),
        "scheme": scheme,
        "timings": timings,
        "retransmitted": counters.get("write_chunks_retransmitted", 0),
        "n_params": sum(p.numel() for p in local.parameters()),
    }


def _single_site(world: int, steps: int, batch: int) -> list[float]:
    """The same training on one site: one model, every rank's batch at once."""
    import torch

    torch.set_num_threads(1)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    per_rank = [_batches(r, steps, batch) for r in range(world)]
    curve = []
    for step in range(steps):
        x = torch.cat([per_rank[r][step][0] for r in range(world)])
        y = torch.cat([per_rank[r][step][1] for r in range(world)])
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        curve.append(float(loss.detach()))
    return curve


def _point(rtt: str, loss: float, args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    per_dc = args.ranks_per_dc
    world = 2 * per_dc
    spec = LinkSpec(rate=args.rate, rtt=rtt, loss=loss, seed=1)
    with TunLink(spec) as link:
        assert link.pair.tun_a is not None and link.pair.tun_b is not None
        port = free_port()
        dc = [(link.addr_a, link.pair.tun_a.name), (link.addr_b, link.pair.tun_b.name)]
        common = {
            "WORLD_SIZE": str(world),
            "MASTER_ADDR": link.addr_a,
            "MASTER_PORT": str(port),
            "SDR_LOCAL_SIZE": str(per_dc),
            "SDR_SCHEME": args.scheme,
            "SDR_RATE": args.rate,
            "SDR_RTT": rtt,
            "SDR_LOSS": str(max(loss, 1e-6)),
            "SDR_SIZE_HINT": args.size_hint,
        }
        job = {
            "env": [
                dict(
                    common,
                    RANK=str(r),
                    SDR_HOST=dc[r // per_dc][0],
                    GLOO_SOCKET_IFNAME=dc[r // per_dc][1],
                )
                for r in range(world)
            ],
            "steps": args.steps,
            "bucket_mb": args.bucket_mb,
            "batch": args.batch,
            "budget": args.budget,
        }
        spaces = [link.ns_a] * per_dc + [link.ns_b] * per_dc
        ranks = run_ranks(world, lambda r: _rank(r, job), namespaces=spaces, timeout=3600)
    row: dict[str, Any] = {"rtt": rtt, "loss": loss, "link": link.summary}
    ran = min(len(r["times"]["sdr"]) for r in ranks)
    row["steps_run"] = ran
    measured = slice(min(args.warmup, max(ran - 1, 0)), ran)
    for name in ("sdr", "gloo"):
        per_step = np.max([r["times"][name][:ran] for r in ranks], axis=0)
        row[f"{name}_median_s"] = float(np.median(per_step[measured]))
        row[f"{name}_steps_s"] = per_step.tolist()
        # the global loss: DDP averages the ranks' gradients, so the mean of their losses
        curve = np.mean([r["losses"][name][:ran] for r in ranks], axis=0)
        row[f"{name}_loss_curve"] = curve.tolist()
    single = np.array(_single_site(world, ran, args.batch))
    row["single_site_loss_curve"] = single.tolist()
    row["loss_curve_diff"] = {
        "sdr_vs_single_site": float(np.abs(np.array(row["sdr_loss_curve"]) - single).max()),
        "sdr_vs_gloo": float(
            np.abs(np.array(row["sdr_loss_curve"]) - np.array(row["gloo_loss_curve"])).max()
        ),
    }
    grad_bits = ranks[0]["n_params"] * 4 * 8
    rate = parse_rate(args.rate)
    row["floor_s"] = grad_bits / rate + 2 * parse_time(rtt)
    row["gloo_ring_floor_s"] = 2 * (world - 1) / world * grad_bits / rate + 2 * parse_time(rtt)
    row["compute_s"] = max(r["compute_s"] for r in ranks)
    row["ratio"] = row["sdr_median_s"] / row["gloo_median_s"]
    row["scheme"] = ranks[0]["scheme"]
    row["sdr_phases_s"] = [
        {k: v / len(r["times"]["sdr"]) for k, v in r["timings"].items()} for r in ranks
    ]
    phases = [{k: round(v * 1e3) for k, v in p.items()} for p in row["sdr_phases_s"]]
    print("    sdr ms per step in its phases, by rank:", phases)
    row["retransmitted_chunks"] = sum(r["retransmitted"] for r in ranks)
    row["sdr_equals_gloo"] = all(r["same_params"] for r in ranks)
    row["replicas_identical"] = all(
        bool(np.array_equal(ranks[0]["params"], r["params"])) for r in ranks
    )
    row["n_params"] = ranks[0]["n_params"]
    return row


def _plot(rows: list[dict[str, Any]], args: argparse.Namespace, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from sdr.simulator.plots import plain_log_axis

    rtts = list(dict.fromkeys(r["rtt"] for r in rows))
    fig, axes = plt.subplots(1, len(rtts), figsize=(5.5 * len(rtts), 4), squeeze=False)
    for ax, rtt in zip(axes[0], rtts, strict=True):
        here = [r for r in rows if r["rtt"] == rtt]
        x = np.arange(len(here))
        ax.bar(x - 0.2, [r["gloo_median_s"] for r in here], 0.4, label="gloo (TCP)", color="C1")
        ax.bar(x + 0.2, [r["sdr_median_s"] for r in here], 0.4, label="sdr", color="C0")
        for i, r in enumerate(here):
            ax.text(i + 0.2, r["sdr_median_s"], f"{r['ratio']:.2f}x", ha="center", va="bottom")
        ax.plot(x, [r["floor_s"] for r in here], "k_", ms=30, mew=2, label="sdr floor")
        ax.set_xticks(x, [f"{r['loss']:g}" for r in here])
        ax.set_xlabel("link packet loss")
        ax.set_ylabel("DDP step time (median)")
        plain_log_axis(ax, seconds=True)
        ax.set_title(f"{args.rate}, RTT {rtt}, 2 DCs x {args.ranks_per_dc} ranks")
        ax.legend(loc="upper left", bbox_to_anchor=(0.02, 0.98), fontsize="small")
    fig.suptitle(f'init_process_group("sdr") (scheme {args.scheme}) against gloo, same link')
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    args = _args()
    # c10d warns once per socket that a namespace's client hostname cannot be looked up
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    reason = can_use_namespaces()
    if reason:
        print(f"needs network namespaces and TUN ({reason}); run as root")
        return 2
    rows = []
    started = time.time()
    points = [(rtt, float(x)) for rtt in args.rtts.split(",") for x in args.losses.split(",")]
    for i, (rtt, loss) in enumerate(points, 1):
        print(f"[{i}/{len(points)}] RTT {rtt}, loss {loss:g} ...", flush=True)
        rows.append(_point(rtt, loss, args))
        r = rows[-1]
        print(
            f"    gloo {r['gloo_median_s'] * 1e3:.0f} ms, sdr {r['sdr_median_s'] * 1e3:.0f} ms"
            f" ({r['ratio']:.2f}x), {r['steps_run']} steps, {time.time() - started:.0f} s",
            flush=True,
        )
    n = rows[0]["n_params"]
    print(
        f"\n2 datacenters x {args.ranks_per_dc} ranks, link {args.rate}; MLP {n / 1e6:.2f} M "
        f"parameters ({n * 4 / 1e6:.1f} MB of gradients a step), DDP {args.bucket_mb:g} MB "
        f"buckets; median step (slowest rank) after {args.warmup} warm-up steps\n"
    )
    print(
        "| RTT | loss | gloo ms | sdr ms | sdr / gloo | sdr floor ms | sdr / floor |"
        " gloo ring floor ms | compute ms | steps | sdr scheme | retransmitted chunks |"
        " loss curve: sdr - single site | sdr = gloo params | replicas identical |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['rtt']} | {r['loss']:g} | {r['gloo_median_s'] * 1e3:.0f} | "
            f"{r['sdr_median_s'] * 1e3:.0f} | {r['ratio']:.2f} | {r['floor_s'] * 1e3:.0f} | "
            f"{r['sdr_median_s'] / r['floor_s']:.2f} | {r['gloo_ring_floor_s'] * 1e3:.0f} | "
            f"{r['compute_s'] * 1e3:.0f} | {r['steps_run']} | {r['scheme']} | "
            f"{r['retransmitted_chunks']} | {r['loss_curve_diff']['sdr_vs_single_site']:.1e} | "
            f"{r['sdr_equals_gloo']} | {r['replicas_identical']} |"
        )
    print("\nemulator's report per point:")
    for r in rows:
        link = {k: v for k, v in r["link"].items() if not isinstance(v, (dict, list))}
        print(f"  RTT {r['rtt']}, loss {r['loss']:g}: {link}")
    import torch

    report = {
        "command": " ".join(sys.argv),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
        },
        "versions": {"torch": torch.__version__},
        "parameters": vars(args),
        "results": rows,
        "seconds": time.time() - started,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, default=str))
    print(f"\nwrote {out}")
    if args.plot:
        _plot(rows, args, Path(args.plot))
        print(f"wrote {args.plot}")
    return 0 if all(r["replicas_identical"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
