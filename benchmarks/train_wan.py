"""DDP step time over an emulated long-haul link: ``init_process_group("sdr")`` against gloo.

    sudo .venv/bin/python benchmarks/train_wan.py                 # ~1-2 min on 2 cores

Two emulated datacenters (network namespaces joined by the WAN emulator, TunLink), one
rank in each. Both ranks train the same 4.3 M-parameter MLP (1024-2048-1024-100, 17 MB
of float32 gradients per step) with plain DDP (25 MB buckets) twice, step by step in
turn: one DDP over the default group (the ``sdr`` backend) and one over a gloo group
made with ``new_group(backend="gloo")`` whose TCP traffic crosses the same emulated link.
So both see the same link, the same load and the same data, in the same run.

Per link loss it reports the median step time of each (the slower rank's, over the steps
after the warm-up), their ratio, the floor (the gradient's bytes over the link rate, once
per direction, plus two round trips), the compute-only step, whether the two trainings
ended with identical parameters, and the emulator's report. JSON goes to ``--out``.
Compute is real but small (batch 32 per rank): the steps are communication-bound.
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


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--losses", default="0,1e-3,1e-2", help="packet drop rates of the link")
    p.add_argument("--rate", default="1Gbit/s")
    p.add_argument("--rtt", default="25ms")
    p.add_argument("--scheme", default="auto", help="SDR_SCHEME of the sdr backend")
    p.add_argument("--size-hint", default="2MiB", help="a WAN write: bucket / (2 ranks x 4)")
    p.add_argument("--steps", type=int, default=10, help="steps per backend, warm-up included")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--bucket-mb", type=float, default=25.0)
    p.add_argument("--batch", type=int, default=32, help="samples per rank and step")
    p.add_argument("--out", default="docs/results/train_wan.json")
    return p.parse_args()


def _model() -> Any:
    import torch

    torch.manual_seed(0)
    layers: list[Any] = []
    for a, b in zip(WIDTHS, WIDTHS[1:], strict=False):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


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
    opts = {k: torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9) for k, m in models.items()}
    gen = torch.Generator().manual_seed(100 + rank)
    times: dict[str, list[float]] = {k: [] for k in models}
    for _ in range(job["steps"]):
        x = torch.randn(job["batch"], WIDTHS[0], generator=gen)
        y = torch.randint(0, WIDTHS[-1], (job["batch"],), generator=gen)
        for name, model in models.items():  # the two in turn: same link, same moment
            start = time.perf_counter()
            opts[name].zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opts[name].step()
            times[name].append(time.perf_counter() - start)
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
    scheme = dist.distributed_c10d._get_default_group().comm.links.scheme
    counters = dist.distributed_c10d._get_default_group().comm.links.counters()
    dist.destroy_process_group()
    return {
        "times": times,
        "compute_s": statistics.median(compute[1:]),
        "same_params": bool(torch.equal(flat["sdr"], flat["gloo"])),
        "params": flat["sdr"].numpy().copy(),
        "scheme": scheme,
        "retransmitted": counters.get("write_chunks_retransmitted", 0),
        "n_params": sum(p.numel() for p in local.parameters()),
    }


def _point(loss: float, args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    spec = LinkSpec(rate=args.rate, rtt=args.rtt, loss=loss, seed=1)
    with TunLink(spec) as link:
        assert link.pair.tun_a is not None and link.pair.tun_b is not None
        port = free_port()
        addrs, tuns = [link.addr_a, link.addr_b], [link.pair.tun_a.name, link.pair.tun_b.name]
        common = {
            "WORLD_SIZE": "2",
            "MASTER_ADDR": link.addr_a,
            "MASTER_PORT": str(port),
            "SDR_LOCAL_SIZE": "1",
            "SDR_SCHEME": args.scheme,
            "SDR_RATE": args.rate,
            "SDR_RTT": args.rtt,
            "SDR_LOSS": str(max(loss, 1e-6)),
            "SDR_SIZE_HINT": args.size_hint,
        }
        job = {
            "env": [
                dict(common, RANK=str(r), SDR_HOST=addrs[r], GLOO_SOCKET_IFNAME=tuns[r])
                for r in range(2)
            ],
            "steps": args.steps,
            "bucket_mb": args.bucket_mb,
            "batch": args.batch,
        }
        ranks = run_ranks(2, lambda r: _rank(r, job), namespaces=[link.ns_a, link.ns_b])
    summary = link.summary
    row: dict[str, Any] = {"loss": loss, "link": summary}
    for name in ("sdr", "gloo"):
        per_step = np.max([r["times"][name] for r in ranks], axis=0)[args.warmup :]
        row[f"{name}_median_s"] = float(np.median(per_step))
        row[f"{name}_steps_s"] = per_step.tolist()
    grad_bytes = ranks[0]["n_params"] * 4
    row["floor_s"] = grad_bytes * 8 / parse_rate(args.rate) + 2 * parse_time(args.rtt)
    row["compute_s"] = max(r["compute_s"] for r in ranks)
    row["ratio"] = row["sdr_median_s"] / row["gloo_median_s"]
    row["scheme"] = ranks[0]["scheme"]
    row["retransmitted_chunks"] = sum(r["retransmitted"] for r in ranks)
    row["sdr_equals_gloo"] = all(r["same_params"] for r in ranks)
    row["replicas_identical"] = bool(np.array_equal(ranks[0]["params"], ranks[1]["params"]))
    row["n_params"] = ranks[0]["n_params"]
    return row


def main() -> int:
    args = _args()
    reason = can_use_namespaces()
    if reason:
        print(f"needs network namespaces and TUN ({reason}); run as root")
        return 2
    rows = []
    started = time.time()
    for loss in (float(x) for x in args.losses.split(",")):
        print(f"loss {loss:g} ...", flush=True)
        rows.append(_point(loss, args))
    n = rows[0]["n_params"]
    print(
        f"\n2 datacenters x 1 rank, link {args.rate}, RTT {args.rtt}; MLP {n / 1e6:.2f} M "
        f"parameters ({n * 4 / 1e6:.1f} MB of gradients a step), DDP {args.bucket_mb:g} MB "
        f"buckets; median of {args.steps - args.warmup} steps (slower rank)\n"
    )
    print(
        "| loss | gloo ms | sdr ms | sdr / gloo | floor ms | compute ms | sdr scheme |"
        " retransmitted chunks | sdr = gloo params | replicas identical |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['loss']:g} | {r['gloo_median_s'] * 1e3:.0f} | {r['sdr_median_s'] * 1e3:.0f} | "
            f"{r['ratio']:.2f} | {r['floor_s'] * 1e3:.0f} | {r['compute_s'] * 1e3:.0f} | "
            f"{r['scheme']} | {r['retransmitted_chunks']} | {r['sdr_equals_gloo']} | "
            f"{r['replicas_identical']} |"
        )
    print("\nemulator's report per point:")
    for r in rows:
        link = {k: v for k, v in r["link"].items() if not isinstance(v, (dict, list))}
        print(f"  loss {r['loss']:g}: {link}")
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
    return 0 if all(r["replicas_identical"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
