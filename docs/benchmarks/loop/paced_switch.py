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

from dataplane.bench import _copies, cpu_seconds
from dataplane.bmv2 import free_tcp_port
from dataplane.demo import program_aggregation
from dataplane.frame import SLOTS_PER_PIPE
from dataplane.netns import VethNet, in_netns
from dataplane.p4rt_client import Client
from dataplane.ports import ina_frames, open_raw
from dataplane.targets import program_for, start_target


def main(fragments: int, gap: float) -> dict:
    program = program_for("embedded")
    with VethNet(3) as net:
        address = f"127.0.0.1:{free_tcp_port()}"
        switch = start_target("embedded", net.switch_if, address)
        try:
            client = Client(address, 1, 10, program.p4info)
            client.set_pipeline(program.device_config)
            program_aggregation(client, [1, 2], 3, slots=SLOTS_PER_PIPE)
            one, two, out = (
                in_netns(net.ns, lambda p=p: open_raw(net.host_if[p])) for p in (1, 2, 3)
            )
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
            client.close()
        finally:
            switch.terminate()
            switch.wait(timeout=10)
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
