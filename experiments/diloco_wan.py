"""DiLoCo across two emulated datacenters: outer steps that end on time.

    sudo .venv/bin/python experiments/diloco_wan.py --plot docs/figures/diloco_wan.png

Two datacenters (network namespaces joined by the WAN emulator, TunLink), one rank each
(``--ranks-per-dc``). Every rank trains a student MLP to imitate a fixed random teacher
network on data it draws itself (no download): ``--inner`` AdamW steps on its own data,
then an outer step: the pseudo-gradient (parameters before minus after the inner steps)
is averaged across datacenters and applied with Nesterov SGD (lr 0.7, momentum 0.9, as
in DiLoCo). Each variant runs on its own emulated link of the same spec and seed, from
the same start, on the same data:

- ``reliable``: ``dist.all_reduce(AVG)`` on the ``sdr`` group (every byte, however late);
- ``deadline``: ``sdr.torch.allreduce_by(delta, T, average="all")``: what arrived by T,
  the rest carried over to the next outer step (error feedback), every slice divided by
  all datacenters (so a late contribution counts once, when it comes);
- ``weighted``: ``carry=0.5`` (``--carry-weight``): half of what missed is carried (a
  staleness weight), averaged over all;
- ``no-carry``: ``carry=False``, averaged over what arrived: what missed is dropped (what
  a loss-tolerant transport does);
- ``local-carry``: ``carry="local"`` (averaged over all datacenters, nothing carried by
  the call), and a site whose slice missed keeps that part of its own progress: its next
  inner steps start from the shared model less ``report.kept``, its missed
  pseudo-gradient (the shared model stays identical everywhere), so its next
  pseudo-gradient, measured from the shared model, carries it. Plain carry-over counts
  it about twice: a site restarted from the shared model walks that way again
  (docs/training.md);
- ``gloo``: ``dist.all_reduce`` on a gloo group whose TCP crosses the same link;
- ``torchft``: torchft's fault-tolerant manager (quorum, allreduce over gloo, commit)
  across the same link, one replica group per datacenter (experiments/diloco_torchft.py;
  needs ``pip install -e '.[torchft]'`` and one rank per datacenter);
- ``hivemind``: hivemind's decentralized averager (DHT matchmaking, then all-reduce)
  across the same link (experiments/diloco_hivemind.py; ``pip install -e '.[hivemind]'``,
  one rank per datacenter).

T (``--deadline auto``): the larger of the model's (:func:`sdr.simulator.deadline.deadline_for`,
``q`` = 0.99, for the pseudo-gradient's bytes over this link) and 1.25 x the lossless
reliable outer step measured at the start on this machine (our two cores carry SDR more
slowly than the model's line rate). Per point: outer-step communication time p50, p99 and
max per variant (from the last rank's entry into the collective to the last rank's exit,
over the outer steps after the first, which sets up), the final evaluation loss, the
fraction of bytes in, and whether the replicas stayed bitwise identical at every outer
step. ``--blackout START`` adds one
2-second blackout that many seconds after the first packet; ``--slow-site S`` delays
datacenter 1's inner phase by S seconds at every 5th outer step.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sdr.backends.hierarchical.local_job import run_ranks  # noqa: E402
from sdr.backends.shm import free_port  # noqa: E402
from sdr.backends.wan import LinkSpec, TunLink, can_use_namespaces  # noqa: E402
from sdr.errors import ConfigError  # noqa: E402
from sdr.units import parse_rate, parse_time  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # diloco_torchft, diloco_hivemind
OTHERS = ("torchft", "hivemind")
"""Variants that run another system's averager; each is an optional extra of the package."""

