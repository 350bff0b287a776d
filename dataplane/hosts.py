"""Host agents: `ina worker` sends a gradient in fragments, `ina ps` finishes and returns the sum.

Worker: splits its gradient into fragments of K int32 elements (float32 gradients are converted
to fixed point with scale 2**16, FIXED_POINT_SCALE), keeps an AIMD window of outstanding
fragments (+1 per result up to `max_window`, halved on a CONTROL packet or a timeout), resends
the fragment a CONTROL packet names, resends on timeout (with a PROBE from the second timeout
of a fragment on, in case its copy of the result was lost), and after receiving the result of
a fragment it had resent sends an ACK so that no switch keeps a stale partial sum of it
(p4src/README.md, Flags). A CONTROL names the fragment occupying the slot; the worker helps it
leave (an ACK if its result is already out, else its own contribution to it, sent out of
order), so that neither a lost ACK nor diverged windows can block a slot for good. Fragments
sent ahead of order that way take no place in the window: a window full of them would wait for
fragments that only its own in-order sending can provide (a deadlock seen after re-plans).
Optionally paced at the task's published rate.

PS: adds whatever arrives (raw fragments and partial aggregates), counting each
(flow id, fragment) once, finishes a fragment when the summed `count` reaches the number of
workers, and sends one RESULT per fragment that the switches multicast to the workers, under the
task's result flow id (published by the controller as `result_flow_id`).

Every frame's UDP source port is its flow id (`build_frame`), so plain OpenFlow switches that
cannot parse INA still forward each flow on its planned path by matching `udp_src`. A DATA,
ACK or PROBE for a finished fragment makes it send the result again (a worker lost it).

Fragment ids carry the iteration: `frag_id` = epoch << 24 | index (EPOCH_SHIFT; gradients up to
2**24 fragments, 2 GiB). A partial sum that a lost ACK left in a switch can then never be merged
with the next iteration's contributions (a different fragment id is a collision, not a match),
and the CONTROL naming it makes the worker free it with an ACK: without this, such a leftover
silently corrupted the next iteration's sums (seen with tail drops on every link).

Stopped by SIGTERM before the end, either agent prints a JSON line with `stopped`: what it
still waits for (the Mininet runner's hang report names it).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dataplane.frame import (
    ACK,
    CONTROL,
    DATA,
    FLOW_IDS_PER_GENERATION,
    INA_HEADER,
    INA_UDP_PORT,
    OFF_ELEMS,
    OFF_INA,
    OFF_UDP,
    PROBE,
    RESULT,
    Endpoint,
    InaHeader,
    K,
    build_frame,
    ip_bytes,
    mac_bytes,
)
from dataplane.ports import drain, open_raw, send

FIXED_POINT_SCALE = 2**16
EPOCH_SHIFT = 24  # frag_id = epoch << EPOCH_SHIFT | fragment index
EPOCHS = 2 ** (32 - EPOCH_SHIFT)
BROADCAST = Endpoint(b"\xff" * 6, b"\xff" * 4)
_INA_PORT = INA_UDP_PORT.to_bytes(2, "big")


@dataclass(frozen=True)
class Task:
    """Which aggregation the traffic belongs to (the plan's job and task ids)."""

    job: int
    task: int


def synthetic_gradient(seed: int, index: int, elements: int) -> np.ndarray:
    """Worker `index`'s int32 test gradient; small values so any 2**11 workers sum exactly."""
    rng = np.random.default_rng([seed, index])
    return rng.integers(-(2**20), 2**20, elements, dtype=np.int32)


def to_fixed_point(gradient: np.ndarray) -> np.ndarray:
    """int32 passes through; float32 becomes round(x * FIXED_POINT_SCALE)."""
    if gradient.dtype == np.int32:
        return gradient
    return np.round(gradient.astype(np.float64) * FIXED_POINT_SCALE).astype(np.int32)


def fragments(gradient: np.ndarray) -> np.ndarray:
    """The gradient as rows of K big-endian int32, the last row zero-padded."""
    rows = -(-len(gradient) // K)
    padded = np.zeros(rows * K, dtype=">i4")
    padded[: len(gradient)] = gradient
    return padded.reshape(rows, K)


def frag_id(epoch: int, index: int) -> int:
    return (epoch % EPOCHS) << EPOCH_SHIFT | index


def split_frag_id(value: int) -> tuple[int, int]:
    """(epoch, fragment index) of a packet's `frag_id`."""
    return value >> EPOCH_SHIFT, value & ((1 << EPOCH_SHIFT) - 1)


def _ina_frames(sock: socket.socket) -> list[bytes]:
    frames: list[bytes] = []
    drain(sock, lambda f: frames.append(f) if f[OFF_UDP + 2:OFF_UDP + 4] == _INA_PORT
          and len(f) >= OFF_ELEMS + 4 * K else None, limit=4096)
    return frames


def _endpoint(iface: str, ip: str) -> Endpoint:
    mac = Path(f"/sys/class/net/{iface}/address").read_text().strip()
    return Endpoint(mac_bytes(mac), ip_bytes(ip))


# *** worker

@dataclass
class PlanWatcher:
    """Follows the controller's state file for the row (a worker assignment) `match` picks.

    The controller replaces the file atomically, so a read never sees half of it.
    """

    path: Path
    match: Callable[[dict], bool]
    version: int = 0
    _stamp: int = 0
    _next_check: float = 0.0

    def poll(self, now: float) -> dict | None:
        """The matching row of a newer plan version, at most every 0.1 s; else None."""
        if now < self._next_check:
            return None
        self._next_check = now + 0.1
        try:
            stamp = os.stat(self.path).st_mtime_ns
            if stamp == self._stamp:
                return None
            self._stamp = stamp
            state = json.loads(self.path.read_text())
        except (OSError, json.JSONDecodeError):
            return None
        if state["version"] <= self.version:
            return None
        row = next((r for r in state["workers"] if self.match(r)), None)
        if row is not None:
            self.version = state["version"]
        return row


@dataclass
class WorkerStats:
    fragments: int = 0
    sent: int = 0
    resent_on_control: int = 0
    resent_on_timeout: int = 0
    acks: int = 0
    probes: int = 0
    plan_switches: int = 0
    sent_to_unblock: int = 0
    seconds: float = 0.0


@dataclass
class Worker:
    """One worker's transfer of one gradient; `run` returns the summed gradient."""

    sock: socket.socket
    me: Endpoint
    ps: Endpoint
    task: Task
    flow_id: int
    next_node: int
    rows: np.ndarray
    window: float = 16.0
    max_window: int = 256
    timeout: float = 0.5
    rate_gbps: float | None = None
    plan: PlanWatcher | None = None
    # wire Gbps per planned Gbps, when the rate comes from the plan (emulations scale links)
    rate_scale: float = 1.0
    stats: WorkerStats = field(default_factory=WorkerStats)
    _unblocked: dict[int, float] = field(default_factory=dict)  # occupant -> next allowed help
    outstanding: dict[int, float] = field(default_factory=dict)  # fragment -> resend deadline
    # outstanding fragments sent ahead of the in-order sender to unblock a slot: they do not
    # take a place in the window, or a window full of them could wait for its own fragments
    ahead: set[int] = field(default_factory=set)
    resent: set[int] = field(default_factory=set)  # fragments sent more than once
    timeouts: dict[int, int] = field(default_factory=dict)  # fragment -> timeouts so far
    next_frag: int = 0
    epoch: int = 0  # the iteration, carried in every fragment id

    def __post_init__(self) -> None:
        self.epoch %= EPOCHS  # as it reads back from a fragment id

    def waiting_for(self) -> dict[str, object]:
        """What a stuck worker is waiting for (printed when it is stopped before the end)."""
        return {"next_fragment": self.next_frag, "outstanding": sorted(self.outstanding)[:20],
                "outstanding_count": len(self.outstanding), "ahead": len(self.ahead),
                "flow_id": self.flow_id, "window": self.window,
                "plan_version": self.plan.version if self.plan else None}

    def _gap(self) -> float:
        """Seconds between two fragments at the paced rate (0: unpaced)."""
        if not self.rate_gbps:
            return 0.0
        size = len(build_frame(self.me, self.ps, InaHeader(0, 0, DATA, 0, 0, 0), bytes(4 * K)))
        return size * 8 / (self.rate_gbps * 1e9)

    def _follow_plan(self, now: float) -> float:
        """Adopt a newer plan version's ids; resend what is outstanding under them."""
        row = self.plan.poll(now) if self.plan else None
        if row is None:
            return self._gap()
        first = self.stats.sent == 0
        self.flow_id, self.next_node = row["flow_id"], row["next_node"]
        self.rate_gbps = row["rate_gbps"] * self.rate_scale
        if not first:
            self.stats.plan_switches += 1
            for frag in self.outstanding:
                self._resend(frag, now)
        return self._gap()

    def _send(self, frag: int, flags: int = DATA, epoch: int | None = None) -> None:
        count = 1 if flags == DATA else 0
        header = InaHeader(self.task.job, self.task.task, flags, self.flow_id, self.next_node,
                           frag_id(self.epoch if epoch is None else epoch, frag), count)
        payload = self.rows[frag].tobytes() if flags == DATA else bytes(4 * K)
        send(self.sock, build_frame(self.me, self.ps, header, payload))
        self.stats.sent += 1

    def _resend(self, frag: int, now: float) -> None:
        self._send(frag)
        self.resent.add(frag)
        self.outstanding[frag] = now + self.timeout

    def _unblock(self, occupant: int, have: np.ndarray) -> None:
        """A slot on this worker's path is held by fragment id `occupant`; help it leave.

        If it belongs to another iteration, or its result is already out, the slot holds a
        partial sum left behind (its ACK was lost): an ACK frees it. Otherwise the partial sum
        may be waiting for this worker's own contribution, which its window has not reached:
        sending that fragment now, out of order, breaks the wait-for cycle in which two
        workers' windows block each other's slots (it is sent once; the in-order loop skips it).
        """
        now = time.monotonic()
        if now < self._unblocked.get(occupant, 0.0):
            return
        self._unblocked[occupant] = now + self.timeout
        epoch, index = split_frag_id(occupant)
        if epoch != self.epoch or index >= len(self.rows) or have[index]:
            self._send(index, ACK, epoch)
            self.stats.acks += 1
        elif index not in self.outstanding:
            self._send(index)
            self.outstanding[index] = now + self.timeout
            self.ahead.add(index)
            self.stats.sent_to_unblock += 1

    def _window_open(self) -> bool:
        return len(self.outstanding) - len(self.ahead) < int(self.window)

    def _send_in_order(self, now: float, next_send: float, gap: float, have: np.ndarray) -> float:
        """Send new fragments while the window and the pacing allow; returns the next send time."""
        while self.next_frag < len(self.rows) and self._window_open() and now >= next_send:
            frag = self.next_frag
            self.next_frag += 1
            if frag in self.outstanding or have[frag]:  # already sent to unblock a slot
                self.ahead.discard(frag)
                continue
            self._send(frag)
            self.outstanding[frag] = now + self.timeout
            next_send = max(next_send, now) + gap
        return next_send

    def _on_timeouts(self, now: float) -> None:
        """Resend what timed out; from a fragment's second timeout on, a PROBE follows: the
        result may have reached every peer but this worker, and then the retransmission waits
        in a slot for contributions that never come again (p4src/README.md, PROBE)."""
        for frag, deadline in list(self.outstanding.items()):
            if deadline > now:
                continue
            self.window = max(1.0, self.window / 2)
            self._resend(frag, now)
            self.stats.resent_on_timeout += 1
            self.timeouts[frag] = self.timeouts.get(frag, 0) + 1
            if self.timeouts[frag] >= 2:
                self._send(frag, PROBE)
                self.stats.probes += 1

    def run(self) -> np.ndarray:
        total = len(self.rows)
        result = np.zeros((total, K), dtype=np.int32)
        have = np.zeros(total, dtype=bool)
        gap = self._follow_plan(time.monotonic())
        done, next_send = 0, 0.0
        start = time.monotonic()
        while done < total:
            now = time.monotonic()
            if self.plan:
                gap = self._follow_plan(now)
            next_send = self._send_in_order(now, next_send, gap, have)
            wait = min(self.outstanding.values(), default=now + self.timeout) - now
            if self.next_frag < total and self._window_open():
                wait = min(wait, max(0.0, next_send - now))
            select.select([self.sock], [], [], max(0.0, wait))
            for frame in _ina_frames(self.sock):
                job, task, flags, flow, _, raw, _, _, occupant = INA_HEADER.unpack_from(
                    frame, OFF_INA)
                epoch, frag = split_frag_id(raw)
                if (job, task) != (self.task.job, self.task.task):
                    continue
                if flags == CONTROL:
                    self._unblock(occupant, have)
                if epoch != self.epoch or frag >= total:
                    continue
                if flags == RESULT and not have[frag]:
                    result[frag] = np.frombuffer(frame, ">i4", K, OFF_ELEMS)
                    have[frag] = True
                    done += 1
                    self.outstanding.pop(frag, None)
                    self.ahead.discard(frag)
                    self.window = min(self.max_window, self.window + 1)
                    if frag in self.resent:
                        self._send(frag, ACK)
                        self.stats.acks += 1
                elif flags == CONTROL and flow == self.flow_id and frag in self.outstanding:
                    # dropped at the collision, so no slot keeps it: no ACK needed later
                    self.window = max(1.0, self.window / 2)
                    self._send(frag)
                    self.outstanding[frag] = time.monotonic() + self.timeout
                    self.stats.resent_on_control += 1
            self._on_timeouts(time.monotonic())
        self.stats.fragments = total
        self.stats.seconds = time.monotonic() - start
        return result.reshape(-1)


# *** parameter server

@dataclass
class ParameterServer:
    """Finishes the aggregation of `fragments` fragments from `workers` workers."""

    sock: socket.socket
    me: Endpoint
    task: Task
    workers: int
    fragments: int
    result_flow_id: int
    plan: PlanWatcher | None = None
    # per flow-id generation: sums and contribution counts of every fragment
    sums: dict[int, np.ndarray] = field(default_factory=dict)
    counts: dict[int, np.ndarray] = field(default_factory=dict)
    done: np.ndarray = field(init=False)
    result: np.ndarray = field(init=False)
    seen: set[tuple[int, int]] = field(default_factory=set)
    finished: int = 0
    results_sent: int = 0
    # Exactly-once evidence: DATA already counted or for a finished fragment (a copy, or a
    # retransmission whose original also arrived), ignored; fragments finished with a summed count other than `workers`
    # (a contribution counted twice or missed: must stay 0).
    duplicates_ignored: int = 0
    miscounted: int = 0
    epoch: int = 0  # the iteration; fragments of other iterations are ignored

    def __post_init__(self) -> None:
        self.epoch %= EPOCHS  # as it reads back from a fragment id
        self.done = np.zeros(self.fragments, dtype=bool)
        self.result = np.zeros((self.fragments, K), dtype=np.int32)

    def _generation(self, flow: int) -> tuple[np.ndarray, np.ndarray]:
        gen = flow // FLOW_IDS_PER_GENERATION
        if gen not in self.sums:
            self.sums[gen] = np.zeros((self.fragments, K), dtype=np.int32)
            self.counts[gen] = np.zeros(self.fragments, dtype=np.int64)
        return self.sums[gen], self.counts[gen]

    def _send_result(self, frag: int) -> None:
        header = InaHeader(self.task.job, self.task.task, RESULT, self.result_flow_id, 0,
                           frag_id(self.epoch, frag), self.workers)
        send(self.sock, build_frame(self.me, BROADCAST, header,
                                    self.result[frag].astype(">i4").tobytes()))
        self.results_sent += 1

    def handle(self, frame: bytes) -> None:
        job, task, flags, flow, _, raw, count, _, _ = INA_HEADER.unpack_from(frame, OFF_INA)
        epoch, frag = split_frag_id(raw)
        if ((job, task) != (self.task.job, self.task.task) or epoch != self.epoch
                or frag >= self.fragments):
            return
        if flags in (ACK, PROBE) or (flags == DATA and self.done[frag]):
            self.duplicates_ignored += flags == DATA
            if self.done[frag]:
                self._send_result(frag)
            return
        if flags != DATA:
            return
        if (flow, frag) in self.seen:
            self.duplicates_ignored += 1
            return
        self.seen.add((flow, frag))
        sums, counts = self._generation(flow)
        sums[frag] += np.frombuffer(frame, ">i4", K, OFF_ELEMS).astype(np.int32)
        counts[frag] += count
        if counts[frag] >= self.workers:
            self.miscounted += int(counts[frag] != self.workers)
            self.done[frag] = True
            self.result[frag] = sums[frag]
            self.finished += 1
            self._send_result(frag)

    def flows_per_fragment(self) -> float:
        """Distinct (flow, fragment) contributions that reached the PS per fragment: how many
        flows the network delivers into the PS, retransmissions, ACKs and PROBEs left out."""
        return round(len(self.seen) / max(1, self.fragments), 3)

    def waiting_for(self) -> dict[str, object]:
        """Unfinished fragments and, per flow-id generation, the counts summed so far."""
        missing = np.flatnonzero(~self.done)[:20].tolist()
        return {"unfinished": int((~self.done).sum()), "first_unfinished": missing,
                "counts": {gen: [int(c[f]) for f in missing] for gen, c in self.counts.items()},
                "result_flow_id": self.result_flow_id}

    def run(self, linger: float) -> None:
        """Serve until every fragment is finished and `linger` seconds pass without traffic."""
        quiet_since = time.monotonic()
        while self.finished < self.fragments or time.monotonic() - quiet_since < linger:
            row = self.plan.poll(time.monotonic()) if self.plan else None
            if row is not None:
                self.result_flow_id = row["result_flow_id"]
            if select.select([self.sock], [], [], 0.1)[0]:
                for frame in _ina_frames(self.sock):
                    self.handle(frame)
                quiet_since = time.monotonic()


# *** command line

class Stopped(Exception):
    """SIGTERM arrived before the agent finished: it reports what it was waiting for."""


def _stop_on_sigterm() -> None:
    def stop(signum, frame):
        raise Stopped
    signal.signal(signal.SIGTERM, stop)


def _gradient(args: argparse.Namespace, index: int) -> np.ndarray:
    if args.gradient:
        return to_fixed_point(np.load(args.gradient))
    return synthetic_gradient(args.seed, index, int(args.size_mb * 2**20) // 4)


def _wait_for_go(args: argparse.Namespace) -> None:
    """With --wait-go: say we are ready (socket open, gradient built), then block until a line
    arrives on stdin. A launcher starts every agent this way, then releases them together, so
    process start-up (seconds of imports on a loaded machine) is neither timed nor lets one
    worker's fragments wait in switch slots for peers that have not started yet."""
    if args.wait_go:
        print(json.dumps({"ready": True}), flush=True)
        sys.stdin.readline()


def cmd_worker(args: argparse.Namespace) -> int:
    if args.verify and args.gradient:
        raise SystemExit("--verify checks synthetic gradients; it cannot be used with --gradient")
    gradient = _gradient(args, args.index)
    plan = None
    if args.state:
        plan = PlanWatcher(Path(args.state), lambda row: row["worker"] == args.name)
    worker = Worker(open_raw(args.iface), _endpoint(args.iface, args.ip),
                    Endpoint(b"\xff" * 6, ip_bytes(args.ps_ip)), Task(args.job, args.task),
                    args.flow_id or args.index + 1, args.next_node, fragments(gradient),
                    window=args.window, timeout=args.timeout, rate_gbps=args.rate_gbps,
                    plan=plan, rate_scale=args.rate_scale, epoch=args.epoch)
    _stop_on_sigterm()
    try:
        _wait_for_go(args)
        result = worker.run()[: len(gradient)]
    except Stopped:
        print(json.dumps({"worker": args.index, "stopped": worker.waiting_for(),
                          **worker.stats.__dict__}))
        return 3
    report: dict[str, object] = {"worker": args.index, **worker.stats.__dict__}
    code = 0
    if args.verify:
        expected = sum((synthetic_gradient(args.seed, i, len(gradient)).astype(np.int64)
                        for i in range(args.workers)), np.zeros(len(gradient), np.int64))
        report["exact"] = bool(np.array_equal(result.astype(np.int64), expected))
        code = 0 if report["exact"] else 1
    print(json.dumps(report))
    return code


def cmd_ps(args: argparse.Namespace) -> int:
    elements = int(args.size_mb * 2**20) // 4
    plan = None
    if args.state:
        task = (args.job, args.task)
        plan = PlanWatcher(Path(args.state), lambda r: (r["job_id"], r["task_id"]) == task)
    ps = ParameterServer(open_raw(args.iface), _endpoint(args.iface, args.ip),
                         Task(args.job, args.task), args.workers, -(-elements // K),
                         args.result_flow_id, plan=plan, epoch=args.epoch)
    _stop_on_sigterm()
    try:
        _wait_for_go(args)
        start = time.monotonic()
        ps.run(args.linger)
    except Stopped:
        print(json.dumps({"ps": True, "stopped": ps.waiting_for(),
                          "flows_per_fragment": ps.flows_per_fragment()}))
        return 3
    print(json.dumps({"ps": True, "fragments": ps.fragments, "finished": ps.finished,
                      "duplicates_ignored": ps.duplicates_ignored,
                      "miscounted": ps.miscounted, "results_sent": ps.results_sent,
                      "flows_per_fragment": ps.flows_per_fragment(),
                      "seconds": round(time.monotonic() - start, 3)}))
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--state", metavar="FILE",
                   help="the controller's state file: follow plan changes (README)")
    p.add_argument("--iface", required=True, help="interface to send and receive on")
    p.add_argument("--ip", required=True, help="this host's IPv4 address")
    p.add_argument("--job", type=int, default=1)
    p.add_argument("--task", type=int, default=0)
    p.add_argument("--workers", type=int, required=True, help="workers in the task")
    p.add_argument("--size-mb", type=float, default=1.0, help="gradient size (default 1 MB)")
    p.add_argument("--epoch", type=int, default=0,
                   help="iteration number, carried in fragment ids (worker and PS must agree)")
    p.add_argument("--wait-go", action="store_true",
                   help='print {"ready": true} once set up, then wait for a line on stdin')


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `worker` and `ps` to the command line."""
    p = subparsers.add_parser("worker", help="send one gradient through INA and get the sum")
    _common(p)
    p.add_argument("--ps-ip", required=True)
    p.add_argument("--index", type=int, required=True, help="worker index in the task (0-based)")
    p.add_argument("--flow-id", type=int, help="this worker's flow id (default index + 1)")
    p.add_argument("--next-node", type=int, default=0, help="id of the first aggregating node")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic gradients")
    p.add_argument("--gradient", metavar="FILE.npy", help="int32 or float32 gradient to send "
                   f"(float32 is scaled by {FIXED_POINT_SCALE}); default: synthetic")
    p.add_argument("--window", type=float, default=16, help="initial window (fragments)")
    p.add_argument("--timeout", type=float, default=0.5, help="retransmission timeout (s)")
    p.add_argument("--rate-gbps", type=float, help="pace at the task's published rate")
    p.add_argument("--name", help="this worker's name in the topology (with --state)")
    p.add_argument("--rate-scale", type=float, default=1.0,
                   help="wire Gbps per planned Gbps when pacing at the state file's rate")
    p.add_argument("--verify", action="store_true",
                   help="check the result against the exact sum of the synthetic gradients")
    p.set_defaults(func=cmd_worker)

    p = subparsers.add_parser("ps", help="parameter server: finish the sums, send results")
    _common(p)
    p.add_argument("--result-flow-id", type=int, required=True,
                   help="flow id of the task's results (the controller's result_flow_id)")
    p.add_argument("--linger", type=float, default=1.0,
                   help="seconds to keep answering retransmissions after the last fragment")
    p.set_defaults(func=cmd_ps)

