"""The scenarios of ``benchmarks.congestion_emulated``, each on its own fresh link:
compete (one TCP flow, SDR joining), loss (SDR alone at random loss, then TCP CUBIC),
pair (two SDR flows); :func:`run_all` runs those the options ask for. A failed run is a
row with its error, not a crash."""

from __future__ import annotations

import pathlib
import tempfile
import time
from collections.abc import Callable
from typing import Any

from benchmarks.congestion_emulated_parts.iperf import IperfFlow, tune_tcp
from benchmarks.congestion_emulated_parts.link import (
    OneWayProbe,
    drops,
    idle_floor,
    link_row,
    make_link,
    queue_ms,
)
from benchmarks.congestion_emulated_parts.metrics import (
    compare_to_fixed,
    rate_between,
    summarize_compete,
    summarize_loss,
    summarize_pair,
)
from benchmarks.congestion_emulated_parts.options import ControllerSpec, Options
from benchmarks.congestion_emulated_parts.sdr_flow import SdrFlow, Workspace

SDR_PORTS = (18515, 18525)


def run_compete(opts: Options, ws: Workspace, tcp: str, spec: ControllerSpec, buffer_bdp: float):
    """One TCP flow, SDR joining after ``lead`` s; returns (row, link summary)."""
    label = f"compete {tcp} vs {spec.label}, {buffer_bdp:g} BDP"
    source = ws.payload(opts.size)
    with make_link(opts, 0.0, buffer_bdp) as link:
        tune_tcp(link, opts.tcp_buffer)
        t0 = time.monotonic()
        with OneWayProbe(link, t0) as probe:
            floor = idle_floor(probe)
            iperf = IperfFlow(link, tcp)
            try:
                time.sleep(opts.lead)
                sdr = SdrFlow(
                    link,
                    SDR_PORTS[0],
                    source,
                    ws.tmp / "out0.bin",
                    ws.send_args(opts, spec, 0.0),
                    opts.sdr_timeout,
                )
                sdr.wait()
                time.sleep(opts.tail)
            finally:
                iperf.stop()
            t_end = time.monotonic() - t0
        queue = queue_ms(probe, floor)
    row = summarize_compete(
        tcp_points=iperf.points(t0),
        sdr_points=sdr.points(t0),
        sdr_span=sdr.span(t0),
        tcp_start=iperf.started - t0,
        queue=queue,
        t_end=t_end,
        settle=opts.settle,
    )
    row.update(
        scenario="compete", label=label, tcp=tcp, controller=spec.label, buffer_bdp=buffer_bdp,
        buffer_ms=buffer_bdp * opts.rtt * 1e3,
        scheme=opts.scheme, size=opts.size, sdr_ok=sdr.error is None, sdr_error=ws.clean(sdr.error),
        tcp_error=iperf.error(), tcp_retransmits=iperf.retransmits,
        queue_drops=drops(link.summary, "drops_queue"), probes_sent=probe.sent,
        probes_received=len(probe.samples),
    )  # fmt: skip
    return row, link_row(label, link)


def run_sdr_alone(opts: Options, ws: Workspace, link: Any, spec: ControllerSpec, loss: float):
    """One SDR transfer of ``loss_size`` on an otherwise idle link: (seconds or None, error)."""
    flow = SdrFlow(
        link,
        SDR_PORTS[0],
        ws.payload(opts.loss_size),
        ws.tmp / "out0.bin",
        ws.send_args(opts, spec, loss),
        opts.sdr_timeout,
    )
    flow.wait()
    if flow.error is not None:
        return None, flow.error
    return flow.report["recv_end"] - flow.report["start"], None


def run_tcp_alone(opts: Options, link: Any, tcp: str) -> dict[str, Any]:
    """TCP alone for ``tcp_seconds``: goodput over the run after its first second."""
    tune_tcp(link, opts.tcp_buffer)
    flow = IperfFlow(link, tcp, seconds=opts.tcp_seconds)
    t0 = flow.started
    flow.wait(opts.tcp_seconds + 30)
    points = flow.points(t0)
    end = points[-1][0] if points else 0.0
    bps = rate_between(points, min(1.0, end / 2), end)
    return {"gbps": bps / 1e9, "error": flow.error(), "retransmits": flow.retransmits}


