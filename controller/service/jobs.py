"""Jobs at run time on a running daemon: admit, install, read back, end.

One change at a time: a submission or a deletion holds the session's `changing` lock, which the
daemon's re-plans hold too, so every change starts from the plan in force. Planning runs in a
thread (`controller.service.admission`, pure: a refusal changes nothing); installing is the
daemon's make-before-break: a new job's entries are written beside the running ones (which the
job layout keeps identical, so they are not rewritten), read back from every switch and only
then published to the hosts; an ended job's entries are deleted and the switches read again to
show that none is left. It also keeps what each job's agents report of their traffic
(`report`), until the job ends.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from finsy import P4MulticastGroupEntry, P4TableEntry

from controller.compiler.program import GROUPS_PER_GENERATION, JobLayout, compile_plan
from controller.evaluator import sharding
from controller.model.network import Network
from controller.service import admission
from controller.service.admission import Refused
from controller.service.job_model import (
    AgentCountersView,
    AgentCountsView,
    AgentReport,
    AggregationView,
    Counts,
    FlowIds,
    JobRequest,
    JobView,
    Removal,
    SlotRegion,
    TaskView,
    summed,
)
from controller.southbound.p4runtime import P4INFO, diff_programs, verify
from dataplane.frame import GENERATIONS

if TYPE_CHECKING:
    from controller.service.daemon import Session

LOG = logging.getLogger(__name__)


@dataclass
class JobRecord:
    """What the service remembers of a job beyond its tasks in the plan in force."""

    name: str
    source: str  # "topology" or "api"
    scheme: str
    plan_status: str
    plan_bound: float | None
    priority: float = 1.0
    gradient_mb: float | None = None
    submitted_at: float | None = None


@dataclass
class AgentTally:
    """One agent's reports: the latest counters of each of its last KEEP_RUNS runs (a late
    report of an earlier run, still on its way when the next run started, updates that run
    instead of counting twice) and the sum of the runs before them."""

    KEEP_RUNS = 16

    latest: dict[str, Counts] = field(default_factory=dict)  # run -> its last report
    retired: Counts = field(default_factory=Counts)
    runs: int = 0
    final: bool = False
    at: float = 0.0

    def take(self, run: str, counts: Counts, final: bool) -> None:
        if run not in self.latest:
            self.runs += 1
            if len(self.latest) >= self.KEEP_RUNS:
                oldest = next(iter(self.latest))
                self.retired = summed([self.retired, self.latest.pop(oldest)])
        self.latest[run] = counts
        self.final, self.at = final, time.time()

    def view(self) -> AgentCountsView:
        total = summed([self.retired, *self.latest.values()])
        return AgentCountsView(
            **total.model_dump(), runs=self.runs, final=self.final, reported_at=self.at
        )


@dataclass
class JobService:
    """Submits and ends jobs on `session` (a `daemon.Session` with a job layout)."""

    session: Session
    scheme: str
    time_limit: float | None = None
    seed: int | None = 0
    records: dict[str, JobRecord] = field(default_factory=dict)
    # Measures for /metrics and the state file.
    refused: dict[str, int] = field(default_factory=dict)
    admissions: list[dict] = field(default_factory=list)
    deletions: int = 0
    # job name -> agent ("worker H02 task 0") -> what it reported
    tallies: dict[str, dict[str, AgentTally]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        session = self.session
        if session.layout is None:
            raise ValueError("the session has no job layout")
        self.base = session.plan
        self.last_id = max((own.job_id for own in session.layout.values()), default=0)
        for job in session.layout:
            self.records[job] = JobRecord(
                job,
                "topology",
                session.plan.scheme,
                session.plan.status,
                session.plan.bound,
                session.network.jobs_beta.get(job, 1.0),
            )

    # *** reading

    def ids(self) -> dict[int, str]:
        assert self.session.layout is not None
        return {own.job_id: job for job, own in self.session.layout.items()}

    def view(self, job: str) -> JobView:
        session, record = self.session, self.records[job]
        assert session.layout is not None
        own = session.layout[job]
        tasks = [tp for tp in session.plan.tasks if tp.job == job]
        agents = [a for a in session.assignments if a.job_id == own.job_id]
        seconds = None
        if record.gradient_mb is not None and tasks:
            seconds = sharding.job_seconds(
                tasks, {tp.key: tp.rate_gbps for tp in tasks}, record.gradient_mb
            ).get(job)
        return JobView(
            id=own.job_id,
            name=job,
            source=record.source,  # type: ignore[arg-type]
            scheme=record.scheme,
            plan_status=record.plan_status,
            plan_bound=record.plan_bound,
            submitted_at=record.submitted_at,
            priority=record.priority,
            gradient_mb=record.gradient_mb,
            communication_seconds=seconds,
            tasks=[
                TaskView(
                    task=tp.task,
                    ps=tp.ps,
                    rate_gbps=tp.rate_gbps,
                    paths=tp.paths,
                    aggregation=[
                        AggregationView(
                            switch=a.switch,
                            pipeline=a.pipeline,
                            fan_in=a.fan_in,
                            next_hop=a.next_hop,
                            share=a.share,
                        )
                        for a in tp.aggregation
                    ],
                    agents=[a for a in agents if a.ps == tp.ps and a.worker in tp.paths],
                )
                for tp in tasks
            ],
            slot_region=SlotRegion(base=own.slot_base, count=own.slot_count),
            flow_ids=FlowIds(base=own.flow_base, count=own.flow_count),
            entries={
                name: sum(_names_job(e, own.job_id) for e in d.program.table_entries)
                for name, d in session.drivers.items()
            },
            counters={"forged": self.forged(own.job_id)},
            agent_counters=self.agent_counters(job),
        )

    def agent_counters(self, job: str) -> AgentCountersView:
        agents = {key: t.view() for key, t in sorted(self.tallies.get(job, {}).items())}
        return AgentCountersView(total=summed(list(agents.values())), agents=agents)

    def report(self, job: str, report: AgentReport) -> None:
        """Take an agent's counters; Refused (422) from a host that is not the agent it says."""
        assert self.session.layout is not None
        job_id = self.session.layout[job].job_id
        rows = [a for a in self.session.assignments if a.job_id == job_id]
        in_task = [a for a in rows if a.task_id == report.task]
        if not in_task:
            raise Refused(
                "not an agent",
                f"job {job_id} has no task {report.task} "
                f"(its tasks: {sorted({a.task_id for a in rows})})",
                422,
            )
        hosts = {a.ps for a in in_task} if report.role == "ps" else {a.worker for a in in_task}
        if report.host not in hosts:
            raise Refused(
                "not an agent",
                f"{report.host} is not {'the PS' if report.role == 'ps' else 'a worker'} of "
                f"job {job_id} task {report.task} ({', '.join(sorted(hosts))})",
                422,
            )
        counts = Counts(**report.model_dump(exclude={"role", "host", "task", "run", "final"}))
        key = f"{report.role} {report.host} task {report.task}"
        agents = self.tallies.setdefault(job, {})
        agents.setdefault(key, AgentTally()).take(report.run, counts, report.final)

    def forged(self, job_id: int) -> int:
        cells = (c.get("forged", []) for c in self.session.counters.values())
        return sum(c[job_id] for c in cells if job_id < len(c))

    def summary(self) -> list[dict]:
        """The jobs as the state file lists them."""
        return [
            {"id": own.job_id, "name": job, "source": self.records[job].source}
            for job, own in sorted(
                (self.session.layout or {}).items(), key=lambda item: item[1].job_id
            )
        ]

    def replanned(self) -> None:
        """The daemon re-planned every job jointly: that plan is now what a deletion can come
        back to, and each job's status is the joint problem's."""
        self.base = self.session.plan
        for record in self.records.values():
            record.plan_status, record.plan_bound = self.base.status, self.base.bound

    def merged(self, network: Network) -> Network:
        """A re-read topology with the jobs submitted at run time added back."""
        extra = [
            t
            for t in self.session.network.tasks
            if self.records.get(t.job, None) and self.records[t.job].source == "api"
        ]
        betas = {t.job: self.records[t.job].priority for t in extra}
        return replace(
            network, tasks=[*network.tasks, *extra], jobs_beta={**network.jobs_beta, **betas}
        )

    # *** changing

    async def submit(self, request: JobRequest) -> JobView:
        """Admit and install `request`, or raise Refused with nothing changed."""
        session = self.session
        try:
            async with session.changing:
                assert session.layout is not None
                own = admission.new_layout(session.layout, request.slots, self.last_id)
                name = request.name or f"job{own.job_id}"
                if name in self.records:
                    raise Refused("name taken", f"a job named {name!r} runs already", 409)
                scheme = request.scheme or self.scheme
                started = time.perf_counter()
                admitted = await asyncio.to_thread(
                    admission.admit,
                    session.network,
                    session.plan,
                    session.layout,
                    request,
                    scheme=scheme,
                    name=name,
                    last_id=self.last_id,
                    version=session.version,
                    switches=list(session.drivers),
                    p4info=session.p4info or P4INFO,
                    dead_links=set(session.dead_links),
                    time_limit=self.time_limit,
                    seed=self.seed,
                    mark_depth=session.mark_depth,
                )
                planned = time.perf_counter()
                before = {switch: d.program for switch, d in session.drivers.items()}
                writes = await self._install(admitted.programs)
                problems = await self._read_back()
                if problems:
                    await self._install(before)
                    raise Refused(
                        "switch error",
                        f"the switches did not take the job's entries (rolled back): {problems[0]}",
                        503,
                    )
                session.network, session.plan = admitted.network, admitted.union
                session.layout = {**session.layout, name: admitted.layout}
                session.assignments = admitted.assignments
                self.last_id = admitted.layout.job_id
                self.records[name] = JobRecord(
                    name,
                    "api",
                    scheme,
                    admitted.plan.status,
                    admitted.plan.bound,
                    request.priority,
                    request.gradient_mb,
                    time.time(),
                )
                session.publish()
                done = time.perf_counter()
                self.admissions.append(
                    {
                        "job": name,
                        "plan_seconds": planned - started,
                        "install_seconds": done - planned,
                        "writes": writes,
                    }
                )
                LOG.info(
                    "admitted job %s (id %d): %.3f s to plan, %.3f s to install, %d writes",
                    name,
                    admitted.layout.job_id,
                    planned - started,
                    done - planned,
                    writes,
                )
                return self.view(name)
        except Refused as exc:
            self.refused[exc.reason] = self.refused.get(exc.reason, 0) + 1
            LOG.info("refused a job (%s): %s", exc.reason, exc)
            raise

    async def delete(self, job: str) -> Removal:
        """End `job`: delete its entries everywhere, then read every switch back."""
        session = self.session
        record = self.records[job]
        if record.source != "api":
            raise Refused(
                "topology job",
                f"job {job} comes from the topology file; remove it "
                "there and restart the controller",
                409,
            )
        async with session.changing:
            assert session.layout is not None
            own = session.layout[job]
            network, plan, layout = admission.without_job(
                session.network, session.plan, session.layout, job, self.base
            )
            programs, assignments = await asyncio.to_thread(
                compile_plan, network, plan, session.version, layout, session.mark_depth
            )
            before = sum(
                _names_job(e, own.job_id)
                for d in session.drivers.values()
                for e in d.program.table_entries
            )
            await self._install(programs)
            session.network, session.plan, session.layout = network, plan, layout
            session.assignments = assignments
            del self.records[job]
            self.tallies.pop(job, None)
            self.deletions += 1
            session.publish()
            left = {
                name: await _held_of_job(d.switch, own)
                for name, d in session.drivers.items()
                if _readable(d)
            }
        LOG.info(
            "ended job %s (id %d): %d entries deleted, %d left",
            job,
            own.job_id,
            before,
            sum(left.values()),
        )
        return Removal(
            id=own.job_id,
            name=job,
            deleted_entries=before,
            left_on_switches=left,
            not_read=sorted(set(session.drivers) - set(left)),
        )

    async def _install(self, programs: dict) -> int:
        """Every switch to its program in `programs`, make before break; the updates written."""
        session = self.session
        writes = 0
        for name, driver in session.drivers.items():
            inserts, modifies, deletes = diff_programs(driver.program, programs[name])
            writes += len(inserts) + len(modifies) + len(deletes)
            await driver.move_to(programs[name], write=name not in session.failed_switches)
        for name, driver in session.drivers.items():
            await driver.retire_previous(write=name not in session.failed_switches)
        return writes

    async def _read_back(self) -> list[str]:
        problems = []
        for driver in self.session.drivers.values():
            if _readable(driver):
                problems += await verify(driver.switch, driver.program)
        return problems


def _readable(driver) -> bool:
    """The switch holds the plan as installed and its channel is up: read it back. Not
    `programmed`, whose liveness part is a once-a-second poll that a loaded switch can miss
    while it still answers a read."""
    return driver.installed and driver.switch.is_up


def _names_job(entry: P4TableEntry, job_id: int) -> bool:
    value = entry.match.get("job") if entry.match else None
    try:
        return value is not None and int(value) == job_id
    except (TypeError, ValueError):
        return False


async def _held_of_job(switch, own: JobLayout) -> int:
    """Table entries naming the job and multicast groups in its block, read from `switch`."""
    held = sum([_names_job(e, own.job_id) async for e in switch.read(P4TableEntry())])
    blocks = [
        (
            g * GROUPS_PER_GENERATION + own.group_base,
            g * GROUPS_PER_GENERATION + own.group_base + admission.GROUP_BLOCK,
        )
        for g in range(GENERATIONS)
    ]
    async for group in switch.read(P4MulticastGroupEntry()):
        held += any(lo < group.multicast_group_id <= hi for lo, hi in blocks)
    return held
