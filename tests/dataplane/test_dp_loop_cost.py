"""The worker's loop turns in time independent of its window, and finds the same timeouts a
scan of every fragment in flight finds (that scan, once per turn, was most of a worker's CPU
at a full window: docs/loop-profile.md)."""

from __future__ import annotations

import socket
import time

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.frame import BROADCAST, FRAME_LEN, Endpoint, InaHeader, K, Task, build_frame
from dataplane.gradients import fragments
from dataplane.recovery import InFlight
from dataplane.worker import PACING_BURST, Worker

ME = Endpoint(b"\x02\0\0\0\0\x09", bytes([10, 0, 0, 9]))


def _worker(frags: int) -> Worker:
    sock, _ = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.setblocking(False)
    rows = fragments(np.zeros(frags * K, dtype=np.int32))
    return Worker(sock, ME, ME, Task(1, 0), 1, 0, rows, max_window=frags, window=frags)


def _turn_seconds(in_flight: int) -> float:
    """Least seconds of one quiet turn (nothing due, nothing to send) with `in_flight`
    fragments outstanding."""
    worker = _worker(in_flight)
    worker.start(100.0)
    worker.pump(100.0)  # the whole window goes out
    assert len(worker.outstanding) == in_flight
    best = float("inf")
    for _ in range(30):
        start = time.perf_counter()
        worker.on_timeouts(100.1)
        worker.pump(100.1)
        best = min(best, time.perf_counter() - start)
    return best


def test_a_quiet_turn_costs_the_same_with_100_or_10000_fragments_in_flight():
    small, large = _turn_seconds(100), _turn_seconds(10_000)
    assert large < 10 * small, f"{large * 1e6:.0f} µs against {small * 1e6:.0f} µs"


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["set", "pop", "expire"]), st.integers(0, 15), st.integers(0, 40)
        ),
        max_size=60,
    )
)
def test_in_flight_expires_what_a_scan_of_every_deadline_finds(steps):
    """Against a plain dict scanned in full, the reference the worker used to be."""
    fast, reference = InFlight(), {}
    for op, frag, tenths in steps:
        when = tenths / 10
        if op == "set":
            fast[frag] = reference[frag] = when
        elif op == "pop":
            assert fast.pop(frag, None) == reference.pop(frag, None)
        else:
            due = {f for f, d in reference.items() if d <= when}
            assert set(fast.expired(when)) == due
            assert len(fast.expired(when)) == len(due)  # each once
            for f in due:
                del fast[f], reference[f]
        assert fast == reference
        assert fast.earliest() == min(reference.values(), default=None)
        assert list(fast) == list(reference)  # still in order of last send


def test_frames_are_the_size_the_pacing_assumes_and_built_the_same_way_every_time():
    header = InaHeader(1, 0, 1, 7, 0, 42, 1)
    frame = build_frame(ME, BROADCAST, header, bytes(4 * K))
    assert len(frame) == FRAME_LEN
    assert build_frame(ME, BROADCAST, header, bytes(4 * K)) == frame


@settings(max_examples=15, deadline=None)
@given(st.floats(0.001, 0.05))
def test_a_paced_worker_keeps_its_rate_and_wakes_once_per_burst_not_per_frame(rate_gbps):
    """Woken per frame, a worker at tens of thousands of frames per second spent its CPU on
    turns of the loop (a select, a drain, timers) that each sent one frame; a burst of
    PACING_BURST seconds' worth per turn keeps the rate and divides the turns."""
    worker = _worker(20_000)
    worker.rate_gbps = rate_gbps
    worker.start(0.0)
    gap = FRAME_LEN * 8 / (rate_gbps * 1e9)
    now, turns, until = 0.0, 0, 0.2
    while now < until:
        before = worker.stats.sent
        wait = worker.pump(now)
        turns += worker.stats.sent > before
        now += max(wait, 1e-6)  # the select wakes when asked to
    sent = worker.stats.sent
    assert abs(sent - now / gap) <= PACING_BURST / gap + 2  # the planned rate, within a burst
    assert turns <= now / PACING_BURST + 2
