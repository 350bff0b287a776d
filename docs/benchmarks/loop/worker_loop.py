"""CPU of one worker per fragment without a network: every DATA it sends comes back as its
RESULT on the next turn (a paced link, a few results per turn), through `dispatch` as in
`run_shards`, with the worker's own `pump` and `on_timeouts` each turn; sends are kept in a
list, not a socket (docs/loop-profile.md, section 8). With `--profile`, cProfile's top lines.

    python docs/benchmarks/loop/worker_loop.py [FRAGMENTS] [--profile]
"""

from __future__ import annotations

import cProfile
import json
import pstats
import sys
import time

import numpy as np

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
from dataplane.gradients import fragments
from dataplane.worker import Worker, dispatch

ME = Endpoint(b"\x02\0\0\0\0\x09", bytes([10, 0, 0, 9]))
PS = Endpoint(b"\x02\0\0\0\0\x0a", bytes([10, 0, 0, 10]))


class Keep:
    """A socket whose sends are kept for the next turn."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def send(self, frame: bytes) -> int:
        self.sent.append(frame)
        return len(frame)


def answer(frame: bytes) -> bytes | None:
    """The RESULT a PS would send for one worker's DATA (a 1-worker task)."""
    job, task, flags, _, _, raw, _, _, aux = INA_HEADER.unpack_from(frame, OFF_INA)
    if kind_of(flags) != DATA:
        return None
    header = InaHeader(job, task, RESULT, 1000, 0, raw, 1, aux=aux)
    return build_frame(PS, BROADCAST, header, frame[OFF_ELEMS : OFF_ELEMS + 4 * K])


def run(frags: int) -> tuple[float, Worker]:
    sock = Keep()
    rows = fragments(np.arange(frags * K, dtype=np.int32))
    w = Worker(sock, ME, PS, Task(1, 0), 1, 0, rows, queued=lambda: 0)  # type: ignore[arg-type]
    shards, by_task = [w], {(1, 0): w}
    now = 100.0
    start = time.process_time()
    w.start(now)
    while not w.finished:
        now += 0.0002
        w.pump(now)
        waiting, sock.sent = sock.sent, []
        for frame in waiting:
            result = answer(frame)
            if result is not None:
                dispatch(shards, by_task, result, now + 0.0001)
        w.on_timeouts(now + 0.0001)
    seconds = time.process_time() - start
    assert np.array_equal(w.result.reshape(-1), np.arange(frags * K, dtype=np.int32))
    return seconds, w


def main(frags: int) -> dict:
    best = min(run(frags)[0] for _ in range(3))
    return {"fragments": frags, "us_per_fragment": round(best / frags * 1e6, 2)}


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--profile"]
    frags = int(args[0]) if args else 20000
    print(json.dumps(main(frags)))
    if "--profile" in sys.argv:
        cProfile.run("run(frags)", "/tmp/worker_loop.prof")
        pstats.Stats("/tmp/worker_loop.prof").sort_stats("tottime").print_stats(18)
