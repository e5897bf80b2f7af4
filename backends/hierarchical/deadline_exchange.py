"""The WAN phase of a deadline-bounded allreduce: slices out, what arrived by the
deadline, one exchange of masks, the late slices cancelled at both ends.

Each rank sends its contribution (its datacenter's sum of shard ``l``) to the rank with
the same local index in every other datacenter, cut into ``slices`` reliable writes, and
posts as many receives from each of them. Half a round trip before the deadline it stops
its writes that are still out (nothing more of them crosses the link: what it would send
from then on reaches the peers after their cut, and ahead of its note). At the deadline it
notes which slices arrived verified (a write completes only once every byte of it is
verified) and sends that note,
one small reliable write per peer, after which it waits for theirs: the agreement round,
about half a round trip after the last peer's deadline. Then every rank holds the same
``arrived[y, x, s]`` array (:func:`sdr.collectives.deadline.agree` decides from it).
The receives still open are cancelled when the note is taken, so a slice a rank
acknowledges is always in its note. With two datacenters that lets a rank that has
every slice of the peer's and an acknowledgement for every one of its own decide "all
in" without waiting for the peer's note (which can only agree): a call where everything
crosses ends as soon as it has, without the agreement round's wait. SDR matches writes
to receives by order, so both ends post and cancel the same messages: order matching
survives every call. A rank that finds nobody in the call with it at the deadline (no
peer's clear-to-send, nothing arrived) decides alone that nothing is in: every rank
reaches that decision from what it learns, so a slow site or a link dark from before
the call costs the others one deadline, not the wait for the site.

The cut is timed from the later peer's entry, dated by the arrival of its first
clear-to-send less half an RTT and the set-up: so :meth:`DeadlineExchange.open` posts
the receives as the call's first act (the set-up is then the same short code at both
ends), and the core keeps when each clear-to-send came, not when the loop looked.
Each call's phases are kept in ``timeline`` (the report's), to see where a late step's
time went.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from sdr.backends.hierarchical.links import SdrLinks
from sdr.collectives.deadline import slice_bounds
from sdr.errors import ConfigError, TimeoutError
from sdr.runtime import ReceiveHandle, WriteHandle

__all__ = ["DeadlineExchange", "Opened"]

_SETUPS_KEPT = 9
"""Our recent set-ups whose median stands for a peer's when its entry is dated."""
NOTES_BOUND_S = 0.1
"""How long a call drives, at least, to see its notes onto the wire (an RTT if longer)."""


@dataclass
class Opened:
    """One call's receives, posted at its start (:meth:`DeadlineExchange.open`)."""

    n: int
    dtype: np.dtype[Any]
    slices: int
    bounds: np.ndarray
    order: list[int]
    held: frozenset[int]
    scratch: dict[int, np.ndarray]
    masks: dict[int, np.ndarray]
    recvs: dict[int, list[ReceiveHandle]]
    mask_recvs: dict[int, ReceiveHandle]
    setup: float
    """Seconds from the call's start to our clear-to-sends."""
    typical_setup: float
    """The median of our recent set-ups: what a peer's is taken to be when its entry is
    dated (one preempted set-up of ours says nothing about the peer's)."""


