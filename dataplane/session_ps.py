"""A PS for a whole training run (`ina ps --session`, `allreduce.serve_ps`): every step, any
size, until stopped.

`ParameterServer` finishes one iteration of a size known in advance. A training process sends
one all-reduce per step, of sizes the PS does not know (the rounds of dataplane/allreduce.py),
so this one keeps its state per fragment id as fragments arrive: per epoch (the step), per
fragment the sums per flow-id generation, the flows counted and, once `workers` contributions
are in, the result. It finishes and answers fragments exactly as `ParameterServer` does
(`ps.result_frame`, the congestion mark echoed, `ps.repeat_to`). A step's results stay for
the next KEEP_EPOCHS - 1 epochs seen: a worker that lost one asks again (PROBE) while its peers
already send the next step; no worker can be further behind, since a step completes only with
every worker's contribution.
"""

from __future__ import annotations

import select
import socket
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

import numpy as np

from dataplane.frame import (
    ACK,
    BROADCAST,
    CONGESTED,
    DATA,
    FLOW_IDS_PER_GENERATION,
    INA_HEADER,
    OFF_ELEMS,
    OFF_INA,
    PROBE,
    RETRANSMITTED,
    Endpoint,
    K,
    Task,
    kind_of,
)
from dataplane.gradients import frag_id, split_frag_id
from dataplane.ports import ina_frames, send
from dataplane.ps import repeat_to, result_frame
from dataplane.state import PlanSource

KEEP_EPOCHS = 8


@dataclass
class _Epoch:
    sums: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)  # (gen, wire)
    counts: dict[tuple[int, int], int] = field(default_factory=dict)
    seen: set[tuple[int, int]] = field(default_factory=set)  # (flow, wire) counted
    results: dict[int, np.ndarray] = field(default_factory=dict)  # wire -> finished sum
    marked: set[int] = field(default_factory=set)  # wires a congestion-marked sum came for


@dataclass
class SessionPS:
    """Finishes every fragment of every step of task `task` from `workers` workers."""

    sock: socket.socket
    me: Endpoint
    task: Task
    workers: int
    result_flow_id: int
    plan: PlanSource | None = None
    epochs: OrderedDict[int, _Epoch] = field(default_factory=OrderedDict)
    finished: int = 0
    results_sent: int = 0
    duplicates_ignored: int = 0
    miscounted: int = 0
    steps: int = 0  # epochs seen

    def _send_result(
        self,
        epoch: int,
        wire: int,
        values: np.ndarray,
        aux: int,
        mark: int = 0,
        to: Endpoint = BROADCAST,
    ) -> None:
        send(self.sock, result_frame(self, frag_id(epoch, wire), values, aux, mark, to))
        self.results_sent += 1

    def _epoch(self, epoch: int) -> _Epoch:
        state = self.epochs.get(epoch)
        if state is None:
            state = self.epochs[epoch] = _Epoch()
            self.steps += 1
            while len(self.epochs) > KEEP_EPOCHS:
                self.epochs.popitem(last=False)
        return state

    def handle(self, frame: bytes) -> None:
        job, task, flags, flow, _, raw, count, _, aux = INA_HEADER.unpack_from(frame, OFF_INA)
        if (job, task) != (self.task.job, self.task.task):
            return
        mark, flags = flags & CONGESTED, kind_of(flags)
        epoch, wire = split_frag_id(raw)
        known = self.epochs.get(epoch)
        done = known.results.get(wire) if known is not None else None
        if flags in (ACK, PROBE) or (flags == DATA and done is not None):
            self.duplicates_ignored += flags == DATA
            if done is not None and (to := repeat_to(flags, count, frame)) is not None:
                self._send_result(epoch, wire, done, RETRANSMITTED, mark, to)
            return
        if flags != DATA:
            return
        state = self._epoch(epoch)
        if (flow, wire) in state.seen:
            self.duplicates_ignored += 1
            return
        state.seen.add((flow, wire))
        if mark:
            state.marked.add(wire)
        key = (flow // FLOW_IDS_PER_GENERATION, wire)
        total = state.sums.get(key)
        values = np.frombuffer(frame, ">i4", K, OFF_ELEMS).astype(np.int32)
        state.sums[key] = values if total is None else total + values
        state.counts[key] = state.counts.get(key, 0) + count
        if state.counts[key] >= self.workers:
            self.miscounted += int(state.counts[key] != self.workers)
            state.results[wire] = state.sums[key]
            self.finished += 1
            for gen_key in [k for k in state.sums if k[1] == wire]:  # done: free the sums
                del state.sums[gen_key], state.counts[gen_key]
            marked = CONGESTED if wire in state.marked else 0
            state.marked.discard(wire)
            self._send_result(epoch, wire, state.results[wire], aux, marked)

    def report(self) -> dict[str, object]:
        return {
            "ps": True,
            "session": True,
            "steps": self.steps,
            "fragments_finished": self.finished,
            "results_sent": self.results_sent,
            "duplicates_ignored": self.duplicates_ignored,
            "miscounted": self.miscounted,
        }

    def run(self, stop: TextIO | None = None, done: Callable[[], bool] | None = None) -> None:
        """Serve until a line (or end of file) arrives on `stop`, or `done()` (checked every
        0.1 s) is true; SIGTERM (the caller's handler) is the other way out."""
        watched: list[socket.socket | TextIO] = [self.sock, *([stop] if stop else [])]
        while done is None or not done():
            row = self.plan.poll(time.monotonic()) if self.plan else None
            if row is not None:
                self.result_flow_id = row["result_flow_id"]
            ready = select.select(watched, [], [], 0.1)[0]
            if stop is not None and stop in ready:
                stop.readline()
                return
            if self.sock in ready:
                for frame in ina_frames(self.sock):
                    self.handle(frame)
