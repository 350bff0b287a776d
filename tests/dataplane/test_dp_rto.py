"""The workers' adaptive retransmission timeout against RFC 6298 values computed by hand,
and how a worker uses it: Karn's rule, per-fragment exponential backoff, PROBE from the
second timeout on."""

from __future__ import annotations

import json
import os
import socket

import numpy as np
import pytest
from test_dp_shards import _sent as _headers

from dataplane.frame import (
    ACK,
    CONTROL,
    DATA,
    PROBE,
    RESULT,
    RETRANSMITTED,
    STALE_AFTER_SECONDS,
    Endpoint,
    InaHeader,
    K,
    Task,
    build_frame,
)
from dataplane.gradients import frag_id
from dataplane.ps import ParameterServer
from dataplane.recovery import CUT_FLOOR, PEER_WAIT_CAP
from dataplane.rto import BACKOFF_CEILING, MAX_RTO, MIN_RTO, RtoEstimator
from dataplane.state import PlanWatcher
from dataplane.worker import Worker

ME = Endpoint(b"\x02\0\0\0\0\x09", bytes([10, 0, 0, 9]))


def test_srtt_rttvar_and_rto_follow_rfc_6298_section_2():
    est = RtoEstimator(initial=1.0)
    assert est.rto == 1.0  # (2.1) before any sample
    est.sample(1.0)  # (2.2) SRTT = R, RTTVAR = R/2, RTO = 1 + 4 * 0.5
    assert (est.srtt, est.rttvar, est.rto) == pytest.approx((1.0, 0.5, 3.0))
    est.sample(2.0)  # (2.3) RTTVAR = 3/4 * 0.5 + 1/4 * |1 - 2|, SRTT = 7/8 * 1 + 1/8 * 2
    assert (est.srtt, est.rttvar, est.rto) == pytest.approx((1.125, 0.625, 3.625))
    est.sample(0.5)  # RTTVAR uses the old SRTT: 3/4 * 0.625 + 1/4 * |1.125 - 0.5|
    assert (est.srtt, est.rttvar, est.rto) == pytest.approx((1.046875, 0.625, 3.546875))
    assert est.samples == 3


def test_rto_is_clamped_and_backs_off_by_doubling():
    fast = RtoEstimator()
    for _ in range(50):
        fast.sample(0.002)
    assert fast.rto == MIN_RTO
    slow = RtoEstimator()
    slow.sample(30.0)
    assert slow.rto == MAX_RTO
    assert RtoEstimator(initial=0.05).rto == MIN_RTO == 0.5
    est = RtoEstimator()
    est.sample(0.1)  # SRTT + 4 RTTVAR = 0.3, under the floor: RTO 0.5, doubled to the ceiling
    assert BACKOFF_CEILING == STALE_AFTER_SECONDS / 2 == 1.0
    assert [est.backed_off(n) for n in range(4)] == pytest.approx([0.5, 1.0, 1.0, 1.0])
    est.sample(2.0)  # SRTT 0.3375, RTTVAR 0.5125: RTO 2.3875; once timed out, the ceiling
    assert [est.backed_off(n) for n in range(3)] == pytest.approx([2.3875, 1.0, 1.0])


def _sent(observer: socket.socket) -> list[tuple[int, int]]:
    return [(h.flags, h.frag_id) for h in _headers(observer)]


def _result(worker: Worker, frag: int, now: float, aux: int = 0) -> None:
    header = InaHeader(1, 0, RESULT, 99, 0, frag_id(0, frag), 2, aux=aux)
    worker.receive(RESULT, 99, frag_id(0, frag), build_frame(ME, ME, header, bytes(4 * K)), now)


