"""A worker's loss recovery: how it finds lost fragments and repairs them, the set of
fragments in flight its timers walk (`InFlight`), and the constants that tune both. The logic
runs in `Worker` (dataplane/worker.py: `receive`, `on_timeouts`, `pump`, `unblock`); the
retransmission timeout itself is dataplane/rto.py, which stays apart: it is RFC 6298's
estimator in the RFC's notation and knows nothing of fragments or windows.

Losses are found three ways: from later results (RACK, RFC 8985: a fragment sent a reordering
window before one whose result came is lost, and is resent at once whatever the window, like
TCP's fast retransmit), by a tail loss probe when nothing comes back for two round trips, and by
the retransmission timeout, which adapts to the round trips the worker measures (dataplane/rto.py,
RFC 6298; every DATA names its sender in `aux` and marks a resend, a RESULT carries the `aux` of
the contribution that completed it: no one samples a result a resend completed, and one a peer
completed counts as at most PEER_WAIT_CAP of the worker's own round trips) and is backed off per
fragment; what timed out is resent within the window and the pacing, lowest fragment first (with
a PROBE from the second timeout of a fragment on, in case its copy of the result was lost; with
loss queries a first timeout sends a query instead, since most are a peer's loss).
After receiving the result of a fragment it resent on a timeout, the worker sends an ACK so that no
switch keeps a stale partial sum of it (p4src/README.md, Flags).

Loss queries (`Worker.query`, both targets): every contributor whose result is missing
finds the fragment lost at the same time, and the results cannot tell it whose loss it was, so
each resending on detection made 3-5 resends per lost frame. With queries a worker that finds
a fragment lost sends a loss query along its data path instead (a PROBE whose `count` is the
query's round, p4src/README.md): the first aggregation point whose partial sum lacks its
contribution answers with a NACK and only then does it resend; one that completed the
fragment passes the query on (or answers with the PS's RESULT if it kept it); one holding its
contribution answers HELD (a peer's loss: the peer's own query is NACKed), and so does the PS
when it has counted the asker's flow. The PS answers a query about a finished fragment with
the result once per round, as a kept RESULT does: the peers of a late contributor ask in the
same round, their queries crossed the result on its way down, and a result sent to every
worker for each of them doubled bmv2's 4-leaf/4-spine at 1 % loss (docs/reliability/loss.md,
"The PS answers each query round once"). Unanswered for REASK_PTOS PTOs it asks again, and after
QUERY_ROUNDS queries it resends;
the timeout counts from the query. The contributors ask in turns (`Worker._turn`): one at
once, the others a round trip apart each, so that a lost result, which every contributor
below the loss misses, is asked about (and its sum sent into the PS) about once; the loser
of a contribution still resends on its NACK at once.

Named NACKs (`Worker.named_missing`, both targets): a query that finds a partial sum of its
fragment also NACKs the members missing from it, once per slot and query round, so the
loser need not wait for its own turn to ask (p4src/README.md, "Loss query"); it resends at
once unless its last copy is younger than its own round trip. A member that is a switch's
sum is named through one worker whose contribution is in it: that copy meets the completed
slot, which sends its stored sum again (4-leaf/4-spine at 5 % loss in the simulation: 1.43x
to 1.37x, a sixth fewer queries).

HELD (`Worker.hold`): the asker sends no copy; it asks again an RTO later (doubled per HELD;
at the tail two PTOs, at most an RTO, and a resend's timeout is not doubled there either),
and up to half a window of such fragments take no place in it meanwhile (4-leaf/4-spine at
5 % loss in the simulation: 1.37x to 1.26x).
A completed slot passes queries on rather than sending its sum (both targets,
`Pipeline.pass_queries`): on the 4-leaf/4-spine the PS receives three sums per fragment, and
the sums that completed slots sent on for a peer's loss (and the copies after QUERY_ROUNDS
silent queries) were most of what its link carried under loss (docs/reliability/loss.md,
"Queries pass completed slots").
"""

from __future__ import annotations

import heapq

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
# completed and the NACKs of its first loss queries, which a switch answers at once; until it
# has one, its least round trip: a worker whose DATA never came last took every wait whole,
# and its RTO reached 5 s on the 4x4 at 5 % loss; its least sample was a wait too, at K = 128's
# longer frames: RTOs of 1.2-1.5 s, windows of 1-3). Some wait for peers is
# real and steady: under congestion every peer is behind its queue, and without that wait
# timeouts came before the peers' contributions (0.1 MB on Fig. 1 through 2-packet queues:
# 28 virtual s, where its test allows 3.1). But a stalled peer's seconds are not this
# worker's round trip: taken whole, they grew the RTOs to MAX_RTO with 16 workers at 5 %
# loss, and every recovery waited that long (dataplane/rto.py).
PEER_WAIT_CAP = 2
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
# Loss queries a fragment gets, a PTO apart, before it is resent without an answer: 2 left
# 1.13-1.63 resends per lost frame in the simulation (Fig. 1, 1 %), 3 0.99-1.81, median 1.12.
QUERY_ROUNDS = 3
# Round trips between two contributors' first loss queries about one fragment (`Worker._turn`):
# a result lost above a first hop is missed by every contributor below it, and one query
# repairs it for all; asking at once sent a completed sum into the PS link per first hop and
# per round, and the PS link is as full as the plan makes it (Fig. 1, 1 MB, 1 % loss: 2 323
# sums of finished fragments for 1 024 lost results, 1.29x the unimpaired time).
QUERY_TURN_RTTS = 1.0
# Ranks beyond this one wait as long as it does: with 16 contributors, turns of up to 15
# round trips held a peer's own loss that long (4-leaf/4-spine at 5 % loss: 360 virtual s,
# 99 s asking at once); 3 gave 32 s at 1 % (47.6 s with 1, 39.5 s uncapped, 124 s at once).
QUERY_TURN_RANKS = 3
# PTOs a loss query waits for its answer before it is asked again: a repair crosses the
# queues into the PS and back, longer than the round trips the PTO is made of (5 % loss: half
# the first queries were asked again at one PTO, 7 153 of 25 059).
REASK_PTOS = 2.0
# PTOs a HELD fragment waits at the tail (the worker has sent every fragment once) before it is
# asked about again, at most an RTO and never doubled; a resend's timeout is not doubled there
# either. Backing off spares a loaded path new copies, but at the tail the few fragments left
# are all a worker sends, and each lost repair of a peer's loss or lost result copy waited out
# a doubled 0.5 s RTO floor with the link idle (the simulation at 5 % loss: from 99 % of the
# fragments to the last 0.75 s on the 4-leaf/4-spine and 0.99 s on Fig. 1; with this rule
# 0.46 s and 0.57 s, docs/reliability/loss.md).
TAIL_HOLD_PTOS = 2.0


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
