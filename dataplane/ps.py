"""The parameter server (`ina ps`): finishes the sums the switches leave and returns them.

PS: adds whatever arrives (raw fragments and partial aggregates), counting each
(flow id, fragment) once, finishes a fragment when the summed `count` reaches the number of
workers, and sends one RESULT per fragment that the switches multicast to the workers, under the
task's result flow id (published by the controller as `result_flow_id`). A PROBE for a
finished fragment makes it send the result again to the PROBE's sender alone (`repeat_to`: the
switches route it by address): a PROBE is one worker's rescue, its copy of the result lost
while its peers got theirs (p4src/README.md, PROBE), and one sent to every worker was
replicated by every switch of the tree. A DATA for a finished fragment (a copy) gets the
result to every worker, and so does a loss query (a PROBE with a round in `count`), once per
round, as a switch's kept RESULT answers: a result lost under congestion is lost to several
workers at once, and the peers of a contributor whose loss delayed the fragment ask in the
same round, their queries crossing the result on its way down. An ACK gets nothing: its
sender holds the result. A loss query for an unfinished fragment gets a NACK back to its
sender when the PS has not counted its flow, else HELD (the loss is another flow's: the asker
waits). It keeps no timer: recovery is the workers' (dataplane/recovery.py).

Congestion: a result carries the congestion mark (p4src/README.md, "Congestion mark") when any
sum the PS added into it came marked, and a result sent again carries the mark of the packet
that asked for it: the workers learn of the queues on the way in, where the sums go.

With model sharding each PS finishes only its own shard of the fragments (`offset`); with
partial aggregation it needs no change: it finishes each fragment by the `count` its packets
carry, whatever flows brought them.
"""

from __future__ import annotations

import select
import socket
import time
from dataclasses import dataclass, field
from typing import Protocol, TextIO

import numpy as np

from dataplane.frame import (
    ACK,
    BROADCAST,
    CONGESTED,
    CONTROL,
    DATA,
    ECN_CE,
    ELEMS_END,
    FLOW_IDS_PER_GENERATION,
    HELD,
    INA_HEADER,
    OFF_ELEMS,
    OFF_INA,
    OFF_IP,
    PROBE,
    RESULT,
    RETRANSMITTED,
    Endpoint,
    InaHeader,
    K,
    Task,
    build_frame,
    kind_of,
)
from dataplane.gradients import EPOCHS, frag_id, split_frag_id, wire_rows
from dataplane.pipeline import lane_sum
from dataplane.ports import GATHER, ina_frames, send
from dataplane.state import PlanSource


class _ResultSender(Protocol):
    me: Endpoint
    task: Task
    workers: int
    result_flow_id: int


def result_frame(
    ps: _ResultSender,
    fragment_id: int,
    values: np.ndarray | bytes,
    aux: int,
    mark: int = 0,
    to: Endpoint = BROADCAST,
) -> bytes:
    """The RESULT of one fragment, to every worker (broadcast; the switches multicast it down
    the tree) or to the one worker `to` (`repeat_to`), with the PS's current result flow id:
    `aux` as the contribution that completed it (RETRANSMITTED for one sent again) and `mark`
    (CONGESTED or 0) echoing the mark. `values`: the K sums, or already as the K big-endian
    int32 of the wire."""
    header = InaHeader(
        ps.task.job,
        ps.task.task,
        RESULT | mark,
        ps.result_flow_id,
        0,
        fragment_id,
        ps.workers,
        aux=aux,
    )
    elements = values if isinstance(values, bytes) else values.astype(">i4").tobytes()
    return build_frame(ps.me, to, header, elements)


