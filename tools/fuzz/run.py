"""Run one fuzz target under atheris (coverage-guided).

    python tools/fuzz/run.py TARGET [-runs=10000000] [-max_len=4096] [corpus_dir ...]
    python tools/fuzz/run.py --list

Exit status 0 means no crash: every input was accepted or raised an SDRError.
"""

from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

INSTRUMENTED = (
    "sdr",
    "backends",
    "sdr.cli",
    "simulator",
    "registry",
    "targets",
    "targets_wire",
    "targets_text",
    "targets_connect",
    "targets_control",
    "targets_placement",
    "targets_forward",
    "targets_setup",
    "targets_arrivals",
)
"""Top-level modules whose code atheris instruments (and everything below them)."""


def main() -> None:
    import atheris

    # coverage feedback for the project's code only: instrumenting the standard library
    # and NumPy as well costs minutes at start-up and adds nothing the targets test
    with atheris.instrument_imports(include=list(INSTRUMENTED)):
        from targets import TARGETS

        import sdr  # noqa: F401
        import sdr.backends  # noqa: F401
    if len(sys.argv) < 2 or sys.argv[1] == "--list":
        print("\n".join(sorted(TARGETS)))
        return
    fn = TARGETS[sys.argv[1]]
    atheris.Setup([sys.argv[0], *sys.argv[2:]], fn)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
