"""One round of a scheme machine, as a connection runs it: its due timer, then its work."""

from __future__ import annotations

from sdr.reliability.base import Machine

__all__ = ["run_machine"]


def run_machine(now: float, machine: Machine) -> None:
    """Fire ``machine``'s timer if it is due at ``now``, then let it do its pending work."""
    deadline = machine.next_timer()
    if deadline is not None and now >= deadline:
        machine.handle_timer(now)
    if machine.has_work():
        machine.do_work(now)
