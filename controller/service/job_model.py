"""What a user submits as a job and what the controller answers: the API's schema.

pydantic models, strict like the topology schema (no `"3"` for a number, no NaN, no unknown
field): FastAPI publishes them as the OpenAPI schema and refuses a body that does not follow
them before any planning starts.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from controller.compiler.program import WorkerAssignment
from controller.model.network import MAX_BETA, MIN_BETA
from dataplane.frame import GENERATIONS, SLOTS_PER_PIPE

HostName = Annotated[str, Field(min_length=1, max_length=256)]
# Slots of one pipeline a generation's region holds (compiler: GENERATIONS regions per pipe).
SLOT_REGION = SLOTS_PER_PIPE // GENERATIONS
DEFAULT_JOB_SLOTS = 128  # eight jobs of the default size fill a region


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)


class JobRequest(_Strict):
    """A training job of one aggregation task: its workers send their gradients to one PS."""

    name: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        description="a name unique among the running jobs (default: job<ID>)",
    )
    placement: Literal["fixed", "free"] = Field(
        default="fixed",
        description="fixed: the hosts given; free: the controller (a placing "
        "scheme such as paring) picks free servers",
    )
    workers: list[HostName] | Annotated[int, Field(ge=1, le=4096)] = Field(
        description="fixed: the worker hosts; free: how many workers"
    )
    ps: HostName | None = Field(default=None, description="the PS host (fixed placement)")
    scheme: str | None = Field(
        default=None, max_length=64, description="routing scheme (default: the controller's)"
    )
    gradient_mb: float | None = Field(
        default=None,
        gt=0,
        le=1e9,
        description="gradient size per worker: the answer adds the communication time",
    )
    priority: float = Field(
        default=1.0,
        ge=MIN_BETA,
        le=MAX_BETA,
        description="the job's weight beta when every job is re-planned jointly (dead links, "
        "capacity edits)",
    )
    min_rate_gbps: float = Field(
        default=0.0,
        ge=0,
        le=1e6,
        description="refuse unless what the running jobs leave gives at least this rate "
        "(0: any positive rate)",
    )
    slots: int = Field(
        default=DEFAULT_JOB_SLOTS,
        ge=1,
        le=SLOT_REGION,
        description="aggregation slots per switch pipeline",
    )

    @model_validator(mode="after")
    def _placement_fields(self) -> JobRequest:
        if self.placement == "fixed":
            if self.ps is None or not isinstance(self.workers, list):
                raise ValueError(
                    "placement fixed needs `ps` (a host) and `workers` (a list of hosts)"
                )
            if len(set(self.workers)) != len(self.workers):
                raise ValueError("a worker is listed twice")
            if self.ps in self.workers:
                raise ValueError(f"{self.ps} is both the PS and a worker")
        elif self.ps is not None or not isinstance(self.workers, int):
            raise ValueError(
                "placement free takes `workers` as a count and no `ps` (the controller places them)"
            )
        return self


Count = Annotated[int, Field(ge=0, le=2**63 - 1)]


class Losses(_Strict):
    """Fragments a worker took for lost, by how it found out."""

    timed_out: Count = Field(default=0, description="retransmission timeouts")
    detected: Count = Field(
        default=0, description="found lost from later results or by the tail loss probe"
    )
    spurious: Count = Field(default=0, description="of those detected, answered after all")


class Resends(_Strict):
    """Packets an agent sent again, by cause."""

    control: Count = Field(default=0, description="on a CONTROL (a slot collision)")
    timeout: Count = Field(default=0, description="on a retransmission timeout")
    loss: Count = Field(default=0, description="on a detected loss")
    unblock: Count = Field(default=0, description="to free a slot a fragment of its held")
    result: Count = Field(default=0, description="PS: a result sent again")


class Counts(_Strict):
    """An agent's traffic counters since it started (or summed over agents and runs)."""

    sent: Count = Field(default=0, description="packets sent")
    aggregations: Count = Field(
        default=0, description="results received (worker) or fragments finished (PS)"
    )
    collisions: Count = Field(default=0, description="CONTROL packets seen: slot collisions")
    duplicates: Count = Field(default=0, description="PS: contributions it had counted already")
    losses: Losses = Losses()
    resends: Resends = Resends()


