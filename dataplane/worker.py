"""One worker's transfer of its gradient (`ina worker`): fragments out, sums back.

Worker: splits its gradient into fragments of K int32 elements (dataplane/gradients.py), keeps
an AIMD window of outstanding fragments (+1 per result up to `max_window`, halved at most once
per round trip, and at most every CUT_FLOOR, on CONTROL packets, the ECN signal of a collision,
and on losses), resends the fragment a CONTROL packet names (at once, at most every
CONTROL_RESEND_GAP). How it finds and repairs losses is told in dataplane/recovery.py. A
CONTROL names the fragment occupying the slot; the worker helps it leave (an ACK if its result
is already out, else its own contribution to it, sent out of order, or sent again if it was
sent a round trip ago), so that neither a lost ACK, a lost contribution nor diverged windows
can block a slot for good. Fragments sent ahead of order that way take no place in the window:
a window full of them would wait for fragments that only its own in-order sending can provide
(a deadlock seen after re-plans). Nor do fragments a loss query found HELD, up to half a
window: the contribution is in a slot, the wait is a peer's repair, and under loss windows
full of them idled links. Optionally paced at the task's published rate. A result carrying
the congestion mark cuts the window as DCTCP does and grows nothing (dataplane/congestion.py);
the worker's own egress queue marks its DATA as a switch port would, so that workers
outpacing their own links hear of it too.

Model sharding (EINA Sec. III-C): when the controller's state file gives the tasks of the job
a `model_share`, the worker splits its fragments into contiguous shards, one per task in task
order, sized by the shares (`shard_ranges`, the same split in every agent), and sends each shard
to its task's PS under that task's ids and rate, all from one loop (`run_shards`); each PS
finishes only its own shard. Fragments keep their index in the whole gradient, so shards never
share a fragment id. The split is fixed for an iteration: a re-plan changes paths and rates,
not which PS holds which fragments.

Partial aggregation (PARING Sec. V-C): when the worker's state-file row has `segments`, the
fragments of each segment [start, end) of its traffic (fractions, rounded to fragment indices
the same way by every worker, `segment_rows`) go under that segment's flow id and first
aggregator: the compiler gave each segment its own flows, so a switch merges a share of a
worker's fragments and forwards the rest (`controller.compiler.segments`).
"""

from __future__ import annotations

import heapq
import select
import socket
import time
from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from dataplane.congestion import MarkReaction
from dataplane.frame import (
    ACK,
    CONGESTED,
    CONTROL,
    DATA,
    ELEMS_END,
    FRAME_LEN,
    HELD,
    INA_HEADER,
    NAMED,
    OFF_ELEMS,
    OFF_INA,
    PROBE,
    RESULT,
    RETRANSMITTED,
    Endpoint,
    InaHeader,
    K,
    Task,
    build_frame,
    completed_by,
    data_aux,
    is_marked,
    kind_of,
)
from dataplane.gradients import EPOCHS, frag_id, segment_rows, split_frag_id, wire_rows
from dataplane.ports import (
    GATHER,
    EgressDepth,
    egress_depth,
    ina_frames,
    send,
)
from dataplane.recovery import (
    CONTROL_RESEND_GAP,
    CUT_FLOOR,
    DETECTED,
    PEER_WAIT_CAP,
    QUERY_ROUNDS,
    QUERY_TURN_RANKS,
    QUERY_TURN_RTTS,
    REASK_PTOS,
    REPLANNED,
    TAIL_HOLD_PTOS,
    TIMED_OUT,
    TLP_FLOOR,
    InFlight,
)
from dataplane.rto import BACKOFF_CEILING, RtoEstimator
from dataplane.state import PlanSource

# A paced worker sends this many seconds' worth of fragments per turn of its loop, then sleeps
# as long: the same rate, but one select, drain and timer check per burst instead of per
# fragment, which at tens of thousands of fragments per second was most of its CPU
# (docs/loop-profile.md). Links queue far more than a burst (1000 frames).
PACING_BURST = 0.002


@dataclass
class WorkerStats:
    fragments: int = 0
    sent: int = 0
    resent_on_control: int = 0
    resent_on_timeout: int = 0
    resent_on_loss: int = 0  # detected lost from later results (RACK) or the tail probe
    spurious: int = 0  # of those, answered before a round trip could have: not lost
    acks: int = 0
    probes: int = 0
    plan_switches: int = 0
    marked: int = 0  # results that came with the congestion mark
    sent_to_unblock: int = 0
    freed_across_shards: int = 0  # ACKs that broke a wait between two PSs' trees (unblock)
    controls: int = 0  # CONTROL packets received: collisions in a slot on the path
    detected_lost: int = 0  # fragments taken for lost from later results or the tail probe
    timed_out: int = 0  # retransmission timeouts
    queries: int = 0  # loss queries sent (`Worker.query`)
    nacks: int = 0  # NACKs received: the path named this worker's contribution missing
    held: int = 0  # HELD answers received: its contribution is there, a peer's is missing
    # unsolicited NACKs received (a peer's query found a partial sum without this worker's
    # contribution, `Worker.named_missing`), and the resends they made
    named: int = 0
    resent_on_named: int = 0
    seconds: float = 0.0


