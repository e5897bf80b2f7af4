"""CPU seconds per GiB at each end: SDR (`sdr send` / `sdr recv`, per scheme) against
iperf3 UDP and TCP at the same paced rate and datagram size, in the same run.

Each end's CPU time (user + system) comes from the kernel's own accounting of that
process (``os.wait4``), so it does not depend on how busy the rest of the machine is the
way a wall-clock time does. Start-up (imports, set-up, registering buffers, hashing is
not: it is per byte) cancels by differencing two transfer sizes: CPU per GiB =
(CPU(big) - CPU(small)) / (big - small). Every peer moves the same sizes at the same rate.

    python benchmarks/cpu_per_byte.py                       # loopback, 1 Gbit/s
    python benchmarks/cpu_per_byte.py --rates 1Gbit/s,5Gbit/s --link --json out/cpu.json

The receiver writes into ``--out-dir`` (default /dev/shm). A fresh file costs its page
population on top of the transport (on our VMs ext4 about 2 s/GiB for pages the guest
has not used lately, 0.2 once reused; tmpfs 0.3; far more where the VM hands freed pages
back to its host): the run prints that cost for the directory it used. So iperf3 runs
twice: memory to memory (its receiver keeps nothing), and file to file (``-F``: the client
reads the sender's file, the server writes into the same ``--out-dir``), and each SDR row
is compared with the peer that moves data the way it does: ``sdr send``/``sdr recv`` with
the file peers, ``--write-bw`` with the memory ones.

Where a VM's balloon hands freed pages back to its host (the run says so), every fresh
page a receiver writes costs a host fault, 1.5-2.5 CPU s/GiB, in whichever process
touches it first, unless the page was freed a moment before: how many pages are fresh
then depends on what ran just before. So there each run of a file receiver first waits
``--settle`` seconds (default 30) after the last run's output was deleted: no receiver
then gets the pages its predecessor freed a moment before, every one starts after the
same idle time, and the file rows agree across spans (before, 64MiB,2GiB mostly reused
pages and 1GiB,4GiB mostly did not). Whether the host has taken the pages back by then
is its own affair (``benchmarks/file_pages.py`` shows it), so compare only the ratios to
the file peers of the same run.

``--write-bw`` adds each scheme memory to memory (``sdr write-bw --scheme``: one reused
buffer sent into a ring of them, as iperf3 moves data), so the reliable path's own cost
shows apart from the file's (its pages, its digest).

``--link`` runs everything again through the WAN emulator (two namespaces and the native
forwarder; needs root) at the given ``--rtt``. iperf3 must be installed (`make system`).
"""

from __future__ import annotations

import argparse
import functools
import json
import mmap
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from sdr.backends.udp.sockets import prefault
from sdr.cli.wan_transfer import make_payload
from sdr.units import format_rate, format_size, parse_rate, parse_size

ROOT = Path(__file__).resolve().parents[1]
GIB = 1 << 30
SCHEMES = ("sr-nack", "sr-rto", "ec-mds")
PEERS = ("iperf3-udp", "iperf3-tcp")
FILE = " file"
"""Suffix of a peer (and of the basis of an SDR row) that moves a file, not memory."""
Wrap = Callable[[str, list[str]], list[str]]
"""Prefix a command to run it on one side ("a": sender, "b": receiver) of the link."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu(proc: subprocess.Popen[str], timeout: float, quiet: bool = False) -> float:
    """Wait for ``proc``; its CPU seconds (user + system, its waited children included).
    A failed process raises RuntimeError, unless ``quiet`` (its ``returncode`` says)."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            if proc.returncode and not quiet:
                err = proc.stderr.read() if proc.stderr else ""
                raise RuntimeError(f"{proc.args[:6]} failed ({proc.returncode}): {err[-1500:]}")
            return usage.ru_utime + usage.ru_stime
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"{proc.args[:6]} did not finish within {timeout:g} s")
        time.sleep(0.01)


def _kill(*procs: subprocess.Popen[str] | None) -> None:
    """Kill whichever of ``procs`` still runs (a failed run leaves nothing behind)."""
    for proc in procs:
        if proc is not None and proc.poll() is None:
            proc.kill()


def _popen(command: list[str]) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT
    )


