"""The real workers, PS and switch pipelines over simulated lossy links, on a virtual clock.

Why hand-written: the recovery bugs under loss (stalls of tens of seconds, a hang at 5 %
loss) show only after thousands of packets under random loss, and on Mininet one such run
takes minutes of a shared lock and never repeats. Here the very objects the agents and the
embedded switch run (`Worker`, `ParameterServer`, `Pipeline` programmed through `Entities`
with the compiler's P4Runtime entities) exchange frames over links with seeded loss,
duplication, reordering, a rate and a bounded queue, so a stall reproduces in seconds,
deterministically, and its state can be read. Discrete-event simulators on PyPI (simpy and
the like) would add a scheduler but not the part that matters, the links, so a heap of timed
callbacks is all it uses. Everything the agents do on time goes through the `now` they are
given; the pipeline reads the same clock (`Pipeline.clock`).

Links model what the Mininet emulation does (RELIABILITY.md): impairment on the egress of
every interface (nftables' netdev egress hook, before the queue), then a FIFO of at most
`queue` frames drained at the link's rate, then a propagation delay. A reordered frame is held
`reorder_delay` and queued again, so later frames overtake it. A switch serves its arrivals
one at a time, `service` seconds each, and its pipeline marks what it sends by the number of
frames waiting in the link's queue (p4src/README.md, "Congestion mark"), as the embedded
target reads its port's kernel queue; a worker marks by its own link's queue.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import random
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from finsy import P4Schema
from finsy.proto import p4r

from controller.compiler.program import Numbering, WorkerAssignment, compile_plan
from controller.emulation.faults.impair import KIND_OF_FLAGS, LOST_KINDS
from controller.emulation.mininet_runner import DEFAULT_SCALE_MBPS, PACING_HEADROOM
from controller.model.inputs import InputError
from controller.model.network import Network, load_topology
from controller.model.plan import Plan
from controller.solvers import SolveOptions, solve
from controller.southbound.p4runtime import diff_programs
from dataplane.entities import DELETE, INSERT, MODIFY, Entities
from dataplane.frame import (
    ACK,
    BROADCAST,
    CPU_PORT,
    DATA,
    INA_HEADER,
    INA_UDP_PORT,
    OFF_ELEMS,
    OFF_INA,
    OFF_UDP,
    PROBE,
    Endpoint,
    K,
    Task,
    ip_bytes,
    kind_of,
)
from dataplane.gradients import fragments, split_frag_id, synthetic_gradient
from dataplane.pipeline import Pipeline
from dataplane.ps import ParameterServer
from dataplane.schema import P4INFO_PATH, Schema, load_p4info
from dataplane.worker import Worker, dispatch

MBPS_PER_GBPS = DEFAULT_SCALE_MBPS["embedded"]  # what the Mininet runner emulates
_INA_PORT = INA_UDP_PORT.to_bytes(2, "big")


def frame_kind(frame: bytes) -> str:
    """What `frame` is among the `LOST_KINDS` the Mininet impairment counts, marked or not."""
    if len(frame) <= OFF_INA + 3 or frame[OFF_UDP + 2 : OFF_UDP + 4] != _INA_PORT:
        return "other"
    return KIND_OF_FLAGS.get(kind_of(frame[OFF_INA + 3]), "other")


@dataclass(frozen=True)
class Impairments:
    """Per-frame probabilities on the egress of every interface (both ends of every link)."""

    loss: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    reorder_delay: float = 0.020


@dataclass(frozen=True)
class Stalls:
    """Scheduling lag on a loaded machine: every switch and worker is held off the CPU for
    `seconds` at random moments, `per_second` times a second on average (0: never); frames
    that arrive meanwhile wait. The Mininet emulation shares two cores among a dozen Python
    processes, which the links and switches alone do not model."""

    per_second: float = 0.0
    seconds: float = 0.0


class Clock:
    """Virtual seconds and a heap of callbacks due at given times."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()

    def at(self, when: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._heap, (max(when, self.now), next(self._seq), fn))

    def run_until(self, until: float, done: Callable[[], bool]) -> None:
        while self._heap and not done():
            when, _, fn = self._heap[0]
            if when > until:
                break
            heapq.heappop(self._heap)
            self.now = when
            fn()
        if not done():
            self.now = max(self.now, until)


