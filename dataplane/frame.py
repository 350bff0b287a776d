"""The INA wire format of p4src/README.md as constants and struct codecs.

The one module that holds the sizes of the packet and of the P4 program (K, slots, pipes,
fan-in, ports, header layout): the embedded target, the host agents and the controller
(compiler, evaluator, OpenFlow rules) all import them from here, and
tests/dataplane/test_dp_packet.py checks each against `p4src/ina.p4`. It imports nothing of
ours: the bottom layer, which the data plane and the controller may both import without
either importing the other.

The switch target and the host agents handle every packet through these helpers rather than
scapy, because scapy costs tens of microseconds per packet; `dataplane.packet` offers the same
format as a scapy layer for tests and inspection.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache

K = 128
MAX_PIPES = 4
MAX_JOBS = 32  # cells of the per-job `forged` counter
SLOTS_PER_PIPE = 4096
# Flows one aggregation point merges: a slot's member bitmap has one bit per merged flow
# (README step 4.2); the compiler refuses a plan that merges more, the evaluator reports it.
MAX_FAN_IN = 64
PORTS = 512  # ingress_port is 9 bits: cells of the per-port `port_packets` counter
# A partial sum nothing touched for this long is abandoned: the slot counts as free (README 4.2)
STALE_AFTER_SECONDS = 2.0
INA_UDP_PORT = 20033
# Flow ids come in generations (flow_id[15:14]; plan versions cycle through them): the PS keeps a
# fragment's sums per generation so that a fragment resent under a new plan is never added to
# what the old plan's path delivered (p4src/README.md, "Plan versions"). controller.compiler.program
# assigns them.
GENERATIONS = 4
FLOW_IDS_PER_GENERATION = (1 << 16) // GENERATIONS
CPU_PORT = 510  # the P4Runtime controller port (simple_switch_grpc --cpu-port 510)
ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_LLDP = 0x88CC
PROTO_UDP = 17
INA_HEADER_LEN = 20
INA_UDP_LEN = 8 + INA_HEADER_LEN + 4 * K
FRAME_LEN = 14 + 20 + INA_UDP_LEN
# ACK, PROBE (and loss queries) and CONTROL (and NACKs) end after the INA header, `k` = 0: they
# carry no elements, and at K = 128 a full frame cost 9 of them on the links that recovery
# loads (p4src/README.md, "Packet format").
SHORT_UDP_LEN = 8 + INA_HEADER_LEN
SHORT_FRAME_LEN = 14 + 20 + SHORT_UDP_LEN

DATA, RESULT, CONTROL, ACK, PROBE = 0x01, 0x02, 0x04, 0x08, 0x10
# `aux` of DATA and RESULT (p4src/README.md): bit 0 marks a retransmitted contribution, and a
# result that such a contribution completed (or one sent again): its round trip includes a
# recovery. The bits above it name the DATA's sender (its worker index, `contributor`); a
# RESULT carries the `aux` of the contribution that completed the fragment.
RETRANSMITTED = 1
CONTRIBUTOR_SHIFT = 1
FLAGS = frozenset((DATA, RESULT, CONTROL, ACK, PROBE))
WITH_ELEMENTS = frozenset((DATA, RESULT))  # the kinds that carry the K elements
# `count` of a CONTROL that answers a loss query with "held" (p4src/README.md, Flags): the
# asker's contribution is held where the query stopped, waiting for a peer's; a NACK has 0.
HELD = 0xFFFF
# `next_node` of an unsolicited NACK (p4src/README.md, "Loss query"): a loss query that found a
# partial sum also NACKs the members missing from it (a sum through one of its workers), whose
# own queries would come late.
NAMED = 0xFFFF
# Bit 7 of `flags` beside the kind (p4src/README.md, "Congestion mark"): a switch sets it on a
# DATA, ACK, PROBE or RESULT that found at least the port's threshold of frames queued ahead of
# it, aggregation ORs it over the contributions, the PS echoes it in the result. Its own bit, not
# the IPv4 ECN field: ECN CE is what tells plain OpenFlow switches a CONTROL packet.
CONGESTED = 0x80
KIND = 0x7F  # the bits of `flags` that name the kind
# Packets simple_switch's egress queue of a port holds (bmv2's default queue depth). A port
# marks from half of the queue it really has unless the controller is given a depth: bmv2 from
# half of this, the embedded target and a worker from half of their interface's queue
# discipline (`dataplane.qdisc`): a queue marks before it drops, and a deep one does not mark
# from the few frames that recovery traffic keeps waiting under random loss
# (docs/reliability/congestion.md).
BMV2_QUEUE_DEPTH = 64


OFF_IP = 14
OFF_UDP = 34
OFF_INA = 42
OFF_ELEMS = OFF_INA + INA_HEADER_LEN
ELEMS_END = OFF_ELEMS + 4 * K  # the K int32 elements are frame[OFF_ELEMS:ELEMS_END]
ECN_CE = 3


def kind_of(flags: int) -> int:
    """The kind of packet `flags` names (DATA, ...), the congestion mark left out."""
    return flags & KIND


def is_marked(frame: bytes | bytearray | memoryview) -> bool:
    """Whether an INA frame carries the congestion mark."""
    return bool(frame[OFF_INA + 3] & CONGESTED)


def with_mark(frame: bytes) -> bytes:
    """`frame` with the congestion mark set (it carries no checksum over the INA header)."""
    if frame[OFF_INA + 3] & CONGESTED:
        return frame
    return b"".join(
        (frame[: OFF_INA + 3], bytes((frame[OFF_INA + 3] | CONGESTED,)), frame[OFF_INA + 4 :])
    )


INA_HEADER = struct.Struct("!HBBHHIHHI")
_ETH_IP_UDP = struct.Struct("!6s6sHBBHHHBBH4s4sHHHH")
_UDP = struct.Struct("!HHHH")


def data_aux(contributor: int, retransmitted: bool) -> int:
    """The `aux` of a DATA: its sender, and whether this is a retransmission."""
    return contributor << CONTRIBUTOR_SHIFT | (RETRANSMITTED if retransmitted else 0)


def completed_by(aux: int) -> int:
    """The contributor a RESULT's `aux` names: the one whose DATA completed the fragment."""
    return aux >> CONTRIBUTOR_SHIFT