def sdr_run(
    wrap: Wrap, host: str, scheme: str, source: Path, out: Path, rate: str, args: Any,
    ack_interval: str = "",
) -> tuple[float, float]:  # fmt: skip
    """One `sdr send` -> `sdr recv`; (sender CPU s, receiver CPU s). ``ack_interval``: the
    receiver's SACK interval (``[reliability] ack_interval`` in a ``--config`` file; the
    receiver takes the sender's), else the default."""
    port = _free_port()
    sdr = [sys.executable, "-m", "sdr.cli.main"]
    receiver = _popen(
        wrap("b", [*sdr, "recv", "--out", str(out), "--bind", host, "--port", str(port)])
        + ["--json", "--timeout", "120"]
    )
    try:
        assert receiver.stdout is not None
        line = receiver.stdout.readline()
        if "listening" not in line:
            raise RuntimeError(f"receiver did not start: {line}{receiver.stderr.read()}")  # type: ignore[union-attr]
        sender = _popen(
            wrap("a", [*sdr, "send", str(source), "--to", f"{host}:{port}", "--json"])
            + ["--scheme", scheme, "--rate", rate, "--rtt", args.rtt, "--mtu", str(args.mtu)]
            + ["--message-size", args.message_size, "--timeout", "120", "--digest", args.digest]
            + (["--config", str(_ack_config(source.parent, ack_interval))] if ack_interval else [])
        )
        cpu_send = _cpu(sender, 300)
        cpu_recv = _cpu(receiver, 60)
    finally:
        _kill(receiver, locals().get("sender"))
    out.unlink(missing_ok=True)
    return cpu_send, cpu_recv


def _ack_config(directory: Path, ack_interval: str) -> Path:
    """A config file that sets only the SACK interval."""
    path = directory / f"sdr-cpu-ack-{os.getpid()}.toml"
    path.write_text(f'[reliability]\nack_interval = "{ack_interval}"\n')
    return path