@dataclass
class Link:
    """One direction of a link: impairment, queue, rate, delay; delivers to `deliver`."""

    clock: Clock
    rng: random.Random
    rate_bps: float
    deliver: Callable[[bytes], None]
    impair: Impairments = Impairments()
    queue: int = 1000
    delay: float = 50e-6
    up: bool = True
    _fifo: deque = field(default_factory=deque)
    _busy: bool = False
    lost: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LOST_KINDS, 0))
    # Frames the full queue dropped, by `LOST_KINDS` (what a qdisc's drop counter counts).
    dropped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LOST_KINDS, 0))
    counts: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            ("offered", "lost", "copies", "held", "tail_drops", "delivered"), 0
        )
    )

    def send(self, frame: bytes, hook: bool = True) -> None:
        self.counts["offered"] += 1
        if hook:
            roll = self.rng.random()
            if roll < self.impair.loss:
                self.counts["lost"] += 1
                self.lost[frame_kind(frame)] += 1
                return
            if self.rng.random() < self.impair.duplicate:
                self.counts["copies"] += 1
                self._enqueue(frame)
            if self.rng.random() < self.impair.reorder:
                self.counts["held"] += 1
                self.clock.at(
                    self.clock.now + self.impair.reorder_delay, lambda: self.send(frame, hook=False)
                )
                return
        self._enqueue(frame)

    @property
    def queued(self) -> int:
        """Frames waiting in the queue (the one on the wire not counted), as a switch's
        egress queue depth reads."""
        return len(self._fifo)

    def _enqueue(self, frame: bytes) -> None:
        if len(self._fifo) >= self.queue:
            self.counts["tail_drops"] += 1
            self.dropped[frame_kind(frame)] += 1
            return
        self._fifo.append(frame)
        if not self._busy:
            self._next()

    def _next(self) -> None:
        if not self._fifo:
            self._busy = False
            return
        self._busy = True
        frame = self._fifo.popleft()
        done = self.clock.now + len(frame) * 8 / self.rate_bps
        if self.up:
            self.clock.at(done + self.delay, lambda: self._arrive(frame))
        self.clock.at(done, self._next)

    def _arrive(self, frame: bytes) -> None:
        if self.up:
            self.counts["delivered"] += 1
            self.deliver(frame)


class SimSocket:
    """What `dataplane.ports.send` needs of a socket: `send(frame)`, here onto a link."""

    def __init__(self) -> None:
        self.link: Link | None = None

    def send(self, frame: bytes) -> None:
        if self.link is not None:
            self.link.send(frame)

    def queued(self) -> int:
        """Frames waiting in the host's own egress queue (what SIOCOUTQ reads on Linux)."""
        return 0 if self.link is None else self.link.queued


@dataclass
class SimSwitch:
    """An embedded switch's pipeline behind a single server of `service` seconds a frame."""

    name: str
    clock: Clock
    pipeline: Pipeline
    service: float
    ports: dict[int, Link] = field(default_factory=dict)
    _inbox: deque = field(default_factory=deque)
    _busy: bool = False
    stalled_until: float = 0.0  # held off the CPU until then (`Stalls`)

    def receive(self, port: int, frame: bytes) -> None:
        self._inbox.append((port, frame))
        if not self._busy:
            self._busy = True
            self.clock.at(self.clock.now + self.service, self._serve)

    def _serve(self) -> None:
        if self.clock.now < self.stalled_until:
            self.clock.at(self.stalled_until, self._serve)
            return
        port, frame = self._inbox.popleft()
        for out_port, out in self.pipeline.process(port, frame):
            if out_port != CPU_PORT and out_port in self.ports:
                link = self.ports[out_port]
                link.send(self.pipeline.mark(out_port, out, link.queued))
        if self._inbox:
            self.clock.at(self.clock.now + self.service, self._serve)
        else:
            self._busy = False


