"""Independent evaluator: what a plan achieves on a topology, from the paths alone.

Every scheme, baseline or not, is scored here and never by its own claim. The evaluator
replays each worker's path, merging a task's flows where the plan marks the (switch, pipeline)
they enter as an aggregation point: flows entering the same switch through different pipelines
are never merged. That yields the number of flows of each task on each directed link
(`y[i]_u^v` in ARO's notation), from which rates follow:

* a link with `shared_capacity` is one resource for the flows of both its directions;
* an aggregator's capacity is charged for the flows it merges, or, on a switch with
  `aggregates: all` (EINA's edge aggregators), for every flow entering it
  (`controller.evaluator.edge_aggregation`);
* a PS with an aggregation capacity (its own, or its task's `ps_aggregation_capacity_gbps`)
  is charged for every flow entering it, and a task's `rate_cap_gbps` (PARING's R) caps its
  rate;
* a point with `share` < 1 merges only that fraction of the fragments entering it (partial
  aggregation); the rest crosses raw, so links and aggregators carry fractions of flows;
* a task with `placement: free` may sit on other servers than the listed ones: the plan's PS
  and workers must then be free servers of the task, as many workers as it lists; a placed job
  of several sharded tasks (PARING's several PSs) has distinct PSs and the same workers, and
  its rate cap R bounds the sum of its tasks' rates (a worker sends every shard at once);
* a plan with a `patch_panel` (ATRO on a reconfigurable pool) runs on the links it builds,
  which the pool must allow (candidates, port budgets, one link per host:
  `controller.model.patch_panel.judged`); a plan without one on a pool builds every candidate;
* the plan's claimed rates are checked against every link and aggregator capacity;
* achievable rates are the max-min fair allocation (progressive filling) in which task i
  consumes `flows(i, e) * r[i]` of resource e. When the claimed rates are feasible they are
  used as the starting point, so the evaluator reports what the network can carry at least as
  fast as the plan says; when they are not, filling starts from zero and the plan is reported
  as inconsistent.

Progressive filling is written by hand: networkx and OR-Tools offer max-flow / LP, not max-min
fairness over fixed multi-flow paths.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from typing import Any

from controller.evaluator import sharding
from controller.evaluator.edge_aggregation import aggregator_charges
from controller.model import patch_panel
from controller.model.network import Network, Task
from controller.model.plan import LinkLoad, Plan, TaskPlan
from dataplane.frame import MAX_FAN_IN

_EPS = 1e-9

FlowId = str | tuple[str, str, int]  # a worker's own flow, or ("agg", switch, pipeline)
Resource = tuple[str, ...]  # ("link", u, v) or ("aggregator", switch)
# Which fragments of the gradient a piece of traffic carries: disjoint [lo, hi) intervals of
# [0, 1). Points merge the fragments in [0, share) (partial aggregation, Sec. V-C of PARING).
Coverage = tuple[tuple[float, float], ...]
WHOLE: Coverage = ((0.0, 1.0),)


@dataclass(frozen=True)
class Hop:
    """Flow `arriving` crosses link u→v and leaves v as `leaving` (they differ where v merges)."""

    u: str
    v: str
    arriving: FlowId
    leaving: FlowId


@dataclass
class TaskFlows:
    """How one task's paths load the network, before any rate is chosen."""

    # Flow counts; a flow carrying part of the gradient (partial aggregation) counts that part.
    link_flows: dict[tuple[str, str], float]
    aggregator_inflows: dict[tuple[str, int], float]
    unaggregated_hops: int
    problems: list[str] = field(default_factory=list)
    # Per worker, its path as hops with flow identities (what the compiler installs).
    traces: dict[str, list[Hop]] = field(default_factory=dict)
    # Per aggregation point, the identities of the flows it merges.
    inflow_ids: dict[tuple[str, int], set[FlowId]] = field(default_factory=dict)
    # Per aggregation point, the fragments of each flow reaching it (before its `share`).
    arriving: dict[tuple[str, int], dict[FlowId, Coverage]] = field(default_factory=dict)