@dataclass
class Worker:
    """One worker's transfer of one gradient; `run` returns the summed gradient."""

    sock: socket.socket
    me: Endpoint
    ps: Endpoint
    task: Task
    flow_id: int
    next_node: int
    rows: np.ndarray
    window: float = 16.0
    max_window: int = 256
    timeout: float = 0.5  # the RTO before the first round trip is measured (RFC 6298 2.1)
    rate_gbps: float | None = None
    plan: PlanSource | None = None
    # wire Gbps per planned Gbps, when the rate comes from the plan (emulations scale links)
    rate_scale: float = 1.0
    # This worker's index in its task, named in the `aux` of every DATA it sends: a RESULT
    # names the contributor whose DATA completed the fragment, so each worker knows which
    # round trips were its own (`own_rtt`, PEER_WAIT_CAP).
    contributor: int = 0
    # Frames waiting in this worker's own egress queue (None: read from the socket, SIOCOUTQ):
    # a DATA sent with `mark_depth` of them ahead carries the congestion mark, as a switch
    # port marks (p4src/README.md, "Congestion mark"); None: from half of what its own
    # interface's queue holds (never with `queued` given, or no queue).
    queued: Callable[[], int] | None = None
    mark_depth: int | None = None
    # Ask the path before resending a fragment found lost from later results or by the tail
    # probe (dataplane/recovery.py, "Loss queries"): needs switches that answer loss queries
    # (both targets do); without them a fragment is resent QUERY_ROUNDS PTOs late.
    query: bool = False
    # Contributors of the task (0: unknown): with queries, the contributors whose result is
    # missing ask in turns (`_declare_lost`) so that one query, not one per contributor,
    # repairs a loss that every contributor sees.
    peers: int = 0
    stats: WorkerStats = field(default_factory=WorkerStats)
    _unblocked: dict[int, float] = field(default_factory=dict)  # occupant -> next allowed help
    _blocking: dict[int, float] = field(default_factory=dict)  # occupant -> first named (shards)
    outstanding: InFlight = field(default_factory=InFlight)  # in flight -> its deadline
    # Timed out, waiting for the window to resend them, lowest fragment first (a heap, entries
    # not in `lost` any more are skipped). Resending them all at once, whatever the window,
    # collapsed congested links: 5 workers at window 1 resent 20-30 fragments each per
    # timeout into 2-packet queues, and no fragment ever had all its contributions arrive.
    lost: dict[int, str] = field(default_factory=dict)  # fragment -> why (TIMED_OUT, ...)
    _lost_order: list[int] = field(default_factory=list)
    # Lost fragments by when they are due for a resend whatever the window (last send +
    # BACKOFF_CEILING): a switch abandons a partial sum untouched for STALE_AFTER, so a
    # fragment whose peers' contributions wait in a slot must come back before that. Queued
    # behind the window alone, a worker at window 1-2 with a dozen lost fragments resent each
    # every 3-20 s after a re-plan under 2-packet queues: its peers' partial sums were
    # abandoned between its resends and the fragments never completed. Not while timeouts
    # are found spurious (`timeouts_spurious`).
    _keepalive: list[tuple[float, int]] = field(default_factory=list)
    last_sent: dict[int, float] = field(default_factory=dict)  # fragment -> its last DATA
    first_sent: dict[int, float] = field(default_factory=dict)  # fragment -> its first DATA
    # Loss detection from later results (RACK, RFC 8985): an outstanding fragment last sent
    # more than `reo_wnd` before the first send of a fragment whose result arrived is taken
    # as lost at once, instead of idling its place in the window until its timeout (0.5-1 s
    # against round trips of milliseconds: at 5 % loss per link half the fragments of a
    # window waited for it, and the window halved on every timeout, down to 1).
    min_rtt: float | None = None
    _reo_steps: int = 1
    detected: set[int] = field(default_factory=set)  # resent because a later result came
    _detected: deque[int] = field(default_factory=deque)  # detected, to resend, oldest first
    # Tail loss probe (RFC 8985 section 7): when nothing has come back for PTO = 2 SRTT and
    # nothing new may be sent, the last fragment sent goes again, so that its result (or
    # its own loss) shows which fragments before it are lost; once per answer. At the tail
    # (nothing new left) no later result can show a loss: every fragment quiet for a PTO
    # goes again with a PROBE, after 2, 4, ... PTO while nothing answers (a copy costs a
    # duplicate in a slot, a timeout here a second or more; the last fragments of an
    # iteration at 5 % loss took seconds of timeouts).
    _probe_due: float | None = None
    _probes_unanswered: int = 0
    # outstanding fragments sent ahead of the in-order sender to unblock a slot: they do not
    # take a place in the window, or a window full of them could wait for its own fragments
    ahead: set[int] = field(default_factory=set)
    resent: set[int] = field(default_factory=set)  # fragments sent more than once
    asked: dict[int, int] = field(default_factory=dict)  # fragment -> loss queries so far
    last_asked: dict[int, float] = field(default_factory=dict)  # fragment -> its last query
    # (when to ask again, fragment), earliest first: a fragment still without an answer a PTO
    # after a query is asked again, and resent after QUERY_ROUNDS queries (the query or its
    # NACK may be lost, or the repair late; a window full of fragments waiting for answers
    # sends nothing whose result would show it)
    _reask: list[tuple[float, int]] = field(default_factory=list)
    # fragment -> (HELD answers since its last send, when it is asked about again)
    held: dict[int, tuple[int, float]] = field(default_factory=dict)
    controlled: dict[int, float] = field(default_factory=dict)  # fragment -> next CONTROL resend
    timeouts: dict[int, int] = field(default_factory=dict)  # fragment -> timeouts so far
    # fragments sent exactly once -> when: the only round trips sampled (Karn's rule)
    sent_once: dict[int, float] = field(default_factory=dict)
    rtt: RtoEstimator = field(init=False)
    # The round trips of the fragments this worker's own DATA completed, and of its first loss
    # queries to their NACKs: the network's, with no peer to wait for (PEER_WAIT_CAP).
    own_rtt: RtoEstimator = field(init=False)
    # The last result of a fragment that had timed out was completed by an original
    # contribution (`aux` 0), not by a resend: timeouts come from a slow path, not losses, and
    # the keepalive then waits for the window like any resend. Whatever the window, it made a
    # storm behind slow switches (0.5 ms a frame, 4x4 leaf-spine): round trips past 1 s, every
    # fragment timed out, 16 workers at window 1 kept 55 fragments each in flight, and 458 of
    # 820 fragments were done after 60 virtual s. Under loss resends complete the fragments
    # (`aux` 1) and the keepalive stays exempt (at window 1 alone, Fig. 1 at 5 % loss hung).
    # While set, a first timeout is not resent but waits once more (`on_timeouts`); a loss
    # found from later results clears it.
    timeouts_spurious: bool = False
    _next_cut: float = 0.0  # timeouts halve the window at most once per round trip
    marks: MarkReaction = field(default_factory=MarkReaction)  # DCTCP on marked results
    next_frag: int = 0
    epoch: int = 0  # the iteration, carried in every fragment id
    # Fragment index on the wire of rows[0]: a shard of a gradient keeps its fragments' place
    # in the whole, so the shards going to different PSs never share a fragment id (and so a
    # switch slot, which is a hash of it) and a CONTROL names the shard its occupant is of.
    offset: int = 0
    # Partial aggregation: (first row, flow id, next node) per segment of the rows, ascending
    # (`segment_rows`); empty: every fragment travels as `flow_id`.
    segments: list[tuple[int, int, int]] = field(default_factory=list)
    # per fragment: its result arrived, and the result's K big-endian int32 as on the wire
    # (plain lists: indexing numpy per frame cost more than the rest of `receive`)
    got: list[bool] = field(init=False)
    payloads: list[bytes] = field(init=False)
    done: int = 0
    next_send: float = 0.0
    gap: float = 0.0
    _started: float = 0.0
    _depth: EgressDepth | None = None  # the socket's, when `queued` is read from it

    def __post_init__(self) -> None:
        self.epoch %= EPOCHS  # as it reads back from a fragment id
        self.got = [False] * len(self.rows)
        self.payloads = [bytes(4 * K)] * len(self.rows)
        self.rtt = RtoEstimator(initial=self.timeout)
        self.own_rtt = RtoEstimator()
        self._own_depth: Callable[[], int | None] = lambda: None
        if self.queued is None and self.sock is not None:  # no socket: built, never run
            egress = egress_depth(self.sock)
            self._depth, self._own_depth = egress, egress.backlog.depth
            # exact from the threshold on: `_send` compares it with the same threshold
            self.queued = lambda: egress.at(self._threshold() or 0)

    @property
    def have(self) -> np.ndarray:
        """Which fragments' results arrived."""
        return np.array(self.got, dtype=bool)

    @property
    def result(self) -> np.ndarray:
        """The results, one row of K int32 per fragment (zeros where none arrived)."""
        return wire_rows(self.payloads)

    def _threshold(self) -> int | None:
        """Frames queued ahead from which a DATA is marked: `mark_depth`, else half this
        worker's own queue (None: it has none)."""
        return self.mark_depth if self.mark_depth is not None else self._own_depth()

    @property
    def rto(self) -> float:
        """The current retransmission timeout, before any fragment's own backoff."""
        return self.rtt.rto

    @property
    def finished(self) -> bool:
        return self.done == len(self.rows)

    def ids(self, frag: int) -> tuple[int, int]:
        """(flow id, next node) under which row `frag` travels: its segment's."""
        if not self.segments:
            return self.flow_id, self.next_node
        _, flow, node = self.segments[
            max(0, bisect_right(self.segments, frag, key=lambda s: s[0]) - 1)
        ]
        return flow, node

    def owns(self, wire_index: int) -> bool:
        return 0 <= wire_index - self.offset < len(self.rows)

    def waiting_for(self) -> dict[str, object]:
        """What a stuck worker is waiting for (printed when it is stopped before the end)."""
        return {
            "next_fragment": self.next_frag,
            "outstanding": sorted(self.outstanding)[:20],
            "outstanding_count": len(self.outstanding),
            "ahead": len(self.ahead),
            "lost": sorted(self.lost)[:20],
            "lost_count": len(self.lost),
            "flow_id": self.flow_id,
            "window": self.window,
            "timeouts_max": max(self.timeouts.values(), default=0),
            "srtt": self.rtt.srtt,
            "rto": round(self.rto, 3),
            "plan_version": self.plan.version if self.plan else None,
        }

    def _gap(self) -> float:
        """Seconds between two fragments at the paced rate (0: unpaced)."""
        if not self.rate_gbps:
            return 0.0
        return FRAME_LEN * 8 / (self.rate_gbps * 1e9)

    def _follow_plan(self, now: float) -> float:
        """Adopt a newer plan version's ids; resend what is outstanding under them."""
        row = self.plan.poll(now) if self.plan else None
        if row is None:
            return self._gap()
        first = self.stats.sent == 0
        self.flow_id, self.next_node = row["flow_id"], row["next_node"]
        self.segments = segment_rows(len(self.rows), row.get("segments") or [])
        self.rate_gbps = row["rate_gbps"] * self.rate_scale
        if not first:
            self.stats.plan_switches += 1
            for frag in list(self.outstanding):  # resent under the new ids as the window allows
                del self.outstanding[frag]
                self._lose(frag, REPLANNED)
        return self._gap()

    def _send(self, frag: int, flags: int = DATA, epoch: int | None = None, count: int = 0) -> None:
        """Send fragment `frag` (an index into this worker's rows) or a DATA-less packet
        (`count`: a loss query's round)."""
        flow, node = self.ids(frag)
        # a query's `aux` is that of a resend: a sum it has sent on again waited for a recovery
        aux = data_aux(self.contributor, frag in self.first_sent) if flags == DATA or count else 0
        count = 1 if flags == DATA else count
        depth = self._threshold()
        queued = self.queued
        marked = flags == DATA and depth is not None and queued is not None and queued() >= depth
        header = InaHeader(
            self.task.job,
            self.task.task,
            flags | CONGESTED if marked else flags,
            flow,
            node,
            frag_id(self.epoch if epoch is None else epoch, self.offset + frag),
            count,
            aux=aux,
        )
        payload = self.rows[frag].tobytes() if flags == DATA else b""
        send(self.sock, build_frame(self.me, self.ps, header, payload))
        if self._depth is not None:
            self._depth.sent()
        self.stats.sent += 1

    def _track(self, frag: int, now: float, deadline: float) -> None:
        """`frag`'s DATA was just sent: in flight until `deadline`, and last in `outstanding`,
        which stays in order of last send (the order loss detection walks)."""
        self.outstanding.pop(frag, None)
        self.outstanding[frag] = deadline
        self.last_sent[frag] = now
        self.last_asked.pop(frag, None)

    def _last_touched(self, frag: int) -> float:
        """When `frag` last went out: its DATA, or a loss query after it."""
        return self.last_asked.get(frag, self.last_sent[frag])

    def _pto(self) -> float:
        """2 SRTT (at most the RTO), doubled per probe nothing answered, at most
        BACKOFF_CEILING once doubled (as a timeout's backoff)."""
        base = min(self.rto, max(2 * (self.rtt.srtt or 0.0), TLP_FLOOR))
        if not self._probes_unanswered:
            return base
        return min(max(base, BACKOFF_CEILING), base * 2 ** min(self._probes_unanswered, 16))

    def _tail(self) -> bool:
        return self.next_frag >= len(self.rows)

    def _first_send(self, frag: int, now: float) -> None:
        self._send(frag)
        self.sent_once[frag] = self.first_sent[frag] = now
        self._track(frag, now, now + self.rto)
        if self._probe_due is None and self.rtt.srtt is not None:
            self._probe_due = now + self._pto()

    @property
    def reo_wnd(self) -> float:
        """RACK's reordering window (RFC 8985 6.2): a quarter of the least round trip, widened
        by a quarter each time a fragment taken as lost turns out not to have been, at most
        SRTT; 0 before the first round trip."""
        if self.min_rtt is None:
            return 0.0
        return min(self.rtt.srtt or 0.0, self.min_rtt / 4 * self._reo_steps)

    def _detect_losses(self, before: float, now: float) -> None:
        """Outstanding fragments last sent before `before` are lost: queue them for resending
        (one window cut per round trip, like timeouts)."""
        gone = []
        for frag in self.outstanding:  # in order of last send or query
            if self._last_touched(frag) >= before:
                break
            gone.append(frag)
        for frag in gone:
            self._declare_lost(frag, now)
        if gone:
            self._cut(now)

    def _cut(self, now: float) -> None:
        """Halve the window, at most once per round trip (its losses are one event) and per
        CUT_FLOOR (a peer's loss is repaired on the peer's time scale, not this worker's)."""
        if now >= self._next_cut:
            self.window = max(1.0, self.window / 2)
            self._next_cut = now + max(self.rtt.srtt or self.rto, CUT_FLOOR)

    def _lose(self, frag: int, why: str = TIMED_OUT) -> None:
        """`frag` is no longer in flight (`why`: TIMED_OUT, DETECTED, REPLANNED): queue it
        for resending."""
        self.lost[frag] = why
        heapq.heappush(self._lost_order, frag)
        heapq.heappush(self._keepalive, (self.last_sent.get(frag, 0.0) + BACKOFF_CEILING, frag))

    def _next_keepalive(self) -> float | None:
        """When the next lost fragment is due for a resend whatever the window (entries of
        fragments no longer lost, or resent since, are dropped)."""
        while self._keepalive:
            due, frag = self._keepalive[0]
            if frag in self.lost and self.last_sent.get(frag, 0.0) + BACKOFF_CEILING == due:
                return due
            heapq.heappop(self._keepalive)
        return None

    def _due_keepalive(self, now: float) -> int | None:
        """A lost fragment whose last send is BACKOFF_CEILING old, if any."""
        due = self._next_keepalive()
        if due is None or due > now:
            return None
        return heapq.heappop(self._keepalive)[1]

    def _next_detected(self) -> int | None:
        """The oldest fragment detected lost and not resent yet: it goes whatever the window,
        as TCP's fast retransmit does (it replaces a packet that left the network)."""
        while self._detected:
            frag = self._detected.popleft()
            if self.lost.get(frag) == DETECTED:
                return frag
        return None

    def _next_lost(self) -> tuple[int, str] | None:
        """The lowest fragment waiting to be resent, and why it is."""
        while self._lost_order:
            frag = heapq.heappop(self._lost_order)
            if frag in self.lost:
                return frag, self.lost.pop(frag)
        return None

    def _resend(self, frag: int, now: float) -> None:
        """Send `frag` again; its next deadline is the RTO backed off by its timeouts so far,
        at the tail the RTO alone (TAIL_HOLD_PTOS)."""
        self._send(frag)
        self.resent.add(frag)
        self.held.pop(frag, None)  # its own copy goes: no longer only waiting for a peer
        self.sent_once.pop(frag, None)
        backoff = self.rtt.backed_off(self.timeouts.get(frag, 0))
        self._track(frag, now, now + (min(self.rto, backoff) if self._tail() else backoff))

    def unblock(self, occupant: int, now: float, other_shard: bool = False) -> None:
        """A slot on this worker's path is held by fragment id `occupant`; help it leave.

        If it belongs to another iteration, or its result is already out, the slot holds a
        partial sum left behind (its ACK was lost): an ACK frees it. Otherwise the partial sum
        may be waiting for this worker's own contribution, which its window has not reached:
        sending that fragment now, out of order, breaks the wait-for cycle in which two
        workers' windows block each other's slots (it is sent once; the in-order loop skips it).

        `other_shard`: the occupant is this shard's, the blocked packet another shard's. Two
        PSs' trees can run in opposite directions over the same aggregators (A1 -> A0 for one,
        A0 -> A1 for the other), and the tasks of a job share its slots: A0 can hold a partial
        sum of one tree that waits for what A1 blocks, while A1 holds one of the other tree
        that waits for what A0 blocks, kept alive by retransmissions. If the occupant still
        blocks a timeout after it was first named, an ACK frees the partial sums of it on this
        shard's path (this worker's contribution included, which it resends on its timeout;
        other contributors resend on theirs): slower, never wrong, and the cycle is broken.
        """
        if now < self._unblocked.get(occupant, 0.0):
            return
        self._unblocked[occupant] = now + self.rto
        epoch, wire = split_frag_id(occupant)
        index = wire - self.offset
        if epoch != self.epoch or not 0 <= index < len(self.rows) or self.got[index]:
            self._send(index, ACK, epoch)
            self.stats.acks += 1
        elif index in self.lost:  # timed out, its resend waits for the window: send it now
            del self.lost[index]
            self._resend(index, now)
            self.ahead.add(index)
            self.stats.sent_to_unblock += 1
        elif index not in self.outstanding:
            self._first_send(index, now)
            self.ahead.add(index)
            self.stats.sent_to_unblock += 1
        elif (
            now - self.last_sent.get(index, now) >= (self.rtt.srtt or self.rto) and not other_shard
        ):
            # In flight for a round trip and its partial sum still waits: this worker's copy
            # may be what was lost. Resent (a duplicate if not), instead of waiting for its
            # timeout while every peer's window waits behind the slot.
            self._resend(index, now)
            self.stats.sent_to_unblock += 1
        elif other_shard:
            first = self._blocking.setdefault(occupant, now)
            if now - first > 3 * self.rto:  # an old sighting: start over
                self._blocking[occupant] = now
            elif now - first >= self.rto:
                del self._blocking[occupant]
                self._send(index, ACK)
                self.stats.freed_across_shards += 1

    def _window_open(self) -> bool:
        """Room for one more fragment: sent ahead of order ones take none, and HELD ones none
        up to half the window (a HELD contribution sits in a slot waiting for a peer's
        repair; counted, each worker of the 4-leaf/4-spine was window-bound a quarter of a
        5 %-loss iteration, 1.37x unimpaired against 1.26x in the simulation; the half keeps
        what a worker has in flight within 1.5 windows behind slow switches)."""
        ahead = sum(f in self.outstanding for f in self.ahead)
        held = sum(f in self.outstanding and f not in self.ahead for f in self.held)
        return len(self.outstanding) - ahead - min(held, int(self.window) // 2) < int(self.window)

    def _has_more(self) -> bool:
        return bool(self.lost) or self.next_frag < len(self.rows)

    def pump(self, now: float) -> float:
        """Follow the plan and send new fragments while the window and the pacing allow;
        returns how long the caller may wait before calling again."""
        if self.plan:
            self.gap = self._follow_plan(now)
        # a due turn sends ahead up to PACING_BURST; the schedule (`next_send`) keeps the rate
        burst_end = now + PACING_BURST if now >= self.next_send else now
        while burst_end >= self.next_send:
            due = None if self.timeouts_spurious else self._due_keepalive(now)
            if due is None:
                due = self._next_detected()
            if due is not None:
                self._resend_lost(due, self.lost.pop(due), now)
            elif not (self._has_more() and self._window_open()):
                break
            elif (due := self._due_keepalive(now)) is not None:
                self._resend_lost(due, self.lost.pop(due), now)
            elif (lost := self._next_lost()) is not None:
                self._resend_lost(*lost, now)  # resends first, lowest first, like every peer
            else:
                frag = self.next_frag
                self.next_frag += 1
                if frag in self.outstanding or frag in self.lost or self.got[frag]:
                    self.ahead.discard(frag)  # already sent to unblock a slot
                    continue
                self._first_send(frag, now)
            self.next_send = max(self.next_send, now) + max(
                self.gap, self.marks.gap(self.window, self.rtt.srtt)
            )
        earliest = self.outstanding.earliest()
        wait = (now + self.rto if earliest is None else earliest) - now
        if (reask := self._next_reask()) is not None:
            wait = min(wait, reask - now)
        if self._probe_due is not None:
            wait = min(wait, self._probe_due - now)
        if not self.timeouts_spurious and (resend_at := self._next_keepalive()) is not None:
            wait = min(wait, max(resend_at, self.next_send) - now)
        if self._detected:
            wait = min(wait, self.next_send - now)
        if self._has_more() and self._window_open():
            wait = min(wait, self.next_send - now)
        return max(0.0, wait)

    def _resend_lost(self, frag: int, why: str, now: float) -> None:
        self._resend(frag, now)
        self.stats.resent_on_timeout += why == TIMED_OUT
        self.stats.resent_on_loss += why == DETECTED
        if self.timeouts.get(frag, 0) >= 2 or self._tail():
            self._send(frag, PROBE)
            self.stats.probes += 1

    def on_timeouts(self, now: float) -> None:
        """Queue what timed out for resending (`pump` resends it within the window and the
        pacing), with `query` from its second timeout on (the first sends a loss query, as a
        detection does, without a turn); from a fragment's second timeout on, a PROBE follows
        its resend: the result may have reached every peer but this worker, and then the
        retransmission waits in a slot for contributions that never come again
        (p4src/README.md, PROBE). The timeouts of one round trip are one loss event: they
        halve the window once."""
        for frag in self.outstanding.expired(now):
            self.sent_once.pop(frag, None)  # its result may now come from the peers' resends
            self.timeouts[frag] = self.timeouts.get(frag, 0) + 1
            self.stats.timed_out += 1
            self._cut(now)
            if self.timeouts_spurious and self.timeouts[frag] == 1:
                # Spurious timeouts so far: its original is likely still queued, so it stays
                # in flight for a backed-off RTO more (as F-RTO, RFC 5682, waits to see
                # whether the original is answered) instead of adding a duplicate to the queue.
                self.outstanding[frag] = now + self.rtt.backed_off(1)
                continue
            if self.query and self.timeouts[frag] == 1 and frag not in self.last_asked:
                # Most first timeouts are a peer's loss: with 16 contributors the loser finds
                # it late too, and every other contributor's duplicate (and its ACK) loaded
                # the links into the PS. A loss query costs one frame on this worker's link;
                # its NACK resends, a second timeout or QUERY_ROUNDS unanswered resend.
                self._ask(frag, now)
                continue
            del self.outstanding[frag]
            self._lose(frag)
        while (due := self._next_reask()) is not None and due <= now:
            frag = heapq.heappop(self._reask)[1]
            if due < self.held.get(frag, (0, 0.0))[1]:
                continue  # a re-ask of a query answered HELD since: the hold asks again
            if self.asked.get(frag, 0) < QUERY_ROUNDS:
                self._ask(frag, now)
                continue
            del self.outstanding[frag]  # unanswered: resent as without queries
            self._lose(frag, DETECTED)
            self._detected.append(frag)
        if self._probe_due is not None and now >= self._probe_due:
            pto = self._pto()
            self._probes_unanswered += 1
            self._probe_due = now + self._pto() if self._tail() else float("inf")
            if self._tail():  # the few left: each quiet for a PTO goes again, with a PROBE
                probed = [f for f in self.outstanding if now - self._last_touched(f) >= pto]
            elif self.outstanding and not (self._has_more() and self._window_open()):
                probed = [next(reversed(self.outstanding))]
            else:
                probed = []
            for frag in probed:
                self._declare_lost(frag, now)

    def _declare_lost(self, frag: int, now: float) -> None:
        """Take an outstanding fragment as lost without a timeout (found from later results,
        or by the tail probe): out of flight to be resent at once, or with `query`, asked
        about at its turn (`_turn`) and left in flight until its answer."""
        if self.query and frag in self.last_asked:
            return  # asked already, or waiting for its turn: its own PTO asks again
        self.stats.detected_lost += 1
        self.sent_once.pop(frag, None)
        self.timeouts_spurious = False  # losses happen: timeouts are resent at once again
        self.detected.add(frag)
        if self.query:
            turn = self._turn(frag)
            if not turn:
                self._ask(frag, now)
                return
            self.asked.setdefault(frag, 0)
            self.outstanding[frag] = max(self.outstanding.pop(frag), now + turn + self.rto)
            self.last_asked[frag] = now
            heapq.heappush(self._reask, (now + turn, frag))
            return
        del self.outstanding[frag]
        self._lose(frag, DETECTED)
        self._detected.append(frag)

    def _turn(self, frag: int) -> float:
        """Seconds this worker waits before its first loss query for `frag`: its rank
        among the task's contributors for that fragment (each leads as often) times a round
        trip; 0 at the tail, when the task's size is unknown, or once congestion marks have
        come (`MarkReaction.ssthresh`): a queue that overflows drops contributions, each
        repaired only by its own sender, whom a turn would hold back."""
        congested = self.marks.ssthresh != float("inf")
        if self.peers <= 1 or self._tail() or congested or QUERY_TURN_RTTS <= 0:
            return 0.0
        rank = min((self.contributor - self.offset - frag) % self.peers, QUERY_TURN_RANKS)
        return rank * QUERY_TURN_RTTS * (self.rtt.srtt or self.rto)

    def _ask(self, frag: int, now: float) -> None:
        """Send a loss query for `frag` along its data path (dataplane/recovery.py, "Loss
        queries"); it stays in flight, now last in the order loss detection walks, its
        deadline an RTO from now at least: a NACK resends it, a repaired result ends it, no
        answer for a PTO asks again (`_reask`)."""
        rounds = self.asked[frag] = self.asked.get(frag, 0) + 1
        self._send(frag, PROBE, count=min(rounds, 0xFFFF))
        self.stats.queries += 1
        # a peer's repair takes its own round trip from now: the timeout counts from the query
        self.outstanding[frag] = max(self.outstanding.pop(frag), now + self.rto)
        self.last_asked[frag] = now
        heapq.heappush(self._reask, (now + REASK_PTOS * self._pto(), frag))

    def _next_reask(self) -> float | None:
        """When the next fragment asked about is due to be resent without an answer
        (entries of fragments answered or resent since are dropped)."""
        while self._reask:
            due, frag = self._reask[0]
            if frag in self.outstanding and frag in self.last_asked:
                return due
            heapq.heappop(self._reask)
        return None

    def _awaited(self, raw_frag: int) -> int | None:
        """The fragment a loss answer (NACK, named NACK, HELD) names, if it is one of this
        worker's in this epoch whose result is not in yet."""
        epoch, wire = split_frag_id(raw_frag)
        frag = wire - self.offset
        if epoch != self.epoch or not 0 <= frag < len(self.rows) or self.got[frag]:
            return None
        return frag

    def nack(self, raw_frag: int, now: float) -> None:
        """A switch or the PS answered a loss query: this worker's contribution to the
        fragment is missing there. Resent at once, unless it has been since the query."""
        frag = self._awaited(raw_frag)
        if frag is None:
            return
        self.stats.nacks += 1
        if frag not in self.last_asked:
            return  # resent since its query (or never asked): that copy answers
        if self.asked.get(frag) == 1:  # later rounds: which query it answers is unknown
            self.own_rtt.sample(now - self.last_asked[frag])
        self.lost.pop(frag, None)
        self._resend(frag, now)
        self.stats.resent_on_loss += 1
        if self._tail():  # its first hop may have moved on: the PS answers a PROBE
            self._send(frag, PROBE)
            self.stats.probes += 1

    def named_missing(self, raw_frag: int, now: float) -> None:
        """A switch named this worker's contribution missing from a partial sum that a peer's
        loss query found (an unsolicited NACK, p4src/README.md "Loss query"): resent at once
        if in flight or waiting to be resent, which ends its turn or query; ignored if its
        result is in, if it was never sent (its first copy goes in order), or if its last
        copy went less than its own round trip ago (that copy may not have arrived yet)."""
        frag = self._awaited(raw_frag)
        if frag is None:
            return
        self.stats.named += 1
        if frag not in self.outstanding and frag not in self.lost:
            return
        if now - self.last_sent.get(frag, 0.0) < (self.own_rtt.srtt or self.min_rtt or self.rto):
            return
        self.lost.pop(frag, None)
        self._resend(frag, now)
        self.stats.resent_on_loss += 1
        self.stats.resent_on_named += 1

    def hold(self, raw_frag: int, now: float) -> None:
        """A switch or the PS answered a loss query HELD: this worker's contribution (or the
        sum it is in) is there and the fragment waits for a peer's, whom the path NACKs. No
        copy then, and no query for a while: the rounds start over after an RTO, doubled with
        every HELD since the fragment's last send (at most BACKOFF_CEILING; at the tail
        TAIL_HOLD_PTOS PTOs, at most an RTO), in case the peer's repair or this worker's copy
        of the result is lost. From the second HELD on, after a copy of its own, and at the
        tail, a PROBE goes too: the PS answers it with the result if it has one (a copy may
        have opened a partial sum that nobody completes, and that sum answers HELD until it
        goes stale)."""
        frag = self._awaited(raw_frag)
        if frag is None:
            return
        self.stats.held += 1
        if frag not in self.last_asked or frag not in self.outstanding:
            return  # resent since its query: that copy answers
        times = self.held.get(frag, (0, 0.0))[0] + 1
        if self._tail():  # nothing left to send: a lost repair must not cost a doubled RTO
            until = now + min(self.rto, TAIL_HOLD_PTOS * self._pto())
        else:
            until = now + min(BACKOFF_CEILING, self.rto * 2 ** (times - 1))
        self.held[frag] = (times, until)
        self.asked[frag] = 0
        if times >= 2 or frag in self.resent or self._tail():
            self._send(frag, PROBE)
            self.stats.probes += 1
        self.outstanding[frag] = max(self.outstanding.pop(frag), until + self.rto)
        heapq.heappush(self._reask, (until, frag))

    def receive(self, flags: int, flow: int, raw_frag: int, frame: bytes, now: float) -> None:
        """A RESULT, or the CONTROL of a collision, of this worker's task."""
        epoch, wire = split_frag_id(raw_frag)
        frag = wire - self.offset
        if epoch != self.epoch or not 0 <= frag < len(self.rows):
            return
        if flags == RESULT and not self.got[frag]:
            self.payloads[frag] = frame[OFF_ELEMS:ELEMS_END]
            self.got[frag] = True
            self.done += 1
            in_flight = self.outstanding.pop(frag, None) is not None
            waiting = self.lost.pop(frag, None)
            self.ahead.discard(frag)
            asked = self.last_asked.pop(frag, None)
            self.held.pop(frag, None)
            sent = self.sent_once.pop(frag, None)
            # Karn's rule across workers (`aux`, p4src/README.md): a result that a
            # retransmission completed waited for a recovery, and one that a peer's DATA
            # completed waited for that peer to send it (PEER_WAIT_CAP).
            aux = INA_HEADER.unpack_from(frame, OFF_INA)[8]
            recovered = bool(aux & RETRANSMITTED)
            own = completed_by(aux) == self.contributor
            if self.timeouts.get(frag):  # was its timeout a loss or a slow path?
                self.timeouts_spurious = not recovered
            # Held after its timeout (`on_timeouts`), its one copy came back, and no recovery
            # held it up.
            slow = (
                in_flight
                and bool(self.timeouts.get(frag))
                and frag not in self.resent
                and not recovered
            )
            if sent is not None and not recovered:
                rtt = now - sent
                if own:
                    self.own_rtt.sample(rtt)
                elif (own_rtt := self.own_rtt.srtt or self.min_rtt) is not None:
                    rtt = min(rtt, PEER_WAIT_CAP * own_rtt)
                self.rtt.sample(rtt)
                self.min_rtt = min(rtt, self.min_rtt or float("inf"))
            if frag in self.detected:
                self.detected.discard(frag)
                if waiting == DETECTED or (
                    self.min_rtt is not None
                    and now - (asked or self.last_sent[frag]) < self.min_rtt
                ):
                    self.stats.spurious += 1  # the original answered: it was not lost
                    self._reo_steps += 1
            if (first := self.first_sent.get(frag)) is not None:
                self._detect_losses(first - self.reo_wnd, now)
            self._probe_due = now + self._pto() if self.outstanding else None
            self._probes_unanswered = 0
            marked = is_marked(frame)
            self.stats.marked += marked
            self.window = self.marks.on_result(marked, self.window)
            if not slow and not marked:
                # A result later than its timeout and not held up by a recovery shows a full
                # path, not room for one more fragment: grown on those too, the windows of
                # 16 workers behind slow switches regrew while the queues were still long,
                # and timed out again (2694 resends on timeout instead of 195, 4x4, 0.5 ms
                # a frame, no loss).
                self.window = min(self.max_window, self.window + self.marks.growth(self.window))
            if frag in self.resent and self.timeouts.get(frag):
                # A resend on a timeout may come late enough to find its slot reused or
                # abandoned and leave a partial sum there. Fast resends (RACK, the tail probe)
                # come within round trips: their copy finds the partial sum it joins or the
                # completed one (README 4.2), and an ACK for each of them doubled the
                # traffic into the PS, on a link the plan fills to its capacity.
                self._send(frag, ACK)
                self.stats.acks += 1
            if self.finished:
                self.stats.seconds = now - self._started
        elif (
            flags == CONTROL
            and flow == self.ids(frag)[0]
            and frag in self.outstanding
            and now >= self.controlled.get(frag, 0.0)
        ):
            # Dropped at the collision, so no slot keeps it: no ACK needed later. Resent at
            # once, but at most every CONTROL_RESEND_GAP: while the occupant stays, a resend
            # per CONTROL ping-pongs at the round-trip time (a worker next to an aggregator
            # whose slots wait on far flows sent thousands a second).
            self.controlled[frag] = now + CONTROL_RESEND_GAP
            self._cut(now)  # ECN: once per round trip (RFC 3168 6.1.2), like losses
            self._send(frag)
            self.sent_once.pop(frag, None)
            self._track(frag, now, now + self.rtt.backed_off(self.timeouts.get(frag, 0)))
            self.stats.resent_on_control += 1

    def start(self, now: float) -> None:
        self._started = now
        self.gap = self._follow_plan(now)

    def run(self) -> np.ndarray:
        return run_shards([self])


class Stalled(Exception):
    """No result arrived for `stall_after` seconds (`run_shards`): a peer or the PS is gone."""

    def __init__(self, shards: list[Worker], seconds: float):
        super().__init__(f"no result for {seconds:g} s")
        self.shards, self.seconds = shards, seconds


def run_shards(shards: list[Worker], stall_after: float | None = None) -> np.ndarray:
    """Send every shard of one gradient, each to its own task's PS over one socket, and return
    the summed gradient (the shards' results in order). One shard is the unsharded case.
    With `stall_after`, raise Stalled when that many seconds pass without a new result.

    A CONTROL goes to the shard owning its occupant's fragment: the partial sum blocking a
    slot on one shard's path may wait for this worker's contribution to another shard."""
    sock = shards[0].sock
    by_task = {(w.task.job, w.task.task): w for w in shards}
    start = progress_at = time.monotonic()
    done = 0
    for w in shards:
        w.start(start)
    while not all(w.finished for w in shards):
        now = time.monotonic()
        wait = min(w.pump(now) for w in shards)
        wait = max(0.0, min(wait, stall_after or wait))
        if select.select([sock], [], [], wait)[0]:  # results gather till the next send is due
            time.sleep(max(0.0, min(GATHER, now + wait - time.monotonic())))
        now = time.monotonic()
        for frame in ina_frames(sock):
            dispatch(shards, by_task, frame, now)
        for w in shards:
            w.on_timeouts(time.monotonic())
        if stall_after is not None:
            if sum(w.done for w in shards) > done:
                done, progress_at = sum(w.done for w in shards), now
            elif now - progress_at > stall_after:
                raise Stalled(shards, stall_after)
    for w in shards:
        w.stats.fragments = len(w.rows)
    return np.concatenate([w.result for w in shards]).reshape(-1)


def dispatch(
    shards: list[Worker], by_task: dict[tuple[int, int], Worker], frame: bytes, now: float
) -> None:
    """Hand one received INA frame to the shard of its task (a CONTROL's occupant first to
    the shard owning it); `controller.emulation.faults.lossy_sim` drives workers through this
    too."""
    job, task, flags, flow, next_node, raw, count, _, occupant = INA_HEADER.unpack_from(
        frame, OFF_INA
    )
    flags = kind_of(flags)  # the mark is read from the frame (`Worker.receive`)
    shard = by_task.get((job, task))
    if shard is None:
        return
    if flags == CONTROL and count == 0 and next_node == NAMED:  # a peer's query found it missing
        shard.named_missing(raw, now)
        return
    if flags == CONTROL and count == 0:  # a NACK: the answer to a loss query
        shard.nack(raw, now)
        return
    if flags == CONTROL and count == HELD:  # the other answer: the loss is a peer's
        shard.hold(raw, now)
        return
    if flags == CONTROL:
        shard.stats.controls += 1
        owner = next((w for w in shards if w.owns(split_frag_id(occupant)[1])), shard)
        owner.unblock(occupant, now, other_shard=owner is not shard)
    shard.receive(flags, flow, raw, frame, now)
