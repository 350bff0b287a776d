"""CPU of one embedded switch per aggregated fragment when frames arrive paced, as on the
closed loop's shaped links (2 senders -> 1, veths; root). `ina bench target` sends windows
back to back, so a switch there serves many frames per wake-up; here one pair arrives every
GAP seconds (docs/loop-profile.md, section 7).

    python docs/benchmarks/loop/paced_switch.py [FRAGMENTS] [GAP_SECONDS]
"""

from __future__ import annotations

import json
import select
import sys
import time

from dataplane.bench import _copies, cpu_seconds, two_into_one
from dataplane.ports import ina_frames


def main(fragments: int, gap: float) -> dict:
    with two_into_one() as (switch, (one, two, out)):
        frames = [_copies(i, 2) for i in range(fragments)]
        got, sent = 0, 0
        cpu, start = cpu_seconds(switch.pid), time.monotonic()
        due = start
        while sent < fragments or (got < fragments and time.monotonic() < due + 1.0):
            if sent < fragments and time.monotonic() >= due:
                first, second = frames[sent]
                one.send(first)
                two.send(second)
                sent, due = sent + 1, due + gap
            if select.select([out], [], [], max(0.0, due - time.monotonic()))[0]:
                got += len(ina_frames(out))
        cpu = cpu_seconds(switch.pid) - cpu
    return {
        "fragments": fragments,
        "gap_us": gap * 1e6,
        "aggregates_out": got,
        "seconds": round(time.monotonic() - start, 2),
        "switch_cpu_us_per_fragment": round(cpu / fragments * 1e6, 1),
    }


if __name__ == "__main__":
    args = sys.argv[1:]
    print(json.dumps(main(int(args[0]) if args else 20000, float(args[1]) if args[1:] else 2e-4)))
