"""Loss queries: the network names the loser (p4src/README.md, PROBE; dataplane/recovery.py).

A worker that finds a fragment lost from later results cannot tell its own loss from a peer's;
instead of resending it asks its data path. Both targets (the embedded switch and bmv2 running
ina.p4, through P4Runtime and veths as in test_dp_target.py) and the PS answer each case of
the contract here, frame by frame; the simulator (real workers, PS and pipelines on ARO
Fig. 1 over lossy links, virtual time) holds the whole to about one resend per lost frame,
against the 2.9-3.4 of resending on every detection (docs/reliability/loss.md).
"""

from __future__ import annotations

import statistics
import threading
import time

import numpy as np
import pytest
import test_dp_target
from conftest import EXAMPLES
from test_dp_fastpath import DST, JOB, OUT_FLOW, OUT_PORT, SRC, TASK, aggregating
from test_dp_target import (
    HOSTS,
    Target,
    _elements,
    _install_aggregation,
    _receive,
    _values,
    well_formed,
)
from test_dp_target import _frame as _target_frame

from controller.emulation.faults.lossy_sim import Emulation, Impairments
from controller.model.network import load_topology
from controller.solvers import SolveOptions, solve
from dataplane.frame import (
    CONTROL,
    DATA,
    ECN_CE,
    HELD,
    OFF_ELEMS,
    OFF_IP,
    PROBE,
    RESULT,
    InaHeader,
    K,
    Task,
    build_frame,
)
from dataplane.gradients import frag_id, fragments
from dataplane.p4rt_client import Client
from dataplane.pipeline import Pipeline, slot_of
from dataplane.ps import ParameterServer
from dataplane.recovery import PEER_WAIT_CAP
from dataplane.worker import Worker

IN_PORT = 1  # flow 1 comes in here; flow 2 on port 2
# The switch fixtures of the contract tests: one switch of each kind for this module.
target = test_dp_target.target
sw = test_dp_target.sw


def _frame(flow: int, frag: int, flags: int = DATA, count: int = 1, value: int = 0) -> bytes:
    elements = np.full(K, value, dtype=">i4").tobytes()
    return build_frame(SRC, DST, InaHeader(JOB, TASK, flags, flow, 0, frag, count), elements)


def _query(flow: int, frag: int, rounds: int = 1) -> bytes:
    return _frame(flow, frag, PROBE, count=rounds)


def _pipeline() -> Pipeline:
    pipeline = aggregating(2)
    pipeline.fwd.clone.update({1: [1], 2: [2]})
    return pipeline


def _is_nack(out: list[tuple[int, bytes]], port: int, frag: int) -> bool:
    [(out_port, frame)] = out
    header = InaHeader.unpack(frame)
    return (
        out_port == port
        and (header.flags, header.count, header.frag_id, header.aux) == (CONTROL, 0, frag, frag)
        and frame[OFF_IP + 1] & 3 == ECN_CE
        and frame[OFF_IP + 16 : OFF_IP + 20] == SRC.ip  # back to the asker
    )


def test_a_query_missing_from_a_partial_sum_is_answered_towards_its_asker() -> None:
    pipeline = _pipeline()
    assert pipeline.process(2, _frame(2, 7)) == []  # flow 2's contribution waits in the slot
    assert _is_nack(pipeline.process(IN_PORT, _query(1, 7)), IN_PORT, 7)
    [(_, held)] = pipeline.process(2, _query(2, 7))  # flow 2's own is there: a peer's loss
    assert (InaHeader.unpack(held).flags, InaHeader.unpack(held).count) == (CONTROL, HELD)


def test_a_query_finding_no_partial_sum_is_answered_too() -> None:
    assert _is_nack(_pipeline().process(IN_PORT, _query(1, 7)), IN_PORT, 7)


def test_without_passing_a_query_at_a_completed_slot_sends_the_sum_on_once_per_round() -> None:
    """`pass_queries` off (the default passes it on: test_dp_held.py)."""
    pipeline = _pipeline()
    pipeline.pass_queries = False
    pipeline.process(1, _frame(1, 7, value=3))
    [(port, done)] = pipeline.process(2, _frame(2, 7, value=4))
    [(port, again)] = pipeline.process(1, _query(1, 7))
    header = InaHeader.unpack(again)
    assert (port, header.flags, header.flow_id, header.count) == (OUT_PORT, DATA, OUT_FLOW, 2)
    assert again[OFF_ELEMS:] == done[OFF_ELEMS:] == np.full(K, 7, ">i4").tobytes()
    assert pipeline.process(2, _query(2, 7)) == [], "round 1 was answered already"
    assert len(pipeline.process(2, _query(2, 7, rounds=2))) == 1