VARIANTS = (
    "reliable",
    "deadline",
    "weighted",
    "no-carry",
    "local-carry",
    "gloo",
    "torchft",
    "hivemind",
)
DEADLINED = ("deadline", "weighted", "no-carry", "local-carry")
"""Variants that call allreduce_by with the deadline T."""
WIDTHS = (128, 1024, 1024, 16)  # 1.2 M parameters: 4.9 MB of float32 per outer step
TEACHER = (128, 256, 16)
OUTER_LR, OUTER_MOMENTUM, INNER_LR = 0.7, 0.9, 1e-3


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--points", default="25ms:1e-3,25ms:1e-2,100ms:1e-3,100ms:1e-2",
                   help="RTT:loss pairs, comma-separated")  # fmt: skip
    p.add_argument("--rate", default="1Gbit/s")
    p.add_argument("--ranks-per-dc", type=int, default=1)
    p.add_argument("--outer", type=int, default=20, help="outer steps")
    p.add_argument("--inner", type=int, default=8, help="inner steps per outer step")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--deadline", default="auto", help="T of allreduce_by: a time, or auto")
    p.add_argument("--slices", type=int, default=8)
    p.add_argument("--carry-weight", type=float, default=0.5, help="the weighted variant's")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--blackout", type=float, default=None, help="a 2 s blackout at this s")
    p.add_argument("--slow-site", type=float, default=0.0, help="datacenter 1 late by s")
    p.add_argument("--budget", type=float, default=120.0, help="seconds per variant")
    p.add_argument("--out", default="out/diloco_wan.json", help="JSON (committed: docs/results/)")
    p.add_argument("--plot", default=None)
    return p.parse_args()


def _mlp(widths: tuple[int, ...], seed: int) -> Any:
    import torch

    torch.manual_seed(seed)
    layers: list[Any] = []
    for a, b in zip(widths, widths[1:], strict=False):
        layers += [torch.nn.Linear(a, b), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers[:-1])


def _batch(gen: Any, n: int) -> tuple[Any, Any]:
    import torch

    teacher = _batch.teacher  # type: ignore[attr-defined]
    x = torch.randn(n, WIDTHS[0], generator=gen)
    with torch.no_grad():
        y = teacher(x) + 0.01 * torch.randn(n, WIDTHS[-1], generator=gen)
    return x, y


