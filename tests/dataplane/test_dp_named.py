"""A loss query at a partial sum names the worker members missing from it: an unsolicited
NACK (`next_node` NAMED) to each, once per slot and query round, down the point's name group
(p4src/README.md, "Loss query"; dataplane/recovery.py). Frame by frame on the embedded
pipeline, on both targets through P4Runtime and veths, and the worker's answer to it.
"""

from __future__ import annotations

import pytest
import test_dp_target
from conftest import EXAMPLES
from test_dp_fastpath import DST, JOB, SRC, TASK, aggregating
from test_dp_nack import _asking_worker, _frame, _query
from test_dp_target import Target, _elements, _install_aggregation, _receive, well_formed
from test_dp_target import _frame as _target_frame

from controller.emulation.faults.lossy_sim import Emulation
from controller.model.network import load_topology
from dataplane.frame import (
    CONTROL,
    DATA,
    ECN_CE,
    HELD,
    KIND,
    NAMED,
    OFF_IP,
    PROBE,
    RESULT,
    InaHeader,
    build_frame,
)
from dataplane.gradients import frag_id, split_frag_id
from dataplane.p4rt_client import Client
from dataplane.pipeline import Aggregate, Pipeline
from dataplane.worker import Worker, dispatch

GROUP = 40
HOST_1 = bytes([10, 0, 0, 1])  # flow 1's worker
target = test_dp_target.target
sw = test_dp_target.sw


def _pipeline() -> Pipeline:
    """Flows 1-3 (member bits 0-2, from ports 1-3) merge here; the name group reaches each."""
    pipeline = aggregating(3)
    fwd = pipeline.fwd
    for key, act in fwd.aggregate.items():
        fwd.aggregate[key] = Aggregate(act.tag, act.member, act.full, act.out_flow, 0, GROUP)
    fwd.clone.update({p: [p] for p in (1, 2, 3)})
    fwd.mcast[GROUP] = [(p, p - 1) for p in (1, 2, 3)]
    fwd.named_host[(GROUP, 0)] = int.from_bytes(HOST_1)
    return pipeline


def _named(frame: bytes, frag: int, source: bytes, to: bytes = b"\xff" * 4) -> bool:
    """An unsolicited NACK of `frag`, from `source` (the PS) to address `to` (by default
    broadcast, without a `named_host` entry), Ethernet broadcast."""
    header = InaHeader.unpack(frame)
    return (
        (header.flags, header.count, header.next_node, header.frag_id, header.aux)
        == (CONTROL, 0, NAMED, frag, frag)
        and well_formed(frame)
        and frame[OFF_IP + 1] & 3 == ECN_CE
        and frame[0:6] == b"\xff" * 6
        and frame[OFF_IP + 12 : OFF_IP + 16] == source
        and frame[OFF_IP + 16 : OFF_IP + 20] == to
    )


def _answer(frame: bytes) -> tuple[int, int, int]:
    header = InaHeader.unpack(frame)
    return header.flags, header.count, header.next_node


def test_a_query_at_a_partial_sum_names_its_missing_members_once_per_round() -> None:
    pipeline = _pipeline()
    assert pipeline.process(2, _frame(2, 7)) == []  # flow 2's contribution waits
    out = dict(pipeline.process(3, _query(3, 7)))  # flow 3's lost: NACKed, flow 1 named
    assert sorted(out) == [1, 3]
    assert _answer(out[3])[:2] == (CONTROL, 0) and _answer(out[3])[2] != NAMED
    assert _named(out[1], 7, DST.ip, HOST_1)
    assert len(pipeline.process(3, _query(3, 7))) == 1, "round 1 named its members already"
    [(port, held)] = pipeline.process(2, _query(2, 7))  # a held asker: HELD, no one named
    assert (port, *_answer(held)[:2]) == (2, CONTROL, HELD)
    out = dict(pipeline.process(2, _query(2, 7, rounds=2)))
    assert sorted(out) == [1, 2, 3] and _named(out[1], 7, DST.ip, HOST_1)
    assert _named(out[3], 7, DST.ip), "no `named_host` entry: broadcast"
    assert _answer(out[2])[:2] == (CONTROL, HELD)


