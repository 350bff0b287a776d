"""A completed slot keeps the PS's RESULT and answers repairs with it (`Pipeline.keep_results`).

On by default, as in ina.p4 (docs/reliability/loss.md, "A completed slot keeps the result";
both targets: tests/dataplane/test_dp_target.py). Frame by frame on the embedded pipeline,
then the whole on Fig. 1 at 5 % loss against the same run without it.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import EXAMPLES
from test_dp_fastpath import DST, JOB, OUT_FLOW, OUT_PORT, SRC, TASK, aggregating

from controller.emulation.faults.lossy_sim import Emulation, Impairments
from controller.model.network import load_topology
from controller.solvers import SolveOptions, solve
from dataplane.frame import (
    BROADCAST,
    DATA,
    OFF_ELEMS,
    OFF_IP,
    OFF_UDP,
    PROBE,
    RESULT,
    RETRANSMITTED,
    Endpoint,
    InaHeader,
    K,
    build_frame,
    ipv4_checksum,
)
from dataplane.pipeline import Pipeline

RESULT_FLOW, GROUP, DOWN = 200, 5, [1, 2]  # the PS's result flow id; ports below the switch


SRC_PORT = 1  # where the route to SRC (the worker that sends the test's DATA) leaves


def _pipeline(keep: bool = True) -> Pipeline:
    pipeline = aggregating(2)
    pipeline.keep_results = keep
    pipeline.fwd.result_group[(JOB, TASK)] = GROUP
    pipeline.fwd.mcast[GROUP] = [(port, 0) for port in DOWN]
    pipeline.fwd.lpm[(32, int.from_bytes(SRC.ip, "big"))] = SRC_PORT
    pipeline.lpm_changed()
    return pipeline


def _frame(flow: int, frag: int, flags: int = DATA, count: int = 1, value: int = 0) -> bytes:
    elements = np.full(K, value, dtype=">i4").tobytes()
    return build_frame(SRC, DST, InaHeader(JOB, TASK, flags, flow, 0, frag, count), elements)


def _result(frag: int, count: int, value: int, to: Endpoint = BROADCAST) -> bytes:
    """The PS's RESULT (dataplane/ps.py): from the PS to every worker, or to one."""
    elements = np.full(K, value, dtype=">i4").tobytes()
    header = InaHeader(JOB, TASK, RESULT, RESULT_FLOW, 0, frag, count, aux=2 << 8)
    return build_frame(DST, to, header, elements)


def _completed(pipeline: Pipeline, frag: int = 7) -> None:
    pipeline.process(1, _frame(1, frag, value=3))
    [(port, _)] = pipeline.process(2, _frame(2, frag, value=4))
    assert port == OUT_PORT


def _is_kept_result(out: list[tuple[int, bytes]], frag: int, count: int, value: int) -> bool:
    """`out` is the RESULT the PS sent, again, down the result group: the PS's flow id and
    sums, aux RETRANSMITTED (no round-trip sample), from the PS to broadcast, checksum valid."""
    if sorted(port for port, _ in out) != DOWN or len({f for _, f in out}) != 1:
        return False
    frame = out[0][1]
    header = InaHeader.unpack(frame)
    return (
        (header.flags, header.flow_id, header.frag_id, header.count, header.aux)
        == (RESULT, RESULT_FLOW, frag, count, RETRANSMITTED)
        and int.from_bytes(frame[OFF_UDP : OFF_UDP + 2], "big") == RESULT_FLOW
        and frame[OFF_ELEMS:] == np.full(K, value, ">i4").tobytes()
        and frame[0:6] == BROADCAST.mac
        and frame[OFF_IP + 12 : OFF_IP + 16] == DST.ip
        and frame[OFF_IP + 16 : OFF_IP + 20] == BROADCAST.ip
        and ipv4_checksum(frame[OFF_IP:OFF_UDP]) == 0
    )


def test_a_copy_after_the_result_passed_is_answered_with_that_result_down_the_tree() -> None:
    pipeline = _pipeline()
    _completed(pipeline)
    passed = pipeline.process(0, _result(7, 16, 99))  # the PS's sum of 16 workers
    assert sorted(port for port, _ in passed) == DOWN
    answer = pipeline.process(1, _frame(1, 7, value=3))
    assert _is_kept_result(answer, 7, 16, 99), answer
    assert pipeline.results_answered == 1


def test_a_result_to_one_worker_is_routed_to_it_and_kept() -> None:
    """The PS's answer to a PROBE (README step 3)."""
    pipeline = _pipeline()
    _completed(pipeline)
    [(port, frame)] = pipeline.process(0, _result(7, 16, 99, to=SRC))
    assert port == SRC_PORT and frame[OFF_IP + 16 : OFF_IP + 20] == SRC.ip
    assert _is_kept_result(pipeline.process(1, _frame(1, 7, PROBE, count=1)), 7, 16, 99)
    pipeline.fwd.result_group.clear()  # a switch off the task's tree routes it all the same
    assert [p for p, _ in pipeline.process(0, _result(8, 16, 99, to=SRC))] == [SRC_PORT]
    assert pipeline.counters["unknown_job"][0] == 0


