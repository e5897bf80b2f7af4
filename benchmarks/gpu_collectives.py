"""Collectives on the GPUs of one host: our plans against NCCL in the same run.

    python benchmarks/gpu_collectives.py --world 2 --out gpu_collectives.json
    python benchmarks/gpu_collectives.py --collectives reduce_scatter broadcast

One process per GPU. For every collective (allreduce, allgather, reduce-scatter,
broadcast from rank 0) and size (1 KiB .. 1 GiB, bfloat16) it times each of our candidate
algorithms and NCCL (through torch.distributed), eagerly launched and captured in a CUDA
graph, and prints latency, bus bandwidth and the NCCL/ours latency ratio (> 1: ours is
faster). Sizes are the full message: the allreduce and broadcast buffer, the allgather
output, the reduce-scatter input. Bus bandwidth as nccl-tests computes it: allreduce
S/t * 2(n-1)/n, allgather and reduce-scatter S/t * (n-1)/n, broadcast S/t. NVLink
multicast stays off (NCCL_NVLS_ENABLE=0).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sdr.backends.collectives.selection import select_algorithm  # noqa: E402
from sdr.backends.shm.bootstrap import TcpBootstrap, free_port  # noqa: E402

KiB, MiB, GiB = 1024, 1024**2, 1024**3
COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "broadcast")


def candidates(coll: str, size: int) -> list[str]:
    """Our algorithms worth timing at this size (the others are far off there)."""
    if coll == "allreduce":
        algs = []
        if size <= 2 * MiB:
            algs.append("allreduce_oneshot_ll")
        if 256 * KiB <= size <= 8 * MiB:
            algs.append("allreduce_twoshot_ll")
        if size >= 256 * KiB:
            algs += ["allreduce_oneshot", "allreduce_oneshot_get", "allreduce_twoshot"]
        return algs
    algs = []  # allgather, reduce_scatter, broadcast: an LL and a mesh algorithm each
    if size <= 32 * MiB:
        algs.append(f"{coll}_ll")
    if size >= 256 * KiB:
        algs.append(f"{coll}_mesh")
    if coll == "broadcast" and size >= 1 * MiB:
        algs.append("broadcast_pipelined")
    return algs


def _nccl_call(coll: str, t_in, t_out, dist):  # noqa: ANN001, ANN202
    """The NCCL call of ``coll`` through torch.distributed."""
    if coll == "allreduce":
        return lambda: dist.all_reduce(t_in)
    if coll == "allgather":
        return lambda: dist.all_gather_into_tensor(t_out, t_in)
    if coll == "reduce_scatter":
        return lambda: dist.reduce_scatter_tensor(t_out, t_in)
    return lambda: dist.broadcast(t_in, src=0)


def _elements(coll: str, size: int, world: int) -> tuple[int, int]:
    """(input, output) bfloat16 elements for a full message of ``size`` bytes."""
    full = size // 2
    if coll == "allgather":
        return full // world, full
    if coll == "reduce_scatter":
        return full, full // world
    return full, full


def _timers(cp, torch):
    def cupy_time(launch, stream, reps):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record(stream)
        for _ in range(reps):
            launch()
        end.record(stream)
        end.synchronize()
        return cp.cuda.get_elapsed_time(start, end) * 1000.0

    def torch_time(launch, reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            launch()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1000.0

    return cupy_time, torch_time


def worker(  # noqa: PLR0913
    rank: int,
    world: int,
    port: int,
    tport: int,
    sizes: list[int],
    colls: list[str],
    q,  # noqa: ANN001
) -> None:
    os.environ.update(NCCL_NVLS_ENABLE="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(tport))
    import cupy as cp
    import torch
    import torch.distributed as dist

    from sdr.backends.gpu.communicator import GpuCommunicator

    torch.cuda.set_device(rank)
    cp.cuda.Device(rank).use()
    dist.init_process_group("nccl", rank=rank, world_size=world)
    boot = TcpBootstrap(rank, world, port)
    comm = GpuCommunicator(boot, device=rank, scratch_bytes=max(sizes), use_nccl=False)
    cupy_time, torch_time = _timers(cp, torch)
    rows = []

    def sync_all():
        cp.cuda.Device().synchronize()
        torch.cuda.synchronize()
        boot.barrier()

    for coll in colls:
        for size in sizes:
            n_in, n_out = _elements(coll, size, world)
            k = max(1, min(50, (64 * MiB) // size))
            reps = max(3, min(20, (512 * MiB) // (size * k)))
            eager_iters = max(5, min(200, (256 * MiB) // size))
            row = {"collective": coll, "bytes": size, "ours": {}, "world": world}
            x = cp.ones(n_in, cp.uint16)
            out = cp.zeros(n_out, cp.uint16)
            for alg in candidates(coll, size):
                fn = getattr(comm, coll)

                if coll == "broadcast":  # in place, root 0

                    def launch(fn=fn, alg=alg, x=x):
                        fn(x, 0, dtype="bfloat16", algorithm=alg)
                else:

                    def launch(fn=fn, alg=alg, x=x, out=out):
                        fn(x, out, dtype="bfloat16", algorithm=alg)

                for _ in range(3):
                    launch()
                sync_all()
                eager = cupy_time(launch, cp.cuda.get_current_stream(), eager_iters) / eager_iters
                stream = cp.cuda.Stream(non_blocking=True)
                with stream:
                    stream.begin_capture()
                    for _ in range(k):
                        launch()
                    graph = stream.end_capture()
                graph.launch(stream)
                stream.synchronize()
                sync_all()
                g = cupy_time(lambda graph=graph, stream=stream: graph.launch(stream), stream, reps)
                comm.check()
                row["ours"][alg] = {"eager_us": eager, "graph_us": g / (k * reps)}
            t_in = torch.ones(n_in, dtype=torch.bfloat16, device="cuda")
            t_out = torch.empty(n_out, dtype=torch.bfloat16, device="cuda")
            nccl_call = _nccl_call(coll, t_in, t_out, dist)

            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    nccl_call()
            torch.cuda.current_stream().wait_stream(side)
            sync_all()
            eager_n = torch_time(nccl_call, eager_iters) / eager_iters
            tg = torch.cuda.CUDAGraph()
            with torch.cuda.graph(tg):
                for _ in range(k):
                    nccl_call()
            tg.replay()
            sync_all()
            graph_n = torch_time(tg.replay, reps) / (k * reps)
            row["nccl"] = {"eager_us": eager_n, "graph_us": graph_n}
            rows.append(row)
            del tg, graph
            if rank == 0:
                print(_line(row), flush=True)
    meta = {
        "gpu": cp.cuda.runtime.getDeviceProperties(rank)["name"].decode(),
        "cupy": cp.__version__,
        "torch": torch.__version__,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())),
    }
    dist.destroy_process_group()
    comm.close()
    q.put((rank, meta, rows))


def busbw(coll: str, size: int, us: float, world: int) -> float:
    """Bus bandwidth in GB/s."""
    factor = {"allreduce": 2 * (world - 1) / world, "broadcast": 1.0}.get(coll, (world - 1) / world)
    return size / (us * 1e-6) * factor / 1e9


def best(row: dict, mode: str) -> tuple[str, float]:
    """Our fastest algorithm for ``mode`` (eager_us or graph_us)."""
    name = min(row["ours"], key=lambda a: row["ours"][a][mode])
    return name, row["ours"][name][mode]


def _size(n: int) -> str:
    for unit, div in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= div:
            return f"{n // div} {unit}"
    return f"{n} B"


def _line(row: dict) -> str:
    alg, eg = best(row, "eager_us")
    galg, gg = best(row, "graph_us")
    ne, ng = row["nccl"]["eager_us"], row["nccl"]["graph_us"]
    bw = busbw(row["collective"], row["bytes"], gg, row["world"])
    nbw = busbw(row["collective"], row["bytes"], ng, row["world"])
    sel = select_algorithm(row["collective"], row["bytes"], row["world"], nccl_available=True)
    return (
        f"| {row['collective']} | {_size(row['bytes'])} | {galg} | {gg:.1f} | {ng:.1f} | "
        f"{ng / gg:.2f}x | {bw:.0f} | {nbw:.0f} | {eg:.1f} | {ne:.1f} | {ne / eg:.2f}x | {sel} |"
    )


HEADER = (
    "| collective | size | ours (graph, best) | ours graph us | NCCL graph us | NCCL/ours graph "
    "| ours busbw GB/s | NCCL busbw GB/s | ours eager us | NCCL eager us | NCCL/ours eager "
    "| selected |\n|" + "---|" * 12
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--min-bytes", type=int, default=KiB)
    ap.add_argument("--max-bytes", type=int, default=GiB)
    ap.add_argument("--out", default="gpu_collectives.json")
    ap.add_argument("--collectives", nargs="+", choices=COLLECTIVES, default=list(COLLECTIVES))
    args = ap.parse_args()
    sizes = []
    s = args.min_bytes
    while s <= args.max_bytes:
        sizes.append(s)
        s *= 2
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port, tport = free_port(), free_port()
    print(HEADER, flush=True)
    t0 = time.time()
    procs = [
        ctx.Process(target=worker, args=(r, args.world, port, tport, sizes, args.collectives, q))
        for r in range(args.world)
    ]
    for p in procs:
        p.start()
    results = sorted(q.get(timeout=3000) for _ in procs)
    for p in procs:
        p.join()
    meta, rows = results[0][1], results[0][2]
    doc = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": {"host": platform.node(), **meta, "world": args.world},
        "parameters": {
            "dtype": "bfloat16",
            "sizes": sizes,
            "collectives": args.collectives,
            "nvls": 0,
            "knobs": {k: v for k, v in os.environ.items() if k.startswith("SDR_GPU_")},
        },
        "seconds": time.time() - t0,
        "results": rows,
    }
    Path(args.out).write_text(json.dumps(doc, indent=1))
    print(f"wrote {args.out} in {doc['seconds']:.0f} s")


if __name__ == "__main__":
    main()