class DeadlineExchange:
    """This rank's deadline exchanges over ``links`` (datacenter ``me`` of ``datacenters``)."""

    def __init__(self, links: SdrLinks, me: int, datacenters: int) -> None:
        self.links = links
        self.me = me
        self.datacenters = datacenters
        self._calls = 0
        """Calls so far (the same on every rank: a collective); rotates the slice order."""
        self._masks_out: list[tuple[WriteHandle, np.ndarray]] = []
        """Mask writes not acknowledged yet, with the buffers they read."""
        self._setups: deque[float] = deque(maxlen=_SETUPS_KEPT)
        """Our last set-ups (seconds from a call's start to its clear-to-sends)."""
        self._strays: list[ReceiveHandle] = []
        """Peers' notes of calls we decided alone: they land later, unread."""
        self.alone = 0
        """Calls decided without the peers' notes (nobody was in the call with us)."""
        self.unanimous = 0
        """Calls decided without the peers' notes because everything crossed both ways
        (two datacenters): the agreement round's wait is saved."""
        self.timeline: dict[str, float | str | None] = {}
        """The last call's phases, seconds from its start: ``setup`` (our clear-to-sends
        out), ``entered`` (the last peer's entry as dated, when one came), ``cut`` (when
        the cut was due), ``stopped`` (the exchange ended: the cut, or earlier when all
        was done), ``agreed`` (the decision known); ``decision``: ``unanimous``,
        ``alone`` or ``notes`` (the peers' notes were waited for)."""

    def check(self, nbytes: int, slices: int) -> None:
        """ConfigError unless ``slices`` slices of ``nbytes`` fit the links."""
        options = self.links.options
        in_flight = self.links.config.max_in_flight
        if slices > in_flight - 2:
            raise ConfigError(
                f"{slices} slices per deadline allreduce: at most max_in_flight - 2 = "
                f"{in_flight - 2} (every slice and the mask are in flight at once)"
            )
        largest = -(-nbytes // slices)
        limit = int(options.attr().max_message_size)
        if largest > limit:
            need = -(-nbytes // limit)
            raise ConfigError(
                f"a slice of {largest} bytes exceeds the links' max_message_size {limit}: "
                f"use >= {need} slices or a larger max_message_size"
            )

    def open(
        self, n: int, dtype: Any, slices: int, begun: float, withhold: Iterable[int] = ()
    ) -> Opened:
        """Post this call's receives (``n`` elements of ``dtype`` from every peer, in
        ``slices`` slices, and each peer's note) as the call's first act: their
        clear-to-sends date our entry at the peers, so nothing may come before them (the
        carry, the local reduction: 1-14 ms and more on a busy host, counted as the
        peer's lateness). ``begun``: the call's start (``time.monotonic()``)."""
        d = self.datacenters
        slices = max(1, min(slices, n))
        itemsize = np.dtype(dtype).itemsize
        self.check(n * itemsize, slices)
        held = frozenset(withhold)
        if bad := sorted(s for s in held if not 0 <= s < slices):
            raise ConfigError(f"withheld slices {bad} are not among 0..{slices - 1}")
        bounds = slice_bounds(n, slices) * itemsize
        # each call starts one slice further on: a deadline cuts the tail of what is sent,
        # and the same slices must not be the tail every time (their carry would pile up)
        order = [(self._calls + i) % slices for i in range(slices)]
        self._calls += 1
        ctx = self.links.ctx
        peers = sorted(self.links.rqps)
        scratch = {p: np.empty(n, dtype) for p in peers}
        masks = {p: np.zeros((d, slices), np.uint8) for p in peers}
        recvs: dict[int, list[ReceiveHandle]] = {}
        mask_recvs: dict[int, ReceiveHandle] = {}
        with self.links.exclusive():
            self._prune()
            for p in peers:  # receives first: the peer's writes find them (clear-to-send)
                rqp, into = self.links.rqps[p], ctx.register(scratch[p].view(np.uint8).reshape(-1))
                posted = {
                    s: rqp.post_recv(into, int(bounds[s]), int(bounds[s + 1] - bounds[s]))
                    for s in order
                }
                recvs[p] = [posted[s] for s in range(slices)]
                mask_recvs[p] = rqp.post_recv(ctx.register(masks[p]), 0, masks[p].nbytes)
            # the clear-to-sends leave now, not at the next round of whichever thread
            # comes first (0-3 ms later, after the carry and the local reduction): that
            # wait is not in the set-up below, and a peer dated our entry that much late
            for rqp in dict.fromkeys(self.links.rqps.values()):
                rqp.progress()
        # from the call's start to our clear-to-sends: a peer's takes about as long (the
        # same code), so its entry is its first clear-to-send less this and half an RTT
        setup = max(time.monotonic() - begun, 0.0)
        self._setups.append(setup)
        typical = float(np.median(self._setups))
        return Opened(n, np.dtype(dtype), slices, bounds, order, held, scratch, masks, recvs,
                      mask_recvs, setup, typical)  # fmt: skip

    def run(
        self,
        contribution: np.ndarray,
        slices: int,
        until: float,
        withhold: Iterable[int] = (),
        grace: float | None = None,
        opened: Opened | None = None,
        while_waiting: Callable[[list[np.ndarray | None], np.ndarray], None] | None = None,
    ) -> tuple[list[np.ndarray | None], np.ndarray, int]:
        """Exchange ``contribution`` (flat, contiguous) with every peer until ``until``
        (``time.monotonic()``); ``(contributions, arrived, slices)``.

        ``contributions[x]`` is datacenter ``x``'s array as it landed here (ours for
        ``me``); only its slices that ``arrived[me, x]`` marks hold its bytes.
        ``withhold``: slices of ours to treat as late (fault injection for tests and
        demos: their writes are cancelled before a packet leaves). ``grace``: the call's
        deadline in seconds (``until`` minus its start): how much later the cut may move
        for a peer that entered later (default: none). ``opened``: this call's receives,
        posted by :meth:`open` at its start (else posted here: ``slices`` and
        ``withhold`` as given to :meth:`open` then). ``while_waiting(contributions,
        guess)``: called once our notes are out, while the peers' cross (half a round
        trip of nothing to do), with ``arrived`` as far as this rank can tell: a peer's
        note holds every slice of ours it acknowledged, and may hold more.
        """
        grace = 0.0 if grace is None else grace
        begun = until - grace
        if opened is None:
            opened = self.open(contribution.size, contribution.dtype, slices, begun, withhold)
        if (contribution.size, contribution.dtype) != (opened.n, opened.dtype):
            raise ConfigError(
                f"deadline exchange opened for {opened.n} x {opened.dtype}, given "
                f"{contribution.size} x {contribution.dtype}"
            )
        d, slices, bounds, order = self.datacenters, opened.slices, opened.bounds, opened.order
        held, scratch, masks = opened.held, opened.scratch, opened.masks
        recvs, mask_recvs, setup = opened.recvs, opened.mask_recvs, opened.setup
        ctx = self.links.ctx
        peers = sorted(self.links.rqps)
        source = np.ascontiguousarray(contribution).view(np.uint8).reshape(-1)
        mr_source = ctx.register(source)
        writes: dict[int, list[WriteHandle]] = {}
        with self.links.exclusive():
            for p in peers:
                rqp = self.links.rqps[p]
                writes[p] = []
                for s in order:
                    lo, hi = int(bounds[s]), int(bounds[s + 1])
                    handle = rqp.write(mr_source, lo, hi - lo)
                    if s in held:
                        rqp.cancel(handle)
                    writes[p].append(handle)
            # done early only when both directions are: our receives landed and our
            # writes were acknowledged (cancelling a write still on its way would cut the
            # peer's window short)
            everything: list[ReceiveHandle | WriteHandle] = [h for p in peers for h in recvs[p]]
            everything += [h for p in peers for h in writes[p]]
            probes = [
                (p, writes[p][i]) for p in peers for i, s in enumerate(order) if s not in held
            ]
            agreement = list(mask_recvs.values())
            sent_by: dict[int, bool] = {}  # our writes as they stood when we stopped them

            def stop_writes() -> None:
                # what we would send from now on reaches the peers after their cut (they
                # cut when we do): it cannot count, and ahead of our note in the link's
                # queue and in their receive loop it only delays the note. A write whose
                # packets are all out stays until the cut: its acknowledgement may come
                # (the guess, and "unanimous", read it)
                for p in peers:
                    rqp = self.links.rqps[p]
                    for handle in writes[p]:
                        if not rqp.sent(handle):
                            sent_by[id(handle)] = handle.done
                            rqp.cancel(handle)

            # every peer's note is here: they have all cut, nothing more will count
            entered, cut, heard = self._drive_until(
                lambda: all(h.finished for h in everything) or all(h.done for h in agreement),
                until,
                grace,
                probes,
                opened.typical_setup,
                stop_writes,
            )
            stopped = time.monotonic()
            mine = np.zeros((d, slices), np.uint8)
            mine[self.me] = 1
            for p in peers:
                mine[p] = [h.done for h in recvs[p]]
            # nobody is in the call with us (no clear-to-send came, nothing arrived): then
            # none of our slices left and none of theirs is here, so every rank will
            # decide that nothing is in whatever it learns; we need not wait for their
            # notes (a slow site, a link dark from before the call). Whether one came is
            # what the drive saw: a write we stopped no longer says it was cleared
            alone = not mine[peers].any() and not heard
            # two datacenters, every slice of theirs here and every one of ours
            # acknowledged: the peer's note can only say that all of ours arrived (it
            # cancels its open receives when it takes its note, so nothing it
            # acknowledges is missing from it), so the outcome is known: all in
            unanimous = (
                d == 2
                and bool(mine.all())
                and all(sent_by.get(id(h), h.done) for p in peers for h in writes[p])
            )
            for p in peers:  # our late writes go no further: the link is the mask's now
                for handle in writes[p]:
                    self.links.rqps[p].cancel(handle)
                for recv in recvs[p]:  # and what arrives after our note does not count
                    self.links.rqps[p].cancel(recv)
            for p in peers:
                note = mine.copy()  # unchanged until its write completes
                rqp = self.links.rqps[p]
                self._masks_out.append((rqp.write(ctx.register(note), 0, note.nbytes), note))
            contributions: list[np.ndarray | None] = [None] * d
            contributions[self.me] = contribution
            for p in peers:
                contributions[p] = scratch[p]
            if alone or unanimous:
                self.alone += alone
                self.unanimous += unanimous
                self._strays += agreement  # their notes land later, unread
                for p in peers:
                    masks[p][:] = unanimous
                self._send_notes([h for h, _ in self._masks_out[-len(peers) :]])
            else:
                if while_waiting is not None:
                    self._send_notes([h for h, _ in self._masks_out[-len(peers) :]])
                    while_waiting(contributions, self._guess(mine, writes, order, sent_by))
                self.links.drive(
                    lambda: all(h.finished for h in agreement),
                    self.links.options.timeout,
                    "the deadline allreduce's agreement round",
                )
                for h in agreement:
                    h._check()
            self.timeline = {
                "setup": setup,
                "entered": entered - begun if entered is not None else None,
                "cut": cut - begun,
                "stopped": stopped - begun,
                "agreed": time.monotonic() - begun,
                "decision": "alone" if alone else "unanimous" if unanimous else "notes",
            }
        arrived = np.zeros((d, d, slices), bool)
        arrived[self.me] = mine.astype(bool)
        for p in peers:
            arrived[p] = masks[p].astype(bool)
        return contributions, arrived, slices

    def _guess(
        self,
        mine: np.ndarray,
        writes: dict[int, list[WriteHandle]],
        order: list[int],
        stopped: dict[int, bool],
    ) -> np.ndarray:
        """``arrived`` before the peers' notes come: ours; and each peer holds its own
        slices, ours that it acknowledged (it takes its note before it acknowledges
        more; ``stopped``: a write's state when we stopped it, by ``id``), and of the
        others what we hold."""
        arrived = np.repeat(mine.astype(bool)[None], self.datacenters, axis=0)
        for p, handles in writes.items():
            arrived[p, p] = True
            arrived[p, self.me] = False
            arrived[p, self.me, order] = [stopped.get(id(h), h.done) for h in handles]
        return arrived

    def _drive_until(
        self,
        done: Any,
        until: float,
        grace: float,
        probes: list[tuple[int, WriteHandle]],
        setup: float = 0.0,
        stop_writes: Callable[[], None] | None = None,
    ) -> tuple[float | None, float, set[int]]:
        """Progress until ``done()`` or the deadline. The deadline counts from when every
        peer is in the call too (a clear-to-send from each is here, half a round trip
        after it posted): ranks that enter ``d`` seconds apart then cut at about the same
        moment, instead of the early one cutting ``d`` seconds of the late one's window.
        The first clear-to-send of each peer dates its entry (one lost and asked for
        again must not move the cut an RTO later), less ``setup``: the typical time from
        our own entry to our clear-to-sends, which the peer's code takes too (before, the
        later peer's entry was dated its 2-4 ms of set-up late, and the earlier rank cut
        that much after it; with this call's own set-up, a preempted set-up of ours
        moved our cut off the peer's by as much). The cut moves at most ``grace`` s later
        (a slow site). ``stop_writes()`` runs once, half an RTT before the cut, when every
        peer is in the call: what we send after it arrives after the peers' cut (they cut
        when we do), so it cannot count, and it would reach them ahead of our note (in the
        link's queue and their receive loop: 1 ms of the note's latency at the median and
        2 at p90, at 1 Gbit/s, 25 ms, 1e-2). Returns (the last peer's entry as dated,
        None if none came; the cut; the peers whose clear-to-send came)."""
        rtqps, half_rtt = self.links.rqps, float(self.links.config.rtt) / 2
        start = until - grace  # the call's start: grace is its deadline
        cut = [until]
        entry: list[float] = []
        waiting = {p for p, _ in probes}
        first: dict[int, float] = {}  # each peer's first clear-to-send, as it came

        stopping = [stop_writes]  # emptied once it ran

        def stop_due() -> float:
            # not before every peer's entry is known: it may move the cut later
            return cut[0] - half_rtt if stopping[0] is not None and not waiting else cut[0]

        def over() -> bool:
            if waiting:
                now = time.monotonic()
                for p, h in probes:
                    if p in waiting and rtqps[p].cleared(h):
                        # when it came, not when we looked: a busy round looks late
                        came = rtqps[p].cleared_at(h)
                        first[p] = min(first.get(p, now), now if came is None else came)
                waiting.difference_update(first)
                if not waiting:
                    entered = max(start, max(first.values()) - half_rtt - setup)
                    entry.append(entered)
                    cut[0] = min(max(until, entered + grace), until + grace)
            now = time.monotonic()
            if (stop := stopping[0]) is not None and not waiting and now >= cut[0] - half_rtt:
                stopping[0] = None
                stop()
            return done() or now >= cut[0]

        # wake at the cut (and at the stop before it): the drive sleeps until a packet, a
        # timer or its timeout, and a timeout at the latest possible cut let the exchange
        # run 5-17 ms past the actual one (a third of the late steps' excess at 25 ms);
        # the cut may move later meanwhile (the peer's entry), so each timeout looks again
        planned = [until]

        def look() -> bool:  # over, or the peer's entry brought the stop before our wake
            return over() or stop_due() < planned[0]

        while not over():
            planned[0] = stop_due()
            try:
                self.links.drive(look, max(planned[0] - time.monotonic(), 0.0), "a deadline")
            except TimeoutError:
                continue  # the cut as it stood came: the peer's entry may have moved it
        # the last over() looked at every peer still waiting, and nothing ran since
        return (entry[0] if entry else None), cut[0], set(first)

    def _send_notes(self, notes: list[WriteHandle]) -> None:
        """See our notes onto the wire before the call returns: a peer that waits for
        one otherwise waits for the background thread, which shares the GIL and two
        cores with the training loop (the peer got them 30-105 ms late in one step of
        five). It takes a round or two; bounded by an RTT or 100 ms, whichever is longer
        (a loaded host), after which the background thread sends the rest. A note whose
        clear-to-send has not come cannot leave (a rank that decided alone: the peer is
        not in the call, or the link is dark): it is not waited for. Each note's QP first
        sends before it reads: a full round reads the late data the cut left on the link
        first (1-2 ms of the note's latency, measured)."""
        for rqp in {id(h.rqp): h.rqp for h in notes}.values():
            rqp.flush()
        try:
            self.links.drive(
                lambda: all(h.rqp.sent(h) or not h.rqp.cleared(h) for h in notes),
                max(float(self.links.config.rtt), NOTES_BOUND_S),
                "our notes",
            )
        except TimeoutError:
            pass

    def _prune(self) -> None:
        """Forget acknowledged mask writes (their buffers may go)."""
        self._masks_out = [(h, b) for h, b in self._masks_out if not h.finished]
        self._strays = [h for h in self._strays if not h.finished]