def repeat_to(kind: int, count: int, frame: bytes) -> Endpoint | None:
    """Where the result of a finished fragment goes again for `frame` (a DATA, ACK or PROBE
    of that fragment, `kind` and `count` from its header): a PROBE's to its sender alone,
    addressed as a named NACK is (IPv4 the sender's, Ethernet broadcast; the switches route
    a RESULT to a host address as a CONTROL, p4src/README.md step 3); a copy's and a loss
    query's to every worker (copies answered to their sender alone made the congested Fig. 1
    of tests/dataplane/test_dp_lossy.py take 10.0 virtual s per iteration, against 8.7);
    none for an ACK, whose sender holds the result."""
    if kind == ACK:
        return None
    if kind == PROBE and not count:
        return Endpoint(BROADCAST.mac, bytes(frame[OFF_IP + 12 : OFF_IP + 16]))
    return BROADCAST


@dataclass
class ParameterServer:
    """Finishes the aggregation of `fragments` fragments from `workers` workers.

    Per frame it works on plain lists and integers, not numpy: a fragment's K sums are one
    integer (`dataplane.pipeline.lane_sum`, as a switch's slot holds them) and its result the
    K big-endian int32 of the wire; indexing numpy scalars was most of `handle`'s time."""

    sock: socket.socket
    me: Endpoint
    task: Task
    workers: int
    fragments: int
    result_flow_id: int
    plan: PlanSource | None = None
    # per flow-id generation: sums (K lanes packed in one integer) and contribution counts of
    # every fragment
    sums: dict[int, list[int]] = field(default_factory=dict)
    counts: dict[int, list[int]] = field(default_factory=dict)
    seen: set[tuple[int, int]] = field(default_factory=set)
    finished: int = 0
    results_sent: int = 0
    # Exactly-once evidence: DATA already counted or for a finished fragment (a copy, or a
    # retransmission whose original also arrived), ignored; fragments finished with a summed
    # count other than `workers` (a contribution counted twice or missed: must stay 0).
    duplicates_ignored: int = 0
    miscounted: int = 0
    nacks_sent: int = 0  # answers to loss queries: the asker's contribution is missing here
    held_sent: int = 0  # answers to loss queries: the asker's flow is counted, a peer's is not
    queries_quiet: int = 0  # loss queries of a finished fragment whose round was answered
    epoch: int = 0  # the iteration; fragments of other iterations are ignored
    offset: int = 0  # wire index of this PS's first fragment (its shard's place in the model)

    def __post_init__(self) -> None:
        self.epoch %= EPOCHS  # as it reads back from a fragment id
        self.finished_at = [False] * self.fragments  # per fragment: finished
        self.marked = [False] * self.fragments  # a sum of it came marked
        self.payloads = [bytes(4 * K)] * self.fragments  # finished sums, as on the wire
        self.answered = [0] * self.fragments  # per finished fragment: last query round answered

    @property
    def done(self) -> np.ndarray:
        """Which fragments are finished."""
        return np.array(self.finished_at, dtype=bool)

    @property
    def result(self) -> np.ndarray:
        """The finished sums, one row of K int32 per fragment (zeros where unfinished)."""
        return wire_rows(self.payloads)

    def _generation(self, flow: int) -> tuple[list[int], list[int]]:
        gen = flow // FLOW_IDS_PER_GENERATION
        if gen not in self.sums:
            self.sums[gen] = [0] * self.fragments
            self.counts[gen] = [0] * self.fragments
        return self.sums[gen], self.counts[gen]

    def _send_result(
        self, frag: int, aux: int = RETRANSMITTED, mark: int = 0, to: Endpoint = BROADCAST
    ) -> None:
        """`aux`: that of the contribution that completed the fragment; a repeated result is
        marked RETRANSMITTED (no worker takes its round trip as a sample, dataplane/rto.py).
        `mark`: CONGESTED to echo the congestion mark. `to`: every worker, or one."""
        fid = frag_id(self.epoch, self.offset + frag)
        send(self.sock, result_frame(self, fid, self.payloads[frag], aux, mark, to))
        self.results_sent += 1

    def handle(self, frame: bytes) -> None:
        job, task, flags, flow, _, raw, count, _, aux = INA_HEADER.unpack_from(frame, OFF_INA)
        mark, flags = flags & CONGESTED, kind_of(flags)
        epoch, wire = split_frag_id(raw)
        frag = wire - self.offset
        if (
            (job, task) != (self.task.job, self.task.task)
            or epoch != self.epoch
            or not 0 <= frag < self.fragments
        ):
            return
        done = self.finished_at[frag]
        if flags == PROBE and count:  # a loss query
            if not done:
                self._nack(frame, HELD if (flow, frag) in self.seen else 0)
                return
            if count <= self.answered[frag]:
                self.queries_quiet += 1
                return
            self.answered[frag] = count
        if flags in (ACK, PROBE) or (flags == DATA and done):
            self.duplicates_ignored += flags == DATA
            if done and (to := repeat_to(flags, count, frame)) is not None:
                self._send_result(frag, mark=mark, to=to)
            return
        if flags != DATA:
            return
        if (flow, frag) in self.seen:
            self.duplicates_ignored += 1
            return
        self.seen.add((flow, frag))
        if mark:
            self.marked[frag] = True
        sums, counts = self._generation(flow)
        total = sums[frag] = lane_sum(sums[frag], int.from_bytes(frame[OFF_ELEMS:ELEMS_END], "big"))
        total_count = counts[frag] = counts[frag] + count
        if total_count >= self.workers:
            self.miscounted += total_count != self.workers
            self.finished_at[frag] = True
            self.payloads[frag] = total.to_bytes(4 * K, "big")
            self.finished += 1
            # Aggregation forwards the `aux` of the contribution that completed a slot, so this
            # is the last contribution to arrive along the fragment's slowest path.
            self._send_result(frag, aux, CONGESTED if self.marked[frag] else 0)

    def _nack(self, query: bytes, count: int = 0) -> None:
        """Answer a loss query to its sender as a switch does (p4src/README.md, PROBE): a
        CONTROL with `count` 0 (NACK) or HELD naming the fragment, ECN CE as every CONTROL."""
        job, task, _, flow, node, raw, *_ = INA_HEADER.unpack_from(query, OFF_INA)
        asker = Endpoint(bytes(query[6:12]), bytes(query[OFF_IP + 12 : OFF_IP + 16]))
        header = InaHeader(job, task, CONTROL, flow, node, raw, count, aux=raw)
        send(self.sock, build_frame(self.me, asker, header, ecn=ECN_CE))
        self.nacks_sent += not count
        self.held_sent += count == HELD

    def flows_per_fragment(self) -> float:
        """Distinct (flow, fragment) contributions that reached the PS per fragment: how many
        flows the network delivers into the PS, retransmissions, ACKs and PROBEs left out."""
        return round(len(self.seen) / max(1, self.fragments), 3)

    def waiting_for(self) -> dict[str, object]:
        """Unfinished fragments and, per flow-id generation, the counts summed so far."""
        missing = np.flatnonzero(~self.done)[:20].tolist()
        return {
            "unfinished": int((~self.done).sum()),
            "first_unfinished": missing,
            "counts": {gen: [int(c[f]) for f in missing] for gen, c in self.counts.items()},
            "result_flow_id": self.result_flow_id,
        }

    def run(self, linger: float, stop: TextIO | None = None) -> None:
        """Serve until every fragment is finished and `linger` seconds pass without traffic;
        with `stop`, until a line (or end of file) arrives there instead: a launcher that knows
        every worker has its sums says so, so a worker still waiting for a lost result is never
        left without its PS, however long its retransmission timeout."""
        quiet_since = time.monotonic()
        watched: list[socket.socket | TextIO] = [self.sock, *([stop] if stop else [])]
        while stop or self.finished < self.fragments or time.monotonic() - quiet_since < linger:
            row = self.plan.poll(time.monotonic()) if self.plan else None
            if row is not None:
                self.result_flow_id = row["result_flow_id"]
            ready = select.select(watched, [], [], 0.1)[0]
            if stop is not None and stop in ready:
                stop.readline()
                return
            if self.sock in ready:
                time.sleep(GATHER)  # one wake-up for the frames of GATHER seconds
                for frame in ina_frames(self.sock):
                    self.handle(frame)
                quiet_since = time.monotonic()