def test_a_worker_resends_within_its_window_backs_off_and_samples_fragments_sent_once():
    sock, observer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    observer.setblocking(False)
    worker = Worker(
        sock, ME, ME, Task(1, 0), 1, 7, np.zeros((4, K), ">i4"), window=2.0, timeout=0.5
    )
    worker.pump(100.0)
    assert _sent(observer) == [(DATA, 0), (DATA, 1)]
    assert worker.outstanding == pytest.approx({0: 100.5, 1: 100.5})  # the initial RTO
    worker.on_timeouts(100.5)  # one loss event: the window halves once, to 1
    assert worker.window == 1.0 and set(worker.lost) == {0, 1} and worker.outstanding == {}
    worker.pump(100.5)  # the window admits one resend, the lowest fragment
    assert _sent(observer) == [(DATA, 0)]
    assert worker.outstanding == pytest.approx({0: 101.5})  # backed off: twice the RTO
    assert worker.pump(100.9) == pytest.approx(0.1)  # fragment 1 is due at 101.0
    assert _sent(observer) == []
    worker.pump(101.0)  # 1 s after its last send, window or not (partial sums stay fresh)
    assert _sent(observer) == [(DATA, 1)]
    worker.on_timeouts(101.5)  # fragment 0's second timeout
    worker.pump(101.5)  # the window is full (fragment 1) but 0 is due: resent, a PROBE after
    assert _sent(observer) == [(DATA, 0), (PROBE, 0)]
    assert worker.outstanding == pytest.approx({0: 102.5, 1: 102.0})  # at the ceiling
    _result(worker, 0, 102.0)  # answers a resent fragment: no sample (Karn), an ACK
    assert worker.rtt.samples == 0 and _sent(observer) == [(ACK, 0)]
    worker.pump(102.0)  # window 2, fragment 1 in flight: one new fragment
    assert _sent(observer) == [(DATA, 2)]
    assert worker.outstanding[2] == pytest.approx(102.5)
    _result(worker, 2, 102.1)  # sent once, answered before its timeout: a sample
    assert worker.rtt.samples == 1 and worker.rtt.srtt == pytest.approx(0.1)
    assert _sent(observer) == []  # no ACK for a fragment sent once
    _result(worker, 1, 102.2)  # resent: an ACK frees what its first copy may have left
    worker.pump(102.2)
    assert _sent(observer) == [(ACK, 1), (DATA, 3)]
    _result(worker, 3, 102.3)
    assert worker.finished


def test_a_fragment_that_timed_out_is_not_sampled_and_its_late_result_cancels_its_resend():
    """Its result may answer a peer's resend, not its own copy (in INA every contributor's
    recovery delays the result): Karn's rule counts it as ambiguous from its timeout on."""
    sock, observer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    observer.setblocking(False)
    worker = Worker(
        sock, ME, ME, Task(1, 0), 1, 7, np.zeros((2, K), ">i4"), window=1.0, timeout=0.5
    )
    worker.pump(10.0)
    worker.on_timeouts(10.5)
    _result(worker, 0, 10.8)
    assert worker.rtt.samples == 0 and worker.rto == 0.5
    worker.pump(10.8)
    assert _sent(observer) == [(DATA, 0), (DATA, 1)]
    assert worker.stats.resent_on_timeout == 0


def test_a_lost_fragment_behind_a_full_window_is_resent_before_its_partial_sums_go_stale():
    """Window 1, three fragments lost: the window alone would resend each every 3 RTOs; a
    switch abandons partial sums untouched for STALE_AFTER, so each is resent at the latest
    BACKOFF_CEILING after its last send, window or not."""
    sock, observer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    observer.setblocking(False)
    worker = Worker(
        sock, ME, ME, Task(1, 0), 1, 7, np.zeros((3, K), ">i4"), window=3.0, timeout=0.8
    )
    worker.pump(0.0)
    worker.on_timeouts(0.8)  # all three lost, window 1.5: one resend
    worker.pump(0.8)
    # nothing new left to send (the tail): a resend brings a PROBE, which the PS answers if
    # the fragment finished while the first hop moved on
    assert _sent(observer) == [(DATA, 0), (DATA, 1), (DATA, 2), (DATA, 0), (PROBE, 0)]
    assert worker.pump(0.9) == pytest.approx(BACKOFF_CEILING - 0.9)  # woken when 1, 2 are due
    worker.pump(BACKOFF_CEILING)
    assert _sent(observer) == [(DATA, 1), (PROBE, 1), (DATA, 2), (PROBE, 2)]
    assert worker.stats.resent_on_timeout == 3 and not worker.lost


