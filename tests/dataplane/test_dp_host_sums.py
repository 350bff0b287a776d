"""The PS adds contributions as packed integers (`lane_sum`), not numpy: its results must
still be numpy's wrapping int32 sums, on the wire and in `result`, for every mix of flows
and counts. A worker keeps its results as the wire's bytes: `result` and `have` must still
be the first result of each fragment, in any order of arrival. No network: sends are
collected."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.frame import (
    BROADCAST,
    DATA,
    INA_HEADER,
    OFF_ELEMS,
    OFF_INA,
    RESULT,
    Endpoint,
    InaHeader,
    K,
    Task,
    build_frame,
    kind_of,
)
from dataplane.gradients import frag_id, fragments
from dataplane.ps import ParameterServer
from dataplane.worker import Worker, dispatch

ME = Endpoint(b"\x02\0\0\0\0\x0a", bytes([10, 0, 0, 10]))
PEER = Endpoint(b"\x02\0\0\0\0\x01", bytes([10, 0, 0, 1]))
INT32 = st.integers(-(2**31), 2**31 - 1)


class Collect:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def send(self, frame: bytes) -> int:
        self.sent.append(frame)
        return len(frame)


@settings(max_examples=60, deadline=None)
@given(
    counts=st.lists(st.integers(1, 3), min_size=1, max_size=5),
    values=st.data(),
    fragments=st.integers(1, 4),
)
def test_results_are_wrapping_int32_sums(
    counts: list[int], values: st.DataObject, fragments: int
) -> None:
    sock = Collect()
    ps = ParameterServer(sock, ME, Task(1, 0), sum(counts), fragments, 1000)  # type: ignore[arg-type]
    edge = st.sampled_from([-(2**31), -1, 0, 1, 2**31 - 1]) | INT32
    rows = np.array(
        values.draw(
            st.lists(
                st.lists(edge, min_size=K, max_size=K),
                min_size=len(counts) * fragments,
                max_size=len(counts) * fragments,
            )
        ),
        dtype=np.int64,
    ).reshape(fragments, len(counts), K)
    for frag in range(fragments):
        for flow, count in enumerate(counts):
            elements = rows[frag, flow].astype(">i4").tobytes()
            header = InaHeader(1, 0, DATA, flow, 0, frag_id(0, frag), count)
            ps.handle(build_frame(PEER, ME, header, elements))
    expected = rows.sum(axis=1).astype(np.int32)  # wraps mod 2^32, as the int32 lanes do
    assert ps.finished == fragments and ps.miscounted == 0
    assert np.array_equal(ps.result, expected) and ps.done.all()
    results = [f for f in sock.sent if kind_of(INA_HEADER.unpack_from(f, OFF_INA)[2]) == RESULT]
    assert len(results) == fragments
    for frag, frame in enumerate(results):
        wire = np.frombuffer(frame, ">i4", K, OFF_ELEMS)
        assert np.array_equal(wire, expected[frag])


@settings(max_examples=40, deadline=None)
@given(order=st.permutations(range(6)), arrived=st.integers(0, 6), data=st.data())
def test_a_worker_keeps_the_first_result_of_each_fragment(
    order: list[int], arrived: int, data: st.DataObject
) -> None:
    rows = fragments(np.zeros(6 * K, dtype=np.int32))
    w = Worker(Collect(), PEER, ME, Task(1, 0), 1, 0, rows, queued=lambda: 0)  # type: ignore[arg-type]
    sums = np.array(
        data.draw(st.lists(st.lists(INT32, min_size=K, max_size=K), min_size=6, max_size=6)),
        dtype=np.int32,
    )
    for frag in order[:arrived] + order[:arrived]:  # each twice: a copy changes nothing
        values = sums[frag] + 1 if w.have[frag] else sums[frag]
        header = InaHeader(1, 0, RESULT, 1000, 0, frag_id(0, frag), 1)
        dispatch(
            [w],
            {(1, 0): w},
            build_frame(ME, BROADCAST, header, values.astype(">i4").tobytes()),
            1.0,
        )
    expected = np.zeros((6, K), dtype=np.int32)
    expected[order[:arrived]] = sums[order[:arrived]]
    assert np.array_equal(w.result, expected) and w.result.dtype == np.int32
    assert w.have.tolist() == [f in order[:arrived] for f in range(6)]
    assert w.done == arrived
