"""Loss queries pass completed slots and a held contribution is answered HELD
(`Pipeline.pass_queries`, `ParameterServer`, `Worker.hold`; dataplane/recovery.py).

Frame by frame on the embedded pipeline and the PS, a worker's answer to HELD, then the
4-leaf/4-spine at 5 % loss in the simulation against the same run without the rule: the PS's
link, which carries three sums per fragment, no longer carries the sums that completed slots
sent on again for a peer's loss.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import ROOT
from test_dp_fastpath import DST, JOB, OUT_FLOW, OUT_PORT, SRC, TASK, aggregating
from test_dp_nack import _asking_worker, _Sent

from controller.emulation.faults.lossy_sim import Emulation, Impairments
from controller.model.network import load_topology
from controller.solvers import SolveOptions, solve
from dataplane.frame import (
    CONTROL,
    DATA,
    ECN_CE,
    HELD,
    OFF_IP,
    PROBE,
    RESULT,
    InaHeader,
    K,
    Task,
    build_frame,
)
from dataplane.gradients import frag_id
from dataplane.pipeline import Pipeline
from dataplane.ps import ParameterServer
from dataplane.recovery import QUERY_ROUNDS, TAIL_HOLD_PTOS
from dataplane.worker import dispatch


def _frame(flow: int, frag: int, flags: int = DATA, count: int = 1, value: int = 0) -> bytes:
    elements = np.full(K, value, dtype=">i4").tobytes()
    return build_frame(SRC, DST, InaHeader(JOB, TASK, flags, flow, 0, frag, count), elements)


def _query(flow: int, frag: int, rounds: int = 1) -> bytes:
    return _frame(flow, frag, PROBE, count=rounds)


def _pipeline(pass_queries: bool = True) -> Pipeline:
    pipeline = aggregating(2)
    pipeline.pass_queries = pass_queries
    pipeline.fwd.clone.update({1: [1], 2: [2]})
    return pipeline


def _answer(out: list[tuple[int, bytes]], port: int, frag: int) -> int | None:
    """The `count` of the CONTROL that `out` sends back to the asker out of `port` (0: a
    NACK, HELD), None if `out` is anything else."""
    if len(out) != 1 or out[0][0] != port:
        return None
    frame = out[0][1]
    header = InaHeader.unpack(frame)
    if (header.flags, header.frag_id, header.aux) != (CONTROL, frag, frag):
        return None
    if frame[OFF_IP + 1] & 3 != ECN_CE or frame[OFF_IP + 16 : OFF_IP + 20] != SRC.ip:
        return None
    return header.count


def test_a_query_at_a_completed_slot_goes_on_towards_the_ps_without_the_sum() -> None:
    pipeline = _pipeline()
    pipeline.process(1, _frame(1, 7, value=3))
    pipeline.process(2, _frame(2, 7, value=4))
    for rounds in (1, 1, 2):  # every round and asker: the PS (or the next hop) answers
        [(port, out)] = pipeline.process(1, _query(1, 7, rounds))
        header = InaHeader.unpack(out)
        assert (port, header.flags, header.flow_id, header.count) == (
            OUT_PORT,
            PROBE,
            OUT_FLOW,
            rounds,
        )
    [(port, copy)] = pipeline.process(2, _frame(2, 7, value=4))  # a copy still gets the sum
    assert (InaHeader.unpack(copy).flags, InaHeader.unpack(copy).count) == (DATA, 2)


def test_a_partial_sum_holding_the_asker_s_contribution_answers_held() -> None:
    pipeline = _pipeline()
    pipeline.process(2, _frame(2, 7))  # flow 2's contribution waits for flow 1's
    assert _answer(pipeline.process(2, _query(2, 7)), 2, 7) == HELD
    assert _answer(pipeline.process(1, _query(1, 7)), 1, 7) == 0, "flow 1's is missing: NACK"
    without = _pipeline(pass_queries=False)
    without.process(2, _frame(2, 7))
    assert without.process(2, _query(2, 7)) == [], "without the rule: dropped, no answer"
    assert Pipeline().pass_queries, "on by default, as ina.p4 does"


def test_the_ps_answers_held_for_a_flow_it_has_counted_of_an_unfinished_fragment() -> None:
    sock = _Sent()
    ps = ParameterServer(sock, DST, Task(JOB, TASK), 2, 4, result_flow_id=99)  # type: ignore[arg-type]
    ps.handle(_frame(2, 1))
    ps.handle(_query(2, 1))
    [held] = sock
    header = InaHeader.unpack(held)
    assert (header.flags, header.count, header.frag_id, header.flow_id) == (CONTROL, HELD, 1, 2)
    assert held[OFF_IP + 16 : OFF_IP + 20] == SRC.ip and held[0:6] == SRC.mac
    assert (ps.held_sent, ps.nacks_sent) == (1, 0)


def test_the_ps_answers_each_query_round_of_a_finished_fragment_once() -> None:
    """The peers of a late contributor ask in the same round, and their queries cross the
    result on its way down: one result per round for all of them, as a kept RESULT does."""
    sock = _Sent()
    ps = ParameterServer(sock, DST, Task(JOB, TASK), 2, 4, result_flow_id=99)  # type: ignore[arg-type]
    ps.handle(_frame(1, 1))
    ps.handle(_frame(2, 1))
    assert len(sock) == 1 and InaHeader.unpack(sock[0]).flags == RESULT
    for rounds in (1, 1, 2, 1, 2, 3):
        ps.handle(_query(1, 1, rounds))
    assert [InaHeader.unpack(f).flags for f in sock[1:]] == [RESULT] * 3, "rounds 1, 2, 3"
    assert ps.queries_quiet == 3
    ps.handle(_frame(1, 1, PROBE, count=0))  # a worker's own PROBE: the result, every time
    ps.handle(_frame(1, 1, PROBE, count=0))
    assert len(sock) == 6 and ps.results_sent == 6


def _held(frag: int) -> bytes:
    header = InaHeader(JOB, TASK, CONTROL, 1, 0, frag_id(0, frag), HELD, aux=frag_id(0, frag))
    return build_frame(DST, SRC, header, bytes(4 * K))


def _sent(sock: _Sent, frag: int) -> list[tuple[int, int]]:
    """(flags, count) of what the worker sent about `frag`."""
    return [
        (h.flags, h.count) for h in map(InaHeader.unpack, sock) if h.frag_id == frag_id(0, frag)
    ]


def test_a_held_fragment_is_asked_about_again_an_rto_later_and_never_copied() -> None:
    """Unanswered queries were resent after QUERY_ROUNDS (4-leaf/4-spine, 5 %: 11 666 copies
    of contributions their first hop held, each a sum into the PS)."""
    worker, sock = _asking_worker(contributor=0, peers=0)
    worker._declare_lost(3, 0.1)  # no peers given: asked at once
    del sock[:]
    dispatch([worker], {(JOB, TASK): worker}, _held(3), 0.12)
    assert worker.stats.held == 1 and sock == [], "the first HELD sends nothing"
    step = 0.01
    for i in range(1, int(0.5 / step)):  # past QUERY_ROUNDS re-asks, before the hold ends
        worker.on_timeouts(0.12 + i * step)
        worker.pump(0.12 + i * step)
    assert _sent(sock, 3) == [], "held: no query, no copy"
    worker.on_timeouts(0.12 + 0.5)
    assert _sent(sock, 3) == [(PROBE, 1)], "an RTO later the rounds start over"
    dispatch([worker], {(JOB, TASK): worker}, _held(3), 0.65)
    assert _sent(sock, 3)[-1] == (PROBE, 0), "a second HELD: a PROBE asks the PS"
    assert worker.held[3][1] == 0.65 + 2 * 0.5, "the wait doubles"
    for t in np.arange(0.66, 1.65, step):
        worker.on_timeouts(float(t))
        worker.pump(float(t))
    assert (DATA, 1) not in _sent(sock, 3) and worker.asked[3] < QUERY_ROUNDS


def test_at_five_percent_loss_the_ps_of_the_leaf_spine_gets_few_sums_again() -> None:
    """Seed 0, 0.25 MB, kept results and the first round's repair only (the simulation's
    best before): sums the PS had counted or finished arrived again 1 763 times for 1 536 new
    ones; with queries passing completed slots, 71. The time gain needs header-only queries
    and CONTROLs on the wire: with 574-byte ones the queries that reach the PS cost more than
    the sums saved (12.8 -> 21.3 virtual s; charged 62 bytes, 12.3 -> 6.7 s)."""
    network = load_topology(ROOT / "topologies" / "reliability" / "leaf-spine-4x4-16w.yaml")
    plan = solve(network, "aro", SolveOptions(time_limit=20, seed=0, params={"num_workers": 1}))
    again = []
    for pass_queries in (False, True):
        it = Emulation(
            network,
            Impairments(loss=0.05),
            seed=0,
            plan=plan,
            keep_results=True,
            pass_queries=pass_queries,
        ).iteration(0, 0.25, timeout=300)
        assert it.seconds is not None, it.waiting
        assert all(it.exact) and (it.finished, it.miscounted) == (it.fragments, 0)
        again.append(it.ps_intake["repeated_sums"] + it.ps_intake["sums_of_finished"])
    assert again[1] < again[0] / 5, again


def test_at_the_tail_a_held_fragment_waits_two_ptos_and_a_resend_is_not_backed_off() -> None:
    """Once every fragment went out, a HELD waits TAIL_HOLD_PTOS PTOs (at most an RTO), the
    second as long as the first, and a fragment resent after timeouts waits one RTO: at 5 %
    loss the last fragments sat out doubled 0.5 s waits with the link idle."""
    worker, _ = _asking_worker(contributor=0, peers=0)
    worker.rtt.sample(0.02)  # SRTT 20 ms: a PTO of 40 ms, an RTO of 0.5 s (the floor)
    for frag in range(16):
        worker.receive(RESULT, 100, frag_id(0, frag), _frame(100, frag_id(0, frag), RESULT), 0.05)
    worker.pump(0.05)  # fragments 16-19: the tail
    assert worker._tail()
    worker._declare_lost(17, 0.1)
    pto = worker._pto()
    assert pto < worker.rto / 2
    for held_at in (0.11, 0.2):
        dispatch([worker], {(JOB, TASK): worker}, _held(17), held_at)
        assert worker.held[17][1] == pytest.approx(held_at + TAIL_HOLD_PTOS * pto)
    worker.timeouts[18] = 3
    worker._resend(18, 0.3)
    assert worker.outstanding[18] == pytest.approx(0.3 + worker.rto), "not doubled"


def test_held_fragments_take_no_place_in_the_window_up_to_half_of_it() -> None:
    """A HELD contribution sits in a slot waiting for a peer's repair: counted in the window,
    each worker of the 4-leaf/4-spine at 5 % loss was window-bound for a quarter of the
    iteration. Half a window of them at most, so that slow switches do not queue 2 windows."""
    worker, sock = _asking_worker(contributor=0, peers=0, count=40)
    assert len(worker.outstanding) == int(worker.window) == 16, "the window is full"
    worker._declare_lost(3, 0.1)
    worker.pump(0.1)
    assert _sent(sock, 16) == [], "asked, not held: still in the window"
    dispatch([worker], {(JOB, TASK): worker}, _held(3), 0.12)
    worker.pump(0.12)
    assert _sent(sock, 16) == [(DATA, 1)] and _sent(sock, 17) == [], "one place freed"
    assert 3 in worker.outstanding, "still awaited"
    for frag in range(4, 14):  # 11 held in all
        worker._declare_lost(frag, 0.13)
        dispatch([worker], {(JOB, TASK): worker}, _held(frag), 0.14)
    worker.pump(0.14)
    newest = max(h.frag_id for h in map(InaHeader.unpack, sock) if h.flags == DATA)
    assert newest == frag_id(0, 16 + 8 - 1), "8 places freed, not 11"