@dataclass
class SimWorker:
    """Drives one `Worker` as `run_shards` does: pump, wait, dispatch what arrives, time out."""

    clock: Clock
    worker: Worker
    _wake: float = float("inf")
    stalled_until: float = 0.0  # held off the CPU until then (`Stalls`)
    _held: deque = field(default_factory=deque)  # frames that arrived meanwhile

    def start(self) -> None:
        self.worker.start(self.clock.now)
        self.step()

    def receive(self, frame: bytes) -> None:
        if frame[OFF_UDP + 2 : OFF_UDP + 4] != _INA_PORT or self.worker.finished:
            return
        if self.clock.now < self.stalled_until:
            if not self._held:
                self.clock.at(self.stalled_until, self._release)
            self._held.append(frame)
            return
        w = self.worker
        dispatch([w], {(w.task.job, w.task.task): w}, frame, self.clock.now)
        self.step()

    def _release(self) -> None:
        if self.clock.now < self.stalled_until:  # stalled again meanwhile
            self.clock.at(self.stalled_until, self._release)
            return
        held, self._held = self._held, deque()
        for frame in held:
            self.receive(frame)

    def step(self) -> None:
        w, now = self.worker, self.clock.now
        if w.finished:
            return
        if now < self.stalled_until:
            self._wake = self.stalled_until
            self.clock.at(self.stalled_until, self._woken)
            return
        w.on_timeouts(now)
        wake = now + w.pump(now)
        if wake < self._wake or self._wake <= now:
            self._wake = wake
            self.clock.at(wake, self._woken)

    def _woken(self) -> None:
        if self.clock.now >= self._wake:
            self._wake = float("inf")
            self.step()


@dataclass
class Iteration:
    """What one simulated iteration gave: per worker exact or not, the PS's evidence."""

    epoch: int
    seconds: float | None  # virtual seconds until every worker held every result (None: hung)
    exact: list[bool]
    finished: int
    fragments: int
    miscounted: int
    duplicates_ignored: int
    resent_on_timeout: int
    resent_on_control: int
    resent_on_loss: int
    spurious: int
    waiting: dict[str, object]
    rto: list[float]  # each worker's retransmission timeout at the end
    # Frames the PS received, by what they were to it (`PsIntake`), and the frames its
    # link dropped from a full queue: what the link into the PS spent its time on.
    ps_intake: dict[str, int] = field(default_factory=dict)
    tail_drops_into_ps: int = 0
    # Frames the impairment dropped on every link during the iteration, by `LOST_KINDS`.
    lost: dict[str, int] = field(default_factory=dict)
    # Loss queries the workers sent and NACKs they received (`Worker.query`): not resends.
    queries: int = 0
    nacks: int = 0
    # Frames full queues dropped on every link during the iteration, by `LOST_KINDS`.
    queue_drops: dict[str, int] = field(default_factory=dict)
    held: int = 0  # HELD answers the workers received: a peer's loss, no copy sent
    # unsolicited NACKs the workers received (a peer's query found their contribution
    # missing, `Worker.named_missing`), and the resends they made
    named: int = 0
    resent_on_named: int = 0

    @property
    def resends(self) -> int:
        """Fragments the workers sent again, whatever the cause."""
        return self.resent_on_timeout + self.resent_on_control + self.resent_on_loss

    def recovery(self) -> dict[str, float | None]:
        """What recovery cost against what was lost: resends per frame dropped (None when
        nothing was) and the share of the workers' fragments resent, in %."""
        lost = sum(self.lost.values())
        sent = self.fragments * len(self.exact)
        return {
            "frames_lost": lost,
            "resends": self.resends,
            "resends_per_lost_frame": round(self.resends / lost, 3) if lost else None,
            "resent_percent": round(100 * self.resends / max(1, sent), 3),
            "queries": self.queries,
            "nacks": self.nacks,
        }


class SimPlan:
    """What `PlanWatcher` gives a worker (its row of the newest plan version), read from the
    emulation instead of the controller's state file."""

    def __init__(self, emulation: Emulation, worker: str) -> None:
        self.emulation, self.worker, self.version = emulation, worker, 0

    def poll(self, now: float) -> dict | None:
        if self.emulation.version <= self.version:
            return None
        self.version = self.emulation.version
        a = next(a for a in self.emulation.assignments if a.worker == self.worker)
        return {
            "flow_id": a.flow_id,
            "next_node": a.next_node,
            "rate_gbps": a.rate_gbps,
            "segments": [s.__dict__ for s in a.segments],
            "result_flow_id": a.result_flow_id,
        }


