"""The congestion mark (p4src/README.md, "Congestion mark") without root: the embedded
pipeline's egress marking and its OR through aggregation, the PS's echo, the worker's DCTCP rule
against the RFC 8257 formulas written out here, the own-queue mark, the compiler's entries and
the default depth: half of the queue a port or worker has, read from `tc`'s JSON.
Real packets on both targets: tests/dataplane/test_dp_congestion_target.py (root)."""

from __future__ import annotations

import re
import socket

import numpy as np
import pytest
from conftest import EXAMPLES
from finsy import P4Schema, P4TableAction, P4TableEntry, P4TableMatch
from finsy.proto import p4r
from test_dp_fastpath import DST, JOB, NEXT_NODE, OUT_PORT, SRC, TASK, aggregating

from controller.compiler.program import compile_plan
from controller.emulation.faults.impair import KIND_OF_FLAGS, LOST_KINDS, _lost_rules
from controller.emulation.faults.lossy_sim import frame_kind
from controller.model.network import load_topology
from controller.solvers import SolveOptions, solve
from dataplane import qdisc
from dataplane.congestion import GAIN, QUIET_WINDOWS, MarkReaction
from dataplane.entities import INSERT, Entities
from dataplane.frame import (
    ACK,
    CONGESTED,
    CONTROL,
    DATA,
    PROBE,
    RESULT,
    InaHeader,
    K,
    Task,
    build_frame,
    is_marked,
    kind_of,
)
from dataplane.pipeline import Pipeline
from dataplane.ps import ParameterServer
from dataplane.schema import P4INFO_PATH, Schema, load_p4info
from dataplane.session_ps import SessionPS
from dataplane.worker import Worker


def _frame(flow: int, frag: int, flags: int = DATA, count: int = 1, value: int = 1) -> bytes:
    header = InaHeader(JOB, TASK, flags, flow, NEXT_NODE, frag, count)
    return build_frame(SRC, DST, header, np.full(K, value, ">i4").tobytes())


def _programmed(depth: int | None) -> Pipeline:
    """A pipeline whose port OUT_PORT marks from `depth` (None: from its own queue,
    `mark_from_queue`), written as the controller writes it."""
    pipeline = Pipeline()
    entity = P4TableEntry(
        "mark_threshold",
        match=P4TableMatch({"egress_port": OUT_PORT}),
        action=P4TableAction("mark_above", depth=depth)
        if depth is not None
        else P4TableAction("mark_from_queue"),
    )
    Entities(Schema(load_p4info()), pipeline).write(
        p4r.Update(type=INSERT, entity=entity.encode(P4Schema(P4INFO_PATH)))
    )
    return pipeline


@pytest.mark.parametrize("kind", [DATA, ACK, PROBE, RESULT])
def test_a_port_marks_from_its_threshold_of_queued_frames(kind: int) -> None:
    pipeline = _programmed(depth=3)
    frame = _frame(1, 5, kind)
    assert [is_marked(pipeline.mark(OUT_PORT, frame, q)) for q in range(6)] == [
        False,
        False,
        False,
        True,
        True,
        True,
    ]
    marked = pipeline.mark(OUT_PORT, frame, 3)
    assert kind_of(marked[42 + 3]) == kind, "the kind stays"
    assert marked[:45] == frame[:45] and marked[46:] == frame[46:], "only the flags byte changes"


def test_a_port_without_an_entry_and_a_control_packet_are_never_marked() -> None:
    pipeline = _programmed(depth=0)
    assert not is_marked(pipeline.mark(OUT_PORT + 1, _frame(1, 5), 100))
    assert not is_marked(pipeline.mark(OUT_PORT, _frame(1, 5, CONTROL), 100))
    assert is_marked(pipeline.mark(OUT_PORT, _frame(1, 5), 0))
    assert pipeline.marks(OUT_PORT) and not pipeline.marks(OUT_PORT + 1)