@dataclass(slots=True)
class InaHeader:
    """The 20-byte INA header; field meanings are in p4src/README.md."""

    job: int
    task: int
    flags: int
    flow_id: int
    next_node: int
    frag_id: int
    count: int = 1
    k: int = K
    aux: int = 0

    def pack(self) -> bytes:
        return INA_HEADER.pack(
            self.job,
            self.task,
            self.flags,
            self.flow_id,
            self.next_node,
            self.frag_id,
            self.count,
            self.k,
            self.aux,
        )

    @classmethod
    def unpack(cls, frame: bytes | memoryview) -> InaHeader:
        return cls(*INA_HEADER.unpack_from(frame, OFF_INA))


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Addresses of one end of an INA exchange."""

    mac: bytes
    ip: bytes


BROADCAST = Endpoint(b"\xff" * 6, b"\xff" * 4)


@dataclass(frozen=True)
class Task:
    """Which aggregation the traffic belongs to (the plan's job and task ids)."""

    job: int
    task: int


def mac_bytes(text: str) -> bytes:
    return bytes(int(part, 16) for part in text.split(":"))


def ip_bytes(text: str) -> bytes:
    return bytes(int(part) for part in text.split("."))


def ipv4_checksum(header: bytes | bytearray | memoryview) -> int:
    """RFC 1071 checksum of a 20-byte IPv4 header whose checksum field is zero."""
    total = sum(struct.unpack("!10H", header))
    total = (total & 0xFFFF) + (total >> 16)
    total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def udp_len(flags: int) -> int:
    """The UDP length of an INA packet of kind `flags` (the mark ignored)."""
    return INA_UDP_LEN if flags & KIND in WITH_ELEMENTS else SHORT_UDP_LEN


def build_frame(
    src: Endpoint, dst: Endpoint, header: InaHeader, elements: bytes = b"", ecn: int = 0
) -> bytes:
    """A complete Ethernet/IPv4/UDP/INA frame. A DATA or RESULT carries `elements`, K
    big-endian int32 (4K bytes), and `k` = K; every other kind ends after the header, `k` = 0,
    whatever `elements` says.

    The UDP source port is the flow id, so plain OpenFlow switches can forward per flow.
    """
    h = header
    length = udp_len(h.flags)
    k = h.k
    if length == SHORT_UDP_LEN:
        elements, k = b"", 0
    elif len(elements) != 4 * K:
        raise ValueError(f"a DATA or RESULT carries {4 * K} bytes of elements, not {len(elements)}")
    return b"".join(
        (
            _eth_ip(src, dst, ecn, length),
            _UDP.pack(h.flow_id, INA_UDP_PORT, length, 0),
            INA_HEADER.pack(
                h.job, h.task, h.flags, h.flow_id, h.next_node, h.frag_id, h.count, k, h.aux
            ),
            elements,
        )
    )


@lru_cache(maxsize=256)
def _eth_ip(src: Endpoint, dst: Endpoint, ecn: int, length: int = INA_UDP_LEN) -> bytes:
    """The Ethernet and IPv4 headers of a frame from `src` to `dst`, checksum included: the
    same for every frame between two ends, so an agent computes them once, not per packet."""
    eth_ip = bytearray(
        _ETH_IP_UDP.pack(
            dst.mac,
            src.mac,
            ETHERTYPE_IPV4,
            0x45,
            ecn,
            20 + length,
            0,
            0,
            64,
            PROTO_UDP,
            0,
            src.ip,
            dst.ip,
            0,
            INA_UDP_PORT,
            length,
            0,
        )
    )[:OFF_UDP]
    struct.pack_into("!H", eth_ip, OFF_IP + 10, ipv4_checksum(eth_ip[OFF_IP:OFF_UDP]))
    return bytes(eth_ip)


def set_ipv4_checksum(frame: bytearray) -> None:
    """Recompute the IPv4 header checksum in place (IHL 5)."""
    frame[OFF_IP + 10 : OFF_IP + 12] = b"\0\0"
    struct.pack_into("!H", frame, OFF_IP + 10, ipv4_checksum(frame[OFF_IP:OFF_UDP]))