def test_no_one_is_named_without_a_group_at_a_free_slot_or_after_the_slot_reopens() -> None:
    pipeline = aggregating(3)
    pipeline.fwd.clone.update({p: [p] for p in (1, 2, 3)})
    pipeline.process(2, _frame(2, 7))
    assert len(pipeline.process(3, _query(3, 7))) == 1, "name_group 0: the asker's NACK only"
    pipeline = _pipeline()
    assert len(pipeline.process(3, _query(3, 7))) == 1, "a free slot: nothing to name"
    for flow in (1, 2, 3):
        pipeline.process(flow, _frame(flow, 7))  # completes: the next sum opens it again
    pipeline.process(2, _frame(2, 7 + 64))
    assert len(pipeline.process(3, _query(3, 7 + 64))) == 2, "a new sum names round 1 again"


# *** the worker


def _named_frame(frag: int) -> bytes:
    header = InaHeader(JOB, TASK, CONTROL, 3, NAMED, frag_id(0, frag), 0, aux=frag_id(0, frag))
    return build_frame(DST, SRC, header, b"")


def _data(sock: list[bytes]) -> list[int]:
    return [h.frag_id for h in map(InaHeader.unpack, sock) if h.flags == DATA]


def _hand(worker: Worker, frame: bytes, now: float) -> None:
    dispatch([worker], {(JOB, TASK): worker}, frame, now)


def test_a_named_worker_resends_at_once_unless_its_copy_is_recent_or_the_result_is_in() -> None:
    worker, sock = _asking_worker(contributor=2, peers=5)  # fragments 0-15 sent at 0
    del sock[:]
    _hand(worker, _named_frame(7), 0.1)
    assert sock == [], "its copy went less than a round trip (the RTO, none measured) ago"
    _hand(worker, _named_frame(18), 1.0)
    assert sock == [], "never sent: its first copy goes in order"
    worker.receive(RESULT, 100, frag_id(0, 5), _frame(100, frag_id(0, 5), RESULT), 0.9)
    _hand(worker, _named_frame(5), 1.0)
    assert sock == [], "its result is in"
    _hand(worker, _named_frame(7), 1.0)
    assert _data(sock) == [frag_id(0, 7)]
    assert (worker.stats.named, worker.stats.resent_on_named) == (3, 1)


def test_a_resend_on_a_named_nack_ends_the_fragment_s_turn_to_ask() -> None:
    worker, sock = _asking_worker(contributor=1, peers=5)
    worker._declare_lost(0, 0.6)  # second in turn for fragment 0: asks an RTO later, at 1.1
    del sock[:]
    _hand(worker, _named_frame(0), 0.7)
    assert _data(sock) == [frag_id(0, 0)] and 0 not in worker.last_asked
    worker.on_timeouts(1.15)  # its turn is past, its copy's deadline (1.2) not yet
    queries = [h.frag_id for h in map(InaHeader.unpack, sock) if h.flags == PROBE and h.count]
    assert frag_id(0, 0) not in queries


# *** a lost sum, in a simulated Fig. 1


