"""Host agents: the PS counts every contribution once; workers and PS aggregate exactly."""

from __future__ import annotations

import os
import socket
import threading
import time

import numpy as np
import pytest

from dataplane.demo import run_demo
from dataplane.frame import (
    ACK,
    BROADCAST,
    DATA,
    OFF_ELEMS,
    OFF_IP,
    OFF_UDP,
    PROBE,
    RESULT,
    Endpoint,
    InaHeader,
    K,
    Task,
    build_frame,
)
from dataplane.gradients import fragments, synthetic_gradient, to_fixed_point
from dataplane.ps import ParameterServer
from dataplane.targets import KINDS, missing

ME = Endpoint(b"\x02\0\0\0\0\x09", bytes([10, 0, 0, 9]))


def _frame(flow: int, frag: int, count: int, values: np.ndarray, flags: int = DATA) -> bytes:
    header = InaHeader(1, 0, flags, flow, 0, frag, count)
    return build_frame(ME, ME, header, values.astype(">i4").tobytes())


RESULT_FLOW = 42


def _results(sock: socket.socket) -> list[np.ndarray]:
    """Values of the RESULT frames sent; each must carry the result flow id (header and port)."""
    out = []
    while True:
        try:
            frame = sock.recv(4096)
        except BlockingIOError:
            return out
        header = InaHeader.unpack(frame)
        assert (header.flags, header.flow_id) == (RESULT, RESULT_FLOW)
        assert int.from_bytes(frame[OFF_UDP : OFF_UDP + 2], "big") == RESULT_FLOW
        out.append(np.frombuffer(frame, ">i4", K, OFF_ELEMS).astype(np.int32))


def test_ps_counts_each_flow_once_and_mixes_partial_and_raw_fragments() -> None:
    ps_end, observer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    observer.setblocking(False)
    ps = ParameterServer(ps_end, ME, Task(1, 0), workers=3, fragments=1, result_flow_id=RESULT_FLOW)
    partial = np.full(K, 5, np.int32)  # flows 1+2 summed by a switch: count 2
    raw = np.arange(K, dtype=np.int32)
    ps.handle(_frame(100, 0, 2, partial))
    ps.handle(_frame(100, 0, 2, partial))  # retransmitted aggregate: ignored
    assert _results(observer) == []
    ps.handle(_frame(3, 0, 1, raw))
    results = _results(observer)
    assert len(results) == 1
    np.testing.assert_array_equal(results[0], partial + raw)
    ps.handle(_frame(3, 0, 0, np.zeros(K, np.int32), flags=PROBE))  # a worker lost the result
    np.testing.assert_array_equal(_results(observer)[0], partial + raw)


def test_a_result_goes_again_to_a_prober_alone_to_all_for_a_copy_or_query_not_for_an_ack():
    ps_end, observer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    observer.setblocking(False)
    ps = ParameterServer(ps_end, ME, Task(1, 0), workers=1, fragments=1, result_flow_id=RESULT_FLOW)
    ps.handle(_frame(1, 0, 1, np.ones(K, np.int32)))
    observer.recv(4096)
    asker = Endpoint(b"\x02\0\0\0\0\x05", bytes([10, 0, 0, 5]))
    zeros = np.zeros(K, np.int32).astype(">i4").tobytes()

    def sent_to(flags: int, count: int = 0) -> list[bytes]:
        header = InaHeader(1, 0, flags, 1, 0, 0, count)
        ps.handle(build_frame(asker, ME, header, zeros))
        frames = []
        while True:
            try:
                frames.append(observer.recv(4096))
            except BlockingIOError:
                return [f[OFF_IP + 16 : OFF_IP + 20] for f in frames]

    assert sent_to(PROBE) == [asker.ip]  # its copy of the result was lost
    assert sent_to(DATA, 1) == [BROADCAST.ip]  # a copy: under congestion its peers lost it too
    assert sent_to(PROBE, count=1) == [BROADCAST.ip]  # a loss query: every worker, once a round
    assert sent_to(PROBE, count=1) == []
    assert sent_to(ACK) == []  # its sender holds the result
    assert ps.results_sent == 4


def test_ps_ignores_a_probe_for_an_unfinished_fragment() -> None:
    ps_end, observer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    observer.setblocking(False)
    ps = ParameterServer(ps_end, ME, Task(1, 0), workers=2, fragments=1, result_flow_id=RESULT_FLOW)
    ps.handle(_frame(1, 0, 1, np.ones(K, np.int32)))
    ps.handle(_frame(1, 0, 0, np.zeros(K, np.int32), flags=PROBE))
    assert _results(observer) == []
    assert ps.counts[0][0] == 1  # a probe adds nothing


def test_gradients_become_padded_fixed_point_fragments() -> None:
    rows = fragments(to_fixed_point(np.array([0.5, -1.25], dtype=np.float32)))
    assert rows.shape == (1, K)
    assert rows[0, :3].tolist() == [2**15, -(2**16 + 2**14), 0]
    assert synthetic_gradient(0, 1, 10).tolist() == synthetic_gradient(0, 1, 10).tolist()


@pytest.mark.root
@pytest.mark.parametrize("target", KINDS)
def test_three_workers_and_a_ps_aggregate_exactly_across_the_switch(target: str) -> None:
    reason = missing(target)
    if reason:
        pytest.skip(reason)
    summary = run_demo(workers=3, size_mb=0.125, seed=7, window=16, target=target)
    assert summary["exact"], summary
    assert summary["switch_counters"]["aggregations_completed"] >= 0.125 * 2**20 / 4 / K


def test_ps_serves_past_its_linger_until_its_launcher_says_stop() -> None:
    """A finished PS keeps serving (a PROBE may still come) while no line has come on its stop
    channel, however long its linger has passed; the line stops it at once."""
    ps_end, _worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    ps = ParameterServer(ps_end, ME, Task(1, 0), workers=1, fragments=1, result_flow_id=RESULT_FLOW)
    ps.handle(_frame(1, 0, 1, np.ones(K, np.int32)))
    assert ps.finished == 1
    read_end, write_end = os.pipe()
    stop = os.fdopen(read_end, "r")
    timer = threading.Timer(0.6, lambda: os.write(write_end, b"stop\n"))
    timer.start()
    started = time.monotonic()
    ps.run(linger=0.05, stop=stop)
    served = time.monotonic() - started
    timer.join()
    os.close(write_end)
    stop.close()
    assert 0.5 < served < 5.0  # past the 0.05 s linger, until the stop line


def test_ps_without_a_stop_channel_leaves_after_its_linger() -> None:
    ps_end, _worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    ps = ParameterServer(ps_end, ME, Task(1, 0), workers=1, fragments=1, result_flow_id=RESULT_FLOW)
    ps.handle(_frame(1, 0, 1, np.ones(K, np.int32)))
    started = time.monotonic()
    ps.run(linger=0.05)
    assert time.monotonic() - started < 0.5
