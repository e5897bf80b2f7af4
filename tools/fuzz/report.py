"""Merge fuzz campaign sessions into one table: inputs per target since its last fix.

    python tools/fuzz/report.py tools/fuzz/results/campaign.json            # Markdown table
    python tools/fuzz/report.py tools/fuzz/results/campaign.json \\
        --add out/fuzz/campaign.json --session s2 [--code-changed TARGET ...]  # record one

A campaign runs in sessions (``tools/fuzz/campaign.py`` writes one JSON summary each);
the results file keeps them all. A session in which a target crashed marks a fix: the
bug is fixed before fuzzing goes on, so only the inputs of that target's later sessions
count towards its goal (the crashing sessions are listed, not counted). A session's
``code_changed`` list names targets whose code changed since their earlier sessions:
those start counting afresh with it.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from typing import Any

GOAL = 10_000_000


def merge(sessions: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per target: inputs and seconds since its last crash, all crashes, coverage."""
    out: dict[str, dict[str, Any]] = {}
    for session in sessions:
        for name in session.get("code_changed", ()):
            if name in out:
                out[name]["inputs"], out[name]["seconds"] = 0, 0.0
        for name, row in session["targets"].items():
            t = out.setdefault(
                name,
                {"inputs": 0, "seconds": 0.0, "crashes": 0, "fixed_after": [], "edges": 0},
            )
            crashes = [f for f in row["crash_files"] if f.startswith("crash")]
            if crashes:  # (older summaries listed out-of-memory stops among crash_files)
                t["crashes"] += len(crashes)
                t["fixed_after"].append(row["inputs"])
                t["inputs"], t["seconds"] = 0, 0.0  # the code changed: count afresh
                continue
            t["inputs"] += row["inputs"]
            t["seconds"] += row["seconds"]
            t["edges"] = max(t["edges"], row.get("edges", 0))
    return out


def table(merged: dict[str, dict[str, Any]], goal: int = GOAL) -> str:
    """The Markdown table docs/reliability.md shows."""
    lines = [
        "| target | inputs since the last fix | seconds | crashes found (fixed) "
        f"| edges covered | reached {goal / 1e6:g} M |",
        "|---|---:|---:|---|---:|:---:|",
    ]
    for name in sorted(merged):
        t = merged[name]
        found = (
            f"{t['crashes']} (after {', '.join(f'{n:,}' for n in t['fixed_after'])} inputs)"
            if t["crashes"]
            else "0"
        )
        edges = str(t["edges"]) if t["edges"] else "-"
        lines.append(
            f"| `{name}` | {t['inputs']:,} | {t['seconds']:,.0f} | {found} | {edges} "
            f"| {'yes' if t['inputs'] >= goal else 'no'} |"
        )
    total = sum(t["inputs"] for t in merged.values())
    lines.append(f"| all ({len(merged)} targets) | {total:,} | | | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the table; with ``--add``, first append a session to the results file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=pathlib.Path, help="the results file (all sessions)")
    parser.add_argument("--add", type=pathlib.Path, help="a campaign.py summary to append")
    parser.add_argument("--session", default=None, help="a name for the added session")
    parser.add_argument(
        "--code-changed",
        nargs="*",
        default=[],
        help="targets whose code changed since their earlier sessions (count afresh)",
    )
    parser.add_argument("--goal", type=int, default=GOAL, help="inputs per target")
    args = parser.parse_args(argv)
    doc = json.loads(args.results.read_text()) if args.results.exists() else {"sessions": []}
    if args.add:
        session = json.loads(args.add.read_text())
        session["session"] = args.session or args.add.stem
        session["code_changed"] = sorted(args.code_changed)
        doc["sessions"].append(session)
    merged = merge(doc["sessions"])
    doc["total_inputs"] = sum(r["inputs"] for s in doc["sessions"] for r in s["targets"].values())
    doc["since_last_fix"] = {name: t["inputs"] for name, t in sorted(merged.items())}
    if args.add:
        args.results.write_text(json.dumps(doc, indent=1) + "\n")
    print(table(merged, args.goal))
    return 0


if __name__ == "__main__":
    sys.exit(main())