def test_after_a_re_plan_what_was_in_flight_is_resent_under_the_new_ids_within_the_window(tmp_path):
    """Not a timeout: no backoff, no PROBE, not counted as a timeout resend; sent under the new
    flow id, at most a window at a time (a burst of them is what collapsed congested links)."""
    state = tmp_path / "state.json"

    def publish(version: int, flow: int) -> None:
        row = {"worker": "w", "flow_id": flow, "next_node": version, "rate_gbps": 1000.0}
        state.write_text(json.dumps({"version": version, "workers": [row]}))
        os.utime(state, ns=(version, version))  # a new stamp whatever the clock's resolution

    publish(1, 1)
    sock, observer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    observer.setblocking(False)
    worker = Worker(
        sock,
        ME,
        ME,
        Task(1, 0),
        1,
        7,
        np.zeros((5, K), ">i4"),
        window=3.0,
        plan=PlanWatcher(state, lambda r: r["worker"] == "w"),
    )
    worker.start(100.0)
    for ms in range(3):  # paced: one fragment per call
        worker.pump(100.0 + ms / 1000)
    assert [h.flow_id for h in _headers(observer)] == [1, 1, 1]
    worker.window = 1.0  # as if collisions had halved it meanwhile
    publish(2, 16385)
    for ms in range(4):
        worker.pump(100.2 + ms / 1000)
    assert [(h.flags, h.frag_id, h.flow_id) for h in _headers(observer)] == [(DATA, 0, 16385)]
    assert set(worker.lost) == {1, 2} and worker.stats.plan_switches == 1
    assert worker.outstanding[0] == pytest.approx(100.2 + worker.rto)  # no backoff
    _result(worker, 0, 100.3)  # window 2: the other two, then no more
    for ms in range(4):
        worker.pump(100.3 + ms / 1000)
    # no ACK for fragment 0: it did not time out (what the old plan left in its slots is
    # abandoned there, and an ACK under the new ids would not reach it)
    assert [(h.flags, h.frag_id, h.flow_id) for h in _headers(observer)] == [
        (DATA, 1, 16385),
        (DATA, 2, 16385),
    ]
    assert worker.stats.resent_on_timeout == 0 and worker.stats.probes == 0


def test_a_retransmission_is_marked_and_so_is_the_result_it_completes():
    """p4src/README.md, `aux`: a worker names itself in every DATA (its index above bit 0)
    and marks the DATA it sends again (bit 0); aggregation forwards the `aux` of the
    contribution that completed a slot, so the PS learns who sent the last piece of a fragment
    and whether it was a recovery, and passes that on in the RESULT; a repeated RESULT is
    marked as a recovery and names no one."""
    sock, observer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    observer.setblocking(False)
    worker = Worker(
        sock, ME, ME, Task(1, 0), 1, 7, np.zeros((2, K), ">i4"), window=2.0, contributor=3
    )
    worker.pump(0.0)
    worker.on_timeouts(0.5)  # both time out, the halved window resends fragment 0
    worker.pump(0.5)
    assert [(h.flags, h.frag_id, h.aux) for h in _headers(observer)] == [
        (DATA, 0, 6),
        (DATA, 1, 6),
        (DATA, 0, 7),
        (PROBE, 0, 0),  # the tail: a resend brings a PROBE
    ]

    ps_sock, ps_observer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    ps_observer.setblocking(False)
    ps = ParameterServer(ps_sock, ME, Task(1, 0), workers=2, fragments=2, result_flow_id=99)

    def contribution(flow: int, frag: int, aux: int, flags: int = DATA) -> bytes:
        header = InaHeader(1, 0, flags, flow, 0, frag_id(0, frag), 1, aux=aux)
        return build_frame(ME, ME, header, bytes(4 * K))

    ps.handle(contribution(1, 0, 2 | RETRANSMITTED))  # a recovered piece that did not complete
    ps.handle(contribution(2, 0, 4))
    ps.handle(contribution(1, 1, 2))
    ps.handle(contribution(2, 1, 4 | RETRANSMITTED))
    ps.handle(contribution(1, 0, 0, flags=PROBE))  # a worker lost fragment 0's result
    assert [(h.flags, h.frag_id, h.aux) for h in _headers(ps_observer)] == [
        (RESULT, 0, 4),
        (RESULT, 1, 5),
        (RESULT, 0, RETRANSMITTED),
    ]