def test_a_query_whose_slot_another_fragment_took_goes_on_for_the_next_hop() -> None:
    pipeline = _pipeline()
    pipeline.process(1, _frame(1, 7))
    pipeline.process(2, _frame(2, 7))  # 7 completed and left
    other = next(f for f in range(8, 10_000) if slot_of(f, 0, 64) == slot_of(7, 0, 64))
    pipeline.process(1, _frame(1, other))
    [(port, out)] = pipeline.process(2, _query(2, 7))
    header = InaHeader.unpack(out)
    assert (port, header.flags, header.flow_id, header.count) == (OUT_PORT, PROBE, OUT_FLOW, 1)


# *** the same answers from a running target (embedded and bmv2), through real ports


def _ask(target: Target, host: int, frag: int, rounds: int = 1) -> None:
    target.sockets[host].send(
        _target_frame(host, frag, host, np.zeros(K, np.int32), flags=PROBE, count=rounds)
    )


def _nack_to(target: Target, host: int, frag: int, count: int = 0) -> bool:
    """One NACK (or with `count` HELD, one HELD) back to `host`. bmv2 clones to each replica
    a clone session was ever given, and the fixture inserts the sessions again after each
    test's pipeline reset (p4lang/behavioral-model#891): there, copies of the one answer are
    allowed."""
    out = _receive(target.sockets[host], wait=0.5)
    if not out or out != [out[0]] * len(out) or (len(out) > 1 and target.kind != "bmv2"):
        return False
    header = InaHeader.unpack(out[0])
    return (
        (header.flags, header.count, header.frag_id, header.aux, header.flow_id)
        == (CONTROL, count, frag, frag, host)
        and well_formed(out[0])
        and out[0][OFF_IP + 1] & 3 == ECN_CE
        and out[0][OFF_IP + 16 : OFF_IP + 20] == HOSTS[host].ip
        and out[0][0:6] == HOSTS[host].mac
    )


def _quiet(target: Target) -> bool:
    return all(_receive(s, wait=0.2 if p == 4 else 0) == [] for p, s in target.sockets.items())


@pytest.mark.root
def test_a_target_answers_a_query_missing_from_a_partial_sum(target: Target, sw: Client) -> None:
    _install_aggregation(sw, {1: 0, 2: 0})
    target.sockets[2].send(_target_frame(2, 7, 2, _elements(2)))
    _ask(target, 1, 7)
    assert _nack_to(target, 1, 7), "flow 1's contribution is missing: a NACK back to it"
    _ask(target, 2, 7)
    assert _nack_to(target, 2, 7, HELD), "flow 2's own is there: a peer's loss, HELD back"
    assert _quiet(target)
    target.sockets[1].send(_target_frame(1, 7, 1, _elements(1)))  # the resend completes it
    out = _receive(target.sockets[4], expect=1)
    np.testing.assert_array_equal(_values(out[0]), _elements(1) + _elements(2))
    assert sw.counter("collisions") == [0, 0, 0, 0] == sw.counter("duplicates")


@pytest.mark.root
def test_a_target_answers_a_query_finding_no_partial_sum(target: Target, sw: Client) -> None:
    _install_aggregation(sw, {1: 0, 2: 0})
    _ask(target, 1, 8)
    assert _nack_to(target, 1, 8) and _quiet(target)


@pytest.mark.root
def test_a_target_passes_a_query_at_a_completed_slot_on_towards_the_ps(
    target: Target, sw: Client
) -> None:
    """Only the PS knows whether the sum above arrived: the query goes on, every round, as
    a short PROBE under the outgoing flow id; a resent copy still gets the sum."""
    _install_aggregation(sw, {1: 0, 2: 0})
    a, b = _elements(1), _elements(2)
    target.sockets[1].send(_target_frame(1, 9, 1, a))
    target.sockets[2].send(_target_frame(2, 9, 2, b))
    assert len(_receive(target.sockets[4], expect=1)) == 1
    for host, rounds in ((1, 1), (2, 1), (2, 2)):
        _ask(target, host, 9, rounds)
        [on] = _receive(target.sockets[4], expect=1)
        header = InaHeader.unpack(on)
        assert (header.flags, header.flow_id, header.count, header.frag_id) == (
            PROBE,
            OUT_FLOW,
            rounds,
            9,
        )
        assert well_formed(on) and _quiet(target)
    target.sockets[2].send(_target_frame(2, 9, 2, b))  # a copy still gets the sum
    [again] = _receive(target.sockets[4], expect=1)
    assert well_formed(again) and InaHeader.unpack(again).flags == DATA
    np.testing.assert_array_equal(_values(again), a + b)
    assert sw.counter("duplicates") == [1, 0, 0, 0], "a query is not a duplicate, a copy is"


