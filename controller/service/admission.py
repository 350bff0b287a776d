"""Admission of jobs at run time: plan the newcomer in what the running jobs leave.

Policy. A running job is never touched by another's arrival or departure: its paths, rates, ids,
slot region and table entries stay exactly as they are. A newcomer is planned alone, by its
scheme, on the residual network: every link, switch aggregator and PS capacity minus what the
running plans use at their rates, charged as the evaluator charges them
(`controller.evaluator.evaluate.resources`). The union of the running plans and the newcomer's
is then judged by the evaluator as one plan, and compiled; the newcomer is refused, with the
reason, unless the union is consistent, within the data plane's limits (fan-in, tables) and has
ids left. Re-planning every job jointly would give fairer rates but move running jobs; that is
left to the daemon's re-plans around dead links and capacity edits, which re-plan every job.

Ids (`controller.compiler.program.JobLayout`): a job id in 1..31 (tags keep 5 bits), given
round robin so a freed id is reused as late as possible; the block of `FLOW_BLOCK` flow ids and
`GROUP_BLOCK` multicast groups that the job id indexes; and a slot region of the size asked,
first fit, disjoint from every running job's, in every generation.

Everything here is pure: it computes a decision and changes nothing, so a refusal leaves the
switches and the controller's state as they were (`controller.service.jobs` installs).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Set
from dataclasses import dataclass, replace
from pathlib import Path

import networkx as nx

from controller.compiler.program import (
    GROUP_BLOCK,
    CompileError,
    JobLayout,
    Layout,
    SwitchProgram,
    WorkerAssignment,
    compile_plan,
)
from controller.evaluator.evaluate import Evaluation, evaluate, resources, task_flows
from controller.model.network import Network, Task, hosts_do_not_forward_to
from controller.model.plan import Plan
from controller.service.job_model import SLOT_REGION, JobRequest
from controller.southbound.p4runtime import check_fits
from dataplane.frame import FLOW_IDS_PER_GENERATION, MAX_JOBS

MAX_JOB_ID = MAX_JOBS - 1  # ids 1..31: the tags' 5 bits, the per-job `forged` counter cells
FLOW_BLOCK = FLOW_IDS_PER_GENERATION // MAX_JOBS  # 512 flow ids per job id
TASK = "t0"  # a job submitted through the API has one task
_TINY = 1e-9  # Gbps: residual capacity below this is none (rounding of the running rates)


class Refused(Exception):
    """The job is not admitted; `reason` is one of `job_model.Refusal`'s, the message one line."""

    def __init__(self, reason: str, message: str, status: int = 409):
        super().__init__(message)
        self.reason, self.status = reason, status


@dataclass
class Admitted:
    """A newcomer's plan and what installing it means; nothing is installed yet."""

    job: str
    layout: JobLayout
    plan: Plan  # the newcomer's own plan (its status and bound are for the residual problem)
    network: Network  # the network with every job's tasks, the newcomer's included
    union: Plan
    programs: dict[str, SwitchProgram]
    assignments: list[WorkerAssignment]
    evaluation: Evaluation  # of the newcomer's plan on the residual network


def initial_layout(network: Network, slots: int) -> Layout:
    """Ids for the topology file's jobs: job ids in file order (as without a layout), each
    with `slots` slots; raises Refused when they do not fit."""
    layout: Layout = {}
    for job in dict.fromkeys(t.job for t in network.tasks):
        layout[job] = new_layout(layout, slots, last_id=len(layout))
    return layout


def new_layout(layout: Layout, slots: int, last_id: int) -> JobLayout:
    """The next free job id after `last_id` (round robin) and a free slot region of `slots`."""
    used = {own.job_id for own in layout.values()}
    job_id = next(
        (i for k in range(MAX_JOB_ID) if (i := (last_id + k) % MAX_JOB_ID + 1) not in used), None
    )
    if job_id is None:
        raise Refused(
            "job ids", f"{MAX_JOB_ID} jobs run already, the most the data plane tells apart"
        )
    taken = sorted((own.slot_base, own.slot_base + own.slot_count) for own in layout.values())
    base, largest = 0, 0
    for start, end in [*taken, (SLOT_REGION, SLOT_REGION)]:
        if start - base >= slots:
            break
        largest = max(largest, start - base)
        base = max(base, end)
    else:
        raise Refused(
            "no slot memory left",
            f"no slot memory left: the job asks {slots} slots per pipeline, the "
            f"largest free block is {largest} of {SLOT_REGION}",
        )
    return JobLayout(job_id, job_id * FLOW_BLOCK, FLOW_BLOCK, base, slots, job_id * GROUP_BLOCK)