def write_bw_run(
    wrap: Wrap, host: str, scheme: str, size: int, *, rate: str, args: Any
) -> tuple[float, float]:
    """``sdr write-bw --scheme`` moving ``size`` bytes in ``--message-size`` messages
    from one reused buffer into a ring of them (memory to memory, as iperf3: no file, no
    digest of one); (client CPU s, server CPU s)."""
    port = _free_port()
    message = parse_size(args.message_size)
    bw = [sys.executable, "-m", "sdr.cli.main", "write-bw"]
    server = _popen(
        wrap("b", [*bw, "--bind", host, "--port", str(port), "--data-port", "0", "--json"])
        + ["--timeout", "60s"]
    )
    try:
        assert server.stdout is not None
        client_cmd = [*bw, host, "--port", str(port), "-s", str(message), "-n"]
        client_cmd += [str(max(1, size // message)), "-m", str(args.mtu), "-t", "4"]
        client_cmd += ["--rate", rate, "--scheme", scheme, "--rtt", args.rtt, "--json"]
        client_cmd += ["--timeout", "60s"]
        for _ in range(100):  # until the server listens
            client = _popen(wrap("a", client_cmd))
            cpu_client = _cpu(client, 300, quiet=True)
            if client.returncode == 0:
                break
            time.sleep(0.05)
        else:
            raise RuntimeError(f"write-bw client failed: {client.stderr.read()[-1500:]}")  # type: ignore[union-attr]
        cpu_server = _cpu(server, 60)
    finally:
        _kill(server, locals().get("client"))
    return cpu_client, cpu_server


def iperf3_run(
    wrap: Wrap, host: str, proto: str, size: int, *, rate: str, args: Any,
    files: dict[int, Path] | None = None, out: Path | None = None,
) -> tuple[float, float]:  # fmt: skip
    """One iperf3 transfer of ``size`` bytes at ``rate``; (client CPU s, server CPU s).
    With ``files`` and ``out``: the client sends ``files[size]`` and the server writes
    what it receives into ``out`` (``-F``), as `sdr send` / `sdr recv` do."""
    port = _free_port()
    keep = ["-F", str(out)] if out is not None else []
    server = _popen(wrap("b", ["iperf3", "-s", "-1", "-B", host, "-p", str(port), *keep]))
    try:
        time.sleep(0.3)  # iperf3 has no readiness signal; the client retries below
        bits = str(int(parse_rate(rate)))
        udp = ["-u", "-l", str(args.mtu)] if proto == "udp" else []
        command = ["iperf3", "-c", host, "-p", str(port), "-b", bits, "-n", str(size), *udp]
        source = ["-F", str(files[size])] if files is not None and out is not None else []
        client = _popen(wrap("a", command + ["-w", "32M", *source]))
        cpu_client = _cpu(client, 300)
        cpu_server = _cpu(server, 60)
    finally:
        _kill(server, locals().get("client"))
        if out is not None:
            out.unlink(missing_ok=True)
    return cpu_client, cpu_server


def per_gib(
    run: Callable[[int], tuple[float, float]],
    sizes: tuple[int, int],
    repeat: int,
    settle: float = 0.0,
) -> dict[str, float]:
    """CPU s/GiB of each end by differencing the two sizes (median of ``repeat`` pairs);
    ``settle``: seconds to wait before each run (:func:`settle_time`)."""

    def settled(size: int) -> tuple[float, float]:
        time.sleep(settle)
        return run(size)

    send, recv = [], []
    for _ in range(repeat):
        small, big = settled(sizes[0]), settled(sizes[1])
        span = (sizes[1] - sizes[0]) / GIB
        send.append((big[0] - small[0]) / span)
        recv.append((big[1] - small[1]) / span)
    send.sort()
    recv.sort()
    return {"send_s_per_gib": send[len(send) // 2], "recv_s_per_gib": recv[len(recv) // 2]}


@contextmanager
def loopback() -> Iterator[tuple[Wrap, str, dict[str, Any] | None]]:
    yield (lambda side, command: command), "127.0.0.1", None


@contextmanager
def emulated(rate: str, rtt: str, mtu: int) -> Iterator[tuple[Wrap, str, dict[str, Any] | None]]:
    from sdr.backends.wan import LinkSpec, TunLink, can_use_namespaces, netns_exec

    why = can_use_namespaces()
    if why:
        raise SystemExit(f"--link needs namespaces: {why}")
    spec = LinkSpec(rate=rate, rtt=rtt)
    with TunLink(spec) as link:
        names = {"a": link.ns_a, "b": link.ns_b}
        summary: dict[str, Any] = {}
        yield (lambda side, command: netns_exec(names[side], *command)), link.addr_b, summary
    summary.update(link.summary.get("report", {}))


def measure_place(
    place: str,
    rate: str,
    schemes: list[str],
    files: dict[int, Path],
    out: Path,
    sizes: tuple[int, int],
    args: Any,
) -> dict[str, dict[str, Any]]:
    """Every peer's CPU per GiB at one ``place`` (loopback or emulated) and ``rate``."""
    context = loopback() if place == "loopback" else emulated(rate, args.rtt, args.mtu)
    found: dict[str, dict[str, Any]] = {}
    with context as (wrap, host, report):
        for peer in PEERS:
            proto = peer.split("-")[1]
            run = functools.partial(iperf3_run, wrap, host, proto, rate=rate, args=args)
            found[peer] = {**per_gib(run, sizes, args.repeat), "basis": "memory"}
            if schemes:  # the peers of the file rows
                run = functools.partial(run, files=files, out=out)
                found[peer + FILE] = {
                    **per_gib(run, sizes, args.repeat, args.settle),
                    "basis": "file",
                }
        for scheme in schemes if args.write_bw else ():
            run = functools.partial(write_bw_run, wrap, host, scheme, rate=rate, args=args)
            found[f"sdr write-bw {scheme}"] = {
                **per_gib(run, sizes, args.repeat),
                "basis": "memory",
            }
        for scheme in schemes:
            for ack in args.ack_intervals.split(","):
                run = functools.partial(_sdr_size, wrap, host, scheme, files, out, rate, args, ack)
                found[f"sdr {scheme}" + (f" ack {ack}" if ack else "")] = {
                    **per_gib(run, sizes, args.repeat, args.settle),
                    "basis": "file",
                }
    for cpu in found.values():
        cpu["emulator"] = report
    return found


def _sdr_size(
    wrap: Wrap, host: str, scheme: str, files: dict[int, Path], out: Path, rate: str, args: Any,
    ack_interval: str, size: int,
) -> tuple[float, float]:  # fmt: skip
    return sdr_run(wrap, host, scheme, files[size], out, rate, args, ack_interval)


def _row(
    place: str, rate: str, name: str, cpu: dict[str, Any], found: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """One table row: ``*_vs_udp`` / ``*_vs_tcp`` against the iperf3 runs that move data
    the same way (``cpu["basis"]``, file or memory); the file rows also keep their ratios
    to the memory peers."""
    basis = FILE if cpu["basis"] == "file" else ""
    row = {"place": place, "rate": rate, "peer": name, **cpu}
    for peer, suffix in [(basis, ""), ("", "_memory")] if basis else [("", "")]:
        udp, tcp = found["iperf3-udp" + peer], found["iperf3-tcp" + peer]
        for end in ("send", "recv"):
            row[f"{end}_vs_udp{suffix}"] = cpu[f"{end}_s_per_gib"] / udp[f"{end}_s_per_gib"]
            row[f"{end}_vs_tcp{suffix}"] = cpu[f"{end}_s_per_gib"] / tcp[f"{end}_s_per_gib"]
    return row


def warm_memory(nbytes: int) -> float:
    """Touch ``nbytes`` of fresh memory once and give it back; the seconds it took.

    On a VM the first touch of guest memory never used since boot costs about 3 s/GiB
    of host faults (docs/benchmarks.md, "The receiver's prefault"), which would land on
    whichever process allocates it first: the receiver's output pages. Freed pages are
    handed out again first, so touching as much as a run will use, before it, keeps
    that cost out of every measurement."""
    start = time.perf_counter()
    with mmap.mmap(-1, nbytes) as area:
        for off in range(0, nbytes, mmap.PAGESIZE):
            area[off] = 1
    return time.perf_counter() - start


def free_page_reporting() -> bool:
    """Whether a virtio balloon reports free guest pages to the host (feature bit 5,
    VIRTIO_BALLOON_F_REPORTING): the host then takes them back, and every first touch of a
    page freed a moment ago costs a host fault again, which :func:`warm_memory` cannot
    prevent. A receiver that writes fresh pages (``sdr recv`` into a new file) pays it;
    the memory-to-memory rows, like iperf3, reuse their buffers and do not."""
    for device in Path("/sys/bus/virtio/devices").glob("*"):
        try:
            if (device / "device").read_text().strip() != "0x0005":  # a balloon
                continue
            features = (device / "features").read_text().strip()
        except OSError:
            continue
        if len(features) > 5 and features[5] == "1":
            return True
    return False


SETTLE_S = 30.0
"""Seconds a file receiver's run waits where the VM reports free pages (see
:func:`settle_time`)."""


def settle_time(reporting: bool) -> float:
    """Seconds to wait before each run whose receiver writes a file: :data:`SETTLE_S`
    where the VM reports free pages to its host, else none.

    There a page freed a moment ago is still backed (writing 2 GiB into /dev/shm cost
    0.33-0.36 CPU s/GiB right after the last output was deleted) and one freed seconds
    ago may not be (1.7-1.8 s/GiB 3-30 s later in one hour, 0.3-0.7 in another: the host
    takes reported pages back as it sees fit, and the next first touch faults), so a
    receiver's figure followed what ran just before it, by more than iperf3's whole
    receive costs. After the wait no receiver inherits its predecessor's pages: each
    starts after the same idle time, as a server that was idle a while does."""
    return SETTLE_S if reporting else 0.0


def populate_cost(directory: Path, nbytes: int) -> float:
    """CPU seconds per GiB to populate the pages of a fresh ``nbytes`` file in
    ``directory`` (what the receiver's prefault does with its output): the part of the
    receiver's figure that depends on where the file lands, not on the transport."""
    path = directory / "populate.bin"
    try:
        with path.open("wb+") as fh:
            fh.truncate(nbytes)
            with mmap.mmap(fh.fileno(), nbytes) as area:
                start = time.process_time()
                prefault(memoryview(area))
                spent = time.process_time() - start
    finally:
        path.unlink(missing_ok=True)
    return spent * GIB / nbytes


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rates", default="1Gbit/s", help="paced rates, comma-separated")
    p.add_argument("--schemes", default=",".join(SCHEMES))
    p.add_argument(
        "--sizes",
        default="64MiB,1GiB",
        help="two sizes to difference (an sdr process's fixed cost varies by 0.1-0.2 s: "
        "half a GiB apart moved the result by up to 0.3 s/GiB)",
    )
    p.add_argument("--mtu", type=int, default=8192, help="SDR packet payload = iperf3 -l")
    p.add_argument("--message-size", default="16MiB")
    p.add_argument("--rtt", default="25ms", help="SDR's --rtt (and the emulated link's)")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument(
        "--write-bw",
        action="store_true",
        help="also each scheme memory to memory (`sdr write-bw --scheme`, reused buffers "
        "as iperf3's: no file, no digest)",
    )
    p.add_argument(
        "--ack-intervals",
        default="",
        help="SACK intervals to run each scheme at, comma-separated (e.g. ',6.25ms,12.5ms': "
        "the default, then rtt/4 and rtt/2 at 25 ms)",
    )
    p.add_argument("--digest", default="blake3", help="sdr send --digest (blake3, sha256, none)")
    p.add_argument("--link", action="store_true", help="also through the WAN emulator (root)")
    p.add_argument(
        "--out-dir",
        help="where the receiver writes (default: /dev/shm, memory as iperf3's receiver; "
        "a disk directory adds its page cost, printed as 'populate')",
    )
    p.add_argument(
        "--settle",
        type=float,
        help="seconds to wait before each run whose receiver writes a file (default: "
        f"{SETTLE_S:g} where the VM reports free pages to its host, else 0)",
    )
    p.add_argument("--json")
    args = p.parse_args(argv)
    if not shutil.which("iperf3"):
        raise SystemExit("iperf3 not found: run `make system` (or apt-get install iperf3)")
    small, big = (parse_size(s) for s in args.sizes.split(","))
    rates = args.rates.split(",")
    schemes = [s for s in args.schemes.split(",") if s]
    console = Console(width=130)
    rows: list[dict[str, Any]] = []
    reporting = free_page_reporting()
    if args.settle is None:
        args.settle = settle_time(reporting)
    if not reporting:  # where the host takes freed pages back, warming cannot help
        warmed = warm_memory(3 * (small + big))  # both inputs, one output, with room
        console.print(f"warmed {format_size(3 * (small + big))} of memory in {warmed:.2f} s")
    with tempfile.TemporaryDirectory(prefix="sdr-cpu-") as tmp:
        files = {n: make_payload(Path(tmp) / f"in-{n}.bin", n) for n in (small, big)}
        out_dir = Path(args.out_dir or ("/dev/shm" if Path("/dev/shm").is_dir() else tmp))
        out = out_dir / f"sdr-cpu-out-{os.getpid()}.bin"
        populate = populate_cost(out_dir, big)
        console.print(
            f"receiver output in {out_dir}: populating a fresh {format_size(big)} file there "
            f"costs {populate:.2f} CPU s/GiB (inside each recv figure below)"
        )
        if reporting:
            console.print(
                "[yellow]this VM reports free pages to its host: a page freed a moment ago "
                "costs a host fault at its next first touch (about 2 s/GiB measured), so every "
                "receiver that writes a file (`sdr recv`, iperf3 -F) carries it; the memory "
                f"rows do not. Each file run waits {args.settle:g} s first (--settle), so "
                "no receiver gets the pages its predecessor freed a moment before"
            )
        places = ["loopback"] + (["emulated"] if args.link else [])
        for place in places:
            for rate in rates:
                found = measure_place(place, rate, schemes, files, out, (small, big), args)
                rows += [_row(place, rate, name, cpu, found) for name, cpu in found.items()]
    table = Table(title=f"CPU s per GiB, {format_size(small)} vs {format_size(big)}, {args.mtu} B")
    for col in ("place", "rate", "peer", "vs iperf3", "send", "recv", "send/udp", "recv/udp",
                "send/tcp", "recv/tcp"):  # fmt: skip
        table.add_column(col, justify="left" if col in ("place", "peer", "vs iperf3") else "right")
    for r in rows:
        table.add_row(
            r["place"],
            format_rate(parse_rate(r["rate"])),
            r["peer"],
            r["basis"],
            f"{r['send_s_per_gib']:.2f}",
            f"{r['recv_s_per_gib']:.2f}",
            f"{r['send_vs_udp']:.2f}x",
            f"{r['recv_vs_udp']:.2f}x",
            f"{r['send_vs_tcp']:.2f}x",
            f"{r['recv_vs_tcp']:.2f}x",
        )
    console.print(table)
    console.print(f"load average before the end: {os.getloadavg()[0]:.2f}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "command": " ".join([sys.argv[0], *(argv or sys.argv[1:])]),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load": os.getloadavg(),
            "out_dir": str(out_dir),
            "populate_s_per_gib": populate,
            "free_page_reporting": reporting,
            "settle_s": args.settle,
        }
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