@pytest.mark.parametrize(("own", "marked_from"), [(5, 5), (1, 1), (None, None)])
def test_a_port_told_to_mark_from_its_own_queue_marks_from_what_its_target_says(
    own: int | None, marked_from: int | None
) -> None:
    """`mark_from_queue`: the target's own depth of the port (the embedded switch: half its
    qdisc's limit), never when the port has no queue."""
    pipeline = _programmed(depth=None)
    marks = [is_marked(pipeline.mark(OUT_PORT, _frame(1, 5), q, lambda: own)) for q in range(8)]
    assert marks == [marked_from is not None and q >= marked_from for q in range(8)]
    assert pipeline.marks(OUT_PORT)


# `tc -j qdisc show` of a veth as Mininet leaves it, shaped (htb), and shaped over a short FIFO.
NOQUEUE = [{"kind": "noqueue", "handle": "0:", "root": True, "refcnt": 2, "options": {}}]
HTB = [{"kind": "htb", "handle": "5:", "root": True, "options": {"default": "0x1"}}]
PFIFO = [*HTB, {"kind": "pfifo", "handle": "10:", "parent": "5:1", "options": {"limit": 2}}]


@pytest.mark.parametrize(
    ("qdiscs", "limit", "depth"),
    [(NOQUEUE, None, None), (HTB, 1000, 500), (PFIFO, 2, 1), ([], None, None)],
    ids=["noqueue", "htb over the default leaf", "htb over pfifo 2", "tc failed"],
)
def test_the_default_depth_is_half_the_queue_an_interface_has(qdiscs, limit, depth) -> None:
    assert qdisc.limit_of(qdiscs, txqueuelen=1000) == limit
    assert qdisc.mark_depth(limit) == depth


def _marked(frame: bytes) -> bytes:
    out = bytearray(frame)
    out[42 + 3] |= CONGESTED
    return bytes(out)


@pytest.mark.parametrize("which", [None, 0, 1, 2])
def test_a_sum_is_marked_if_any_of_its_contributions_was(which: int | None) -> None:
    pipeline = aggregating(3)
    outputs = []
    for i in range(3):
        frame = _frame(i + 1, 40, value=i + 1)
        outputs += pipeline.process(i + 1, _marked(frame) if i == which else frame)
    [(port, out)] = outputs
    header = InaHeader.unpack(out)
    assert (port, header.count, kind_of(header.flags)) == (OUT_PORT, 3, DATA)
    assert np.frombuffer(out, ">i4", K, 62).tolist() == [6] * K
    assert is_marked(out) == (which is not None)
    # A copy of a counted contribution gets the stored sum again, with the stored mark.
    [(_, again)] = pipeline.process(1, _frame(1, 40, value=1))
    assert is_marked(again) == (which is not None)
    # The next fragment in the same slot starts from its own contributions' marks.
    outputs = [pipeline.process(i + 1, _frame(i + 1, 40 + 64, value=1)) for i in range(3)]
    assert not is_marked(outputs[-1][0][1])


def test_a_marked_contribution_is_neither_malformed_nor_taken_for_another_kind() -> None:
    pipeline = aggregating(1)
    [(port, out)] = pipeline.process(1, _marked(_frame(1, 3)))
    assert port == OUT_PORT and is_marked(out)
    assert pipeline.counters["malformed"] == [0] * 4
    [(_, ack)] = pipeline.process(1, _marked(_frame(1, 3, ACK, count=0)))
    assert kind_of(ack[45]) == ACK and is_marked(ack), "an ACK passes with its mark"


def _ps(session: bool, workers: int = 2) -> tuple[ParameterServer | SessionPS, socket.socket]:
    """The PS of one iteration (`ina ps`), or of a training run (`ina ps --session`)."""
    ps_end, observer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    observer.setblocking(False)
    if session:
        return SessionPS(ps_end, DST, Task(JOB, TASK), workers, 50), observer
    return ParameterServer(ps_end, DST, Task(JOB, TASK), workers, 4, 50), observer


def _sent(sock: socket.socket) -> list[bytes]:
    out = []
    while True:
        try:
            out.append(sock.recv(4096))
        except BlockingIOError:
            return out


