"""The INA pipeline of p4src/README.md executed on raw frames.

`Pipeline.process(port, frame)` returns the frames to send and their ports. The lookup state is
plain dictionaries that `dataplane.entities` fills from P4Runtime writes; the step numbers in
comments refer to the README, which is the specification this mirrors line for line.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

from dataplane.frame import (
    ACK,
    BROADCAST,
    CONGESTED,
    CONTROL,
    CPU_PORT,
    DATA,
    ECN_CE,
    ELEMS_END,
    ETHERTYPE_IPV4,
    ETHERTYPE_LLDP,
    FLAGS,
    HELD,
    INA_HEADER,
    INA_UDP_LEN,
    INA_UDP_PORT,
    KIND,
    MAX_JOBS,
    MAX_PIPES,
    NAMED,
    OFF_ELEMS,
    OFF_INA,
    OFF_IP,
    OFF_UDP,
    PORTS,
    PROBE,
    PROTO_UDP,
    RESULT,
    RETRANSMITTED,
    SHORT_UDP_LEN,
    SLOTS_PER_PIPE,
    STALE_AFTER_SECONDS,
    K,
    ipv4_checksum,
    set_ipv4_checksum,
    udp_len,
    with_mark,
)

# Counter name -> cells: the event counters are indexed by pipe, `forged` by the job a packet
# claims (README "What the controller installs"), `port_packets` (frames received per
# front-panel port, the link monitor's evidence of a live link) by port.
COUNTERS = {
    **dict.fromkeys(
        ("aggregations_completed", "collisions", "duplicates", "malformed", "unknown_job"),
        MAX_PIPES,
    ),
    "forged": MAX_JOBS,
    "port_packets": PORTS,
}
# A `mark_threshold` entry of action `mark_from_queue`: the port marks from half of its queue.
FROM_QUEUE = -1
# From offset 0: EtherType, IPv4 version/IHL and protocol, UDP destination port and length,
# INA job, flags and k.
_PARSED = struct.Struct("!12xHB8xB12xHH2xHxB10xH")
_PARSED_END = _PARSED.size
# The K elements as one 4K-byte big-endian integer: lane-wise int32 addition (wrapping, as a
# bit<32> register does) is two masked additions on it, far cheaper than numpy on K elements.
_LANE_HIGH = int.from_bytes(b"\x80\0\0\0" * K, "big")
_LANE_LOW = (1 << 32 * K) - 1 ^ _LANE_HIGH
_UDP_INA = struct.Struct("!HHHHHBBHHIHHI")  # UDP header + INA header: what `_emit` rewrites
_INA_PORT = INA_UDP_PORT.to_bytes(2, "big")
_FULL_IP_LEN = (20 + INA_UDP_LEN).to_bytes(2, "big")


@dataclass(frozen=True, slots=True)
class Aggregate:
    """Parameters of the `aggregate` action (README step 4.2)."""

    tag: int
    member: int
    full: int
    out_flow: int
    next_node: int
    # the multicast group that reaches the point's members, one replica per member (the
    # port its flow arrives on, instance its member bit; `Forwarding.named_host` the address
    # of its worker, or of one worker in it for a sum); 0: the point names no one (`_name`)
    name_group: int = 0


@dataclass
class Forwarding:
    """Everything the controller installs, in the shape the pipeline looks it up."""

    port_pipe: dict[int, int] = field(default_factory=dict)
    job_slots: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    aggregate: dict[tuple[int, int, int, int], Aggregate] = field(default_factory=dict)
    forward: dict[tuple[int, int, int], int] = field(default_factory=dict)
    host_ports: set[int] = field(default_factory=set)
    host_jobs: set[tuple[int, int]] = field(default_factory=set)  # (port, job) bound
    result_group: dict[tuple[int, int], int] = field(default_factory=dict)
    # (prefix length, prefix value) -> port; searched longest prefix first.
    lpm: dict[tuple[int, int], int] = field(default_factory=dict)
    mcast: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # (port, instance)
    clone: dict[int, list[int]] = field(default_factory=dict)
    # Default entries of the two tables whose action runs on a miss (the others act only on
    # a hit): `port_pipeline`'s pipe and `ina_aggregate`'s parameters (None: NoAction).
    default_pipe: int = 0
    default_aggregate: Aggregate | None = None
    # `mark_threshold`: egress port -> frames queued ahead of a packet from which it is marked
    # (FROM_QUEUE: half of the frames the port's own queue holds, which the target knows)
    mark_depth: dict[int, int] = field(default_factory=dict)
    # `named_host`: (name group, replica instance) -> the IPv4 address of that worker member
    named_host: dict[tuple[int, int], int] = field(default_factory=dict)


class Slots:
    """Per (pipe, slot) aggregation memory; a cell is free when its bitmap is 0."""

    def __init__(self) -> None:
        cells = MAX_PIPES * SLOTS_PER_PIPE
        self.frag = [0] * cells
        self.tag = [0] * cells
        self.bitmap = [0] * cells
        self.count = [0] * cells
        self.touched = [0.0] * cells  # monotonic seconds of the last contribution or duplicate
        self.values = [0] * cells  # the K int32 partial sums as one integer (see _LANE_HIGH)
        self.mark = [0] * cells  # CONGESTED if any contribution summed here carried the mark
        # the highest loss-query round a kept RESULT (or, without `pass_queries`, the completed
        # sum) answered (README 4.2)
        self.repaired = [0] * cells
        # the highest loss-query round whose missing members this partial sum NACKed
        # (`Pipeline._name`; 0: none since it opened)
        self.named = [0] * cells
        # `Pipeline.keep_results`: the PS's RESULT that passed, per slot index (not cell: it
        # may enter by another pipe than its task's), as ina.p4's `result_*` registers; flow 0:
        # none kept. A contribution taken at the index, in any pipe, clears it.
        self.kept_flow = [0] * SLOTS_PER_PIPE
        self.kept_frag = [0] * SLOTS_PER_PIPE
        self.kept_task = [0] * SLOTS_PER_PIPE
        self.kept_count = [0] * SLOTS_PER_PIPE
        self.kept_mark = [0] * SLOTS_PER_PIPE
        self.kept_values = [0] * SLOTS_PER_PIPE


def slot_of(frag_id: int, base: int, count: int) -> int:
    """README 4.1: base + frag_id mod count. Ids closer than `count` never share a slot, so a
    window of consecutive fragments smaller than the region never collides with itself, however
    far its senders drift apart (a hash of the id made neighbours collide)."""
    return base + frag_id % count


def lane_sum(a: int, b: int) -> int:
    """Two K-element int32 vectors packed as integers (`_LANE_HIGH`), added lane by lane mod
    2^32: the low 31 bits of each lane add without reaching the next lane, the top bit is the
    XOR of both top bits and that carry."""
    return ((a & _LANE_LOW) + (b & _LANE_LOW)) ^ ((a ^ b) & _LANE_HIGH)


class Pipeline:
    """One switch's data plane: forwarding state, slot memory and event counters."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        keep_results: bool = True,
        pass_queries: bool = True,
    ) -> None:
        # Seconds for the slots' `time` (README 4.2); a simulation passes its virtual clock.
        self.clock = clock
        # A completed slot keeps the PS's RESULT that passes it and answers repairs with it
        # (`_keep_result`, `_answer_with_result`; README steps 3 and 4.2, as ina.p4 does).
        # Off only to measure the pipeline without it.
        self.keep_results = keep_results
        # A loss query passes a completed slot on towards the PS (as a PROBE, no sum) and a
        # partial sum holding the asker's contribution answers it HELD (`_query`; README
        # 4.2, as ina.p4 does): only the PS knows whether the sums above it arrived, and on
        # the 4-leaf/4-spine the sums completed slots sent on for a peer's loss were most of
        # the PS's intake. Off only to measure the pipeline without it (a completed slot
        # then sends its sum on once per query round, a held one stays silent).
        self.pass_queries = pass_queries
        self.results_answered = 0  # repairs answered with a kept RESULT
        self.reset()

    def reset(self) -> None:
        """A new pipeline config: forwarding state, slots and counters start empty."""
        self.fwd = Forwarding()
        self.slots = Slots()
        self.counters = {name: [0] * cells for name, cells in COUNTERS.items()}
        self._lpm_order: list[tuple[int, int]] = []

    def adopt(self, other: Pipeline) -> None:
        """Forward from now on with the state `other` was programmed with (a committed
        config: its forwarding state, fresh slots and counters)."""
        self.fwd, self.slots, self.counters = other.fwd, other.slots, other.counters
        self._lpm_order = other._lpm_order

    def lpm_changed(self) -> None:
        self._lpm_order = sorted(self.fwd.lpm, reverse=True)

    def process(self, port: int, frame: bytes) -> list[tuple[int, bytes]]:
        """Frames to send for `frame` arriving on `port`; port CPU_PORT means a packet-in."""
        if port < PORTS:
            self.counters["port_packets"][port] += 1
        length = len(frame)
        # Every field the parser checks, in one call; a frame cut short reads as zeros past
        # its end, and the length checks below reject it where the parser would.
        ethertype, version, proto, dport, udp_length, job, flags, k = _PARSED.unpack_from(
            frame if length >= _PARSED_END else frame.ljust(_PARSED_END, b"\0")
        )
        if ethertype == ETHERTYPE_LLDP:
            return [(CPU_PORT, frame)]  # step 0: link-discovery probe to the controller
        fwd = self.fwd
        pipe = fwd.port_pipe.get(port, fwd.default_pipe)  # step 1
        if length < OFF_UDP or ethertype != ETHERTYPE_IPV4:
            return []  # step 6 (or an IPv4 header cut short: parser error, not INA)
        if version != 0x45 or proto != PROTO_UDP:
            return self._ipv4(frame)
        if length < OFF_INA:
            return []
        if dport != INA_UDP_PORT:
            return self._ipv4(frame)
        mark, flags = flags & CONGESTED, flags & KIND
        elements = udp_length == INA_UDP_LEN
        if (
            flags not in FLAGS
            or udp_length != udp_len(flags)
            or k != (K if elements else 0)
            or length < (ELEMS_END if elements else OFF_ELEMS)
        ):
            self._count("malformed", pipe)  # step 2
            return []
        if port in fwd.host_ports and (port, job) not in fwd.host_jobs:
            self.counters["forged"][job if job < MAX_JOBS else 0] += 1  # step 2b
            return []
        if flags == RESULT:
            return self._result(pipe, frame)
        if flags == CONTROL:
            return self._ipv4(frame)
        return self._data_or_ack(port, pipe, frame, flags, mark)

    @staticmethod
    def packet_out(port: int, payload: bytes) -> list[tuple[int, bytes]]:
        """Step 0: a controller's frame leaves out of `port` as it is (IPv4 checksum redone)."""
        if len(payload) >= OFF_UDP and payload[12:14] == b"\x08\x00":
            payload = _with_checksum(payload)
        return [(port, payload)]

    def _count(self, name: str, pipe: int) -> None:
        if pipe < MAX_PIPES:
            self.counters[name][pipe] += 1

    def _result(self, pipe: int, frame: bytes) -> list[tuple[int, bytes]]:
        """Step 3: down the task's result group, or to one worker's address (the PS's answer
        to its PROBE) by step 5; kept either way where the task has a group."""
        job, task = struct.unpack_from("!HB", frame, OFF_INA)
        group = self.fwd.result_group.get((job, task))
        one = frame[OFF_IP + 16 : OFF_IP + 20] != BROADCAST.ip
        if group is None and not one:
            self._count("unknown_job", pipe)
            return []
        if group is not None and self.keep_results:
            self._keep_result(frame)
        if one or group is None:
            return self._ipv4(frame)
        out = _with_checksum(frame)
        return [(p, out) for p, _ in self.fwd.mcast.get(group, ())]

    def _keep_result(self, frame: bytes) -> None:
        """The PS's RESULT passes: its slot index keeps it (README step 3). The PS has every
        sum once it sends a result, so a completed slot's own sum is no longer needed."""
        job, task, flags, flow, _, frag, count, _, _ = INA_HEADER.unpack_from(frame, OFF_INA)
        region = self.fwd.job_slots.get((job, flow >> 14))
        if region is None:
            return
        s, index = self.slots, slot_of(frag, *region)
        s.kept_flow[index], s.kept_frag[index], s.kept_task[index] = flow, frag, task
        s.kept_count[index], s.kept_mark[index] = count, flags & CONGESTED
        s.kept_values[index] = int.from_bytes(frame[OFF_ELEMS:ELEMS_END], "big")

    def _answer_with_result(
        self, act: Aggregate, cell: int, frame: bytes, flags: int, count: int, mark: int
    ) -> list[tuple[int, bytes]] | None:
        """A copy of a counted contribution, or a loss query's repair, at a slot that kept
        the PS's RESULT: that RESULT again, down this switch's result group as the PS's was
        (aux RETRANSMITTED, no round trip sample), instead of the sum towards the PS. One
        repair per query round, as for the sum. None: the slot kept no result, go on as
        before."""
        s = self.slots
        job, task, _, _, _, frag, _, _, _ = INA_HEADER.unpack_from(frame, OFF_INA)
        group = self.fwd.result_group.get((job, task))
        index = cell % SLOTS_PER_PIPE
        if (
            group is None
            or not s.kept_flow[index]
            or s.kept_frag[index] != frag
            or s.kept_task[index] != task
            or s.bitmap[cell]
            or s.tag[cell] != act.tag
            or s.frag[cell] != frag
            or self.clock() - s.touched[cell] > STALE_AFTER_SECONDS
            or (flags == PROBE and not count)
        ):
            return None
        if flags == PROBE:
            if count <= s.repaired[cell]:
                return []
            s.repaired[cell] = count
        else:
            self._count("duplicates", cell // SLOTS_PER_PIPE)
        self.results_answered += 1
        flow = s.kept_flow[index]
        out = bytearray(_full_headers(frame)) + s.kept_values[index].to_bytes(4 * K, "big")
        # From the PS (the asker's destination) to every worker (broadcast), as the PS's.
        out[0:6], out[6:12] = b"\xff" * 6, frame[0:6]
        out[OFF_IP + 12 : OFF_IP + 16] = frame[OFF_IP + 16 : OFF_IP + 20]
        out[OFF_IP + 16 : OFF_IP + 20] = BROADCAST.ip
        _UDP_INA.pack_into(
            out,
            OFF_UDP,
            flow,
            INA_UDP_PORT,
            INA_UDP_LEN,
            0,
            job,
            task,
            RESULT | s.kept_mark[index] | mark,
            flow,
            0,
            frag,
            s.kept_count[index] & 0xFFFF,
            K,
            RETRANSMITTED,
        )
        result = _with_checksum(bytes(out))
        return [(p, result) for p, _ in self.fwd.mcast.get(group, ())]

    def marks(self, port: int) -> bool:
        """Whether packets leaving `port` are marked by its queue (a `mark_threshold` entry):
        only then need a target measure that queue."""
        return port in self.fwd.mark_depth

    def mark(
        self, port: int, frame: bytes, queued: int, own: Callable[[], int | None] = lambda: None
    ) -> bytes:
        """Egress (README "Congestion mark"): `frame` leaving `port` with `queued` frames
        ahead of it in the port's queue, marked if that is at least the port's threshold (for
        `mark_from_queue`, what `own` says: half the port's queue, None when it has none). Only
        INA packets but CONTROL are marked (a CONTROL already is the collision's signal)."""
        depth = self.fwd.mark_depth.get(port)
        if (
            depth is None
            or len(frame) < OFF_ELEMS
            or frame[OFF_UDP + 2 : OFF_UDP + 4] != _INA_PORT
            or frame[OFF_INA + 3] & KIND == CONTROL
        ):
            return frame
        if depth == FROM_QUEUE:
            depth = own()
        return frame if depth is None or queued < depth else with_mark(frame)

    def _data_or_ack(
        self, port: int, pipe: int, frame: bytes, flags: int, mark: int
    ) -> list[tuple[int, bytes]]:
        job, task, _, flow, _, frag, count, _, _ = INA_HEADER.unpack_from(frame, OFF_INA)
        region = self.fwd.job_slots.get((job, flow >> 14))  # step 4.1: (job, generation)
        action = (
            self.fwd.aggregate.get((job, task, pipe, flow), self.fwd.default_aggregate)
            if region
            else None
        )
        if action is not None and region is not None:
            cell = pipe * SLOTS_PER_PIPE + slot_of(frag, *region)
            if (
                self.keep_results
                and flags in (DATA, PROBE)
                and self.slots.kept_flow[cell % SLOTS_PER_PIPE]
            ):
                answer = self._answer_with_result(action, cell, frame, flags, count, mark)
                if answer is not None:
                    return answer
            result = self._aggregate(action, cell, frame, flags, frag, count, mark)
            if result is None:
                return []
            if result == "collision":
                self._count("collisions", pipe)
                return self._control(port, frame, self.slots.frag[cell])
            if result == "duplicate":
                self._count("duplicates", pipe)
                return []
            if result in ("nack", "held"):
                answer = self._control(port, frame, frag, count=0 if result == "nack" else HELD)
                return answer + self._name(action, cell, frame, frag, count)
            assert isinstance(result, bytes)
            frame = result
            flow = action.out_flow
        out_port = self.fwd.forward.get((job, task, flow))  # step 4.3
        if out_port is None:
            self._count("unknown_job", pipe)
            return []
        return [(out_port, _with_checksum(frame))]

    def _aggregate(
        self, act: Aggregate, cell: int, frame: bytes, flags: int, frag: int, count: int, mark: int
    ) -> bytes | str | None:
        """Step 4.2. Returns the frame to forward, "collision", "duplicate", or None (consumed).
        A sum leaves with the congestion mark if any of its contributions carried it."""
        s = self.slots
        now = self.clock()
        stale = now - s.touched[cell] > STALE_AFTER_SECONDS
        same = s.frag[cell] == frag and s.tag[cell] == act.tag
        if flags == PROBE and count:
            return self._query(act, cell, frame, frag, count, mark, stale)
        if flags == DATA and same and s.bitmap[cell] == 0 and not stale:
            # Completed here less than STALE_AFTER ago: a copy of a counted contribution (a
            # resend whose original made it) gets the sum again; it must not open a new
            # partial sum that nobody completes (README 4.2, "completed").
            self._count("duplicates", cell // SLOTS_PER_PIPE)
            return self._emit(
                frame, act, s.count[cell] & 0xFFFF, s.values[cell], s.mark[cell] | mark
            )
        free = s.bitmap[cell] == 0 or stale
        bitmap = 0 if free else s.bitmap[cell]
        mine = not free and same
        if flags in (ACK, PROBE):
            if flags == ACK and mine:  # a PROBE leaves the slot alone
                s.bitmap[cell] = 0
                s.tag[cell] = 0  # a freed partial sum is not a completed one
            return self._emit(frame, act, None, None)
        if not free and not mine:
            return "collision"
        s.touched[cell] = now  # a contribution or a duplicate: the partial sum is alive
        if bitmap & act.member:
            return "duplicate"
        elems = int.from_bytes(frame[OFF_ELEMS:ELEMS_END], "big")
        s.kept_flow[cell % SLOTS_PER_PIPE] = 0  # a contribution taken: no kept result here
        if free:
            s.frag[cell], s.tag[cell], s.count[cell] = frag, act.tag, count
            s.values[cell], s.mark[cell], s.repaired[cell] = elems, mark, 0
            s.named[cell] = 0
        else:
            s.count[cell] += count
            s.values[cell] = lane_sum(s.values[cell], elems)
            s.mark[cell] |= mark
        bitmap |= act.member
        if bitmap != act.full:
            s.bitmap[cell] = bitmap
            return None
        s.bitmap[cell] = 0
        self._count("aggregations_completed", pipe=cell // SLOTS_PER_PIPE)
        return self._emit(frame, act, s.count[cell] & 0xFFFF, s.values[cell], s.mark[cell])

    def _query(
        self,
        act: Aggregate,
        cell: int,
        frame: bytes,
        frag: int,
        rounds: int,
        mark: int,
        stale: bool,
    ) -> bytes | str | None:
        """A loss query (a PROBE with its round in `count`, README 4.2): whose loss is it?
        Completed here: the loss is further on, the query goes on as a PROBE does, for the
        next aggregation point or the PS to answer (a slot that kept the PS's RESULT answered
        before, `_answer_with_result`); a slot another fragment took since: this one left,
        the query goes on the same way; a partial sum holding the asker's bit: the loss is a
        peer's, "held", answered towards the asker, who waits; otherwise (a partial sum
        without the asker's bit, a free or stale slot) the asker's contribution is missing
        here: "nack", answered towards it. Without `pass_queries` a completed slot sends its
        stored sum on as a DATA once per round instead, and a held one stays silent."""
        s = self.slots
        if (s.bitmap[cell] == 0 and s.tag[cell] == 0) or stale:
            return "nack"
        if s.frag[cell] != frag or s.tag[cell] != act.tag:
            return self._emit(frame, act, None, None)
        if s.bitmap[cell] == 0 and self.pass_queries:
            return self._emit(frame, act, None, None)
        if s.bitmap[cell] == 0:
            if rounds <= s.repaired[cell]:
                return None
            s.repaired[cell] = rounds
            return self._emit(
                frame, act, s.count[cell] & 0xFFFF, s.values[cell], s.mark[cell] | mark, DATA
            )
        if s.bitmap[cell] & act.member:
            return "held" if self.pass_queries else None
        return "nack"

    def _name(
        self, act: Aggregate, cell: int, frame: bytes, frag: int, rounds: int
    ) -> list[tuple[int, bytes]]:
        """A loss query answered at a partial sum of its fragment also NACKs the members
        missing from it but the asker (a sum through one of its workers, `named_host`),
        once per slot and query round: down the point's `name_group`, whose replicas of
        members not missing egress drops (README 4.2, "Loss query")."""
        s = self.slots
        if (
            not act.name_group
            or s.bitmap[cell] == 0
            or s.frag[cell] != frag
            or s.tag[cell] != act.tag
            or self.clock() - s.touched[cell] > STALE_AFTER_SECONDS
            or rounds <= s.named[cell]
        ):
            return []
        s.named[cell] = rounds
        missing = act.full & ~s.bitmap[cell] & ~act.member
        sent = []
        for port, rid in self.fwd.mcast.get(act.name_group, ()):
            if not missing >> rid & 1:
                continue
            out = bytearray(frame[:OFF_ELEMS])
            # From the PS (the asker's destination) to the member's host (`named_host`, else
            # broadcast), Ethernet broadcast, as a RESULT.
            out[0:6], out[6:12] = b"\xff" * 6, frame[0:6]
            out[OFF_IP + 1] = (frame[OFF_IP + 1] & 0xFC) | ECN_CE
            out[OFF_IP + 12 : OFF_IP + 16] = frame[OFF_IP + 16 : OFF_IP + 20]
            host = self.fwd.named_host.get((act.name_group, rid), 0xFFFFFFFF)
            struct.pack_into("!I", out, OFF_IP + 16, host)
            out[OFF_UDP + 6 : OFF_UDP + 8] = b"\0\0"
            out[OFF_INA + 3] = CONTROL
            struct.pack_into("!HIH", out, OFF_INA + 6, NAMED, frag, 0)
            struct.pack_into("!I", out, OFF_INA + 16, frag)
            set_ipv4_checksum(out)
            sent.append((port, bytes(out)))
        return sent

    @staticmethod
    def _emit(
        frame: bytes,
        act: Aggregate,
        count: int | None,
        values: int | None,
        mark: int | None = None,
        kind: int | None = None,
    ) -> bytes:
        """The frame with flow id (also the UDP source port), next node, no UDP checksum and,
        on completion, the count, the sums and the sum's congestion mark: UDP and INA headers
        packed in one call. With `values` a short frame (a loss query's repair) grows the K
        elements (its IPv4 checksum is redone on the way out)."""
        (_, dport, length, _, job, task, flags, _, _, frag, old_count, k, aux) = (
            _UDP_INA.unpack_from(frame, OFF_UDP)
        )
        if values is not None and length == SHORT_UDP_LEN:
            frame, length, k = _full_headers(frame), INA_UDP_LEN, K
        head = _UDP_INA.pack(
            act.out_flow,
            dport,
            length,
            0,
            job,
            task,
            flags if mark is None else (kind or flags & KIND) | mark,
            act.out_flow,
            act.next_node,
            frag,
            old_count if count is None else count,
            k,
            aux,
        )
        elements = frame[OFF_ELEMS:ELEMS_END] if values is None else values.to_bytes(4 * K, "big")
        return b"".join((frame[:OFF_UDP], head, elements, frame[ELEMS_END:]))

    def _control(
        self, port: int, frame: bytes, occupant: int, count: int | None = None
    ) -> list[tuple[int, bytes]]:
        """The I2E clone of a collision, rewritten as egress does (README Flags: CONTROL, a
        short frame); with `count` 0, the NACK of a loss query (occupant: the queried
        fragment)."""
        ports = self.fwd.clone.get(port)
        if not ports:
            return []
        out = bytearray(frame[:OFF_ELEMS])
        struct.pack_into("!H", out, OFF_IP + 2, 20 + SHORT_UDP_LEN)
        struct.pack_into("!H", out, OFF_UDP + 4, SHORT_UDP_LEN)
        struct.pack_into("!H", out, OFF_INA + 14, 0)
        out[0:6], out[6:12] = frame[6:12], frame[0:6]
        out[OFF_IP + 1] = (frame[OFF_IP + 1] & 0xFC) | ECN_CE
        out[OFF_IP + 12 : OFF_IP + 16] = frame[OFF_IP + 16 : OFF_IP + 20]
        out[OFF_IP + 16 : OFF_IP + 20] = frame[OFF_IP + 12 : OFF_IP + 16]
        out[OFF_UDP + 6 : OFF_UDP + 8] = b"\0\0"
        out[OFF_INA + 3] = CONTROL
        struct.pack_into("!I", out, OFF_INA + 16, occupant)
        if count is not None:
            struct.pack_into("!H", out, OFF_INA + 12, count)
        set_ipv4_checksum(out)
        data = bytes(out)
        return [(p, data) for p in ports]

    def _ipv4(self, frame: bytes) -> list[tuple[int, bytes]]:
        """Step 5: longest-prefix match on the destination address."""
        dst = int.from_bytes(frame[OFF_IP + 16 : OFF_IP + 20], "big")
        for length, value in self._lpm_order:
            if (dst ^ value) >> (32 - length) == 0:
                return [(self.fwd.lpm[(length, value)], _with_checksum(frame))]
        return []


def _full_headers(frame: bytes) -> bytes:
    """`frame`'s headers up to its elements, with the IPv4 total length of a frame that
    carries them: a short query turned into a sum or a result. Its caller appends the
    elements and packs the UDP and INA headers (UDP length, `k`); egress redoes the
    checksum."""
    return b"".join((frame[: OFF_IP + 2], _FULL_IP_LEN, frame[OFF_IP + 4 : OFF_ELEMS]))


def _with_checksum(frame: bytes) -> bytes:
    """Egress recomputes the IPv4 checksum of every IPv4 packet it sends (IHL 5 only)."""
    if frame[OFF_IP] != 0x45:
        return frame
    header = frame[OFF_IP:OFF_UDP]
    checked = _checked_ipv4(header)
    return frame if checked == header else frame[:OFF_IP] + checked + frame[OFF_UDP:]


@lru_cache(maxsize=4096)
def _checked_ipv4(header: bytes) -> bytes:
    """A 20-byte IPv4 header with its checksum recomputed. Cached: a flow's headers repeat
    (same addresses, ECN, id 0), so the sum is computed once per flow, not per packet."""
    out = bytearray(header)
    out[10:12] = b"\0\0"
    struct.pack_into("!H", out, 10, ipv4_checksum(out))
    return bytes(out)