def residual(network: Network, plan: Plan) -> Network:
    """`network` with what `plan` uses at its rates taken off every link, switch aggregator and
    PS capacity (as the evaluator charges them), and no tasks."""
    plans = {f"{tp.job}/{tp.task}": tp for tp in plan.tasks}
    flows = {label: task_flows(network, tp) for label, tp in plans.items()}
    demand, capacity = resources(network, plans, flows)
    load: dict[tuple, float] = defaultdict(float)
    for label, uses in demand.items():
        for resource, n in uses.items():
            load[resource] += n * plans[label].rate_gbps
    graph = network.graph.copy()  # edge and node attribute dicts are copied
    for resource, cap in capacity.items():
        left = cap - load[resource]
        left = 0.0 if left < _TINY else left
        if resource[0] == "link":
            u, v = resource[1], resource[2]
            ways = [(u, v), (v, u)] if graph.edges[u, v].get("shared") else [(u, v)]
            for edge in ways:
                graph.edges[edge]["capacity_gbps"] = left
        elif resource[0] == "aggregator" and len(resource) == 2:
            node = graph.nodes[resource[1]]
            node["spec"] = node["spec"].model_copy(update={"aggregation_capacity_gbps": left})
        # A task's own PS capacity or rate cap serves that task alone: nothing to share.
    return replace(network, graph=graph, tasks=[], jobs_beta={})


def busy_hosts(plan: Plan) -> set[str]:
    return {h for tp in plan.tasks for h in (tp.ps, *tp.paths)}


def requested_task(network: Network, plan: Plan, request: JobRequest, name: str) -> Task:
    """The newcomer as a task of the network; Refused (422) for hosts the network lacks."""
    hosts = set(network.hosts)
    if request.placement == "fixed":
        assert request.ps is not None and isinstance(request.workers, list)
        for role, host in (("PS", request.ps), *(("worker", w) for w in request.workers)):
            if host not in network.graph:
                raise Refused(
                    "unknown host",
                    f"unknown host {host!r} (as {role}); the "
                    f"topology's hosts: {_some(network.hosts)}",
                    422,
                )
            if host not in hosts:
                raise Refused("unknown host", f"{host!r} (as {role}) is a switch, not a host", 422)
        return Task(name, TASK, request.ps, tuple(request.workers), request.priority)
    assert isinstance(request.workers, int)  # `placement: free`: a count
    count = request.workers
    free = [h for h in network.hosts if h not in busy_hosts(plan)]
    if len(free) < count + 1:
        raise Refused(
            "capacity",
            f"placement free needs {count + 1} free servers (a PS and "
            f"{count} workers); {len(free)} are free",
        )
    return Task(
        name,
        TASK,
        free[0],
        tuple(free[1 : count + 1]),
        request.priority,
        "free",
        free_hosts=tuple(free),
    )


def _some(names: list[str], shown: int = 8) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def admit(
    network: Network,
    plan: Plan,
    layout: Layout,
    request: JobRequest,
    *,
    scheme: str,
    name: str,
    last_id: int,
    version: int,
    switches: Iterable[str],
    p4info: Path,
    dead_links: Set[tuple[str, str]] = frozenset(),
    time_limit: float | None = None,
    seed: int | None = 0,
    mark_depth: int | None = None,
) -> Admitted:
    """Plan `request` as job `name` beside the running `plan` on `network`, around the links
    known dead (module docstring); raises Refused with the reason."""
    from controller.solvers import SchemeInputError, SolveOptions, UnknownScheme, solve

    own = new_layout(layout, request.slots, last_id)
    task = requested_task(network, plan, request, name)
    left = residual(network.without_links(set(dead_links)), plan)
    if task.placement != "free":
        _reachable(left, task, dead_links)
    alone = replace(left, tasks=[task], jobs_beta={name: request.priority})
    try:
        mine = solve(alone, scheme, SolveOptions(time_limit=time_limit, seed=seed))
    except UnknownScheme as exc:
        raise Refused("unknown scheme", str(exc), 422) from None
    except nx.NetworkXException as exc:  # free placement: no free server pair is connected
        raise Refused("no path", f"{scheme} finds no path for the job: {exc}") from None
    except SchemeInputError as exc:
        raise Refused(
            "no plan", f"{scheme} finds no plan for the job in what the running jobs leave: {exc}"
        ) from None
    if mine.status == "infeasible" or not mine.tasks:
        raise Refused(
            "no plan",
            f"{scheme} finds no plan for the job in what the running jobs leave ({mine.status})",
        )
    alone_eval = evaluate(alone, mine)
    if alone_eval.beyond_data_plane:
        raise Refused("fan-in", alone_eval.beyond_data_plane[0])
    rate = min(tp.rate_gbps for tp in mine.tasks)
    if rate <= _TINY or rate < request.min_rate_gbps * (1 - 1e-9):
        raise Refused(
            "capacity",
            f"what the running jobs leave carries {rate:.6g} Gbps for "
            f"this job{_asked(request)}: {_bottleneck(alone, mine)}",
        )
    placed = _as_placed(task, mine)
    union_net = replace(
        network,
        tasks=[*network.tasks, placed],
        jobs_beta={**network.jobs_beta, name: request.priority},
    )
    union = union_plan(plan, mine.tasks)
    judged = evaluate(union_net, union)
    if not judged.consistent:
        raise Refused(
            "capacity",
            f"the running plans and this job's do not fit together: {judged.problems[0]}",
        )
    full = {**layout, name: own}
    try:
        programs, assignments = compile_plan(union_net, union, version, full, mark_depth)
    except CompileError as exc:
        kind = (
            "fan-in"
            if "fan-in" in str(exc)
            else "flow ids"
            if "flow ids" in str(exc)
            else "table space"
        )
        raise Refused(kind, str(exc)) from None
    too_big = [p for s in switches for p in check_fits(programs[s], p4info)]
    if too_big:
        raise Refused("table space", f"the switches' tables cannot hold the job: {too_big[0]}")
    return Admitted(name, own, mine, union_net, union, programs, assignments, alone_eval)


