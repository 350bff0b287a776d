"""CPU of the parameter server's `handle` per frame, without a network: the contributions of
WORKERS workers to FRAGMENTS fragments, each worker its own flow (as under `shortest`, every
frame a DATA the PS adds) or all of them summed by the switches into one (as under `aro`),
handed to `ParameterServer.handle` with sends discarded (docs/loop-profile.md, section 8).

    python docs/benchmarks/loop/ps_handle.py [FRAGMENTS] [WORKERS]
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from dataplane.frame import DATA, Endpoint, InaHeader, K, Task, build_frame
from dataplane.gradients import frag_id
from dataplane.ps import ParameterServer

ME = Endpoint(b"\x02\0\0\0\0\x0a", bytes([10, 0, 0, 10]))
PEER = Endpoint(b"\x02\0\0\0\0\x01", bytes([10, 0, 0, 1]))


class Discard:
    """A socket whose sends go nowhere."""

    def send(self, frame: bytes) -> int:
        return len(frame)


def frames(fragments: int, flows: int, count: int) -> list[bytes]:
    rng = np.random.default_rng(0)
    out = []
    for frag in range(fragments):
        for flow in range(flows):
            values = rng.integers(-1000, 1000, K, dtype=np.int32).astype(">i4").tobytes()
            header = InaHeader(1, 0, DATA, flow, 0, frag_id(0, frag), count)
            out.append(build_frame(PEER, ME, header, values))
    return out


def cpu_per_frame(fragments: int, flows: int, count: int) -> float:
    todo = frames(fragments, flows, count)
    best = float("inf")
    for _ in range(3):
        ps = ParameterServer(Discard(), ME, Task(1, 0), flows * count, fragments, 1000)  # type: ignore[arg-type]
        start = time.process_time()
        for frame in todo:
            ps.handle(frame)
        best = min(best, time.process_time() - start)
        assert ps.finished == fragments and ps.results_sent == fragments
    return round(best / len(todo) * 1e6, 2)


def main(fragments: int, workers: int) -> dict:
    return {
        "fragments": fragments,
        "workers": workers,
        "us_per_frame_one_flow_each": cpu_per_frame(fragments, workers, 1),
        "us_per_frame_summed": cpu_per_frame(fragments, 1, workers),
    }


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    print(json.dumps(main(*(args + [20000, 5][len(args) :]))))
