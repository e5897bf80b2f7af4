"""Run every fuzz target under atheris for N inputs each and write a JSON summary.

    python tools/fuzz/campaign.py --runs 10000000 --jobs 1 --out fuzz-campaign.json
    python tools/fuzz/campaign.py --runs 20000 --targets cts plan     # a quick check
    python tools/fuzz/campaign.py --targets udp_receive --session-inputs 1000000

Each target runs in its own process (``tools/fuzz/run.py``) with a corpus directory
seeded from ``seeds.py``; crashes are saved as ``crash-*`` files under the work
directory. The summary (inputs executed, crashes, seconds, exit status per target) is
rewritten after every target, so a campaign stopped early still records what finished.

An input that takes longer than ``--slow-ms`` (100 ms of CPU time, confirmed by a second
run, see registry.slow_guard) is a finding like a crash: its ``crash-*`` file is counted
with the crashes, and ``slow_inputs`` says how many of them were slow. libFuzzer's
``-timeout`` (whole seconds, ``--hang-s``) stays as the backstop for an input that never
returns to Python; its ``timeout-*`` files count as crashes too.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

PRIORITY = {
    name: i
    for i, name in enumerate(
        ("udp_receive", "roce_decode", "reliability_message", "reliability_config", "plan")
    )
}
"""Targets fuzzed first (the network-facing decoders), the rest follow by name."""
_RUNS = re.compile(r"stat::number_of_executed_units:\s*(\d+)")
_DONE = re.compile(r"Done (\d+) runs in (\d+) second")
_PULSE = re.compile(r"#(\d+)\s+(?:pulse|NEW|REDUCE|INITED)")
_COVERAGE = re.compile(r"\bcov: (\d+) ft: (\d+)")
_SLOW = re.compile(r"\bSlowInput: ")
_FINDINGS = ("crash", "timeout")
"""Artifact prefixes that are findings: a target raised (or was slow), or it hung."""


def _executed(log: str) -> int:
    """Inputs executed, from libFuzzer's final stats (or its last progress line)."""
    for pattern in (_RUNS, _DONE):
        found = pattern.findall(log)
        if found:
            return int(found[-1][0] if isinstance(found[-1], tuple) else found[-1])
    pulses = _PULSE.findall(log)
    return int(pulses[-1]) if pulses else 0


def _session(
    name: str,
    runs: int,
    corpus: pathlib.Path,
    artifacts: pathlib.Path,
    log_path: pathlib.Path,
    max_len: int,
    timeout: float,
    seconds: float,
    rss_limit_mb: int,
    slow_ms: float = 100.0,
    hang_s: int = 10,
) -> tuple[int | str, int, tuple[int, int]]:
    """One libFuzzer process over the shared corpus: (exit status, inputs executed,
    (edges, features) covered). ``slow_ms`` reaches the targets as SDR_FUZZ_SLOW_MS."""
    from registry import SLOW_ENV

    cmd = [
        sys.executable,
        str(HERE / "run.py"),
        name,
        f"-runs={runs}",
        f"-max_len={max_len}",
        "-print_final_stats=1",
        f"-artifact_prefix={artifacts}/",
        f"-rss_limit_mb={rss_limit_mb}",
        f"-timeout={max(1, int(hang_s))}",
        *([f"-max_total_time={max(1, int(seconds))}"] if seconds else []),
        str(corpus),
    ]
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    env[SLOW_ENV] = f"{slow_ms:g}"
    with open(log_path, "w") as log:
        try:
            proc = subprocess.run(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT, timeout=timeout
            )
            status: int | str = proc.returncode
        except subprocess.TimeoutExpired:
            status = "timeout"
    text = log_path.read_text(errors="replace")
    return status, _executed(text), _coverage(text)


def _is_finding(name: str) -> bool:
    return name.startswith(_FINDINGS)


def _coverage(log: str) -> tuple[int, int]:
    """(edges, features) libFuzzer last reported: how much of the code the inputs reach."""
    found = _COVERAGE.findall(log)
    return (int(found[-1][0]), int(found[-1][1])) if found else (0, 0)


