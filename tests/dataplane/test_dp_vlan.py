"""802.1Q / 802.1ad tagged frames through the embedded target, on real veths.

p4src/README.md: only Ethernet type 0x0800 is IPv4; "Anything else (ARP, IPv6, ...): dropped".
A tagged frame has type 0x8100 (or 0x88a8), so its INA contribution must not be summed. Linux
strips the outer tag before a packet socket sees the frame; these tests send real tagged
frames built by scapy and check that the target still sees (and drops) them.
"""

from __future__ import annotations

import select
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator

import numpy as np
import pytest
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether

from dataplane.frame import (
    DATA,
    INA_UDP_PORT,
    OFF_ELEMS,
    OFF_UDP,
    Endpoint,
    InaHeader,
    K,
    build_frame,
)
from dataplane.netns import VethNet
from dataplane.p4rt_client import Client
from dataplane.ports import open_raw, receive, receive_tagged, with_vlan_tag
from dataplane.schema import load_p4info

pytestmark = pytest.mark.root
DEVICE_ID, JOB, TASK, OUT_FLOW, TAG = 1, 3, 1, 100, 5
HOSTS = {p: Endpoint(bytes([2, 0, 0, 0, 0, p]), bytes([10, 0, 0, p])) for p in range(1, 5)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def switch() -> Iterator[tuple[str, dict[int, socket.socket]]]:
    net = VethNet(4)
    net.create()
    address = f"127.0.0.1:{_free_port()}"
    ifaces = [arg for p, name in net.switch_if.items() for arg in ("-i", f"{p}@{name}")]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dataplane",
            "switch",
            "--device-id",
            str(DEVICE_ID),
            "--grpc-addr",
            address,
            *ifaces,
            "--log-level",
            "warning",
        ]
    )
    try:
        yield address, {p: net.host_socket(p) for p in net.host_if}
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        net.destroy()


@pytest.fixture
def sw(switch) -> Iterator[Client]:
    """Flows 1..3 (ports 1..3) are summed here and the sum leaves through port 4."""
    address, sockets = switch
    client = Client(address, DEVICE_ID, 10, load_p4info())
    client.set_pipeline()
    full = 0b111
    client.write(
        client.table_entry(
            "job_slots", {"job": JOB, "generation": 0}, "set_job_slots", base=0, count=64
        ),
        client.table_entry(
            "ina_forward", {"job": JOB, "task": TASK, "flow_id": OUT_FLOW}, "forward", port=4
        ),
        *(
            client.table_entry(
                "ina_aggregate",
                {"job": JOB, "task": TASK, "pipe": 0, "flow_id": f},
                "aggregate",
                tag=TAG,
                member=1 << (f - 1),
                full=full,
                out_flow=OUT_FLOW,
                next_node=9,
                name_group=0,
            )
            for f in (1, 2, 3)
        ),
    )
    for sock in sockets.values():
        _receive(sock, wait=0)
    yield client
    client.close()


def _contribution(port: int, frag: int) -> bytes:
    elements = np.full(K, port, dtype=">i4").tobytes()
    return build_frame(
        HOSTS[port], HOSTS[4], InaHeader(JOB, TASK, DATA, port, 9, frag, 1), elements
    )


def _tagged(frame: bytes, kind: str) -> bytes:
    """`frame` with a real 802.1Q (VLAN 7 or priority-only VLAN 0) or 802.1ad outer tag."""
    plain = Ether(frame)
    outer = Ether(dst=plain.dst, src=plain.src)
    ipv4 = 0x0800  # explicit: scapy leaves the inner type 0 over a re-parsed payload
    tags = {
        "vlan 7": Dot1Q(vlan=7, type=ipv4),
        "priority tag": Dot1Q(vlan=0, prio=5, type=ipv4),
        "802.1ad": Dot1AD(vlan=30) / Dot1Q(vlan=7, type=ipv4),
    }[kind]
    tagged = bytes(outer / tags / plain.payload)
    assert tagged[-len(frame) + 12 :] == frame[12:], "the tag sits between the MACs and type"
    return tagged