def _reachable(network: Network, task: Task, dead_links: Set[tuple[str, str]]) -> None:
    """Refuse (409, `no path`) a job some worker of which cannot reach its PS over the links
    alive, before any scheme runs: schemes assume connected tasks and fail each in its own way."""
    to_ps = hosts_do_not_forward_to(network.graph, task.ps)
    cut = [w for w in task.workers if not nx.has_path(to_ps, w, task.ps)]
    if cut:
        dead = f" (links down: {_some([f'{a}-{b}' for a, b in sorted(dead_links)])})"
        raise Refused(
            "no path",
            f"no path from {_some(cut)} to the PS {task.ps} over the links alive"
            + (dead if dead_links else ""),
        )


def _asked(request: JobRequest) -> str:
    return f" (it asks at least {request.min_rate_gbps:.6g})" if request.min_rate_gbps > 0 else ""


def _bottleneck(network: Network, plan: Plan) -> str:
    """The resource that holds the newcomer's rate down: the least capacity left per flow."""
    plans = {f"{tp.job}/{tp.task}": tp for tp in plan.tasks}
    flows = {label: task_flows(network, tp) for label, tp in plans.items()}
    demand, capacity = resources(network, plans, flows)
    uses = [(capacity[e] / n, e) for per in demand.values() for e, n in per.items() if n > 0]
    if not uses:
        return "no capacity left"
    share, worst = min(uses)
    what = f"{worst[0]} {'->'.join(worst[1:])}"
    return f"{what} has {share:.6g} Gbps left per flow of this job"


def _as_placed(task: Task, plan: Plan) -> Task:
    """The task where its plan put it, fixed from now on: a running job's processes do not
    move when the daemon re-plans every job."""
    tp = plan.tasks[0]
    return replace(task, ps=tp.ps, workers=tuple(tp.paths), placement="fixed", free_hosts=())


def union_plan(plan: Plan, tasks: list) -> Plan:
    """The running plan with `tasks` added: each part holds its own claims, none is a proven
    optimum of the joint problem, so the union claims no status beyond `heuristic`."""
    every = [*plan.tasks, *tasks]
    return Plan(
        plan.scheme,
        "heuristic",
        min((tp.rate_gbps for tp in every), default=0.0),
        None,
        0.0,
        plan.seed,
        every,
        plan.topology,
        details={
            **plan.details,
            "objective": "the least task rate; jobs admitted one "
            "by one in what the running ones left",
        },
    )


def without_job(
    network: Network, plan: Plan, layout: Layout, job: str, base: Plan | None = None
) -> tuple[Network, Plan, Layout]:
    """The running state without `job`: its tasks, its ids. When what is left is the plan the
    daemon started with (`base`), that plan, with its status and bound, is back in force."""
    tasks = [t for t in network.tasks if t.job != job]
    betas = {k: v for k, v in network.jobs_beta.items() if k != job}
    kept = [tp for tp in plan.tasks if tp.job != job]
    rest = replace(plan, tasks=kept)
    if base is not None and kept == base.tasks:
        rest = base
    elif kept:
        rest.objective = min(tp.rate_gbps for tp in kept)
    return (
        replace(network, tasks=tasks, jobs_beta=betas),
        rest,
        {k: v for k, v in layout.items() if k != job},
    )
