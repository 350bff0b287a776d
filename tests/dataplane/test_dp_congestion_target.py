"""The congestion mark (p4src/README.md, "Congestion mark") on running targets through veth
pairs, real packets in and out: the `mark_threshold` entry, the OR of the contributions' marks
through aggregation, CONTROL never marked, on the embedded target and on bmv2 (the fixtures
of tests/dataplane/test_dp_target.py); and a queue the kernel really holds (an htb shaper on the
switch's port) read by the embedded target; and the default entry, `mark_from_queue`, on a
queue that really fills: bmv2's own 64-packet egress queue (its drain rate slowed through
bmv2's Thrift runtime service, which P4Runtime has no knob for: a kernel shaper never fills
bmv2's queue, bmv2 drops what the kernel does not take), and a `pfifo limit 10` behind the
embedded target's port. Each marks before it drops."""

from __future__ import annotations

import socket
import struct
import subprocess
import time

import numpy as np
import pytest
import test_dp_target
from test_dp_target import (
    JOB,
    OUT_FLOW,
    TASK,
    Target,
    _elements,
    _frame,
    _install_aggregation,
    _receive,
)

from dataplane.frame import (
    CONGESTED,
    CONTROL,
    DATA,
    OFF_ELEMS,
    OFF_INA,
    InaHeader,
    K,
    is_marked,
    kind_of,
)
from dataplane.p4rt_client import Client

pytestmark = pytest.mark.root
# The switch fixtures of the contract tests: one switch of each kind for this module.
target = test_dp_target.target
sw = test_dp_target.sw


def _threshold(sw: Client, port: int, depth: int | None) -> None:
    """Port `port` marks from `depth` (None: from half its own queue, the controller's
    default)."""
    if depth is None:
        sw.write(sw.table_entry("mark_threshold", {"egress_port": port}, "mark_from_queue"))
    else:
        sw.write(sw.table_entry("mark_threshold", {"egress_port": port}, "mark_above", depth=depth))


def _marked(frame: bytes) -> bytes:
    out = bytearray(frame)
    out[OFF_INA + 3] |= CONGESTED
    return bytes(out)


def test_a_port_with_a_threshold_of_zero_marks_every_ina_packet(target: Target, sw: Client):
    _install_aggregation(sw, {1: 0, 2: 0})
    target.sockets[1].send(_frame(1, 9, 1, _elements(1)))
    target.sockets[2].send(_frame(2, 9, 2, _elements(2)))
    [unmarked] = _receive(target.sockets[4], expect=1)
    assert not is_marked(unmarked), "no entry, no mark"
    _threshold(sw, 4, 0)
    target.sockets[1].send(_frame(1, 10, 1, _elements(1)))
    target.sockets[2].send(_frame(2, 10, 2, _elements(2)))
    [out] = _receive(target.sockets[4], expect=1)
    header = InaHeader.unpack(out)
    assert is_marked(out) and kind_of(header.flags) == DATA and header.count == 2
    np.testing.assert_array_equal(
        np.frombuffer(out, ">i4", K, OFF_ELEMS), _elements(1) + _elements(2)
    )


@pytest.mark.parametrize("which", [None, 1, 2])
def test_a_sum_leaves_marked_when_a_contribution_came_marked(
    target: Target, sw: Client, which: int | None
) -> None:
    _install_aggregation(sw, {1: 0, 2: 0})
    _threshold(sw, 4, 10_000)  # the port itself never marks here
    for flow in (1, 2):
        frame = _frame(flow, 20, flow, _elements(flow))
        target.sockets[flow].send(_marked(frame) if flow == which else frame)
    [out] = _receive(target.sockets[4], expect=1)
    assert InaHeader.unpack(out).count == 2
    assert is_marked(out) == (which is not None)


def test_a_control_packet_is_never_marked(target: Target, sw: Client) -> None:
    _install_aggregation(sw, {1: 0, 2: 0}, slots=1)  # one slot: the second fragment collides
    for port in (1, 2, 3, 4):
        _threshold(sw, port, 0)
    target.sockets[1].send(_frame(1, 1, 1, _elements(1)))
    target.sockets[1].send(_frame(1, 2, 1, _elements(1)))
    control = [f for f in _receive(target.sockets[1], expect=1) if f[OFF_INA + 3] & 0x7F == CONTROL]
    assert control and not any(is_marked(f) for f in control)


def _shape(interface: str, rate: str, limit: int = 1000) -> None:
    for args in (
        ["qdisc", "add", "dev", interface, "root", "handle", "1:", "htb", "default", "1"],
        ["class", "add", "dev", interface, "parent", "1:", "classid", "1:1", "htb", "rate", rate],
        [
            "qdisc",
            "add",
            "dev",
            interface,
            "parent",
            "1:1",
            "handle",
            "10:",
            "pfifo",
            "limit",
            str(limit),
        ],
    ):
        subprocess.run(["tc", *args], check=True, capture_output=True)