def test_a_lost_sum_is_repaired_through_a_worker_of_the_leaf_that_made_it() -> None:
    """L1's sums of fragments 1-4 are lost on their way to S1. A peer's query at S1's partial
    sum names L1's sum, through W0 (the first of its workers): W0's copy meets L1's completed
    slot, which sends the sum again. Named only as worker members, the sums waited for L1's
    workers' own queries, and no one was named."""
    network = load_topology(EXAMPLES / "aro-fig1.yaml")
    emulation = Emulation(network)
    link = emulation.links["L1", "S1"]
    deliver, dropped = link.deliver, set()

    def lose_first_sums(frame: bytes) -> None:
        header = InaHeader.unpack(frame)
        frag = split_frag_id(header.frag_id)[1]
        if header.flags & KIND == DATA and 1 <= frag <= 4 and frag not in dropped:
            dropped.add(frag)
            return
        deliver(frame)

    link.deliver = lose_first_sums
    it = emulation.iteration(0, 0.05, timeout=60)
    assert it.seconds is not None, it.waiting
    assert all(it.exact) and (it.finished, it.miscounted) == (it.fragments, 0)
    assert dropped == {1, 2, 3, 4}
    assert it.resent_on_named >= 1, (it.named, it.resent_on_named, it.queries)


# *** both targets, through real ports


def _name_group(sw: Client) -> None:
    """Group GROUP: one replica per worker port 1-3, instance its flow's member bit; flow 1's
    has its host's address (flow 3's none: broadcast)."""
    entity = sw.group(GROUP, [])
    group = entity.packet_replication_engine_entry.multicast_group_entry
    for port in (1, 2, 3):
        group.replicas.add(egress_port=port, instance=port - 1)
    host = int.from_bytes(test_dp_target.HOSTS[1].ip)
    sw.write(
        entity,
        sw.table_entry("named_host", {"group": GROUP, "rid": 0}, "set_named_host", addr=host),
    )


def _got(target: Target) -> dict[int, list[bytes]]:
    """What each port received: the waits stay well within STALE_AFTER, since queries do
    not keep a partial sum alive."""
    return {p: _receive(s, wait=0.3 if p == 1 else 0.05) for p, s in target.sockets.items()}


@pytest.mark.root
def test_a_target_names_the_missing_worker_once_per_round_and_it_resends(
    target: Target, sw: Client
) -> None:
    _name_group(sw)
    _install_aggregation(sw, {1: 0, 2: 0, 3: 0}, name_group=GROUP)
    frag = frag_id(0, 7)
    target.sockets[2].send(_target_frame(2, frag, 2, _elements(2)))
    target.sockets[3].send(_target_frame(3, frag, 3, _elements(3), flags=PROBE, count=1))
    got = _got(target)
    # bmv2 clones to each replica a clone session was ever given (test_dp_nack.py `_nack_to`)
    to_1 = test_dp_target.HOSTS[1].ip
    assert got[1] and all(_named(f, frag, test_dp_target.PS.ip, to_1) for f in got[1]), got
    assert len(got[1]) == 1, "one replica per missing member"
    assert got[3] and {_answer(f)[:2] for f in got[3]} == {(CONTROL, 0)}, "the asker's NACK"
    assert got[2] == [] and got[4] == [], "the held member and the PS get nothing"
    target.sockets[3].send(_target_frame(3, frag, 3, _elements(3), flags=PROBE, count=1))
    got = _got(target)
    assert got[1] == [] and got[3], "round 1 named flow 1 already"
    target.sockets[2].send(_target_frame(2, frag, 2, _elements(2), flags=PROBE, count=1))
    got = _got(target)
    assert got[2] and {_answer(f)[:2] for f in got[2]} == {(CONTROL, HELD)}, "a held asker"
    assert got[1] == [] == got[3]
    target.sockets[2].send(_target_frame(2, frag, 2, _elements(2)))  # keeps the sum alive
    target.sockets[2].send(_target_frame(2, frag, 2, _elements(2), flags=PROBE, count=2))
    got = _got(target)
    assert [len(got[p]) for p in (1, 3)] == [1, 1], "round 2 names flows 1 and 3"
    assert _named(got[1][0], frag, test_dp_target.PS.ip, to_1)
    assert _named(got[3][0], frag, test_dp_target.PS.ip)
    worker, sock = _asking_worker(contributor=0, peers=3)  # what flow 1's worker does with it
    del sock[:]
    _hand(worker, got[1][0], 1.0)
    assert _data(sock) == [frag] and worker.stats.resent_on_named == 1
