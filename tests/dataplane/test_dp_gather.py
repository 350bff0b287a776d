"""Packet loops woken by a frame let GATHER seconds of frames gather before serving them
(dataplane/ports.py): on paced links a worker, a PS and a switch otherwise woke once per
frame, and the wake-ups cost more CPU than the frames (docs/loop-profile.md). Real veths,
real sockets; every frame of a burst must still be handled, in order."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dataplane.ps as ps_module
import dataplane.worker as worker_module
from dataplane.bench import _copies, two_into_one
from dataplane.demo import AGG_FLOW
from dataplane.frame import (
    DATA,
    INA_HEADER,
    OFF_ELEMS,
    OFF_INA,
    Endpoint,
    InaHeader,
    K,
    Task,
    build_frame,
)
from dataplane.gradients import fragments
from dataplane.netns import VethNet
from dataplane.ports import GATHER, LEARNING_READS, EgressDepth, ina_frames, open_raw, send
from dataplane.ps import ParameterServer, result_frame
from dataplane.worker import Worker, run_shards

pytestmark = pytest.mark.root
ME = Endpoint(b"\x02\0\0\0\0\x09", bytes([10, 0, 0, 9]))
PS = Endpoint(b"\x02\0\0\0\0\x0a", bytes([10, 0, 0, 10]))
SPACING = 0.0001  # one frame per 100 µs (or per sleep, when the machine is slower): paced
FRAGMENTS = 2000


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A socket on each end of one veth: (root end, namespace end)."""
    with VethNet(1) as net:
        near, far = open_raw(net.switch_if[1]), net.host_socket(1)
        try:
            yield near, far
        finally:
            near.close()
            far.close()


def _counting(monkeypatch, module) -> list[int]:
    """Count the turns of `module`'s loop: one drain of its socket per turn."""
    turns = [0]
    drain = module.ina_frames

    def counted(sock: socket.socket) -> list[bytes]:
        turns[0] += 1
        return drain(sock)

    monkeypatch.setattr(module, "ina_frames", counted)
    return turns


def test_a_worker_takes_paced_results_a_gathering_at_a_time(pair, monkeypatch):
    near, far = pair
    rows = fragments(np.arange(FRAGMENTS * K, dtype=np.int32))
    worker = Worker(far, ME, PS, Task(1, 0), 1, 0, rows, max_window=64)
    sender = SimpleNamespace(me=PS, task=Task(1, 0), workers=1, result_flow_id=7)
    done = threading.Event()

    def answer_paced() -> None:
        """The PS of one worker behind a paced link: each DATA's sum (its own values) back,
        one result per SPACING."""
        while not done.is_set():
            for frame in ina_frames(near):
                fid = INA_HEADER.unpack_from(frame, OFF_INA)[5]
                values = np.frombuffer(frame, ">i4", K, OFF_ELEMS)
                send(near, result_frame(sender, fid, values, aux=0))
                time.sleep(SPACING)

    turns = _counting(monkeypatch, worker_module)
    responder = threading.Thread(target=answer_paced)
    responder.start()
    try:
        result = run_shards([worker], stall_after=30)
    finally:
        done.set()
        responder.join()
    assert np.array_equal(result, rows.reshape(-1))
    # Woken per result it took about one turn each (1 900-2 000 of 2 000 here).
    assert turns[0] < FRAGMENTS / 4, f"{turns[0]} turns for {FRAGMENTS} results"


def test_a_ps_takes_paced_contributions_a_gathering_at_a_time(pair, monkeypatch):
    near, far = pair
    ps = ParameterServer(far, PS, Task(1, 0), 1, FRAGMENTS, 7)
    turns = _counting(monkeypatch, ps_module)
    serving = threading.Thread(target=ps.run, args=(0.3,))
    serving.start()
    values = np.arange(K, dtype=np.int32)
    for frag in range(FRAGMENTS):
        header = InaHeader(1, 0, DATA, 1, 0, frag, 1)
        send(near, build_frame(ME, PS, header, (values + frag).astype(">i4").tobytes()))
        time.sleep(SPACING)
    serving.join(timeout=30)
    assert ps.finished == FRAGMENTS
    assert np.array_equal(ps.result, np.arange(FRAGMENTS)[:, None] + values)
    assert turns[0] < FRAGMENTS / 4, f"{turns[0]} turns for {FRAGMENTS} contributions"


def test_a_switch_serves_every_frame_of_bursts_longer_than_its_turn_in_order():
    """Two senders' copies of 700 fragments, 600 back to back (more than a turn serves) and
    100 paced after a pause: every aggregate leaves, in fragment order."""
    with two_into_one() as (_switch, (one, two, out)):
        frames = [_copies(frag, 2) for frag in range(700)]
        for first, second in frames[:600]:
            send(one, first)
            send(two, second)
        time.sleep(10 * GATHER)
        for first, second in frames[600:]:
            send(one, first)
            send(two, second)
            time.sleep(SPACING)
        got: list[int] = []
        deadline = time.monotonic() + 20
        while len(got) < 700 and time.monotonic() < deadline:
            for frame in ina_frames(out):
                flow, _, frag = INA_HEADER.unpack_from(frame, OFF_INA)[3:6]
                if flow == AGG_FLOW:
                    got.append(frag)
            time.sleep(0.01)
    assert got == list(range(700))


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 20),
    st.lists(st.tuples(st.sampled_from(["send", "drain", "check"]), st.integers(0, 6))),
)
def test_egress_depth_decides_every_mark_as_a_read_per_frame_would(threshold, steps):
    """Against the queue itself: a sender's frames only add to its egress queue, the interface
    only takes them out, so below the threshold the last read plus the frames sent since
    decides as a fresh read does, and reads are only needed near or above the threshold."""
    queue, reads = [0], [0]

    def read() -> int:
        reads[0] += 1
        return queue[0]

    depth = EgressDepth(read)
    checks = 0
    for action, n in steps:
        if action == "send":
            queue[0] += 1
            depth.sent()
        elif action == "drain":
            queue[0] = max(0, queue[0] - n)
        else:
            checks += 1
            assert (depth.at(threshold) >= threshold) == (queue[0] >= threshold)


@pytest.mark.parametrize("waiting, reads_expected", [(0, 1), (2, LEARNING_READS)])
def test_egress_depth_reads_sparsely_unless_a_busy_queue_teaches_a_frame_s_charge(
    waiting: int, reads_expected: int
) -> None:
    """Below the threshold one read bounds the queue for the frames sent after it. But a read
    that finds frames waiting may have seen several frames since the last one and taken them
    for one (the backlog learns a frame's charge from the reads): while the queue holds
    frames, the next LEARNING_READS reads come one per frame sent, then sparse again."""
    reads = [0]

    def read() -> int:
        reads[0] += 1
        return waiting

    depth = EgressDepth(read)
    for _ in range(100):
        assert depth.at(500) < 500
        depth.sent()
    assert reads[0] == reads_expected