def _rank(rank: int, job: dict[str, Any]) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    import sdr.torch

    torch.set_num_threads(1)
    os.environ.update(job["env"][rank])
    _batch.teacher = _mlp(TEACHER, 1234)  # type: ignore[attr-defined]
    dist.init_process_group("sdr")
    gloo = dist.new_group(backend="gloo") if job["variant"] == "gloo" else None
    dc = int(job["env"][rank]["RANK"]) // job["per_dc"]
    model = _mlp(WIDTHS, 0)
    params = list(model.parameters())
    ft: Any = None  # another system's averager: torchft's or hivemind's
    if job["variant"] == "torchft":
        from diloco_torchft import TorchftAverager

        ft = TorchftAverager(dc, job["env"][rank]["SDR_HOST"], job["lighthouse"],
                             job["store_ports"][rank])  # fmt: skip
    elif job["variant"] == "hivemind":
        from diloco_hivemind import HivemindAverager

        ft = HivemindAverager(dc, job["env"][rank]["SDR_HOST"], job["store_ports"][rank],
                              job["rendezvous"], sum(p.numel() for p in params))  # fmt: skip
    inner = torch.optim.AdamW(params, lr=INNER_LR)
    momentum = [torch.zeros_like(p) for p in params]
    gen = torch.Generator().manual_seed(1000 + rank)
    eval_x, eval_y = _batch(torch.Generator().manual_seed(7), 512)
    times, losses, fractions, digests, timelines = [], [], [], [], []
    spent, deadline = 0.0, job["deadline"]
    group = dist.distributed_c10d._get_default_group()
    shared = None  # the shared model when this site starts its inner steps elsewhere
    kept_buffer: torch.Tensor | None = None  # local carry's kept part, the same every step
    for outer in range(job["outer"]):
        before = [p.detach().clone() for p in params] if shared is None else shared
        for _ in range(job["inner"]):
            x, y = _batch(gen, job["batch"])
            inner.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            inner.step()
        if job["slow"] and dc == 1 and outer % 5 == 4:
            time.sleep(job["slow"])
        delta = torch.cat(
            [(b - p.detach()).reshape(-1) for b, p in zip(before, params, strict=True)]
        )
        start, kept = time.monotonic(), None  # one clock for every rank of the host
        if job["variant"] == "reliable":
            dist.all_reduce(delta, op=dist.ReduceOp.AVG)
            fractions.append(1.0)
        elif job["variant"] == "gloo":
            dist.all_reduce(delta, op=dist.ReduceOp.AVG, group=gloo)
            fractions.append(1.0)
        elif ft is not None:  # a step the other system discarded counts as nothing in
            fractions.append(1.0 if ft.average(delta) else 0.0)
        else:
            carry = {"deadline": 1.0, "weighted": job["carry_weight"],
                     "local-carry": "local"}.get(job["variant"], 0.0)  # fmt: skip
            # the job's first call sets up (buffers, first round trips) and is 2-3x
            # slower than the rest: it gets a generous deadline
            if job["variant"] == "local-carry" and kept_buffer is None:
                kept_buffer = torch.zeros_like(delta)  # reused: its pages are in
            report = sdr.torch.allreduce_by(
                delta, deadline if outer else max(deadline, 10.0), slices=job["slices"],
                key="delta", carry=carry, kept_out=kept_buffer,
            )  # fmt: skip
            fractions.append(report.fraction_in)
            timelines.append(report.timeline)
            kept = report.kept  # with carry="local": this site's missed part, or None
        took = time.monotonic() - start
        times.append((start, start + took))
        spent += took
        with torch.no_grad():  # the outer step: Nesterov SGD on the averaged pseudo-gradient
            off = 0
            for b, p, m in zip(before, params, momentum, strict=True):
                g = delta[off : off + p.numel()].view_as(p)
                off += p.numel()
                m.mul_(OUTER_MOMENTUM).add_(g)
                p.copy_(b - OUTER_LR * (g + OUTER_MOMENTUM * m))
            losses.append(float(torch.nn.functional.mse_loss(model(eval_x), eval_y)))
        flat = torch.cat([p.detach().reshape(-1) for p in params]).numpy().tobytes()
        digests.append(hashlib.sha256(flat).hexdigest())  # the shared model, every rank's
        shared = None
        if job["variant"] == "local-carry" and kept is not None:
            shared = [p.detach().clone() for p in params]
            with torch.no_grad():  # start the inner steps where this site had got to
                off = 0
                for p in params:
                    p.sub_(kept[off : off + p.numel()].view_as(p))
                    off += p.numel()
        over = torch.tensor([spent > job["budget"]], dtype=torch.int32)
        dist.all_reduce(over, op=dist.ReduceOp.MAX)
        if over.item():
            break
    counters = group.comm.links.counters()
    if ft is not None:
        dist.barrier()  # the lighthouse (datacenter 0) outlives every manager
        ft.close()
    dist.destroy_process_group()
    return {"times": times, "losses": losses, "fractions": fractions, "digests": digests,
            "timelines": timelines,
            "retransmitted": counters.get("write_chunks_retransmitted", 0)}  # fmt: skip


