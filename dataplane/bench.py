"""`ina bench target`: aggregated fragments per second through one embedded switch, 2 -> 1.

Two sender ports feed the same fragments under flows 1 and 2; the switch sums each pair and
sends one fragment to the receiver port. The generator keeps `window` pairs outstanding (so the
switch's socket buffer never overflows and the figure is the switch's, not the drop rate's) and
resends what a CONTROL packet names. Prints JSON: fragments/s and payload Mbps.
"""

from __future__ import annotations

import argparse
import json
import select
import time
from pathlib import Path

from dataplane.demo import JOB, TASK, free_tcp_port, program_aggregation, start_switch
from dataplane.frame import (
    CONTROL,
    DATA,
    INA_HEADER,
    OFF_INA,
    Endpoint,
    InaHeader,
    K,
    build_frame,
)
from dataplane.netns import VethNet, in_netns
from dataplane.p4rt_client import Client
from dataplane.ports import drain, open_raw
from dataplane.schema import load_p4info

SRC = Endpoint(b"\x02\0\0\0\0\x01", bytes([10, 0, 0, 1]))
DST = Endpoint(b"\x02\0\0\0\0\x03", bytes([10, 0, 0, 3]))


def _pair(frag: int) -> tuple[bytes, bytes]:
    elements = bytes(range(4 * K))
    return tuple(build_frame(SRC, DST, InaHeader(JOB, TASK, DATA, flow, 0, frag), elements)
                 for flow in (1, 2))  # type: ignore[return-value]


def measure(net: VethNet, fragments: int, window: int) -> dict:
    senders = {p: in_netns(net.ns, lambda p=p: open_raw(net.host_if[p])) for p in (1, 2)}
    receiver = in_netns(net.ns, lambda: open_raw(net.host_if[3]))
    frames = [_pair(i) for i in range(fragments)]
    outstanding: set[int] = set()
    completed, resent, next_frag = 0, 0, 0
    start = last_progress = time.monotonic()

    def on_output(frame: bytes) -> None:
        nonlocal completed, last_progress
        frag = INA_HEADER.unpack_from(frame, OFF_INA)[5]
        if frag in outstanding and frame[OFF_INA + 3] == DATA:
            outstanding.discard(frag)
            completed += 1
            last_progress = time.monotonic()

    def on_control(port: int, frame: bytes) -> None:
        nonlocal resent
        header = InaHeader.unpack(frame)
        if header.flags == CONTROL and header.frag_id in outstanding:
            senders[port].send(frames[header.frag_id][port - 1])
            resent += 1

    while completed < fragments and time.monotonic() - last_progress < 2.0:
        while next_frag < fragments and len(outstanding) < window:
            outstanding.add(next_frag)
            for port, frame in zip((1, 2), frames[next_frag], strict=True):
                senders[port].send(frame)
            next_frag += 1
        ready = select.select([receiver, *senders.values()], [], [], 0.05)[0]
        if receiver in ready:
            drain(receiver, on_output, limit=4096)
        for port, sock in senders.items():
            if sock in ready:
                drain(sock, lambda f, port=port: on_control(port, f), limit=4096)
    seconds = time.monotonic() - start
    return {"fragments": completed, "lost": fragments - completed, "resent_on_control": resent,
            "seconds": round(seconds, 3), "fragments_per_s": round(completed / seconds),
            "payload_mbps": round(completed * 4 * K * 8 / seconds / 1e6, 1), "k": K,
            "window": window}


def run_bench(fragments: int, window: int) -> dict:
    with VethNet(3) as net:
        address = f"127.0.0.1:{free_tcp_port()}"
        switch = start_switch(net, address)
        try:
            client = Client(address, 1, 10, load_p4info())
            client.set_pipeline()
            program_aggregation(client, [1, 2], 3, slots=4096)
            result = measure(net, fragments, window)
            result["switch_counters"] = {name: sum(client.counter(name)) for name in
                                         ("aggregations_completed", "collisions", "duplicates")}
            client.close()
        finally:
            switch.terminate()
            switch.wait(timeout=10)
    return {"target": "embedded", "topology": "2 -> 1 on veth", **result}


def cmd_bench_target(args: argparse.Namespace) -> int:
    result = run_bench(args.fragments, args.window)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n")
    return 0


def add_parser(bench_subparsers: argparse._SubParsersAction) -> None:
    """Add `target` under `ina bench` (the controller.bench.COMMANDS convention)."""
    p = bench_subparsers.add_parser("target", help="fragments/s through one embedded switch, 2->1")
    p.add_argument("--fragments", type=int, default=50000, help="aggregated fragments to send")
    p.add_argument("--window", type=int, default=256, help="outstanding fragment pairs")
    p.add_argument("--json", metavar="OUT", help="also write the result here")
    p.set_defaults(func=cmd_bench_target)