def run_target(
    name: str,
    runs: int,
    workdir: pathlib.Path,
    max_len: int,
    timeout: float,
    seconds: int,
    session_inputs: int = 0,
    rss_limit_mb: int = 4096,
    slow_ms: float = 100.0,
    hang_s: int = 10,
) -> dict:
    """Fuzz one target for ``runs`` inputs or ``seconds`` (0: no limit); its summary row.

    ``slow_ms``: an input slower than this is a finding (0: no limit); ``hang_s``:
    libFuzzer's ``-timeout`` for an input that never returns.

    With ``session_inputs`` the inputs are split over several libFuzzer processes of at
    most that many each, all growing one corpus: atheris 3.0 keeps a reference to the
    result of every instrumented comparison that is a NumPy array, so a long session of a
    target whose code compares arrays grows without bound (a few KiB per input) although
    the code under test does not (docs/reliability.md, "Fuzzing"). A crash ends the
    target; a session stopped at the RSS limit is followed by the next one.
    """
    from seeds import write_seeds

    corpus = workdir / "corpus" / name
    seeded = write_seeds(name, corpus)
    artifacts = workdir / "crashes" / name
    artifacts.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    executed, sessions, status, coverage = 0, 0, 0, (0, 0)
    logs = []
    while executed < runs:
        left_s = seconds - (time.monotonic() - start) if seconds else 0.0
        if seconds and left_s < 1:
            break
        sessions += 1
        log_path = workdir / (f"{name}.log" if sessions == 1 else f"{name}.{sessions}.log")
        logs.append(str(log_path.relative_to(workdir)))
        todo = min(runs - executed, session_inputs) if session_inputs else runs - executed
        status, done, reached = _session(
            name,
            todo,
            corpus,
            artifacts,
            log_path,
            max_len,
            timeout,
            left_s,
            rss_limit_mb,
            slow_ms,
            hang_s,
        )
        executed += done
        coverage = max(coverage, reached)
        crashed = any(_is_finding(p.name) for p in artifacts.iterdir())
        if crashed or status == "timeout" or done == 0 or not session_inputs:
            break  # an out-of-memory stop (libFuzzer status 71) goes on with a new session
    elapsed = time.monotonic() - start
    found = sorted(p.name for p in artifacts.iterdir())
    crashes = [f for f in found if _is_finding(f)]  # the target raised, was slow, or hung
    ooms = [f for f in found if f.startswith("oom")]  # libFuzzer's RSS limit: no verdict
    # a session ends at its first finding, and atheris prints a SlowInput twice
    slow = sum(1 for log in logs if _SLOW.search((workdir / log).read_text(errors="replace")))
    return {
        "target": name,
        "inputs": executed,
        "requested": runs,
        "complete": status == 0 and executed >= runs,
        "crashes": len(crashes),
        "crash_files": crashes,
        "slow_inputs": slow,
        "timeouts": sum(1 for f in crashes if f.startswith("timeout")),
        "slow_ms": slow_ms,
        "out_of_memory": ooms,
        "exit_status": status,
        "sessions": sessions,
        "edges": coverage[0],
        "features": coverage[1],
        "seconds": round(elapsed, 1),
        "inputs_per_s": round(executed / elapsed, 1) if elapsed else 0.0,
        "seed_inputs": seeded,
        "corpus_files": sum(1 for _ in corpus.iterdir()),
        "logs": logs,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the campaign; exit status 1 when any target crashed."""
    import targets  # noqa: F401  (registers every target)
    from registry import TARGETS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000_000, help="inputs per target")
    parser.add_argument("--jobs", type=int, default=1, help="targets fuzzed at once")
    parser.add_argument("--targets", nargs="*", default=None, help="default: all")
    parser.add_argument("--workdir", type=pathlib.Path, default=ROOT / "out" / "fuzz")
    parser.add_argument("--out", type=pathlib.Path, default=None, help="summary JSON")
    parser.add_argument("--max-len", type=int, default=4096)
    parser.add_argument("--timeout", type=float, default=24 * 3600.0, help="s per target")
    parser.add_argument(
        "--max-seconds", type=int, default=0, help="stop each target after this long (0: never)"
    )
    parser.add_argument(
        "--session-inputs",
        type=int,
        default=0,
        help="split each target into libFuzzer sessions of at most this many inputs "
        "(0: one session); bounds atheris' own memory growth",
    )
    parser.add_argument("--rss-limit-mb", type=int, default=4096, help="libFuzzer RSS limit")
    parser.add_argument(
        "--slow-ms",
        type=float,
        default=100.0,
        help="an input slower than this (CPU time, twice) is a finding (0: no limit)",
    )
    parser.add_argument(
        "--hang-s", type=int, default=10, help="libFuzzer -timeout: an input that never returns"
    )
    args = parser.parse_args(argv)
    if not 0 <= args.slow_ms < float("inf"):
        parser.error(f"--slow-ms must be a finite number of ms >= 0, got {args.slow_ms}")
    names = args.targets or sorted(
        TARGETS, key=lambda n: (n not in PRIORITY, PRIORITY.get(n, 0), n)
    )
    unknown = sorted(set(names) - set(TARGETS))
    if unknown:
        parser.error(f"unknown targets {unknown}; known: {sorted(TARGETS)}")
    args.workdir.mkdir(parents=True, exist_ok=True)
    out = args.out or args.workdir / "campaign.json"
    summary: dict[str, Any] = {
        "command": " ".join([pathlib.Path(sys.argv[0]).name, *(argv or sys.argv[1:])]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "python": platform.python_version(),
        "runs_per_target": args.runs,
        "max_seconds_per_target": args.max_seconds,
        "session_inputs": args.session_inputs,
        "slow_ms": args.slow_ms,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "targets": {},
    }

    def record(row: dict) -> None:
        summary["targets"][row["target"]] = row
        summary["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        out.write_text(json.dumps(summary, indent=2) + "\n")
        print(
            f"{row['target']:<22} {row['inputs']:>11,} inputs  {row['crashes']} crashes  "
            f"({row['slow_inputs']} slow)  "
            f"{row['seconds']:>8.0f} s  {row['edges']:>4} edges  status {row['exit_status']}",
            flush=True,
        )

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [
            pool.submit(
                run_target,
                n,
                args.runs,
                args.workdir,
                args.max_len,
                args.timeout,
                args.max_seconds,
                args.session_inputs,
                args.rss_limit_mb,
                args.slow_ms,
                args.hang_s,
            )
            for n in names
        ]
        for future in as_completed(futures):
            record(future.result())
    return 1 if any(r["crashes"] for r in summary["targets"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