def _receive(sock: socket.socket, wait: float = 0.5) -> list[bytes]:
    frames, deadline = [], time.monotonic() + wait
    while select.select([sock], [], [], max(0.0, deadline - time.monotonic()))[0]:
        frame, address = sock.recvfrom(65535)
        if (
            address[2] != socket.PACKET_OUTGOING
            and len(frame) > OFF_UDP + 4
            and int.from_bytes(frame[OFF_UDP + 2 : OFF_UDP + 4], "big") == INA_UDP_PORT
        ):
            frames.append(frame)
    return frames


@pytest.mark.parametrize("kind", ["vlan 7", "priority tag", "802.1ad"])
def test_tagged_contributions_are_dropped_not_summed(switch, sw, kind):
    _, sockets = switch
    for port in (1, 2, 3):
        sockets[port].send(_tagged(_contribution(port, 40), kind))
    assert _receive(sockets[4]) == [], "a tagged frame is not IPv4: it must not be aggregated"
    assert sw.counter("aggregations_completed") == [0, 0, 0, 0]
    # The same contributions untagged are summed: the setup itself works.
    for port in (1, 2, 3):
        sockets[port].send(_contribution(port, 41))
    (out,) = _receive(sockets[4])
    assert InaHeader.unpack(out).frag_id == 41
    np.testing.assert_array_equal(np.frombuffer(out, ">i4", K, OFF_ELEMS), np.full(K, 6))


def test_the_tag_is_restored_exactly_from_the_kernels_auxdata():
    """Unit check of `with_vlan_tag` against a tag built by scapy (no sockets)."""
    untagged = _contribution(1, 1)
    tagged = _tagged(untagged, "priority tag")
    aux = (0x10 | 0x40, 0, 0, 0, 0, (5 << 13) | 0, 0x8100)  # VLAN_VALID | TPID_VALID
    ancillary = [(263, 8, struct.pack("=IIIHHHH", *aux))]
    assert with_vlan_tag(untagged, ancillary) == tagged
    assert with_vlan_tag(untagged, []) == untagged


def _all(read, sock: socket.socket, wait: float = 0.5) -> list[bytes]:
    frames, deadline = [], time.monotonic() + wait
    while select.select([sock], [], [], max(0.0, deadline - time.monotonic()))[0]:
        frame = read(sock)
        if frame is not None and len(frame) > OFF_ELEMS:  # not the kernel's IPv6 chatter
            frames.append(frame)
    return frames


def test_a_port_is_read_in_two_halves_untagged_and_tagged():
    """`open_raw`'s socket (read with a plain `recv`) gets the untagged frames a port
    receives, the `tagged` half the tagged ones, tag restored; neither the host's own
    output, not even one sent by another socket on the same port."""
    with VethNet(1) as net:
        far = net.host_socket(1)
        plain, tagged = (open_raw(net.switch_if[1], tagged=t) for t in (False, True))
        other = open_raw(net.switch_if[1])
        try:
            frames = [_contribution(1, frag) for frag in range(4)]
            kinds = ["vlan 7", "priority tag", "802.1ad"]
            on_wire = [frames[0], _tagged(frames[1], kinds[0]), frames[2]]
            on_wire += [_tagged(frames[3], kind) for kind in kinds[1:]]
            for frame in on_wire:
                far.send(frame)
            assert _all(receive, plain) == [frames[0], frames[2]]
            assert _all(receive_tagged, tagged) == [on_wire[1], *on_wire[3:]]
            other.send(frames[0])
            assert _all(receive, far) == [frames[0]], "it reaches the far end"
            assert _all(receive, plain, wait=0.2) == []
            assert _all(receive_tagged, tagged, wait=0.1) == []
        finally:
            for sock in (far, plain, tagged, other):
                sock.close()