@pytest.mark.parametrize("session", [False, True], ids=["ps", "session-ps"])
@pytest.mark.parametrize("marked", [False, True])
def test_the_ps_echoes_a_mark_on_any_sum_of_the_fragment_in_its_result(
    marked: bool, session: bool
) -> None:
    ps, observer = _ps(session)
    first = _frame(1, 2)
    ps.handle(_marked(first) if marked else first)
    ps.handle(_frame(2, 2))
    [result] = _sent(observer)
    assert kind_of(result[45]) == RESULT and is_marked(result) == marked
    assert np.frombuffer(result, ">i4", K, 62).tolist() == [2] * K
    # A result sent again answers the packet that asked for it with that packet's mark.
    ps.handle(_marked(_frame(1, 2, PROBE, count=0)))
    ps.handle(_frame(1, 2, PROBE, count=0))
    assert [is_marked(r) for r in _sent(observer)] == [True, False]
    assert (ps.finished, ps.miscounted) == (1, 0)


def _reference_alphas(marks: list[bool], window: int) -> list[float]:
    """RFC 8257 section 3.3 by hand: alpha = (1 - g) alpha + g F once per window of results,
    F the marked share of that window, alpha from 1; the window held fixed."""
    alpha, out = 1.0, []
    for start in range(0, len(marks), window):
        chunk = marks[start : start + window]
        if len(chunk) == window:
            alpha = (1 - GAIN) * alpha + GAIN * sum(chunk) / window
            out.append(alpha)
    return out


def test_alpha_is_rfc_8257s_moving_average_of_the_marked_share_per_window() -> None:
    rng = np.random.default_rng(1)
    marks = [bool(m) for m in rng.random(400) < 0.3]
    reaction, alphas = MarkReaction(window_left=8), []
    for i, m in enumerate(marks):
        reaction.on_result(m, 8.0)  # the window the caller holds; cuts are tested below
        if (i + 1) % 8 == 0:
            alphas.append(reaction.alpha)
    assert alphas == pytest.approx(_reference_alphas(marks, 8))


def test_a_marked_result_cuts_the_window_by_half_alpha_once_per_window() -> None:
    reaction = MarkReaction()
    assert reaction.on_result(True, 40.0) == pytest.approx(40 * (1 - reaction.alpha / 2))
    window = 40 * (1 - reaction.alpha / 2)
    for _ in range(int(window) - 1):  # the rest of that window: no second cut
        assert reaction.on_result(True, window) == window
    assert reaction.on_result(True, window) < window
    assert reaction.cuts == 2
    assert MarkReaction().on_result(True, 1.0) == 1.0, "never below one fragment"


def test_growth_is_one_per_result_until_the_first_cut_then_one_per_window() -> None:
    reaction = MarkReaction()
    assert reaction.growth(10.0) == 1.0
    window = reaction.on_result(True, 20.0)
    assert reaction.ssthresh == window
    assert reaction.growth(window) == pytest.approx(1 / window)
    assert reaction.growth(window / 2) == 1.0, "below the cut's window: one per result"


def test_pacing_spreads_the_window_over_a_round_trip_once_marks_came() -> None:
    reaction = MarkReaction()
    assert reaction.gap(10.0, 0.02) == 0.0
    window = reaction.on_result(True, 20.0)
    assert reaction.gap(window, 0.02) == pytest.approx(0.02 / window)


def test_windows_of_results_without_a_mark_forget_the_cuts_window() -> None:
    """Once the marking queue has drained (QUIET_WINDOWS windows of results in a row, none
    marked) a worker grows one per result again and stops pacing; one mark restarts the
    count."""
    reaction = MarkReaction()
    window = reaction.on_result(True, 20.0)
    for quiet in range(QUIET_WINDOWS):
        for _ in range(int(window)):
            reaction.on_result(False, window)
        if quiet == QUIET_WINDOWS // 2:
            reaction.on_result(True, window)  # a mark: the count starts again
            window = reaction.ssthresh
    assert reaction.ssthresh == window, "a mark came fewer than QUIET_WINDOWS windows ago"
    assert reaction.growth(window) == pytest.approx(1 / window)
    for _ in range(QUIET_WINDOWS * int(window)):
        reaction.on_result(False, window)
    assert reaction.ssthresh == float("inf")
    assert reaction.growth(window) == 1.0 and reaction.gap(window, 0.02) == 0.0