def test_the_embedded_target_marks_from_the_kernels_queue_behind_its_port(
    target: Target, sw: Client
) -> None:
    """40 frames at once into a port shaped to 200 kbit/s (7.6 ms a frame): the switch hands
    them to the kernel faster than the shaper lets them go, so the socket's unsent frames
    (SIOCOUTQ) grow by one per frame once htb's burst (about 9 frames) is spent; from 5 queued
    on, they leave marked: 14 unmarked, then 26 marked, in three runs."""
    if target.kind != "embedded":
        pytest.skip("bmv2 marks from its own egress queue, which a kernel shaper never fills")
    interface = target.net.switch_if[4]
    sw.write(
        sw.table_entry(
            "ina_forward", {"job": JOB, "task": TASK, "flow_id": OUT_FLOW}, "forward", port=4
        )
    )
    _threshold(sw, 4, 5)
    _shape(interface, "200kbit")
    try:
        for frag in range(40):
            target.sockets[1].send(_frame(1, frag, OUT_FLOW, _elements(frag)))
        out = _receive(target.sockets[4], wait=3.0, expect=40)
    finally:
        subprocess.run(["tc", "qdisc", "del", "dev", interface, "root"], capture_output=True)
    marks = [is_marked(f) for f in sorted(out, key=lambda f: InaHeader.unpack(f).frag_id)]
    assert len(marks) == 40
    seen = "".join("x" if m else "." for m in marks)  # ..............xxxxxxxxxxxxxxxxxxxxxxxxxx
    assert marks[:5] == [False] * 5, f"the first frames found fewer than 5 ahead: {seen}"
    assert marks[20:] == [True] * 20, f"later frames found the queue the shaper holds: {seen}"


def _bmv2_queue_rate(target: Target, port: int, packets_per_second: int) -> None:
    """bmv2's `set_egress_queue_rate(port, pps)` (simple_switch.thrift) over its Thrift port:
    one call in Thrift's strict binary protocol on a buffered transport, multiplexed as
    service "simple_switch", as bmv2's runtime CLI sends it (no Thrift library here)."""
    args = list(target.process.args)
    thrift_port = int(args[args.index("--thrift-port") + 1])
    name = b"simple_switch:set_egress_queue_rate"
    call = (
        struct.pack("!Ii", 0x80010001, len(name))  # version 1, CALL
        + name
        + struct.pack("!i", 1)  # sequence id
        + struct.pack("!bhi", 8, 1, port)  # field 1: i32 port_num
        + struct.pack("!bhq", 10, 2, packets_per_second)  # field 2: i64 rate_pps
        + b"\0"  # end of the arguments
    )
    with socket.create_connection(("127.0.0.1", thrift_port), timeout=5) as conn:
        conn.sendall(call)
        reply = conn.recv(4096)
    # the reply's result: field 0, i32 0 (success), end
    assert reply.endswith(struct.pack("!bhib", 8, 0, 0, 0)), reply


def _pattern(out: list[bytes], sent: int) -> str:
    """One character per frame sent: x arrived marked, . arrived unmarked, _ lost."""
    got = {InaHeader.unpack(f).frag_id: is_marked(f) for f in out}
    return "".join("x" if got.get(i) else "." if i in got else "_" for i in range(sent))


def test_a_port_with_its_default_queue_marks_before_it_drops(target: Target, sw: Client) -> None:
    """The controller's default entry (`mark_from_queue`) on a queue that really fills:
    bmv2's own egress queue of 64 packets drained at 100 packets/s while 150 frames come at
    400/s; the embedded target's kernel queue, a `pfifo limit 10` under a 1 Mbit/s shaper,
    while 60 frames come at once. With the old default (500) bmv2 marked nothing, and the
    embedded port nothing below 500 queued. bmv2 marks from 32 queued, the embedded port from
    5; frames arrive unmarked, then marked, and only then are frames lost."""
    interface = target.net.switch_if[4]
    sw.write(
        sw.table_entry(
            "ina_forward", {"job": JOB, "task": TASK, "flow_id": OUT_FLOW}, "forward", port=4
        )
    )
    _threshold(sw, 4, None)
    if target.kind == "bmv2":
        sent, gap = 150, 0.0025
        _bmv2_queue_rate(target, 4, 100)
    else:
        sent, gap = 60, 0.0
        _shape(interface, "1mbit", limit=10)
    try:
        # One frame first: the embedded target reads the new limit on a thread, the packet
        # path takes it from the next frame on.
        target.sockets[1].send(_frame(1, sent, OUT_FLOW, _elements(0)))
        _receive(target.sockets[4], wait=0.5, expect=1)
        time.sleep(0.5)
        for frag in range(sent):
            target.sockets[1].send(_frame(1, frag, OUT_FLOW, _elements(frag)))
            if gap:
                time.sleep(gap)
        out = _receive(target.sockets[4], wait=3.0, expect=sent)
    finally:
        if target.kind == "bmv2":
            _bmv2_queue_rate(target, 4, 1_000_000_000)
        else:
            subprocess.run(["tc", "qdisc", "del", "dev", interface, "root"], capture_output=True)
    seen = _pattern(out, sent)  # bmv2: 46 ., 45 x, then _ and x as the queue drains
    print(f"{target.kind}: {seen}")
    assert "_" in seen, f"the queue never overflowed: {seen}"
    first_lost = seen.index("_")
    assert "x" in seen[:first_lost], f"no mark before the first loss: {seen}"
    assert seen[: seen.index("x")].count(".") >= 5, f"marked from the start: {seen}"