@pytest.mark.root
def test_a_target_passes_a_query_whose_slot_another_fragment_took(
    target: Target, sw: Client
) -> None:
    _install_aggregation(sw, {1: 0, 2: 0}, slots=1)  # one slot for every fragment
    target.sockets[1].send(_target_frame(1, 10, 1, _elements(1)))
    target.sockets[2].send(_target_frame(2, 10, 2, _elements(2)))
    assert len(_receive(target.sockets[4], expect=1)) == 1
    target.sockets[1].send(_target_frame(1, 11, 1, _elements(1)))  # 11 takes the slot
    _ask(target, 2, 10, rounds=3)
    [out] = _receive(target.sockets[4], expect=1)
    header = InaHeader.unpack(out)
    assert (header.flags, header.flow_id, header.count, header.frag_id) == (PROBE, OUT_FLOW, 3, 10)
    assert _quiet(target)


@pytest.mark.root
def test_a_worker_whose_data_was_lost_is_named_by_the_target_and_resends_once(
    target: Target, sw: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real worker asking: its first DATA of fragment 3 is lost on the link, later results
    reveal it, its query meets flow 2's partial sum without it, and the target's NACK makes
    it resend that fragment alone (no timeout). The test plays flow 2 and the PS."""
    _install_aggregation(sw, {1: 0, 2: 0}, slots=4096)
    sw.write(
        sw.group(8, [1]),
        sw.table_entry("result_multicast", {"job": JOB, "task": TASK}, "set_result_group", group=8),
    )
    gradient = np.concatenate([_elements(10 + f) for f in range(8)])
    peer = np.concatenate([_elements(30 + f) for f in range(8)])
    for f in range(8):  # flow 2's contributions wait in their slots
        target.sockets[2].send(_target_frame(2, frag_id(0, f), 2, peer[f * K : (f + 1) * K]))
    dropped = []

    def lossy_send(sock, frame: bytes) -> None:
        header = InaHeader.unpack(frame)
        if header.flags == DATA and header.frag_id == frag_id(0, 3) and not dropped:
            dropped.append(frame)  # lost on the link
            return
        sock.send(frame)

    monkeypatch.setattr("dataplane.worker.send", lossy_send)
    worker = Worker(
        target.sockets[1],
        HOSTS[1],
        HOSTS[5],
        Task(JOB, TASK),
        1,
        0,
        fragments(gradient),
        timeout=2.0,
        query=True,
    )
    summed: dict[str, np.ndarray] = {}
    thread = threading.Thread(target=lambda: summed.update(values=worker.run()), daemon=True)
    thread.start()
    sums = 0
    deadline = time.monotonic() + 10
    while thread.is_alive() and time.monotonic() < deadline:  # the PS: each sum, its result
        for out in _receive(target.sockets[4], wait=0.1):
            header = InaHeader.unpack(out)
            if header.flags == DATA:
                sums += 1
                target.sockets[4].send(
                    _target_frame(4, header.frag_id, OUT_FLOW, _values(out), flags=RESULT, count=2)
                )
    thread.join(timeout=1)
    assert not thread.is_alive(), "the worker never finished"
    np.testing.assert_array_equal(summed["values"].ravel(), gradient + peer)
    stats = worker.stats
    assert stats.queries >= 1 and stats.nacks >= 1 and stats.resent_on_loss >= 1, stats
    assert (stats.resent_on_timeout, stats.resent_on_control, sums) == (0, 0, 8), stats


class _Sent(list):
    def send(self, frame: bytes) -> None:
        self.append(frame)


def test_the_ps_answers_a_query_for_a_flow_it_has_not_counted_and_repeats_a_result() -> None:
    sock = _Sent()
    ps = ParameterServer(sock, DST, Task(JOB, TASK), 2, 4, result_flow_id=99)  # type: ignore[arg-type]
    ps.handle(_frame(2, 1))
    ps.handle(_query(2, 1))
    [held] = sock  # flow 2 is counted: the loss is another flow's (test_dp_held.py)
    assert (InaHeader.unpack(held).flags, InaHeader.unpack(held).count) == (CONTROL, HELD)
    del sock[:]
    ps.handle(_query(1, 1))
    [nack] = sock
    header = InaHeader.unpack(nack)
    assert (header.flags, header.count, header.frag_id) == (CONTROL, 0, 1)
    assert nack[OFF_IP + 16 : OFF_IP + 20] == SRC.ip and nack[0:6] == SRC.mac
    ps.handle(_frame(1, 1))
    ps.handle(_query(1, 1))
    assert [InaHeader.unpack(f).flags for f in sock[1:]] == [RESULT, RESULT]
    assert ps.nacks_sent == 1


@pytest.fixture(scope="module")
def fig1():
    network = load_topology(EXAMPLES / "aro-fig1.yaml")
    plan = solve(network, "aro", SolveOptions(time_limit=20, seed=0, params={"num_workers": 1}))
    return network, plan


def test_about_one_resend_per_lost_frame_at_one_percent_loss(fig1) -> None:
    """Resending on every detection gave 2.90-3.37 resends per lost frame on these seeds."""
    network, plan = fig1
    per_lost = []
    for seed in (1, 2, 3):
        it = Emulation(network, Impairments(loss=0.01), seed=seed, plan=plan).iteration(
            0, 0.25, timeout=120
        )
        assert it.seconds is not None, it.waiting
        assert all(it.exact) and (it.finished, it.miscounted) == (it.fragments, 0)
        assert it.queries > 0 and it.nacks > 0
        per_lost.append(it.recovery()["resends_per_lost_frame"])
    assert statistics.median(per_lost) <= 1.5, per_lost


def _asking_worker(contributor: int, peers: int, count: int = 20) -> tuple[Worker, _Sent]:
    sock = _Sent()
    rows = fragments(np.arange(count * K, dtype=np.int32))
    worker = Worker(
        sock,  # type: ignore[arg-type]
        SRC,
        DST,
        Task(JOB, TASK),
        1,
        0,
        rows,
        timeout=0.5,
        query=True,
        contributor=contributor,
        peers=peers,
        queued=lambda: 0,
    )
    worker.start(0.0)
    worker.pump(0.0)  # fragments 0-15 in flight, 4 left: not yet the tail
    return worker, sock


def _queries(sock: _Sent) -> list[int]:
    return [h.frag_id for h in map(InaHeader.unpack, sock) if h.flags == PROBE and h.count]


def test_contributors_ask_about_a_lost_fragment_in_turns_one_round_trip_apart() -> None:
    """Contributor 2 of 5 leads fragment 2 and is third for fragment 0 (rank = contributor -
    fragment mod 5): it asks about 2 at once and about 0 two RTOs (no round trip measured yet)
    later, unless the result came meanwhile; asked at once, every contributor's query about
    a result lost above its first hop sent a sum into the PS link."""
    worker, sock = _asking_worker(contributor=2, peers=5)
    del sock[:]
    for frag in (2, 0, 1):
        worker._declare_lost(frag, 0.1)
    assert _queries(sock) == [frag_id(0, 2)]
    worker.receive(RESULT, OUT_FLOW, frag_id(0, 1), _frame(OUT_FLOW, frag_id(0, 1), RESULT), 0.5)
    worker.on_timeouts(0.1 + 2 * 0.5 - 1e-6)
    assert frag_id(0, 0) not in _queries(sock), "fragment 0's turn has not come"
    assert worker.outstanding[0] > 0.1 + 2 * 0.5, "it does not time out before its turn"
    worker.on_timeouts(0.1 + 2 * 0.5)
    assert frag_id(0, 0) in _queries(sock)
    worker.on_timeouts(0.1 + 3 * 0.5)
    assert frag_id(0, 1) not in _queries(sock), "answered before its turn: never asked"


def test_every_contributor_asks_at_once_at_the_tail_alone_or_under_congestion() -> None:
    """Under congestion marks a queue drops contributions, which only their senders repair:
    asking in turns there held the loser back (2-packet queues at a third of the pace: 3.8
    virtual s where test_dp_lossy allows 3.1)."""
    worker, sock = _asking_worker(contributor=2, peers=1)
    del sock[:]
    worker._declare_lost(0, 0.1)
    assert _queries(sock) == [frag_id(0, 0)]
    worker, sock = _asking_worker(contributor=2, peers=5)
    worker.next_frag = 20  # nothing new left: no later result will show a peer's repair
    del sock[:]
    worker._declare_lost(0, 0.1)
    assert _queries(sock) == [frag_id(0, 0)]
    worker, sock = _asking_worker(contributor=2, peers=5)
    worker.marks.ssthresh = 8.0  # marks have come
    del sock[:]
    worker._declare_lost(0, 0.1)
    assert _queries(sock) == [frag_id(0, 0)]


def test_a_first_timeout_asks_and_a_second_resends() -> None:
    """With 16 contributors most first timeouts were a peer's loss (4-leaf/4-spine, 5 %: 90 %
    of the fragments that timed out were completed by a peer's resend), and each duplicate
    and its ACK went towards the PS; a loss query goes one hop when the contribution is held."""
    worker, sock = _asking_worker(contributor=2, peers=5)
    del sock[:]
    deadline = worker.outstanding[3]
    worker.on_timeouts(deadline)
    worker.pump(deadline)
    data = [h.frag_id for h in map(InaHeader.unpack, sock) if h.flags == DATA]
    assert frag_id(0, 3) in _queries(sock) and frag_id(0, 3) not in data
    assert worker.outstanding[3] >= deadline + 0.5, "in flight an RTO more"
    del sock[:]
    worker.on_timeouts(worker.outstanding[3])
    worker.pump(worker.last_asked[3] + 0.5)
    data = [h.frag_id for h in map(InaHeader.unpack, sock) if h.flags == DATA]
    assert frag_id(0, 3) in data, "unanswered: resent"


def test_a_first_query_s_nack_is_a_round_trip_that_caps_what_a_peer_kept_waiting() -> None:
    """A worker whose DATA never completes a fragment has no round trip of its own to cap its
    peers' waits by (PEER_WAIT_CAP); its least sample was such a wait. 4-leaf/4-spine, 5 %
    loss, 512 fragments of K = 128: 11 of 16 workers had none, least samples 0.09-0.40 s,
    RTOs 1.2-1.5 s, windows at 1-3 for 80 virtual s (seed 7: 113.7 s against 3.7 unimpaired).
    A switch answers a query at once: the NACK of a first query is the network's round trip.
    One of a later round is not sampled: which query it answers is unknown (Karn's rule)."""
    worker, _ = _asking_worker(contributor=2, peers=1)
    worker._declare_lost(3, 0.1)  # asked at once
    worker.nack(frag_id(0, 3), 0.14)
    assert worker.own_rtt.samples == 1
    worker._declare_lost(5, 0.1)
    worker._ask(5, 0.3)  # a second round
    worker.nack(frag_id(0, 5), 0.31)
    assert worker.own_rtt.samples == 1
    # fragment 0 went once at 0.0; contributor 0's DATA completed it 2 s later
    worker.receive(RESULT, OUT_FLOW, frag_id(0, 0), _frame(OUT_FLOW, frag_id(0, 0), RESULT), 2.0)
    assert worker.rtt.srtt == pytest.approx(PEER_WAIT_CAP * 0.04)


def test_a_result_lost_above_a_first_hop_sends_about_one_sum_into_the_ps(fig1) -> None:
    """Contributors asking at once sent 2.7-2.9 sums of finished fragments into the PS per
    lost result on these seeds (every first hop's completed slot sent its sum on, each round)
    and 3.4-3.6 queries per lost frame."""
    network, plan = fig1
    repeats, queries = [], []
    for seed in (1, 2, 3):
        it = Emulation(network, Impairments(loss=0.01), seed=seed, plan=plan).iteration(
            0, 0.25, timeout=120
        )
        assert it.seconds is not None, it.waiting
        assert all(it.exact) and (it.finished, it.miscounted) == (it.fragments, 0)
        repeats.append(it.ps_intake["sums_of_finished"] / it.lost["results"])
        queries.append(it.queries / it.recovery()["frames_lost"])
    assert statistics.median(repeats) <= 1.8, repeats
    assert statistics.median(queries) <= 2.5, queries