def _worker(queued: int = 0) -> tuple[Worker, socket.socket]:
    mine, wire = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    wire.setblocking(False)
    rows = np.ones((64, K), np.int32)
    w = Worker(mine, SRC, DST, Task(JOB, TASK), 1, NEXT_NODE, rows, window=20.0, timeout=0.5)
    w.queued = lambda: queued
    return w, wire


def _result(frag: int, marked: bool) -> bytes:
    frame = build_frame(
        DST, SRC, InaHeader(JOB, TASK, RESULT, 50, 0, frag, 2), np.ones(K, ">i4").tobytes()
    )
    return _marked(frame) if marked else frame


def test_a_worker_cuts_on_a_marked_result_and_grows_on_an_unmarked_one() -> None:
    w, _ = _worker()
    w.start(0.0)
    w.pump(0.0)
    w.receive(RESULT, 50, 0, _result(0, False), 0.01)
    assert w.window == 21.0
    w.receive(RESULT, 50, 1, _result(1, True), 0.02)
    assert w.window == pytest.approx(21 * (1 - w.marks.alpha / 2))
    assert w.stats.marked == 1


@pytest.mark.parametrize("queued", [0, 9, 10, 15])
def test_a_worker_marks_its_data_when_its_own_queue_holds_the_threshold(queued: int) -> None:
    w, wire = _worker(queued)
    w.mark_depth = 10
    w.start(0.0)
    w.pump(0.0)
    frames = _sent(wire)
    assert frames and all(kind_of(f[45]) == DATA for f in frames)
    assert {is_marked(f) for f in frames} == {queued >= 10}


def test_a_worker_with_no_depth_and_no_queue_of_its_own_never_marks() -> None:
    """No depth given: half of its interface's queue; a socket that is no packet socket has
    no interface, so nothing to read and no mark, however much is said to wait."""
    w, wire = _worker(10_000)
    w.start(0.0)
    w.pump(0.0)
    frames = _sent(wire)
    assert frames and not any(is_marked(f) for f in frames)


def test_the_compiler_makes_every_port_of_every_switch_mark_from_the_depth_asked() -> None:
    network = load_topology(EXAMPLES / "aro-fig1.yaml")
    plan = solve(network, "aro", SolveOptions(time_limit=20, seed=0, params={"num_workers": 1}))
    for depth, programs in (
        ("own queue", compile_plan(network, plan)[0]),
        (5, compile_plan(network, plan, mark_depth=5)[0]),
    ):
        for name, program in programs.items():
            entries = {
                e.match["egress_port"]: e.action.args.get("depth", "own queue")
                for e in program.table_entries
                if e.table_id == "mark_threshold"
            }
            ports = {d["out_port"] for _, _, d in network.graph.out_edges(name, data=True)}
            assert entries == dict.fromkeys(ports, depth), name


@pytest.mark.parametrize("kind", [DATA, RESULT, ACK, PROBE])
def test_a_lost_marked_frame_is_counted_by_its_kind(kind: int) -> None:
    """What the impairments count as lost, in the simulation and in Mininet's nftables rules
    (one counting rule per kind, in LOST_KINDS order): a marked frame is still its kind."""
    frame = _marked(_frame(1, 5, kind))
    assert frame_kind(frame) == KIND_OF_FLAGS[kind]
    chain = _lost_rules("s1-eth1")
    sets = [{int(v) for v in m.split(",")} for m in re.findall(r"\{ ([\d, ]+) \}", chain)]
    assert [frame[45] in values for values in sets] == [
        name == KIND_OF_FLAGS[kind] for name in LOST_KINDS[:-1]
    ]