class Emulation:
    """A topology's switches, programmed with `plan` (default: `scheme` solved here), its
    hosts and impaired links; links carry `mbps_per_gbps` per model Gbps and hold `queue`
    frames, workers pace at the plan's rate × MBPS_PER_GBPS × PACING_HEADROOM (so a lower
    `mbps_per_gbps` congests the links, as `controller.emulation.faults.impair.congest` does).
    Ports and workers mark congestion from `mark_depth` waiting frames (default: half the
    queue, at least 1)."""

    def __init__(
        self,
        network: Network,
        impair: Impairments = Impairments(),
        seed: int = 0,
        scheme: str = "aro",
        mbps_per_gbps: float = MBPS_PER_GBPS,
        queue: int = 1000,
        service: float = 30e-6,
        plan: Plan | None = None,
        mark_depth: int | None = None,
        stalls: Stalls = Stalls(),
        query: bool = True,
        keep_results: bool = True,
        pass_queries: bool = True,
    ) -> None:
        self.network = network
        self.query = query  # workers send loss queries (`Worker.query`)
        self.clock = Clock()
        self.rng = random.Random(seed)
        self.stalls, self._stall_rng = stalls, random.Random(seed + 1)
        self.impair = impair
        self.plan = plan or solve(
            network, scheme, SolveOptions(time_limit=20, seed=0, params={"num_workers": 1})
        )
        self.scheme, self.version = scheme, 1
        self.mark_depth = max(1, queue // 2) if mark_depth is None else mark_depth
        self.programs, self.assignments = compile_plan(
            network, self.plan, mark_depth=self.mark_depth
        )
        programs = self.programs
        schema, self._finsy = Schema(load_p4info()), P4Schema(P4INFO_PATH)
        finsy_schema = self._finsy
        self.switches: dict[str, SimSwitch] = {}
        self.entities: dict[str, Entities] = {}
        self.watchers: list[SimPlan] = []
        self._ps: ParameterServer | None = None
        for name in network.switches:
            pipeline = Pipeline(lambda: self.clock.now, keep_results, pass_queries)
            entities = Entities(schema, pipeline)
            for entity in programs[name].entities():
                entities.write(p4r.Update(type=INSERT, entity=entity.encode(finsy_schema)))
            self.switches[name] = SimSwitch(name, self.clock, pipeline, service)
            self._stall(self.switches[name])
            self.entities[name] = entities
        self.sockets = {h: SimSocket() for h in network.hosts}
        self.receivers: dict[str, Callable[[bytes], None]] = {}
        self.links: dict[tuple[str, str], Link] = {}
        for u, v, data in network.graph.edges(data=True):
            rate = data["capacity_gbps"] * mbps_per_gbps * 1e6
            link = Link(
                self.clock, self.rng, rate, self._deliverer(v, data["in_port"]), impair, queue
            )
            self.links[u, v] = link
            if network.is_switch(u):
                self.switches[u].ports[data["out_port"]] = link
            else:
                self.sockets[u].link = link
        self.ips = Numbering(network).host_ip

    def cut(self, u: str, v: str, after: float, detect: float = 1.5, drain: float = 3.0) -> None:
        """`after` virtual seconds from now the link u-v goes down; `detect` later the
        controller re-plans without it as `controller.service.daemon` does: the new version's
        entries beside the old (make-before-break), the agents switch to the new ids, the old
        entries go `drain` later."""
        at = self.clock.now + after

        def down() -> None:
            self.links[u, v].up = self.links[v, u].up = False

        def replan() -> None:
            self.version += 1
            network = self.network.without_links({(u, v)})
            plan = solve(
                network, self.scheme, SolveOptions(time_limit=20, seed=0, params={"num_workers": 1})
            )
            programs, self.assignments = compile_plan(
                network, plan, self.version, mark_depth=self.mark_depth
            )
            stale = {}
            for name, entities in self.entities.items():
                inserts, modifies, deletes = diff_programs(self.programs[name], programs[name])
                for kind, batch in ((INSERT, inserts), (MODIFY, modifies)):
                    for entity in batch:
                        entities.write(p4r.Update(type=kind, entity=entity.encode(self._finsy)))
                stale[name] = deletes
            self.programs = programs
            if self._ps is not None:
                self._ps.result_flow_id = self.assignments[0].result_flow_id
            self.clock.at(self.clock.now + drain, lambda: self._delete(stale))

        self.clock.at(at, down)
        self.clock.at(at + detect, replan)

    def _delete(self, stale: dict[str, list]) -> None:
        for name, deletes in stale.items():
            for entity in reversed(deletes):  # table entries before the groups they use
                self.entities[name].write(
                    p4r.Update(type=DELETE, entity=entity.encode(self._finsy))
                )

    def _deliverer(self, node: str, port: int | None) -> Callable[[bytes], None]:
        if self.network.is_switch(node):
            switch = self.switches[node]
            assert port is not None  # a switch's end of a link has a port
            return lambda frame: switch.receive(port, frame)
        return lambda frame: self.receivers.get(node, _ignore)(frame)

    def endpoint(self, host: str) -> Endpoint:
        index = self.network.hosts.index(host) + 1
        return Endpoint(bytes([2, 0, 0, 0, 0, index]), ip_bytes(self.ips[host]))

    def iteration(
        self,
        epoch: int,
        gradient_mb: float,
        timeout: float = 600.0,
        window: float = 16.0,
        rto: float = 0.5,
        pacing_headroom: float = PACING_HEADROOM,
    ) -> Iteration:
        """One iteration as the Mininet runner starts it: PS and workers released together,
        synthetic gradients of seed `epoch`; runs until done or `timeout` virtual seconds.
        Workers pace at `pacing_headroom` of their planned rate (the runner's by default)."""
        by_task: dict[tuple[int, int], list[WorkerAssignment]] = {}
        for a in self.assignments:
            by_task.setdefault((a.job_id, a.task_id), []).append(a)
        (job, task), rows = next(iter(by_task.items()))
        elements = int(gradient_mb * 2**20) // 4
        count = -(-elements // K)
        first = rows[0]
        # The simulated sockets and plan stand in for the real ones (duck-typed).
        ps = ParameterServer(
            self.sockets[first.ps],  # type: ignore[arg-type]
            self.endpoint(first.ps),
            Task(job, task),
            len(rows),
            count,
            first.result_flow_id,
            epoch=epoch,
        )
        intake = PsIntake(ps)
        self.receivers[first.ps] = intake.receive
        into_ps = [link for (_, v), link in self.links.items() if v == first.ps]
        drops_before = sum(link.counts["tail_drops"] for link in into_ps)
        lost_before = self.lost_by_kind()
        dropped_before = self.lost_by_kind("dropped")
        self._ps, self.watchers = ps, []
        workers = []
        for index, a in enumerate(rows):
            grad = synthetic_gradient(epoch, index, elements)
            watcher = SimPlan(self, a.worker)
            self.watchers.append(watcher)
            w = Worker(
                self.sockets[a.worker],  # type: ignore[arg-type]
                self.endpoint(a.worker),
                Endpoint(BROADCAST.mac, ip_bytes(a.ps_ip)),
                Task(job, task),
                a.flow_id,
                a.next_node,
                fragments(grad),
                window=window,
                timeout=rto,
                plan=watcher,  # type: ignore[arg-type]
                rate_scale=MBPS_PER_GBPS / 1000 * pacing_headroom,
                epoch=epoch,
                contributor=index,
                queued=self.sockets[a.worker].queued,
                mark_depth=self.mark_depth,
                query=self.query,
                peers=len(rows),
            )
            sim = SimWorker(self.clock, w)
            self._stall(sim)
            self.receivers[a.worker] = sim.receive
            workers.append((a.worker, sim))
        start = self.clock.now
        for _, sim in workers:
            sim.start()
        self.clock.run_until(start + timeout, lambda: all(s.worker.finished for _, s in workers))
        done = all(s.worker.finished for _, s in workers)
        expected = sum(
            synthetic_gradient(epoch, i, elements).astype(np.int64) for i in range(len(rows))
        )
        exact = [
            bool(np.array_equal(s.worker.result.reshape(-1)[:elements].astype(np.int64), expected))
            for _, s in workers
        ]
        waiting: dict[str, object] = (
            {}
            if done
            else {**{name: s.worker.waiting_for() for name, s in workers}, "PS": ps.waiting_for()}
        )
        return Iteration(
            epoch,
            self.clock.now - start if done else None,
            exact,
            ps.finished,
            count,
            ps.miscounted,
            ps.duplicates_ignored,
            sum(s.worker.stats.resent_on_timeout for _, s in workers),
            sum(s.worker.stats.resent_on_control for _, s in workers),
            sum(s.worker.stats.resent_on_loss for _, s in workers),
            sum(s.worker.stats.spurious for _, s in workers),
            waiting,
            [s.worker.rto for _, s in workers],
            intake.counts,
            sum(link.counts["tail_drops"] for link in into_ps) - drops_before,
            {k: n - lost_before[k] for k, n in self.lost_by_kind().items()},
            sum(s.worker.stats.queries for _, s in workers),
            sum(s.worker.stats.nacks for _, s in workers),
            {k: n - dropped_before[k] for k, n in self.lost_by_kind("dropped").items()},
            sum(s.worker.stats.held for _, s in workers),
            sum(s.worker.stats.named for _, s in workers),
            sum(s.worker.stats.resent_on_named for _, s in workers),
        )

    def _stall(self, agent: SimSwitch | SimWorker) -> None:
        """Hold `agent` off the CPU now and then (`Stalls`), until the clock stops."""
        if not self.stalls.per_second:
            return

        def stall() -> None:
            agent.stalled_until = self.clock.now + self.stalls.seconds
            self.clock.at(self.clock.now + self._stall_rng.expovariate(rate), stall)

        rate = self.stalls.per_second
        self.clock.at(self.clock.now + self._stall_rng.expovariate(rate), stall)

    def lost_by_kind(self, cause: str = "lost") -> dict[str, int]:
        """Frames every link's impairment (`cause` "lost") or full queue ("dropped") dropped
        so far, by `LOST_KINDS`."""
        return {k: sum(getattr(link, cause)[k] for link in self.links.values()) for k in LOST_KINDS}


class PsIntake:
    """Counts what reaches the PS by what it is to the PS when it arrives: a sum it has not
    counted yet, one it has (a repeat), one of a fragment already finished, an ACK or a PROBE.
    Read before `ParameterServer.handle` changes the state it is judged by."""

    KINDS = ("new_sums", "repeated_sums", "sums_of_finished", "acks", "probes")

    def __init__(self, ps: ParameterServer) -> None:
        self.ps = ps
        self.counts = dict.fromkeys(self.KINDS, 0)

    def receive(self, frame: bytes) -> None:
        if frame[OFF_UDP + 2 : OFF_UDP + 4] != _INA_PORT or len(frame) < OFF_ELEMS:
            return
        job, task, flags, flow, _, raw, *_ = INA_HEADER.unpack_from(frame, OFF_INA)
        flags = kind_of(flags)
        epoch, wire = split_frag_id(raw)
        ps, frag = self.ps, wire - self.ps.offset
        if (
            (job, task) == (ps.task.job, ps.task.task)
            and epoch == ps.epoch
            and 0 <= frag < ps.fragments
        ):
            kind = {ACK: "acks", PROBE: "probes"}.get(flags)
            if flags == DATA:
                kind = (
                    "sums_of_finished"
                    if ps.done[frag]
                    else "repeated_sums"
                    if (flow, frag) in ps.seen
                    else "new_sums"
                )
            if kind:
                self.counts[kind] += 1
        ps.handle(frame)


def _ignore(frame: bytes) -> None:
    return None


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not a probability between 0 and 1")
    return value


def _positive(kind: type) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text} is not above 0")
        return value

    return parse


def main(argv: list[str] | None = None) -> int:
    """`python -m controller.emulation.faults.lossy_sim`: one line per iteration (virtual seconds,
    exactly-once evidence, resends, what reached the PS) for an impairment on every link of a
    topology, optionally every link slowed and its queue shortened (as
    `controller.emulation.faults.impair.congest` does on Mininet) and one link cut during the last
    iteration."""
    parser = argparse.ArgumentParser(
        prog="python -m controller.emulation.faults.lossy_sim", description=main.__doc__
    )
    parser.add_argument("--topology", default="topologies/examples/aro-fig1.yaml")
    parser.add_argument("--loss", type=_fraction, default=0.0, help="per frame and link (0..1)")
    parser.add_argument("--duplicate", type=_fraction, default=0.0)
    parser.add_argument("--reorder", type=_fraction, default=0.0)
    parser.add_argument("--iterations", type=_positive(int), default=3)
    parser.add_argument("--gradient-mb", type=_positive(float), default=0.25)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--service",
        type=_positive(float),
        default=30e-6,
        help="seconds a switch takes per frame (slow Python switches: 0.0005)",
    )
    parser.add_argument(
        "--link-scale",
        type=_positive(float),
        default=1.0,
        help="every link's rate as a fraction of what the workers pace at "
        "(0.3: the congestion case of RELIABILITY.md section 2)",
    )
    parser.add_argument(
        "--queue", type=_positive(int), default=1000, help="frames a link's queue holds"
    )
    parser.add_argument(
        "--pacing-headroom",
        type=_positive(float),
        default=PACING_HEADROOM,
        help="workers pace at this fraction of their planned rate",
    )
    parser.add_argument(
        "--stalls",
        type=_positive(float),
        default=0.0,
        help="times a second each switch and worker is held off the CPU (a loaded machine)",
    )
    parser.add_argument(
        "--stall-ms",
        type=_positive(float),
        default=20.0,
        help="how long each of those stalls lasts (ms)",
    )
    parser.add_argument(
        "--no-query",
        action="store_true",
        help="workers resend what they find lost without asking the switches first",
    )
    parser.add_argument(
        "--no-keep-results",
        action="store_true",
        help="completed slots keep no RESULT and answer every copy or loss query with "
        "the sum towards the PS (both targets keep results)",
    )
    parser.add_argument(
        "--no-pass-queries",
        action="store_true",
        help="a completed slot sends its sum on again for each loss query round and a "
        "partial sum holding the asker's contribution stays silent (both targets pass "
        "queries on and answer HELD)",
    )
    parser.add_argument(
        "--cut",
        metavar="U-V",
        help="cut link U-V during the last iteration; the plan is recomputed "
        "without it 1.5 virtual s later, as the controller does",
    )
    parser.add_argument(
        "--cut-after",
        type=_positive(float),
        default=0.5,
        help="virtual seconds into the last iteration the cut happens",
    )
    args = parser.parse_args(argv)
    try:
        network = load_topology(args.topology)
    except (OSError, InputError) as error:
        parser.error(str(error))
    emulation = Emulation(
        network,
        seed=args.seed,
        service=args.service,
        impair=Impairments(args.loss, args.duplicate, args.reorder),
        mbps_per_gbps=args.link_scale * MBPS_PER_GBPS,
        queue=args.queue,
        stalls=Stalls(args.stalls, args.stall_ms / 1000),
        query=not args.no_query,
        keep_results=not args.no_keep_results,
        pass_queries=not args.no_pass_queries,
    )
    cut = tuple(args.cut.split("-", 1)) if args.cut else None
    if cut and cut not in emulation.links:
        parser.error(f"--cut {args.cut}: the topology has no link {cut[0]}-{cut[1]}")
    for epoch in range(args.iterations):
        if cut and epoch == args.iterations - 1:
            emulation.cut(cut[0], cut[1], after=args.cut_after)
        it = emulation.iteration(
            epoch, args.gradient_mb, timeout=600, pacing_headroom=args.pacing_headroom
        )
        row = {k: v for k, v in it.__dict__.items() if k != "waiting"}
        row["exact"] = all(it.exact)
        row.update(it.recovery())
        row["plan_version"] = emulation.version
        if not args.no_keep_results:
            row["results_answered"] = sum(
                s.pipeline.results_answered for s in emulation.switches.values()
            )
        print(
            json.dumps(row if it.seconds is not None else {**row, "waiting": it.waiting}),
            flush=True,
        )
        if it.seconds is None:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