def test_a_query_after_the_result_passed_is_answered_with_it_once_per_round() -> None:
    pipeline = _pipeline()
    _completed(pipeline)
    pipeline.process(0, _result(7, 16, 99))
    assert _is_kept_result(pipeline.process(1, _frame(1, 7, PROBE, count=1)), 7, 16, 99)
    assert pipeline.process(2, _frame(2, 7, PROBE, count=1)) == [], "round 1 was answered"
    assert _is_kept_result(pipeline.process(2, _frame(2, 7, PROBE, count=2)), 7, 16, 99)


def test_before_the_result_passed_the_sum_goes_on_towards_the_ps() -> None:
    pipeline = _pipeline()
    _completed(pipeline)
    [(port, again)] = pipeline.process(1, _frame(1, 7, value=3))
    header = InaHeader.unpack(again)
    assert (port, header.flags, header.flow_id, header.count) == (OUT_PORT, DATA, OUT_FLOW, 2)
    assert again[OFF_ELEMS:] == np.full(K, 7, ">i4").tobytes()


@pytest.mark.parametrize("state", ["partial", "other fragment", "retaken"])
def test_a_result_keeps_nothing_where_the_slot_did_not_complete_its_fragment(state: str) -> None:
    pipeline = _pipeline()
    if state == "partial":
        pipeline.process(1, _frame(1, 7, value=3))
        pipeline.process(0, _result(7, 16, 99))
        pipeline.process(2, _frame(2, 7, value=4))  # completes after the result passed
    else:
        _completed(pipeline, 7 if state == "retaken" else 7 + 64)  # 64: the slot region
        pipeline.process(0, _result(7, 16, 99))
        if state == "retaken":  # fragment 71 takes the slot over and completes
            _completed(pipeline, 7 + 64)
        _completed(pipeline, 7)
    [(port, out)] = pipeline.process(1, _frame(1, 7, value=3))
    assert (port, InaHeader.unpack(out).flags, InaHeader.unpack(out).count) == (OUT_PORT, DATA, 2)


def test_on_by_default_and_when_off_a_passing_result_changes_nothing() -> None:
    assert Pipeline().keep_results
    pipeline = _pipeline(keep=False)
    _completed(pipeline)
    pipeline.process(0, _result(7, 16, 99))
    [(port, out)] = pipeline.process(1, _frame(1, 7, value=3))
    assert (port, InaHeader.unpack(out).flags) == (OUT_PORT, DATA)


def test_fig1_at_five_percent_sends_fewer_repairs_into_the_ps() -> None:
    """Exactly once either way; with kept results the sums of finished fragments into the PS
    (repairs of lost results, which the PS ignores) fall to a fraction (seed 0, 0.25 MB: 394
    to 87)."""
    network = load_topology(EXAMPLES / "aro-fig1.yaml")
    plan = solve(network, "aro", SolveOptions(time_limit=20, seed=0, params={"num_workers": 1}))
    finished_sums = []
    for keep in (False, True):
        it = Emulation(
            network,
            Impairments(loss=0.05),
            seed=0,
            plan=plan,
            keep_results=keep,
            pass_queries=False,  # the rule alone: completed slots repair every round
        ).iteration(0, 0.25, timeout=120)
        assert it.seconds is not None, it.waiting
        assert all(it.exact) and (it.finished, it.miscounted) == (it.fragments, 0)
        finished_sums.append(it.ps_intake["sums_of_finished"])
    assert finished_sums[1] < finished_sums[0] / 3, finished_sums


def test_a_query_passes_a_completed_slot_until_its_result_passed_then_gets_it() -> None:
    """A completed slot passes a query on towards the PS (no sum: only the PS knows whether
    it has it), a resent copy still gets the sum, and once the PS's RESULT passed every new
    query round gets it."""
    pipeline = _pipeline()
    _completed(pipeline)
    [(port, on)] = pipeline.process(1, _frame(1, 7, PROBE, count=1))
    assert (port, InaHeader.unpack(on).flags, InaHeader.unpack(on).count) == (OUT_PORT, PROBE, 1)
    [(port, copy)] = pipeline.process(2, _frame(2, 7, value=4))
    assert (port, InaHeader.unpack(copy).flags, InaHeader.unpack(copy).count) == (OUT_PORT, DATA, 2)
    pipeline.process(0, _result(7, 16, 99))
    assert _is_kept_result(pipeline.process(2, _frame(2, 7, PROBE, count=1)), 7, 16, 99)
    assert pipeline.process(1, _frame(1, 7, PROBE, count=1)) == [], "round 1 was answered"
    assert _is_kept_result(pipeline.process(2, _frame(2, 7, PROBE, count=2)), 7, 16, 99)
    assert Pipeline().pass_queries