@dataclass
class TaskEvaluation:
    job: str
    task: str
    ps: str
    rate_gbps: float
    claimed_rate_gbps: float
    flows_into_ps: float
    volume_mb: float | None = None
    volume_without_ina_mb: float | None = None
    communication_seconds: float | None = None


@dataclass
class AggregatorLoad:
    switch: str
    pipeline: int
    task: str
    fan_in: float
    load_gbps: float


@dataclass
class Evaluation:
    scheme: str
    consistent: bool
    tasks: list[TaskEvaluation]
    link_loads: list[LinkLoad]
    aggregator_loads: list[AggregatorLoad]
    problems: list[str]
    gradient_mb: float | None = None
    # What the plan asks of the INA data plane beyond its limits (a fan-in over MAX_FAN_IN): the
    # routing may hold as the paper's model states it, yet the controller cannot install it.
    beyond_data_plane: list[str] = field(default_factory=list)
    # Per job: when its slowest task (or model shard) has arrived.
    job_communication_seconds: dict[str, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["link_loads"] = [
            {
                "from": ll.src,
                "to": ll.dst,
                "flows": ll.flows,
                "load_gbps": ll.load_gbps,
                "capacity_gbps": ll.capacity_gbps,
            }
            for ll in self.link_loads
        ]
        return data


def task_flows(network: Network, tp: TaskPlan) -> TaskFlows:
    """Replay a task's paths and count its flows per link and per aggregation point.

    A worker's traffic travels as pieces (flow identity, fragment coverage). At a point with
    `share` s < 1 (partial aggregation) the fragments in [0, s) of a piece are merged and the
    rest crosses raw: a link then carries fractions of flows (`coverage`)."""
    label = f"{tp.job}/{tp.task}"
    problems = _point_problems(network, tp)
    on_link: dict[tuple[str, str], dict[FlowId, Coverage]] = defaultdict(dict)
    into_aggregator: dict[tuple[str, int], dict[FlowId, Coverage]] = defaultdict(dict)
    arriving: dict[tuple[str, int], dict[FlowId, Coverage]] = defaultdict(dict)
    next_hop_of: dict[tuple[FlowId, str], str] = {}
    merged_at: dict[tuple[FlowId, str, int], bool] = {}
    traces: dict[str, list[Hop]] = {}
    hops = 0
    for worker, path in tp.paths.items():
        if not _path_is_valid(network, tp, worker, path, problems):
            continue
        hops += len(path) - 1
        pieces: list[tuple[FlowId, Coverage]] = [(worker, WHOLE)]
        trace = traces[worker] = []
        # A node may see a path twice only as different flows (EINA relays a merged flow
        # back through the fabric); the same flow twice is a loop no forwarding table holds.
        visits: set[tuple[str, FlowId]] = {(worker, worker)}
        for u, v, after in zip(path, path[1:], [*path[2:], None], strict=False):
            if any((v, flow) in visits for flow, _ in pieces):
                problems.append(
                    f"{label}: path of {worker} brings the same flow back to {v} "
                    f"(it bounces or loops): {path}"
                )
                break
            visits.update((v, flow) for flow, _ in pieces)
            first = pieces[0][0]
            moved: list[tuple[FlowId, Coverage]] = []
            for flow, cover in pieces:
                on_link[(u, v)][flow] = _union(on_link[(u, v)].get(flow, ()), cover)
                if after is None or not network.is_switch(v):
                    moved.append((flow, cover))
                    continue
                pipe = network.ingress_pipeline(u, v)
                point = tp.point_at(v, pipe)
                merging = point if point is not None and point.merges(worker) else None
                merge = merging is not None
                if (
                    isinstance(flow, tuple)
                    and merged_at.setdefault((flow, v, pipe), merge) != merge
                ):
                    problems.append(
                        f"{label}: the flow aggregated at {flow[1]} pipeline {flow[2]} holds "
                        f"workers that {v} pipeline {pipe} merges and workers it does not"
                    )
                if merge:
                    arriving[(v, pipe)][flow] = _union(arriving[(v, pipe)].get(flow, ()), cover)
                taken, rest = _split(cover, merging.share if merging is not None else 0.0)
                if taken:
                    assert merging is not None  # a share of 0 takes nothing
                    into_aggregator[(v, pipe)][flow] = _union(
                        into_aggregator[(v, pipe)].get(flow, ()), taken
                    )
                    moved.append((("agg", v, pipe), taken))
                    if after != merging.next_hop:
                        problems.append(
                            f"{label}: aggregation at {v} pipeline {pipe} declares next_hop "
                            f"{merging.next_hop} but the path of {worker} leaves it toward {after}"
                        )
                if rest:
                    moved.append((flow, rest))
            for flow, _ in moved:
                if isinstance(flow, tuple) and after is not None:
                    known = next_hop_of.setdefault((flow, v), after)
                    if known != after:
                        problems.append(
                            f"{label}: the flow aggregated at {flow[1]} pipeline {flow[2]} leaves "
                            f"{v} toward both {known} and {after}; an aggregated flow cannot split"
                        )
            pieces = moved
            trace.append(Hop(u, v, first, pieces[0][0]))
    for point in tp.aggregation:
        merged = len(into_aggregator.get((point.switch, point.pipeline), ()))
        if merged != point.fan_in:
            problems.append(
                f"{label}: aggregation at {point.switch} pipeline {point.pipeline} declares "
                f"fan-in {point.fan_in} but {merged} flow(s) enter it"
            )
    return TaskFlows(
        link_flows={e: _amount(f) for e, f in on_link.items()},
        aggregator_inflows={a: _amount(f) for a, f in into_aggregator.items()},
        unaggregated_hops=hops,
        problems=list(dict.fromkeys(problems)),  # each problem once, however many paths show it
        traces=traces,
        inflow_ids={a: set(f) for a, f in into_aggregator.items()},
        arriving=dict(arriving),
    )


def _split(cover: Coverage, share: float) -> tuple[Coverage, Coverage]:
    """(the fragments below `share`, the others)."""
    below = tuple((lo, min(hi, share)) for lo, hi in cover if lo < share)
    above = tuple((max(lo, share), hi) for lo, hi in cover if hi > share)
    return below, above


def _union(a: Coverage, b: Coverage) -> Coverage:
    merged: list[tuple[float, float]] = []
    for lo, hi in sorted(a + b):
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return tuple(merged)


def _amount(flows: dict[FlowId, Coverage]) -> int | float:
    """Flows, counting each by the fraction of the gradient it carries (whole: an int)."""
    total = sum(hi - lo for cover in flows.values() for lo, hi in cover)
    return round(total) if abs(total - round(total)) < 1e-12 else total


def _point_problems(network: Network, tp: TaskPlan) -> list[str]:
    """Aggregation points must sit on an existing pipeline of an INA switch with capacity."""
    label = f"{tp.job}/{tp.task}"
    problems = []
    for point in tp.aggregation:
        where = f"{label}: aggregation at {point.switch} pipeline {point.pipeline}"
        if point.next_hop not in network.graph:
            problems.append(f"{where}: next_hop {point.next_hop!r} is not a node of the topology")
        strangers = sorted(set(point.workers or ()) - set(tp.paths))
        if strangers:
            problems.append(f"{where}: lists workers without a path in this task: {strangers}")
        if point.switch not in network.graph or not network.is_switch(point.switch):
            problems.append(f"{where}: no such switch")
        elif not network.is_ina(point.switch):
            problems.append(f"{where}: the switch is not INA-capable")
        elif not 0 <= point.pipeline < network.pipelines(point.switch):
            problems.append(f"{where}: the switch has {network.pipelines(point.switch)} pipelines")
        elif network.spec(point.switch).aggregation_capacity_gbps == 0:
            problems.append(f"{where}: the switch has no aggregation capacity")
    return problems


def _path_is_valid(
    network: Network, tp: TaskPlan, worker: str, path: list[str], problems: list[str]
) -> bool:
    label = f"{tp.job}/{tp.task}"
    if len(path) < 2 or path[0] != worker or path[-1] != tp.ps:
        problems.append(f"{label}: path of {worker} must run from {worker} to {tp.ps}: {path}")
        return False
    hosts = [n for n in path[1:-1] if n in network.graph and not network.is_switch(n)]
    if hosts:
        problems.append(
            f"{label}: path of {worker} passes through host(s) {', '.join(hosts)}; "
            f"hosts do not forward"
        )
        return False
    missing = [(u, v) for u, v in pairwise(path) if not network.graph.has_edge(u, v)]
    if missing:
        where = network.graph.graph.get("links", "the topology")
        problems.append(
            f"{label}: path of {worker} uses link(s) absent from {where}: "
            f"{', '.join(f'{u}->{v}' for u, v in missing)}"
        )
        return False
    return True


def max_min_fair(
    demand: dict[str, dict[Resource, float]],
    capacity: dict[Resource, float],
    start: dict[str, float] | None = None,
) -> dict[str, float]:
    """Progressive filling: raise all unfrozen rates together until a resource saturates.

    `demand[t][e]` is how many units of task t's rate resource e carries (its flow count).
    """
    rate = {t: (start or {}).get(t, 0.0) for t in demand}
    remaining = dict(capacity)
    for t, uses in demand.items():
        for e, n in uses.items():
            remaining[e] -= n * rate[t]
    active = {t for t, uses in demand.items() if uses}
    while active:
        step = float("inf")
        for e, left in remaining.items():
            weight = sum(demand[t].get(e, 0) for t in active)
            if weight > 0:
                step = min(step, max(left, 0.0) / weight)
        if step == float("inf"):
            break
        for t in active:
            rate[t] += step
            for e, n in demand[t].items():
                remaining[e] -= n * step
        saturated = {e for e, left in remaining.items() if left <= _EPS * max(1.0, capacity[e])}
        active = {t for t in active if not any(e in saturated for e in demand[t])}
    return rate


def evaluate(network: Network, plan: Plan, gradient_mb: float | None = None) -> Evaluation:
    """Score `plan` on `network`; `gradient_mb` adds traffic volume and communication time.
    A plan with a patch panel (ATRO) is scored on the network the panel builds from the
    topology's candidate links, and must be buildable there (`patch_panel.judged`)."""
    network, problems = patch_panel.judged(network, plan)
    known = {t.key: t for t in network.tasks}
    flows: dict[str, TaskFlows] = {}
    plans: dict[str, TaskPlan] = {}
    for tp in plan.tasks:
        label = f"{tp.job}/{tp.task}"
        if tp.key in known:
            problems.extend(_task_problems(known[tp.key], tp))
        elif network.tasks:
            problems.append(f"{label}: the topology has no such task")
        elif tp.ps not in network.graph or network.is_switch(tp.ps):
            problems.append(f"{label}: the PS {tp.ps!r} is not a host of the topology")
        plans[label] = tp
        flows[label] = task_flows(network, tp)
        problems.extend(flows[label].problems)

    planned = {tp.key for tp in plan.tasks}
    problems.extend(
        f"{t.job}/{t.name}: the plan does not route this task of the topology"
        for t in network.tasks
        if t.key not in planned
    )
    problems.extend(sharding.problems(plan.tasks))
    problems.extend(_several_ps_problems(network, plan.tasks))

    demand, capacity = resources(network, plans, flows)
    claimed = {label: tp.rate_gbps for label, tp in plans.items()}
    overloaded = _overloaded(demand, capacity, claimed)
    problems.extend(overloaded)
    rates = max_min_fair(demand, capacity, start=None if overloaded else claimed)
    for label, tp in plans.items():
        if tp.rate_gbps > rates[label] * (1 + 1e-6) + _EPS:
            problems.append(
                f"{label}: the plan claims {tp.rate_gbps:.6g} Gbps but its paths carry at most "
                f"{rates[label]:.6g} Gbps"
            )

    return Evaluation(
        beyond_data_plane=_beyond_data_plane(flows),
        scheme=plan.scheme,
        consistent=not problems,
        tasks=[_task_evaluation(plans[k], flows[k], rates[k], gradient_mb) for k in plans],
        link_loads=_link_loads(network, flows, rates),
        aggregator_loads=[
            AggregatorLoad(sw, pipe, label, n, n * rates[label])
            for label, tf in flows.items()
            for (sw, pipe), n in sorted(tf.aggregator_inflows.items())
        ],
        problems=problems,
        gradient_mb=gradient_mb,
        job_communication_seconds=None
        if gradient_mb is None
        else sharding.job_seconds(
            plan.tasks, {tp.key: rates[label] for label, tp in plans.items()}, gradient_mb
        ),
    )


def _beyond_data_plane(flows: dict[str, TaskFlows]) -> list[str]:
    return [
        f"{label}: aggregation at {switch} pipeline {pipe} merges {merged} flows; the data "
        f"plane merges at most {MAX_FAN_IN}"
        for label, tf in flows.items()
        for (switch, pipe), merged in sorted(tf.aggregator_inflows.items())
        if merged > MAX_FAN_IN
    ]


def _task_problems(task: Task, tp: TaskPlan) -> list[str]:
    """The plan's task must be the topology's: same PS, a path for each worker and no other;
    a `placement: free` task instead as many workers, all on distinct free servers."""
    label = f"{tp.job}/{tp.task}"
    if task.placement == "free":
        return _placement_problems(task, tp)
    problems = []
    if tp.ps != task.ps:
        problems.append(f"{label}: the plan sends to {tp.ps!r} but the task's PS is {task.ps!r}")
    missing = [w for w in task.workers if w not in tp.paths]
    if missing:
        problems.append(f"{label}: no path for worker(s) {', '.join(missing)} of the task")
    extra = sorted(set(tp.paths) - set(task.workers))
    if extra:
        problems.append(f"{label}: path(s) for {', '.join(extra)}, not workers of the task")
    return problems


def _placement_problems(task: Task, tp: TaskPlan) -> list[str]:
    """A placed task: its PS and n workers on distinct servers the topology lets it use."""
    label = f"{tp.job}/{tp.task}"
    free = set(task.free_hosts)
    problems = []
    used = [tp.ps, *tp.paths]
    strangers = [h for h in used if h not in free]
    if strangers:
        problems.append(
            f"{label}: placed on {', '.join(strangers)}, not free servers of the "
            f"task (role idle or listed by it)"
        )
    if len(tp.paths) != len(task.workers):
        problems.append(
            f"{label}: the plan places {len(tp.paths)} workers, the task needs {len(task.workers)}"
        )
    if tp.ps in tp.paths:
        problems.append(f"{label}: {tp.ps} is both the PS and a worker")
    return problems


def _several_ps_problems(network: Network, tasks: list[TaskPlan]) -> list[str]:
    """A placed job of several tasks (PARING's several PSs, Sec. IV-C.3): distinct PSs, none
    also a worker; sharded (model_share), every PS gets the same workers (each holds a shard of
    every worker's gradient)."""
    free = {t.job for t in network.tasks if t.placement == "free"}
    by_job: dict[str, list[TaskPlan]] = defaultdict(list)
    for tp in tasks:
        if tp.job in free:
            by_job[tp.job].append(tp)
    problems = []
    for job, tps in by_job.items():
        if len(tps) < 2:
            continue
        pss = [tp.ps for tp in tps]
        workers = set().union(*(tp.paths for tp in tps))
        if len(set(pss)) < len(pss):
            problems.append(f"job {job}: two of its tasks have the same PS")
        if set(pss) & workers:
            problems.append(
                f"job {job}: {', '.join(sorted(set(pss) & workers))} is both a PS and a worker"
            )
        sharded = any(tp.model_share is not None for tp in tps)
        if sharded and any(set(tp.paths) != set(tps[0].paths) for tp in tps):
            problems.append(
                f"job {job}: its PSs hold shards of one model, so every task needs the same workers"
            )
    return problems


def resources(
    network: Network, plans: dict[str, TaskPlan], flows: dict[str, TaskFlows]
) -> tuple[dict[str, dict[Resource, float]], dict[Resource, float]]:
    """Per task, how many units of its rate each resource carries: links, switch aggregators,
    the PS host's aggregation capacity (flows entering it) and the task's rate cap R."""
    demand: dict[str, dict[Resource, float]] = {}
    capacity: dict[Resource, float] = {}
    tasks = {f"{t.job}/{t.name}": t for t in network.tasks}
    for label, tf in flows.items():
        uses: dict[Resource, float] = {}
        task, ps = tasks.get(label), plans[label].ps
        ps_limit = network.ps_capacity(task, ps) if task and ps in network.graph else None
        into_ps = sum(n for (_u, v), n in tf.link_flows.items() if v == ps)
        if ps_limit is not None and into_ps:
            # The host's own capacity serves every task it is PS of; a task's is its own.
            own = network.spec(ps).aggregation_capacity_gbps is not None
            key = ("aggregator", ps) if own else ("aggregator", ps, label)
            uses[key] = into_ps
            capacity[key] = ps_limit
        if task and task.rate_cap_gbps is not None:
            # A sharded job's workers send every shard at once: R caps the sum of its rates.
            cap = ("rate cap", task.job if plans[label].model_share is not None else label)
            uses[cap] = 1
            capacity[cap] = min(capacity.get(cap, task.rate_cap_gbps), task.rate_cap_gbps)
        for (u, v), n in tf.link_flows.items():
            key = ("link", *network.link_key(u, v))  # both directions on a shared link
            uses[key] = uses.get(key, 0) + n
            capacity[key] = network.capacity(u, v)
        for sw, n in aggregator_charges(network, tf.link_flows, tf.aggregator_inflows).items():
            limit = network.spec(sw).aggregation_capacity_gbps
            if limit is not None:
                uses[("aggregator", sw)] = n
                capacity[("aggregator", sw)] = limit
        demand[label] = uses
    return demand, capacity


def _overloaded(
    demand: dict[str, dict[Resource, float]],
    capacity: dict[Resource, float],
    rates: dict[str, float],
) -> list[str]:
    load: dict[Resource, float] = defaultdict(float)
    for t, uses in demand.items():
        for e, n in uses.items():
            load[e] += n * rates[t]
    return [
        f"{' '.join(e[:1])} {'->'.join(e[1:])} carries {load[e]:.6g} Gbps at the claimed rates, "
        f"over its capacity {capacity[e]:.6g} Gbps"
        for e in sorted(load)
        if load[e] > capacity[e] * (1 + 1e-6) + _EPS
    ]


def _task_evaluation(
    tp: TaskPlan, tf: TaskFlows, rate: float, gradient_mb: float | None
) -> TaskEvaluation:
    into_ps = sum(n for (_u, v), n in tf.link_flows.items() if v == tp.ps)
    result = TaskEvaluation(tp.job, tp.task, tp.ps, rate, tp.rate_gbps, into_ps)
    if gradient_mb is not None:
        shard = gradient_mb * sharding.share(tp)
        result.volume_mb = shard * sum(tf.link_flows.values())
        result.volume_without_ina_mb = shard * tf.unaggregated_hops
        result.communication_seconds = sharding.seconds(gradient_mb, sharding.share(tp), rate)
    return result


def _link_loads(
    network: Network, flows: dict[str, TaskFlows], rates: dict[str, float]
) -> list[LinkLoad]:
    count: defaultdict[tuple[str, str], float] = defaultdict(int)
    load: dict[tuple[str, str], float] = defaultdict(float)
    for label, tf in flows.items():
        for e, n in tf.link_flows.items():
            count[e] += n
            load[e] += n * rates[label]
    return [
        LinkLoad(u, v, count[(u, v)], load[(u, v)], network.capacity(u, v))
        for (u, v) in sorted(count)
    ]