def run_loss(opts: Options, ws: Workspace, loss: float, progress: Callable[[str], None]):
    """SDR alone at ``loss`` (each loss controller, ``repeats`` runs, interleaved), then
    TCP CUBIC; returns (rows, link summary)."""
    label = f"loss {loss:g}"
    times: dict[str, list[float | None]] = {s.label: [] for s in opts.loss_controllers}
    errors: dict[str, list[str]] = {s.label: [] for s in opts.loss_controllers}
    with make_link(opts, loss, opts.buffers[0]) as link:
        for i in range(opts.repeats):
            for spec in opts.loss_controllers:
                progress(f"{label}: {spec.label} run {i + 1}/{opts.repeats}")
                seconds, error = run_sdr_alone(opts, ws, link, spec, loss)
                times[spec.label].append(seconds)
                if error:
                    errors[spec.label].append(ws.clean(error))
        progress(f"{label}: tcp cubic")
        tcp = run_tcp_alone(opts, link, "cubic")
    rows = [
        summarize_loss(loss, s.label, times[s.label], errors[s.label])
        for s in opts.loss_controllers
    ]
    implied = opts.loss_size * 8 / (tcp["gbps"] * 1e9) if tcp["gbps"] > 0 else None
    rows.append(
        {
            "scenario": "loss",
            "loss": loss,
            "controller": "tcp-cubic",
            "median_s": implied,
            "tcp_gbps": tcp["gbps"],
            "tcp_error": tcp["error"],
            "failures": 0,
            "runs_s": [],
        }
    )
    compare_to_fixed(rows)
    return rows, link_row(label, link)


def run_pair(opts: Options, ws: Workspace, spec: ControllerSpec):
    """Two SDR flows with controller ``spec``: the second is launched ``pair_lead`` s
    after the first one's transfer began (and joins after its own start-up, ~2 s)."""
    label = f"pair {spec.label}"
    source = ws.payload(opts.size)
    with make_link(opts, 0.0, opts.buffers[0]) as link:
        t0 = time.monotonic()
        args = ws.send_args(opts, spec, 0.0)
        first = SdrFlow(link, SDR_PORTS[0], source, ws.tmp / "out0.bin", args, opts.sdr_timeout)
        first.started.wait(opts.sdr_timeout)
        time.sleep(opts.pair_lead)
        second = SdrFlow(link, SDR_PORTS[1], source, ws.tmp / "out1.bin", args, opts.sdr_timeout)
        first.wait()
        second.wait()
        t_end = time.monotonic() - t0
    flows = (first, second)
    row = summarize_pair(
        [f.points(t0) for f in flows], [f.span(t0) for f in flows], t_end, opts.settle
    )
    ok = all(f.error is None for f in flows)
    met = ok and row["jain"] is not None and row["jain"] >= 0.95
    row.update(
        scenario="pair", label=label, controller=spec.label, met=met,
        errors=[ws.clean(f.error) for f in flows],
        completion_s=[f.span(t0)[1] - f.span(t0)[0] for f in flows],
    )  # fmt: skip
    return row, link_row(label, link)


def _guard(label: str, run: Callable[..., Any], *args: Any) -> Any:
    try:
        return run(*args)
    except Exception as exc:  # a failed run is a result, not a crash
        return {"label": label, "error": f"{type(exc).__name__}: {exc}"[-500:]}, None


def run_all(opts: Options, progress: Callable[[str], None]) -> dict[str, Any]:
    results: dict[str, Any] = {"compete": [], "loss": [], "pair": [], "links": []}
    with tempfile.TemporaryDirectory(prefix="sdr-cc-") as tmp:
        ws = Workspace(pathlib.Path(tmp))
        if "compete" in opts.scenarios:
            for buffer_bdp in opts.buffers:
                for tcp in opts.tcp:
                    for spec in opts.controllers:
                        progress(f"compete: {tcp} vs SDR {spec.label}, buffer {buffer_bdp:g} BDP")
                        row, link = _guard(spec.label, run_compete, opts, ws, tcp, spec, buffer_bdp)
                        results["compete"].append(row)
                        results["links"].append(link)
        if "loss" in opts.scenarios:
            for loss in opts.losses:
                rows, link = _guard(f"loss {loss:g}", run_loss, opts, ws, loss, progress)
                results["loss"] += rows if isinstance(rows, list) else [rows]
                results["links"].append(link)
        if "pair" in opts.scenarios:
            for spec in opts.pair_controllers:
                progress(f"pair: two SDR flows, {spec.label}")
                row, link = _guard(spec.label, run_pair, opts, ws, spec)
                results["pair"].append(row)
                results["links"].append(link)
    results["links"] = [link for link in results["links"] if link]
    return results