def _run(variant: str, rtt: str, loss: float, deadline: float, args: Any) -> dict[str, Any]:
    import numpy as np

    per_dc = args.ranks_per_dc
    world = 2 * per_dc
    blackouts = ((args.blackout, args.blackout + 2.0),) if args.blackout is not None else ()
    spec = LinkSpec(rate=args.rate, rtt=rtt, loss=loss, seed=1, blackouts=blackouts)
    with TunLink(spec) as link, tempfile.TemporaryDirectory(prefix="diloco-") as scratch:
        assert link.pair.tun_a is not None and link.pair.tun_b is not None
        port = free_port()
        dc = [(link.addr_a, link.pair.tun_a.name), (link.addr_b, link.pair.tun_b.name)]
        common = {"WORLD_SIZE": str(world), "MASTER_ADDR": link.addr_a, "MASTER_PORT": str(port),
                  "SDR_LOCAL_SIZE": str(per_dc), "SDR_RATE": args.rate, "SDR_RTT": rtt,
                  "SDR_LOSS": str(max(loss, 1e-6))}  # fmt: skip
        job = {
            "env": [dict(common, RANK=str(r), SDR_HOST=dc[r // per_dc][0],
                         GLOO_SOCKET_IFNAME=dc[r // per_dc][1]) for r in range(world)],  # fmt: skip
            "variant": variant, "outer": args.outer, "inner": args.inner, "batch": args.batch,
            "deadline": deadline, "slices": args.slices, "budget": args.budget,
            "per_dc": per_dc, "slow": args.slow_site, "carry_weight": args.carry_weight,
            "lighthouse": (link.addr_a, free_port()),
            "store_ports": [free_port() for _ in range(world)],
            "rendezvous": str(Path(scratch) / "peer"),
        }  # fmt: skip
        spaces = [link.ns_a] * per_dc + [link.ns_b] * per_dc
        ranks = run_ranks(world, lambda r: _rank(r, job), namespaces=spaces, timeout=3600)
    ran = min(len(r["times"]) for r in ranks)
    spans = np.array([r["times"][:ran] for r in ranks])  # rank, step, (entry, exit)
    # what the collective adds to the step: from the last rank's entry to the last exit (a
    # rank that entered earlier waited for the other's compute, not for the collective)
    steps = spans[:, :, 1].max(axis=0) - spans[:, :, 0].max(axis=0)
    own = (spans[:, :, 1] - spans[:, :, 0]).max(axis=0)  # the slower rank's own call
    after = slice(1, None) if ran > 1 else slice(None)  # the first call sets up (10 s T)
    timed = steps[after]
    return {
        "variant": variant, "rtt": rtt, "loss": loss, "deadline_s": deadline, "steps_run": ran,
        "step_s": steps.tolist(), "own_step_s": own.tolist(),
        "p50_s": float(np.percentile(timed, 50)), "p99_s": float(np.percentile(timed, 99)),
        "max_s": float(timed.max()), "p99_own_s": float(np.percentile(own[after], 99)),
        "loss_curve": ranks[0]["losses"][:ran], "final_loss": ranks[0]["losses"][ran - 1],
        "fraction_in": float(np.mean(ranks[0]["fractions"][:ran])),
        "replicas_identical": all(r["digests"][:ran] == ranks[0]["digests"][:ran] for r in ranks),
        "retransmitted_chunks": sum(r["retransmitted"] for r in ranks), "link": link.summary,
        # per step, each rank's entry (s after the step's last entry) and its call's
        # phases (DeadlineReport.timeline): where a late step's time went
        "entries_s": (spans[:, :, 0] - spans[:, :, 0].max(axis=0)).T.tolist(),
        "timelines": [[r["timelines"][i] for r in ranks] for i in range(ran)]
        if all(len(r["timelines"]) >= ran for r in ranks) else [],
    }  # fmt: skip


def _deadline(rtt: str, loss: float, calibrated: float | None, args: Any) -> tuple[float, float]:
    """(T used, the model's T)."""
    from sdr.simulator.deadline import deadline_for
    from sdr.simulator.link import Link

    n_bytes = sum(a * b + b for a, b in zip(WIDTHS, WIDTHS[1:], strict=False)) * 4
    link = Link(rate=parse_rate(args.rate), rtt=parse_time(rtt), mtu=8192,
                chunk_size=8192)  # fmt: skip
    model = deadline_for(link, n_bytes, loss, q=0.99).seconds
    if args.deadline != "auto":
        return parse_time(args.deadline), model
    return max(model, 1.25 * (calibrated or 0.0)), model


def _plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sdr.simulator.plots import plain_log_axis

    points = list(dict.fromkeys((r["rtt"], r["loss"]) for r in rows))
    width = max(6.0, 4.2 * len(points))
    fig, axes = plt.subplots(2, len(points), figsize=(width, 7), squeeze=False)
    colors = dict(zip(VARIANTS, ("C0", "C2", "C4", "C3", "C6", "C1", "C5", "C7"), strict=True))
    for i, point in enumerate(points):
        here = [r for r in rows if (r["rtt"], r["loss"]) == point]
        for r in here:
            c = colors[r["variant"]]
            axes[0][i].plot(r["step_s"], ".-", color=c, label=r["variant"])
            axes[1][i].plot(r["loss_curve"], color=c, label=r["variant"])
        axes[0][i].axhline(here[0]["deadline_s"], color="k", ls=":", lw=1, label="T")
        plain_log_axis(axes[0][i], seconds=True)
        axes[0][i].set_title(f"RTT {point[0]}, loss {point[1]:g}")
        axes[0][i].set_ylabel("outer-step communication")
        plain_log_axis(axes[1][i])
        axes[1][i].set_xlabel("outer step")
        axes[1][i].set_ylabel("evaluation loss (MSE)")
    axes[0][0].legend(fontsize="small")
    fig.suptitle("DiLoCo, two emulated datacenters: outer-step time and loss", fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> int:
    args = _args()
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    if reason := can_use_namespaces():
        print(f"needs network namespaces and TUN ({reason}); run as root")
        return 2
    try:  # a bad value says so in one line before any link is built
        parse_rate(args.rate)
        if args.deadline != "auto":
            parse_time(args.deadline)
        for point in args.points.split(","):
            if point.count(":") != 1:
                raise ConfigError(f"point {point!r} is not RTT:loss")
            rtt, loss = point.split(":")
            parse_time(rtt)
            float(loss)
    except (ConfigError, ValueError) as exc:
        print(f"diloco_wan: {exc} (e.g. --points 25ms:1e-2,100ms:1e-3 --deadline 150ms)")
        return 2
    variants = [v for v in args.variants.split(",") if v]
    if bad := sorted(set(variants) - set(VARIANTS)):
        print(f"unknown variants {bad}; expected some of {', '.join(VARIANTS)}")
        return 2
    for other in OTHERS:
        why = (importlib.util.find_spec(other) is None and f"{other} is not installed "
               f"(pip install -e '.[{other}]')") or (args.ranks_per_dc != 1 and
               "it needs one rank per datacenter")  # fmt: skip
        if other in variants and why:
            print(f"leaving out the {other} variant: {why}")
            variants.remove(other)
    started, rows = time.time(), []
    for spec in args.points.split(","):
        rtt, loss = spec.split(":")[0], float(spec.split(":")[1])
        calibration = None
        if args.deadline == "auto":  # the reliable lossless outer step on this machine
            quick = argparse.Namespace(**{**vars(args), "outer": 4, "blackout": None,
                                          "slow_site": 0.0})  # fmt: skip
            calibration = float(sorted(_run("reliable", rtt, 0.0, 1.0, quick)["step_s"][1:])[1])
        deadline, model = _deadline(rtt, loss, calibration, args)
        why = (f"lossless reliable {1e3 * calibration:.0f} ms" if calibration is not None
               else "--deadline")  # fmt: skip
        print(f"RTT {rtt}, loss {loss:g}: T = {deadline * 1e3:.0f} ms (model {model * 1e3:.0f} ms,"
              f" {why})", flush=True)  # fmt: skip
        for variant in variants:
            row = _run(variant, rtt, loss, deadline, args)
            row.update(model_deadline_s=model, calibrated_s=calibration)
            rows.append(row)
            within = row["p99_s"] <= deadline + parse_time(rtt)
            bound = f" (<= T+RTT: {'yes' if within else 'no'})" if variant in DEADLINED else ""
            print(f"  {variant:11s} p50 {row['p50_s'] * 1e3:5.0f} ms  p99 {row['p99_s'] * 1e3:5.0f}"
                  f" ms{bound}  max {row['max_s'] * 1e3:5.0f} ms  "
                  f"final loss {row['final_loss']:.4g}  "
                  f"in {row['fraction_in']:.3f}  identical {row['replicas_identical']}  "
                  f"({row['steps_run']} steps, {time.time() - started:.0f} s)",
                  flush=True)  # fmt: skip
    report = {"command": " ".join(sys.argv), "parameters": vars(args), "results": rows,
              "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                          "load_average": os.getloadavg()}}  # fmt: skip
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, default=str))
    print(f"wrote {out}")
    if args.plot:
        _plot(rows, Path(args.plot))
        print(f"wrote {args.plot}")
    return 0 if all(r["replicas_identical"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
