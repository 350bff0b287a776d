"""The embedded pipeline's fast path against independent references, without root.

The per-packet code sums elements as one big integer (`lane_sum`), parses every checked field
in one struct call and caches IPv4 checksums; these tests hold it to numpy's wrapping int32
sums, scapy's checksum and the README's parser order on frames cut short at every length.
bmv2 equivalence of the same paths is tests/dataplane/test_dp_target.py (root).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scapy.layers.inet import IP
from scapy.layers.l2 import Ether

from dataplane.frame import (
    ACK,
    DATA,
    FRAME_LEN,
    OFF_ELEMS,
    OFF_INA,
    SHORT_FRAME_LEN,
    Endpoint,
    InaHeader,
    K,
    build_frame,
)
from dataplane.pipeline import Aggregate, Pipeline, lane_sum

INT32 = np.iinfo(np.int32)
SRC = Endpoint(b"\x02\0\0\0\0\x01", bytes([10, 0, 0, 1]))
DST = Endpoint(b"\x02\0\0\0\0\x09", bytes([10, 0, 0, 9]))
JOB, TASK, OUT_FLOW, NEXT_NODE, OUT_PORT = 3, 1, 100, 7, 9


def _packed(vector: np.ndarray) -> int:
    return int.from_bytes(vector.astype(">i4").tobytes(), "big")


def test_lane_sum_is_numpys_wrapping_int32_sum() -> None:
    rng = np.random.default_rng(0)
    extremes = np.array([INT32.min, INT32.max, -1, 0, 1] * K, dtype=np.int32)[:K]
    vectors = [
        extremes,
        extremes[::-1].copy(),
        *rng.integers(INT32.min, INT32.max, size=(40, K), endpoint=True, dtype=np.int32),
    ]
    for a, b in itertools.pairwise(vectors):
        expected = (a.astype(np.int64) + b.astype(np.int64)).astype(np.int32)  # wraps mod 2^32
        assert lane_sum(_packed(a), _packed(b)) == _packed(expected)


def aggregating(fan_in: int) -> Pipeline:
    """A pipeline that merges `fan_in` flows of JOB's TASK into OUT_FLOW, out of OUT_PORT."""
    pipeline = Pipeline()
    fwd = pipeline.fwd
    fwd.job_slots[(JOB, 0)] = (0, 64)
    for i in range(fan_in):
        fwd.aggregate[(JOB, TASK, 0, i + 1)] = Aggregate(
            1, 1 << i, (1 << fan_in) - 1, OUT_FLOW, NEXT_NODE
        )
    fwd.forward[(JOB, TASK, OUT_FLOW)] = OUT_PORT
    return pipeline


def _frame(flow: int, frag: int, elements: np.ndarray, flags: int = DATA, ecn: int = 0) -> bytes:
    return build_frame(
        SRC,
        DST,
        InaHeader(JOB, TASK, flags, flow, 0, frag),
        elements.astype(">i4").tobytes(),
        ecn=ecn,
    )


@pytest.mark.parametrize("fan_in", [2, 3, 5])
def test_completed_fragment_carries_the_exact_sum_and_a_valid_checksum(fan_in: int) -> None:
    rng = np.random.default_rng(fan_in)
    pipeline = aggregating(fan_in)
    for frag in range(20):
        contributions = rng.integers(
            INT32.min, INT32.max, size=(fan_in, K), endpoint=True, dtype=np.int32
        )
        outputs = [
            pipeline.process(i + 1, _frame(i + 1, frag, row, ecn=frag % 4))
            for i, row in enumerate(contributions)
        ]
        assert outputs[:-1] == [[]] * (fan_in - 1), "partial sums are consumed"
        [(port, out)] = outputs[-1]
        assert port == OUT_PORT and len(out) == FRAME_LEN
        expected = contributions.astype(np.int64).sum(axis=0).astype(np.int32)
        assert (np.frombuffer(out, ">i4", K, OFF_ELEMS) == expected).all()
        header = InaHeader.unpack(out)
        assert (header.flow_id, header.next_node, header.count, header.frag_id) == (
            OUT_FLOW,
            NEXT_NODE,
            fan_in,
            frag,
        )
        ip = Ether(out)[IP]
        recomputed = ip.copy()
        del recomputed.chksum
        assert IP(bytes(recomputed)).chksum == ip.chksum, "egress checksum is valid"
        assert ip.tos == frag % 4, "ECN passes through"


def test_ack_passing_an_aggregation_point_is_rewritten_not_summed() -> None:
    pipeline = aggregating(2)
    elements = np.arange(K, dtype=np.int32)
    [(port, out)] = pipeline.process(1, _frame(1, 5, elements, flags=ACK))
    assert port == OUT_PORT
    assert InaHeader.unpack(out).flow_id == OUT_FLOW
    assert len(out) == SHORT_FRAME_LEN, "an ACK carries no elements"
    assert not any(pipeline.slots.bitmap), "nothing was summed"


def test_a_wrong_checksum_is_corrected_on_the_way_out() -> None:
    pipeline = aggregating(1)
    frame = bytearray(_frame(1, 0, np.zeros(K, dtype=np.int32)))
    frame[24:26] = b"\xde\xad"  # IPv4 header checksum
    [(_, out)] = pipeline.process(1, bytes(frame))
    ip = Ether(out)[IP]
    recomputed = ip.copy()
    del recomputed.chksum
    assert IP(bytes(recomputed)).chksum == ip.chksum


def test_a_frame_cut_short_anywhere_is_dropped_where_the_readme_says() -> None:
    """Below the UDP header's end (42 bytes) a frame is not INA and is dropped silently;
    from there to a full frame it is INA and malformed (README step 2)."""
    pipeline = aggregating(2)
    whole = _frame(1, 0, np.ones(K, dtype=np.int32))
    for length in range(len(whole)):
        before = sum(pipeline.counters["malformed"])
        assert pipeline.process(1, whole[:length]) == [], length
        counted = sum(pipeline.counters["malformed"]) - before
        assert counted == (1 if length >= OFF_INA else 0), length
