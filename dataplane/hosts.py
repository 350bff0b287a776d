"""Host agents: `ina worker` sends a gradient in fragments, `ina ps` finishes and returns the sum.

Worker: splits its gradient into fragments of K int32 elements (float32 gradients are converted
to fixed point with scale 2**16, FIXED_POINT_SCALE), keeps an AIMD window of outstanding
fragments (+1 per result up to `max_window`, halved at most once per round trip, and at most
every CUT_FLOOR, on CONTROL packets, the ECN signal of a collision, and on losses), resends the
fragment a CONTROL packet names (at once, at most every CONTROL_RESEND_GAP). Losses are found
three ways: from later results (RACK, RFC 8985: a fragment sent a reordering window before one
whose result came is lost, and is resent at once whatever the window, like TCP's fast
retransmit), by a tail loss probe when nothing comes back for two round trips, and by the
retransmission timeout, which adapts to the round trips the worker measures (dataplane/rto.py,
RFC 6298; every DATA names its sender in `aux` and marks a resend, a RESULT carries the `aux` of
the contribution that completed it: no one samples a result a resend completed, and one a peer
completed counts as at most PEER_WAIT_CAP of the worker's own round trips) and is backed off per
fragment; what timed out is resent within the window and the pacing, lowest fragment first (with
a PROBE from the second timeout of a fragment on, in case its copy of the result was lost).
After receiving the result of a fragment it resent on a timeout it sends an ACK so that no
switch keeps a stale partial sum of it (p4src/README.md, Flags). A CONTROL names the fragment
occupying the slot; the worker helps it leave (an ACK if its result is already out, else its own
contribution to it, sent out of order, or sent again if it was sent a round trip ago), so that
neither a lost ACK, a lost contribution nor diverged windows can block a slot for good.
Fragments sent ahead of order that way take no place in the window: a window full of them would
wait for fragments that only its own in-order sending can provide (a deadlock seen after
re-plans). Optionally paced at the task's published rate.

PS: adds whatever arrives (raw fragments and partial aggregates), counting each
(flow id, fragment) once, finishes a fragment when the summed `count` reaches the number of
workers, and sends one RESULT per fragment that the switches multicast to the workers, under the
task's result flow id (published by the controller as `result_flow_id`).

Every frame's UDP source port is its flow id (`build_frame`), so plain OpenFlow switches that
cannot parse INA still forward each flow on its planned path by matching `udp_src`. A DATA,
ACK or PROBE for a finished fragment makes it send the result again (a worker lost it).

Fragment ids carry the iteration: `frag_id` = epoch << 24 | index (EPOCH_SHIFT; gradients up to
2**24 fragments, 2 GiB). A partial sum that a lost ACK left in a switch can then never be merged
with the next iteration's contributions (a different fragment id is a collision, not a match),
and the CONTROL naming it makes the worker free it with an ACK: without this, such a leftover
silently corrupted the next iteration's sums (seen with tail drops on every link).

Model sharding (EINA Sec. III-C): when the controller's state file gives the tasks of the job
a `model_share`, the worker splits its fragments into contiguous shards, one per task in task
order, sized by the shares (`shard_ranges`, the same split in every agent), and sends each shard
to its task's PS under that task's ids and rate, all from one loop (`run_shards`); each PS
finishes only its own shard (and with --verify checks it against the exact sum). Fragments keep
their index in the whole gradient, so shards never share a fragment id. The split is fixed for
an iteration: a re-plan changes paths and rates, not which PS holds which fragments.

Partial aggregation (PARING Sec. V-C): when the worker's state-file row has `segments`, the
fragments of each segment [start, end) of its traffic (fractions, rounded to fragment indices
the same way by every worker, `segment_rows`) go under that segment's flow id and first
aggregator: the compiler gave each segment its own flows, so a switch merges a share of a
worker's fragments and forwards the rest (`controller.compiler.segments`). The PS needs no change:
it finishes each fragment by the `count` its packets carry, whatever flows brought them.

Stopped by SIGTERM before the end, either agent prints a JSON line with `stopped`: what it
still waits for (the Mininet runner's hang report names it).
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import select
import signal
import socket
import sys
import time
from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import accumulate, pairwise
from pathlib import Path
from typing import TextIO

import numpy as np

from dataplane.frame import (
    ACK,
    CONTROL,
    DATA,
    FLOW_IDS_PER_GENERATION,
    FRAME_LEN,
    INA_HEADER,
    INA_UDP_PORT,
    OFF_ELEMS,
    OFF_INA,
    OFF_UDP,
    PROBE,
    RESULT,
    RETRANSMITTED,
    Endpoint,
    InaHeader,
    K,
    build_frame,
    completed_by,
    data_aux,
    ip_bytes,
    mac_bytes,
)
from dataplane.ports import drain, open_raw, send
from dataplane.rto import BACKOFF_CEILING, RtoEstimator

FIXED_POINT_SCALE = 2**16
EPOCH_SHIFT = 24  # frag_id = epoch << EPOCH_SHIFT | fragment index
EPOCHS = 2 ** (32 - EPOCH_SHIFT)
# Least seconds between two resends of one fragment on CONTROL packets: a few round trips on
# an emulated link, so a slot freed by the worker's own ACK is retried at once (as before)
# while a slot that stays taken is not hammered at the round-trip time.
CONTROL_RESEND_GAP = 0.02
# Why a fragment waits to be resent (Worker.lost): its timeout, loss detection from later
# results, or a re-plan (its ids changed).
TIMED_OUT, DETECTED, REPLANNED = "timed out", "detected", "replanned"
TLP_FLOOR = 0.01  # least tail-probe timeout (s): a few packets' time on an emulated link
# A result that a peer's DATA completed (`aux`, p4src/README.md) waited for that peer to send
# it: under loss a peer whose window stalls sends seconds late. Such a round trip is sampled
# as at most PEER_WAIT_CAP times the worker's own (`Worker.own_rtt`, the results its own DATA
# completed; until it has one, its least round trip: a worker whose DATA never came last took
# every wait whole, and its RTO reached 5 s on the 4x4 at 5 % loss). Some wait for peers is
# real and steady: under congestion every peer is behind its queue, and without that wait
# timeouts came before the peers' contributions (0.1 MB on Fig. 1 through 2-packet queues:
# 28 virtual s, where its test allows 3.1). But a stalled peer's seconds are not this
# worker's round trip: taken whole, they grew the RTOs to MAX_RTO with 16 workers at 5 %
# loss, and every recovery waited that long (dataplane/rto.py).
PEER_WAIT_CAP = 2
# A paced worker sends this many seconds' worth of fragments per turn of its loop, then sleeps
# as long: the same rate, but one select, drain and timer check per burst instead of per
# fragment, which at tens of thousands of fragments per second was most of its CPU
# (docs/loop-profile.md). Links queue far more than a burst (1000 frames).
PACING_BURST = 0.002
# Least seconds between two window cuts (`Worker._cut`): once per round trip, but never more
# often than this. Every worker sees every loss in the tree (a later result shows the fragment
# missing, whoever lost it), and the contributor that lost it repairs it within its own round
# trip or a timeout (at least MIN_RTO, 0.5 s). A worker behind its peers completes fragments
# on arrival and measures round trips of milliseconds (6 ms on Fig. 1), so "once per SRTT" cut
# it a hundred times a second for the same losses: at window 1 it paced the whole iteration,
# while the workers ahead (SRTTs of seconds, waiting for it) cut rarely and ran seconds ahead,
# until their contributions outlived the switches' STALE_AFTER (lossy_sim, 5 % loss, 1 MB:
# 146 virtual s against 6.6 s unimpaired; fragments timed out up to 17 times).
CUT_FLOOR = 0.25
BROADCAST = Endpoint(b"\xff" * 6, b"\xff" * 4)
_INA_PORT = INA_UDP_PORT.to_bytes(2, "big")


class InFlight(dict[int, float]):
    """Fragments in flight -> their deadlines, in order of last send (a dict), with a heap of
    the deadlines beside it: the loop asks for the earliest deadline and for what expired on
    every turn, and a scan of the whole window for that (256 fragments, once per packet) was
    most of a worker's CPU (docs/loop-profile.md). Heap entries a later send, a result or a
    deletion made stale are skipped when they come up."""

    def __init__(self) -> None:
        super().__init__()
        self._heap: list[tuple[float, int]] = []

    def __setitem__(self, frag: int, deadline: float) -> None:
        super().__setitem__(frag, deadline)
        heapq.heappush(self._heap, (deadline, frag))
        if len(self._heap) > 4 * len(self) + 1024:  # mostly stale: rebuild
            self._heap = [(d, f) for f, d in self.items()]
            heapq.heapify(self._heap)

    def earliest(self) -> float | None:
        """The earliest deadline in flight (None when nothing is)."""
        heap = self._heap
        while heap:
            deadline, frag = heap[0]
            if self.get(frag) == deadline:
                return deadline
            heapq.heappop(heap)
        return None

    def expired(self, now: float) -> list[int]:
        """The fragments whose deadline is at most `now`, each once, earliest first; they stay
        in flight until the caller moves or removes them."""
        heap, out = self._heap, {}
        while heap and heap[0][0] <= now:
            deadline, frag = heapq.heappop(heap)
            if self.get(frag) == deadline:
                out[frag] = deadline
        for frag, deadline in out.items():  # still theirs until the caller decides
            heapq.heappush(heap, (deadline, frag))
        return list(out)


@dataclass(frozen=True)
class Task:
    """Which aggregation the traffic belongs to (the plan's job and task ids)."""

    job: int
    task: int


def synthetic_gradient(seed: int, index: int, elements: int) -> np.ndarray:
    """Worker `index`'s int32 test gradient; small values so any 2**11 workers sum exactly."""
    rng = np.random.default_rng([seed, index])
    return rng.integers(-(2**20), 2**20, elements, dtype=np.int32)


def to_fixed_point(gradient: np.ndarray) -> np.ndarray:
    """int32 passes through; float32 becomes round(x * FIXED_POINT_SCALE)."""
    if gradient.dtype == np.int32:
        return gradient
    return np.round(gradient.astype(np.float64) * FIXED_POINT_SCALE).astype(np.int32)


def fragments(gradient: np.ndarray) -> np.ndarray:
    """The gradient as rows of K big-endian int32, the last row zero-padded."""
    rows = -(-len(gradient) // K)
    padded = np.zeros(rows * K, dtype=">i4")
    padded[: len(gradient)] = gradient
    return padded.reshape(rows, K)


def frag_id(epoch: int, index: int) -> int:
    return (epoch % EPOCHS) << EPOCH_SHIFT | index


def split_frag_id(value: int) -> tuple[int, int]:
    """(epoch, fragment index) of a packet's `frag_id`."""
    return value >> EPOCH_SHIFT, value & ((1 << EPOCH_SHIFT) - 1)


def _ina_frames(sock: socket.socket) -> list[bytes]:
    frames: list[bytes] = []
    drain(sock, lambda f: frames.append(f) if f[OFF_UDP + 2:OFF_UDP + 4] == _INA_PORT
          and len(f) >= OFF_ELEMS + 4 * K else None, limit=4096)
    return frames


def _endpoint(iface: str, ip: str) -> Endpoint:
    mac = Path(f"/sys/class/net/{iface}/address").read_text().strip()
    return Endpoint(mac_bytes(mac), ip_bytes(ip))


# *** worker

@dataclass
class PlanWatcher:
    """Follows the controller's state file for the row (a worker assignment) `match` picks.

    The controller replaces the file atomically, so a read never sees half of it.
    """

    path: Path
    match: Callable[[dict], bool]
    version: int = 0
    _stamp: int = 0
    _next_check: float = 0.0

    def poll(self, now: float) -> dict | None:
        """The matching row of a newer plan version, at most every 0.1 s; else None."""
        if now < self._next_check:
            return None
        self._next_check = now + 0.1
        try:
            stamp = os.stat(self.path).st_mtime_ns
            if stamp == self._stamp:
                return None
            self._stamp = stamp
            state = json.loads(self.path.read_text())
        except (OSError, json.JSONDecodeError):
            return None
        if state["version"] <= self.version:
            return None
        row = next((r for r in state["workers"] if self.match(r)), None)
        if row is not None:
            self.version = state["version"]
        return row


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
    sent_to_unblock: int = 0
    freed_across_shards: int = 0  # ACKs that broke a wait between two PSs' trees (unblock)
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
    plan: PlanWatcher | None = None
    # wire Gbps per planned Gbps, when the rate comes from the plan (emulations scale links)
    rate_scale: float = 1.0
    # This worker's index in its task, named in the `aux` of every DATA it sends: a RESULT
    # names the contributor whose DATA completed the fragment, so each worker knows which
    # round trips were its own (`own_rtt`, PEER_WAIT_CAP).
    contributor: int = 0
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
    controlled: dict[int, float] = field(default_factory=dict)  # fragment -> next CONTROL resend
    timeouts: dict[int, int] = field(default_factory=dict)  # fragment -> timeouts so far
    # fragments sent exactly once -> when: the only round trips sampled (Karn's rule)
    sent_once: dict[int, float] = field(default_factory=dict)
    rtt: RtoEstimator = field(init=False)
    # The round trips of the fragments this worker's own DATA completed: the network's, with
    # no peer to wait for (PEER_WAIT_CAP).
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
    next_frag: int = 0
    epoch: int = 0  # the iteration, carried in every fragment id
    # Fragment index on the wire of rows[0]: a shard of a gradient keeps its fragments' place
    # in the whole, so the shards going to different PSs never share a fragment id (and so a
    # switch slot, which is a hash of it) and a CONTROL names the shard its occupant is of.
    offset: int = 0
    # Partial aggregation: (first row, flow id, next node) per segment of the rows, ascending
    # (`segment_rows`); empty: every fragment travels as `flow_id`.
    segments: list[tuple[int, int, int]] = field(default_factory=list)
    result: np.ndarray = field(init=False)
    have: np.ndarray = field(init=False)  # fragments whose result arrived
    done: int = 0
    next_send: float = 0.0
    gap: float = 0.0
    _started: float = 0.0

    def __post_init__(self) -> None:
        self.epoch %= EPOCHS  # as it reads back from a fragment id
        self.result = np.zeros((len(self.rows), K), dtype=np.int32)
        self.have = np.zeros(len(self.rows), dtype=bool)
        self.rtt = RtoEstimator(initial=self.timeout)
        self.own_rtt = RtoEstimator()

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
        _, flow, node = self.segments[max(0, bisect_right(self.segments, frag,
                                                          key=lambda s: s[0]) - 1)]
        return flow, node

    def owns(self, wire_index: int) -> bool:
        return 0 <= wire_index - self.offset < len(self.rows)

    def waiting_for(self) -> dict[str, object]:
        """What a stuck worker is waiting for (printed when it is stopped before the end)."""
        return {"next_fragment": self.next_frag, "outstanding": sorted(self.outstanding)[:20],
                "outstanding_count": len(self.outstanding), "ahead": len(self.ahead),
                "lost": sorted(self.lost)[:20], "lost_count": len(self.lost),
                "flow_id": self.flow_id, "window": self.window,
                "timeouts_max": max(self.timeouts.values(), default=0),
                "srtt": self.rtt.srtt, "rto": round(self.rto, 3),
                "plan_version": self.plan.version if self.plan else None}

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

    def _send(self, frag: int, flags: int = DATA, epoch: int | None = None) -> None:
        """Send fragment `frag` (an index into this worker's rows) or a DATA-less packet."""
        count = 1 if flags == DATA else 0
        flow, node = self.ids(frag)
        aux = data_aux(self.contributor, frag in self.first_sent) if flags == DATA else 0
        header = InaHeader(self.task.job, self.task.task, flags, flow, node,
                           frag_id(self.epoch if epoch is None else epoch, self.offset + frag),
                           count, aux=aux)
        payload = self.rows[frag].tobytes() if flags == DATA else bytes(4 * K)
        send(self.sock, build_frame(self.me, self.ps, header, payload))
        self.stats.sent += 1

    def _track(self, frag: int, now: float, deadline: float) -> None:
        """`frag`'s DATA was just sent: in flight until `deadline`, and last in `outstanding`,
        which stays in order of last send (the order loss detection walks)."""
        self.outstanding.pop(frag, None)
        self.outstanding[frag] = deadline
        self.last_sent[frag] = now

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
        for frag in self.outstanding:  # in order of last send
            if self.last_sent[frag] >= before:
                break
            gone.append(frag)
        for frag in gone:
            self._declare_lost(frag)
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
        """Send `frag` again; its next deadline is the RTO backed off by its timeouts so far."""
        self._send(frag)
        self.resent.add(frag)
        self.sent_once.pop(frag, None)
        self._track(frag, now, now + self.rtt.backed_off(self.timeouts.get(frag, 0)))

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
        if epoch != self.epoch or not 0 <= index < len(self.rows) or self.have[index]:
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
        elif now - self.last_sent.get(index, now) >= (self.rtt.srtt or self.rto) \
                and not other_shard:
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
        in_flight = len(self.outstanding) - sum(f in self.outstanding for f in self.ahead)
        return in_flight < int(self.window)

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
                if frag in self.outstanding or frag in self.lost or self.have[frag]:
                    self.ahead.discard(frag)  # already sent to unblock a slot
                    continue
                self._first_send(frag, now)
            self.next_send = max(self.next_send, now) + self.gap
        earliest = self.outstanding.earliest()
        wait = (now + self.rto if earliest is None else earliest) - now
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
        if self.timeouts.get(frag, 0) >= 2 or (why == DETECTED and self._tail()):
            self._send(frag, PROBE)
            self.stats.probes += 1

    def on_timeouts(self, now: float) -> None:
        """Queue what timed out for resending (`pump` resends it within the window and the
        pacing); from a fragment's second timeout on, a PROBE follows its resend: the result
        may have reached every peer but this worker, and then the retransmission waits in a
        slot for contributions that never come again (p4src/README.md, PROBE). The timeouts
        of one round trip are one loss event: they halve the window once."""
        for frag in self.outstanding.expired(now):
            self.sent_once.pop(frag, None)  # its result may now come from the peers' resends
            self.timeouts[frag] = self.timeouts.get(frag, 0) + 1
            self._cut(now)
            if self.timeouts_spurious and self.timeouts[frag] == 1:
                # Spurious timeouts so far: its original is likely still queued, so it stays
                # in flight for a backed-off RTO more (as F-RTO, RFC 5682, waits to see
                # whether the original is answered) instead of adding a duplicate to the queue.
                self.outstanding[frag] = now + self.rtt.backed_off(1)
                continue
            del self.outstanding[frag]
            self._lose(frag)
        if self._probe_due is not None and now >= self._probe_due:
            pto = self._pto()
            self._probes_unanswered += 1
            self._probe_due = now + self._pto() if self._tail() else float("inf")
            if self._tail():  # the few left: each quiet for a PTO goes again, with a PROBE
                probed = [f for f in self.outstanding if now - self.last_sent[f] >= pto]
            elif self.outstanding and not (self._has_more() and self._window_open()):
                probed = [next(reversed(self.outstanding))]
            else:
                probed = []
            for frag in probed:
                self._declare_lost(frag)

    def _declare_lost(self, frag: int) -> None:
        """Take an outstanding fragment out of flight as lost without a timeout (found from
        later results, or by the tail probe), to be resent at once."""
        del self.outstanding[frag]
        self.sent_once.pop(frag, None)
        self.timeouts_spurious = False  # losses happen: timeouts are resent at once again
        self.detected.add(frag)
        self._lose(frag, DETECTED)
        self._detected.append(frag)

    def receive(self, flags: int, flow: int, raw_frag: int, frame: bytes, now: float) -> None:
        """A RESULT, or the CONTROL of a collision, of this worker's task."""
        epoch, wire = split_frag_id(raw_frag)
        frag = wire - self.offset
        if epoch != self.epoch or not 0 <= frag < len(self.rows):
            return
        if flags == RESULT and not self.have[frag]:
            self.result[frag] = np.frombuffer(frame, ">i4", K, OFF_ELEMS)
            self.have[frag] = True
            self.done += 1
            in_flight = self.outstanding.pop(frag, None) is not None
            waiting = self.lost.pop(frag, None)
            self.ahead.discard(frag)
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
            slow = (in_flight and bool(self.timeouts.get(frag)) and frag not in self.resent
                    and not recovered)
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
                if waiting == DETECTED or (self.min_rtt is not None
                                           and now - self.last_sent[frag] < self.min_rtt):
                    self.stats.spurious += 1  # the original answered: it was not lost
                    self._reo_steps += 1
            if (first := self.first_sent.get(frag)) is not None:
                self._detect_losses(first - self.reo_wnd, now)
            self._probe_due = now + self._pto() if self.outstanding else None
            self._probes_unanswered = 0
            if not slow:
                # A result later than its timeout and not held up by a recovery shows a full
                # path, not room for one more fragment: grown on those too, the windows of
                # 16 workers behind slow switches regrew while the queues were still long,
                # and timed out again (2694 resends on timeout instead of 195, 4x4, 0.5 ms
                # a frame, no loss).
                self.window = min(self.max_window, self.window + 1)
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
        elif (flags == CONTROL and flow == self.ids(frag)[0] and frag in self.outstanding
              and now >= self.controlled.get(frag, 0.0)):
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


def run_shards(shards: list[Worker]) -> np.ndarray:
    """Send every shard of one gradient, each to its own task's PS over one socket, and return
    the summed gradient (the shards' results in order). One shard is the unsharded case.

    A CONTROL goes to the shard owning its occupant's fragment: the partial sum blocking a
    slot on one shard's path may wait for this worker's contribution to another shard."""
    sock = shards[0].sock
    by_task = {(w.task.job, w.task.task): w for w in shards}
    start = time.monotonic()
    for w in shards:
        w.start(start)
    while not all(w.finished for w in shards):
        now = time.monotonic()
        wait = min(w.pump(now) for w in shards)
        select.select([sock], [], [], max(0.0, wait))
        now = time.monotonic()
        for frame in _ina_frames(sock):
            dispatch(shards, by_task, frame, now)
        for w in shards:
            w.on_timeouts(time.monotonic())
    for w in shards:
        w.stats.fragments = len(w.rows)
    return np.concatenate([w.result for w in shards]).reshape(-1)


def dispatch(shards: list[Worker], by_task: dict[tuple[int, int], Worker], frame: bytes,
             now: float) -> None:
    """Hand one received INA frame to the shard of its task (a CONTROL's occupant first to
    the shard owning it); `controller.emulation.faults.lossy_sim` drives workers through this
    too."""
    job, task, flags, flow, _, raw, _, _, occupant = INA_HEADER.unpack_from(frame, OFF_INA)
    shard = by_task.get((job, task))
    if shard is None:
        return
    if flags == CONTROL:
        owner = next((w for w in shards if w.owns(split_frag_id(occupant)[1])), shard)
        owner.unblock(occupant, now, other_shard=owner is not shard)
    shard.receive(flags, flow, raw, frame, now)


def segment_rows(total: int, segments: list[dict]) -> list[tuple[int, int, int]]:
    """(first row, flow id, next node) of each segment (state-file `segments`: `start`,
    `end` fractions of `total` fragments), the start rounded to the nearest fragment index.

    Deterministic in its inputs, so every worker of a task puts each fragment in the same
    segment and the switches count its contributors right."""
    return [(round(s["start"] * total), s["flow_id"], s["next_node"]) for s in segments]


def shard_ranges(total: int, shares: list[float]) -> list[tuple[int, int]]:
    """Split `total` fragments into contiguous ranges, one per share in task order, sized by
    largest remainders (EINA's r_p / Σ r, README "Plan JSON" `model_share`).

    Deterministic in its inputs, so every worker and every PS computes the same split from
    the shares the controller publishes."""
    weight = sum(shares)
    if weight <= 0:
        raise ValueError("model shares must add up to more than 0")
    exact = [total * s / weight for s in shares]
    sizes = [int(x) for x in exact]
    by_remainder = sorted(range(len(shares)), key=lambda i: (sizes[i] - exact[i], i))
    for i in by_remainder[: total - sum(sizes)]:
        sizes[i] += 1
    return list(pairwise([0, *accumulate(sizes)]))


# *** parameter server

@dataclass
class ParameterServer:
    """Finishes the aggregation of `fragments` fragments from `workers` workers."""

    sock: socket.socket
    me: Endpoint
    task: Task
    workers: int
    fragments: int
    result_flow_id: int
    plan: PlanWatcher | None = None
    # per flow-id generation: sums and contribution counts of every fragment
    sums: dict[int, np.ndarray] = field(default_factory=dict)
    counts: dict[int, np.ndarray] = field(default_factory=dict)
    done: np.ndarray = field(init=False)
    result: np.ndarray = field(init=False)
    seen: set[tuple[int, int]] = field(default_factory=set)
    finished: int = 0
    results_sent: int = 0
    # Exactly-once evidence: DATA already counted or for a finished fragment (a copy, or a
    # retransmission whose original also arrived), ignored; fragments finished with a summed
    # count other than `workers` (a contribution counted twice or missed: must stay 0).
    duplicates_ignored: int = 0
    miscounted: int = 0
    epoch: int = 0  # the iteration; fragments of other iterations are ignored
    offset: int = 0  # wire index of this PS's first fragment (its shard's place in the model)

    def __post_init__(self) -> None:
        self.epoch %= EPOCHS  # as it reads back from a fragment id
        self.done = np.zeros(self.fragments, dtype=bool)
        self.result = np.zeros((self.fragments, K), dtype=np.int32)

    def _generation(self, flow: int) -> tuple[np.ndarray, np.ndarray]:
        gen = flow // FLOW_IDS_PER_GENERATION
        if gen not in self.sums:
            self.sums[gen] = np.zeros((self.fragments, K), dtype=np.int32)
            self.counts[gen] = np.zeros(self.fragments, dtype=np.int64)
        return self.sums[gen], self.counts[gen]

    def _send_result(self, frag: int, aux: int = RETRANSMITTED) -> None:
        """`aux`: that of the contribution that completed the fragment; a repeated result is
        marked RETRANSMITTED (no worker takes its round trip as a sample, dataplane/rto.py)."""
        header = InaHeader(self.task.job, self.task.task, RESULT, self.result_flow_id, 0,
                           frag_id(self.epoch, self.offset + frag), self.workers, aux=aux)
        send(self.sock, build_frame(self.me, BROADCAST, header,
                                    self.result[frag].astype(">i4").tobytes()))
        self.results_sent += 1

    def handle(self, frame: bytes) -> None:
        job, task, flags, flow, _, raw, count, _, aux = INA_HEADER.unpack_from(frame, OFF_INA)
        epoch, wire = split_frag_id(raw)
        frag = wire - self.offset
        if ((job, task) != (self.task.job, self.task.task) or epoch != self.epoch
                or not 0 <= frag < self.fragments):
            return
        if flags in (ACK, PROBE) or (flags == DATA and self.done[frag]):
            self.duplicates_ignored += flags == DATA
            if self.done[frag]:
                self._send_result(frag)
            return
        if flags != DATA:
            return
        if (flow, frag) in self.seen:
            self.duplicates_ignored += 1
            return
        self.seen.add((flow, frag))
        sums, counts = self._generation(flow)
        sums[frag] += np.frombuffer(frame, ">i4", K, OFF_ELEMS).astype(np.int32)
        counts[frag] += count
        if counts[frag] >= self.workers:
            self.miscounted += int(counts[frag] != self.workers)
            self.done[frag] = True
            self.result[frag] = sums[frag]
            self.finished += 1
            # Aggregation forwards the `aux` of the contribution that completed a slot, so this
            # is the last contribution to arrive along the fragment's slowest path.
            self._send_result(frag, aux)

    def flows_per_fragment(self) -> float:
        """Distinct (flow, fragment) contributions that reached the PS per fragment: how many
        flows the network delivers into the PS, retransmissions, ACKs and PROBEs left out."""
        return round(len(self.seen) / max(1, self.fragments), 3)

    def waiting_for(self) -> dict[str, object]:
        """Unfinished fragments and, per flow-id generation, the counts summed so far."""
        missing = np.flatnonzero(~self.done)[:20].tolist()
        return {"unfinished": int((~self.done).sum()), "first_unfinished": missing,
                "counts": {gen: [int(c[f]) for f in missing] for gen, c in self.counts.items()},
                "result_flow_id": self.result_flow_id}

    def run(self, linger: float, stop: TextIO | None = None) -> None:
        """Serve until every fragment is finished and `linger` seconds pass without traffic;
        with `stop`, until a line (or end of file) arrives there instead: a launcher that knows
        every worker has its sums says so, so a worker still waiting for a lost result is never
        left without its PS, however long its retransmission timeout."""
        quiet_since = time.monotonic()
        watched: list[socket.socket | TextIO] = [self.sock, *([stop] if stop else [])]
        while (stop or self.finished < self.fragments
               or time.monotonic() - quiet_since < linger):
            row = self.plan.poll(time.monotonic()) if self.plan else None
            if row is not None:
                self.result_flow_id = row["result_flow_id"]
            ready = select.select(watched, [], [], 0.1)[0]
            if stop is not None and stop in ready:
                stop.readline()
                return
            if self.sock in ready:
                for frame in _ina_frames(self.sock):
                    self.handle(frame)
                quiet_since = time.monotonic()


# *** command line

class Stopped(Exception):
    """SIGTERM arrived before the agent finished: it reports what it was waiting for."""


def _stop_on_sigterm() -> None:
    def stop(signum, frame):
        raise Stopped
    signal.signal(signal.SIGTERM, stop)


def _gradient(args: argparse.Namespace, index: int) -> np.ndarray:
    if args.gradient:
        return to_fixed_point(np.load(args.gradient))
    return synthetic_gradient(args.seed, index, int(args.size_mb * 2**20) // 4)


def _wait_for_go(args: argparse.Namespace) -> None:
    """With --wait-go: say we are ready (socket open, gradient built), then block until a line
    arrives on stdin. A launcher starts every agent this way, then releases them together, so
    process start-up (seconds of imports on a loaded machine) is neither timed nor lets one
    worker's fragments wait in switch slots for peers that have not started yet."""
    if args.wait_go:
        print(json.dumps({"ready": True}), flush=True)
        sys.stdin.readline()


class BadShards(Exception):
    """The state file shards a job in a way this agent cannot follow; the message says why."""


def job_shares(state_path: str | None, job: int) -> dict[int, float] | None:
    """Task id → `model_share` of job `job`, in task order, from the controller's state file;
    None when the job is not sharded (or there is no state file to say so)."""
    if not state_path:
        return None
    try:
        rows = json.loads(Path(state_path).read_text())["workers"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    shares = {r["task_id"]: r.get("model_share") for r in rows if r["job_id"] == job}
    if not shares or any(v is None for v in shares.values()):
        return None
    return dict(sorted(shares.items()))


def _worker_shards(args: argparse.Namespace, sock: socket.socket, me: Endpoint,
                   rows: np.ndarray) -> list[Worker]:
    """One Worker per task this worker sends to: the whole gradient to --task's PS, or, when
    the state file gives the job's tasks model shares, each task's shard to its PS."""
    common = {"window": args.window, "timeout": args.timeout, "rate_scale": args.rate_scale,
              "epoch": args.epoch}

    def watcher(task: int) -> PlanWatcher | None:
        if not args.state:
            return None
        key = (args.name, args.job, task)
        return PlanWatcher(Path(args.state),
                           lambda r: (r["worker"], r["job_id"], r["task_id"]) == key)

    shares = job_shares(args.state, args.job)
    if shares is None:
        return [Worker(sock, me, Endpoint(BROADCAST.mac, ip_bytes(args.ps_ip)),
                       Task(args.job, args.task), args.flow_id or args.index + 1,
                       args.next_node, rows, rate_gbps=args.rate_gbps, plan=watcher(args.task),
                       contributor=args.index, **common)]
    mine = {r["task_id"]: r for r in json.loads(Path(args.state).read_text())["workers"]
            if r["job_id"] == args.job and r["worker"] == args.name}
    if set(mine) != set(shares):
        raise BadShards(
            f"worker {args.name}: job {args.job} shards its model over tasks {sorted(shares)} "
            f"but this worker is in tasks {sorted(mine)} of it; with model sharding every "
            "worker holds the whole model and sends one shard to each task's PS")
    ranges = shard_ranges(len(rows), list(shares.values()))
    return [Worker(sock, me, Endpoint(BROADCAST.mac, ip_bytes(mine[task]["ps_ip"])),
                   Task(args.job, task), mine[task]["flow_id"], mine[task]["next_node"],
                   rows[lo:hi], plan=watcher(task), offset=lo, contributor=args.index,
                   **common)
            for task, (lo, hi) in zip(shares, ranges, strict=True)]


def _worker_report(shards: list[Worker]) -> dict[str, object]:
    """The shards' stats summed (seconds: the last shard's); per shard its task and range;
    the round trip estimate the retransmission timeout came to (the longest shard's)."""
    report: dict[str, object] = {}
    for w in shards:
        for key, value in w.stats.__dict__.items():
            report[key] = max(report.get(key, 0), value) if key == "seconds" \
                else report.get(key, 0) + value
    slowest = max(shards, key=lambda w: w.rto)
    report.update(rtt_samples=sum(w.rtt.samples for w in shards),
                  srtt_ms=round(1000 * (slowest.rtt.srtt or 0.0), 1),
                  rto_ms=round(1000 * slowest.rto, 1))
    if len(shards) > 1:
        report["shards"] = [{"task": w.task.task, "first_fragment": w.offset,
                             "fragments": len(w.rows), "seconds": round(w.stats.seconds, 3)}
                            for w in shards]
    return report


def cmd_worker(args: argparse.Namespace) -> int:
    if args.verify and args.gradient:
        raise SystemExit("--verify checks synthetic gradients; it cannot be used with --gradient")
    gradient = _gradient(args, args.index)
    try:
        shards = _worker_shards(args, open_raw(args.iface), _endpoint(args.iface, args.ip),
                                fragments(gradient))
    except BadShards as exc:
        print(f"error: ina worker: {exc}", file=sys.stderr)
        return 2
    _stop_on_sigterm()
    try:
        _wait_for_go(args)
        result = run_shards(shards)[: len(gradient)]
    except Stopped:
        waiting = {w.task.task: w.waiting_for() for w in shards}
        print(json.dumps({"worker": args.index,
                          "stopped": waiting if len(shards) > 1 else waiting[args.task],
                          **_worker_report(shards)}))
        return 3
    report: dict[str, object] = {"worker": args.index, **_worker_report(shards)}
    code = 0
    if args.verify:
        expected = _expected_sum(args.seed, args.workers, len(gradient))
        report["exact"] = bool(np.array_equal(result.astype(np.int64), expected))
        code = 0 if report["exact"] else 1
    print(json.dumps(report))
    return code


def _expected_sum(seed: int, workers: int, elements: int) -> np.ndarray:
    """The exact sum of the synthetic gradients of workers 0..workers-1 (int64)."""
    return sum((synthetic_gradient(seed, i, elements).astype(np.int64) for i in range(workers)),
               np.zeros(elements, np.int64))


def _ps_shard(args: argparse.Namespace, total: int) -> tuple[int, int]:
    """(first fragment, fragments) this PS finishes: its task's shard, or the whole gradient."""
    shares = job_shares(args.state, args.job)
    if shares is None:
        return 0, total
    if args.task not in shares:
        raise BadShards(f"PS of task {args.task}: the state file shards job {args.job} over "
                        f"tasks {sorted(shares)} only")
    lo, hi = shard_ranges(total, list(shares.values()))[list(shares).index(args.task)]
    return lo, hi - lo


def cmd_ps(args: argparse.Namespace) -> int:
    elements = int(args.size_mb * 2**20) // 4
    try:
        offset, count = _ps_shard(args, -(-elements // K))
    except BadShards as exc:
        print(f"error: ina ps: {exc}", file=sys.stderr)
        return 2
    plan = None
    if args.state:
        task = (args.job, args.task)
        plan = PlanWatcher(Path(args.state), lambda r: (r["job_id"], r["task_id"]) == task)
    ps = ParameterServer(open_raw(args.iface), _endpoint(args.iface, args.ip),
                         Task(args.job, args.task), args.workers, count,
                         args.result_flow_id, plan=plan, epoch=args.epoch, offset=offset)
    _stop_on_sigterm()
    try:
        _wait_for_go(args)
        start = time.monotonic()
        ps.run(args.linger, stop=sys.stdin if args.wait_go else None)
    except Stopped:
        # stopped while still answering stragglers, its shard may well be complete
        print(json.dumps({"ps": True, "stopped": ps.waiting_for(), "fragments": ps.fragments,
                          "flows_per_fragment": ps.flows_per_fragment(),
                          **_ps_check(args, ps, elements)}))
        return 3
    report = {"ps": True, "first_fragment": offset, "fragments": ps.fragments,
              "finished": ps.finished, "duplicates_ignored": ps.duplicates_ignored,
              "miscounted": ps.miscounted, "results_sent": ps.results_sent,
              "flows_per_fragment": ps.flows_per_fragment(),
              "seconds": round(time.monotonic() - start, 3), **_ps_check(args, ps, elements)}
    print(json.dumps(report))
    return 0 if report.get("exact", True) else 1


def _ps_check(args: argparse.Namespace, ps: ParameterServer, elements: int) -> dict:
    """With --verify and every fragment finished: is the PS's shard the exact sum?"""
    if not args.verify or ps.finished < ps.fragments:
        return {}
    expected = fragments(_expected_sum(args.seed, args.workers, elements))[ps.offset:]
    return {"exact": bool(np.array_equal(ps.result.astype(np.int64),
                                         expected[: ps.fragments]))}


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--state", metavar="FILE",
                   help="the controller's state file: follow plan changes (README)")
    p.add_argument("--iface", required=True, help="interface to send and receive on")
    p.add_argument("--ip", required=True, help="this host's IPv4 address")
    p.add_argument("--job", type=int, default=1,
                   help="job number, carried in every fragment (default 1)")
    p.add_argument("--task", type=int, default=0,
                   help="task number within the job, carried in every fragment (default 0)")
    p.add_argument("--workers", type=int, required=True, help="workers in the task")
    p.add_argument("--size-mb", type=float, default=1.0, help="gradient size (default 1 MB)")
    p.add_argument("--epoch", type=int, default=0,
                   help="iteration number, carried in fragment ids (worker and PS must agree)")
    p.add_argument("--wait-go", action="store_true",
                   help='print {"ready": true} once set up, then wait for a line on stdin')
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic gradients")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `worker` and `ps` to the command line."""
    p = subparsers.add_parser("worker", help="send one gradient through INA and get the sum")
    _common(p)
    p.add_argument("--ps-ip", required=True,
                   help="the PS's address (a sharded job takes each task's PS from --state)")
    p.add_argument("--index", type=int, required=True, help="worker index in the task (0-based)")
    p.add_argument("--flow-id", type=int, help="this worker's flow id (default index + 1)")
    p.add_argument("--next-node", type=int, default=0, help="id of the first aggregating node")
    p.add_argument("--gradient", metavar="FILE.npy", help="int32 or float32 gradient to send "
                   f"(float32 is scaled by {FIXED_POINT_SCALE}); default: synthetic")
    p.add_argument("--window", type=float, default=16, help="initial window (fragments)")
    p.add_argument("--timeout", type=float, default=0.5, help="retransmission timeout (s)")
    p.add_argument("--rate-gbps", type=float, help="pace at the task's published rate")
    p.add_argument("--name", help="this worker's name in the topology (with --state)")
    p.add_argument("--rate-scale", type=float, default=1.0,
                   help="wire Gbps per planned Gbps when pacing at the state file's rate")
    p.add_argument("--verify", action="store_true",
                   help="check the result against the exact sum of the synthetic gradients")
    p.set_defaults(func=cmd_worker)

    p = subparsers.add_parser("ps", help="parameter server: finish the sums, send results")
    _common(p)
    p.add_argument("--result-flow-id", type=int, required=True,
                   help="flow id of the task's results (the controller's result_flow_id)")
    p.add_argument("--linger", type=float, default=1.0,
                   help="seconds to keep answering retransmissions after the last fragment; "
                   "with --wait-go the PS serves until a second line on stdin instead")
    p.add_argument("--verify", action="store_true",
                   help="check this PS's sums (its shard of the model) against the exact sum "
                   "of the synthetic gradients (--seed)")
    p.set_defaults(func=cmd_ps)