def summed(counts: list[Counts]) -> Counts:
    """Field by field sum of `counts` (nested too)."""

    def add(a: dict, b: dict) -> dict:
        return {k: add(v, b[k]) if isinstance(v, dict) else v + b[k] for k, v in a.items()}

    total = Counts().model_dump()
    for c in counts:
        total = add(total, c.model_dump())
    return Counts.model_validate(total)


class AgentReport(Counts):
    """`POST /jobs/{id}/counters`: one agent's counters, cumulative since it started (a lost
    report loses nothing); sent every second and once more, `final`, at exit."""

    role: Literal["worker", "ps"]
    host: HostName = Field(description="the agent's host: a worker of the task, or its PS")
    task: int = Field(default=0, ge=0, le=2**16, description="the task id within the job")
    run: str = Field(
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="one per agent process: a new run of an agent adds to what the earlier "
        "ones counted instead of replacing it",
    )
    final: bool = Field(default=False, description="the agent's last report of this run")


class AgentCountsView(Counts):
    runs: int = Field(description="agent processes that reported so far")
    final: bool = Field(description="the last run sent its final report")
    reported_at: float = Field(description="Unix time of the last report")


class AgentCountersView(BaseModel):
    """A job's counters as its agents report them: summed, and per agent
    (`<role> <host> task <id>`), each over all its runs."""

    total: Counts = Counts()
    agents: dict[str, AgentCountsView] = {}


class AggregationView(BaseModel):
    switch: str
    pipeline: int
    fan_in: int
    next_hop: str
    share: float = 1.0


class AgentRows(BaseModel):
    """A job's rows as its agents follow them (`ina worker|ps --api URL --job ID`): the state
    file's `version` and `workers` rows of this job, answered once every switch holds them."""

    version: int
    job_id: int
    name: str
    workers: list[WorkerAssignment]


class TaskView(BaseModel):
    task: str
    ps: str
    rate_gbps: float
    paths: dict[str, list[str]]
    aggregation: list[AggregationView]
    agents: list[WorkerAssignment]


class SlotRegion(BaseModel):
    """Slots [base, base + count) of every pipeline, counted from the start of a generation's
    region; plan version v uses generation (v - 1) mod GENERATIONS."""

    base: int
    count: int
    region_size: int = SLOT_REGION


class FlowIds(BaseModel):
    """The job's flow ids: [base, base + count) within each generation's ids."""

    base: int
    count: int


class JobView(BaseModel):
    id: int = Field(description="the job id its packets carry")
    name: str
    source: Literal["topology", "api"]
    scheme: str
    status: Literal["running"] = "running"
    plan_status: str = Field(
        description="the scheme's status for the problem last solved "
        "for the job: alone in what the running jobs left, "
        "or every job jointly (a re-plan)"
    )
    plan_bound: float | None = None
    submitted_at: float | None = None
    priority: float
    gradient_mb: float | None = None
    communication_seconds: float | None = Field(
        default=None, description="per iteration at the planned rate (with gradient_mb)"
    )
    tasks: list[TaskView]
    slot_region: SlotRegion
    flow_ids: FlowIds
    entries: dict[str, int] = Field(description="table entries the job has on each switch")
    counters: dict[str, int] = Field(
        description="per-job counters of the switches: forged (packets naming the job that "
        "came from a host port not bound to it)"
    )
    agent_counters: AgentCountersView = Field(
        default=AgentCountersView(),
        description="what the job's agents report (POST /jobs/{id}/counters)",
    )


class Refusal(BaseModel):
    """A job the controller does not run, and why; nothing installed changed."""

    detail: str
    reason: Literal[
        "capacity",
        "fan-in",
        "unknown host",
        "no slot memory left",
        "job ids",
        "flow ids",
        "table space",
        "no plan",
        "name taken",
        "unknown scheme",
        "switch error",
        "topology job",
        "not an agent",
    ]


class Problem(BaseModel):
    detail: str


class Removal(BaseModel):
    """A deleted job: what each switch still holds of it, read back after the delete."""

    id: int
    name: str
    deleted_entries: int
    left_on_switches: dict[str, int]
    not_read: list[str] = Field(
        default=[],
        description="switches down at the time: one that comes back is made to "
        "hold the plan in force, which no longer has the job",
    )