def test_a_result_a_peer_completed_counts_as_at_most_twice_the_workers_own_round_trip():
    """Karn's rule across workers: this worker (index 3) sent fragments 0-2 once. Its own DATA
    completed fragment 2 (a 0.1 s round trip). Fragment 1's result waited for a peer's
    recovery (seconds of timeouts): not sampled. Fragment 0's waited 2.55 s for worker 5's
    DATA, sent late by a stalled window: sampled as PEER_WAIT_CAP x 0.1 s."""
    sock, observer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    observer.setblocking(False)
    worker = Worker(
        sock,
        ME,
        ME,
        Task(1, 0),
        1,
        7,
        np.zeros((3, K), ">i4"),
        window=3.0,
        timeout=3.0,
        contributor=3,
    )
    worker.pump(0.0)
    _result(worker, 2, 0.1, aux=3 << 1)  # SRTT 0.1, RTTVAR 0.05
    _result(worker, 1, 2.5, aux=5 << 1 | RETRANSMITTED)
    assert worker.rtt.samples == 1
    # R' = 0.2: RTTVAR 3/4 0.05 + 1/4 0.1, SRTT 7/8 0.1 + 1/8 0.2
    _result(worker, 0, 2.55, aux=5 << 1)
    assert PEER_WAIT_CAP == 2
    assert worker.rtt.samples == 2
    assert (worker.rtt.srtt, worker.rtt.rttvar) == pytest.approx((0.1125, 0.0625))


def test_a_worker_with_millisecond_round_trips_halves_its_window_at_most_every_cut_floor():
    """Every worker sees every loss in its tree, and the peer that lost a fragment repairs it
    on the peer's time scale: a worker whose own round trips take 6 ms halves its window for
    them at most every CUT_FLOOR, not a hundred times a second (which kept it at window 1
    while its peers ran seconds ahead and their partial sums went stale)."""
    sock, observer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    observer.setblocking(False)
    worker = Worker(sock, ME, ME, Task(1, 0), 1, 7, np.zeros((16, K), ">i4"), window=8.0)
    worker.pump(0.0)
    _result(worker, 0, 0.006)  # SRTT 6 ms; window 9
    assert worker.rtt.srtt == pytest.approx(0.006) and worker.window == 9.0
    assert CUT_FLOOR == 0.25

    def collision(frag: int, now: float) -> None:
        worker.receive(CONTROL, worker.ids(frag)[0], frag_id(0, frag), b"", now)

    windows = []
    for frag, now in [(1, 0.010), (2, 0.030), (3, 0.100), (4, 0.250), (5, 0.262), (6, 0.600)]:
        collision(frag, now)
        windows.append(worker.window)
    # cut at 0.010 (4.5); 0.030-0.250 within CUT_FLOOR of it; 0.262 cut (2.25); 0.600 cut
    assert windows == [4.5, 4.5, 4.5, 4.5, 2.25, 1.125]
    assert worker.stats.resent_on_control == 6  # each collision's fragment is still resent
