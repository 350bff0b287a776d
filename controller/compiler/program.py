"""Compiler: a Plan on a Network → the P4Runtime entities each INA switch needs.

It implements the "What the controller installs" table of `p4src/README.md` by P4Info *names*
(finsy resolves them against whichever P4Info the switch runs, bmv2's or the embedded
target's). Flow identities come from the evaluator's replay of the plan (`task_flows`), so the
switches realise exactly the flows the evaluator scored:

* every flow gets a `flow_id`, unique across the whole plan so that a switch can tell flows
  apart by it alone (plain OpenFlow switches match it in the UDP source port): per task, the
  workers' own flows in worker order, then one per aggregation point, then the task's result
  flow;
* `ina_forward` sends each flow leaving a switch to its planned next hop;
* `ina_aggregate` has one entry per flow merged at a point, with the point's `tag`, the flow's
  `member` bit, the point's `full` bitmap and its `name_group`: a multicast group with one
  replica per member (the port its flow arrives on, instance its member bit), down
  which a loss query at a partial sum NACKs the members missing from it, and `named_host`
  gives each replica its worker's address (p4src/README.md, "Loss query"); a member that is
  a switch's sum is named through one worker whose contribution is in it (`naming_replicas`);
* results go back down a tree: the first reversed worker path to reach a node chooses its
  parent, so every worker receives each result exactly once even where the plan splits paths;
* a task with partial aggregation (`share` < 1) is compiled segment by segment
  (`controller.compiler.segments`): each segment of its fragments is a coarse plan with its own flow
  ids, and each worker learns which flow id and first aggregator each segment uses;
* `job_slots` gives every (job, generation) its own slot region (job isolation, and a new plan
  version never meets the partial sums an old one left behind), `port_pipeline`
  installs the switch's port→pipeline map, and clone session p sends control packets back out
  of port p;
* `host_port` / `host_job` bind every port facing a host to the jobs that host takes part in
  (worker or PS), so a host cannot send for another job (p4src/README.md step 2b);
* `mark_threshold` makes every port mark INA packets congested from `mark_depth` packets
  queued ahead of them, by default (None) from half of the queue the port has
  (`mark_from_queue`; p4src/README.md, "Congestion mark").

Jobs are numbered from the topology's task order, flow ids run on across the plan and the slot
region of a generation is split evenly, unless a `JobLayout` per job is given: then each job
keeps its own job id and its own blocks of flow ids, slots and multicast groups in every
generation, so adding or removing one job leaves every other job's entries exactly as they were
(the controller's job service, `controller.service.admission`).

The per-switch forwarding decisions (`number_tasks`, `flow_routes`, `result_children`,
`host_routes`) are plain data, so the OpenFlow driver for plain switches
(`controller.southbound.openflow`) installs the very same paths.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from itertools import pairwise

import networkx as nx
from finsy import (
    P4CloneSessionEntry,
    P4MulticastGroupEntry,
    P4TableAction,
    P4TableEntry,
    P4TableMatch,
)

from controller.compiler.segments import segment_plans
from controller.evaluator.evaluate import FlowId, TaskFlows, task_flows
from controller.model import patch_panel
from controller.model.network import Network, hosts_do_not_forward
from controller.model.plan import Plan, TaskPlan
from dataplane.frame import (
    FLOW_IDS_PER_GENERATION,
    GENERATIONS,
    MAX_FAN_IN,
    MAX_JOBS,
    SLOTS_PER_PIPE,
)

# Plan versions cycle through GENERATIONS, each with its own flow ids, tags, slot region and
# multicast groups, so that a new plan's entries can be installed beside the old one's
# (make-before-break) and a new plan never meets partial sums an old one left in slots until
# GENERATIONS re-plans later.
GROUPS_PER_GENERATION = 4096
GROUP_BLOCK = GROUPS_PER_GENERATION // MAX_JOBS  # a job's multicast groups under a JobLayout
HOST_SUBNET = ipaddress.ip_network("10.0.0.0/16")


class CompileError(ValueError):
    """A plan that the data plane cannot realise (too many flows, a fan-in over MAX_FAN_IN, ...)."""


@dataclass(frozen=True)
class JobLayout:
    """Where one job's ids live, the same in every generation: its job id (1..31: tags keep 5
    bits of it), flow ids [flow_base, flow_base + flow_count) and slots [slot_base, slot_base +
    slot_count) counted from the generation's start, and multicast groups from `group_base`."""

    job_id: int
    flow_base: int
    flow_count: int
    slot_base: int
    slot_count: int
    group_base: int


Layout = dict[str, JobLayout]  # job name -> its ids
Replica = tuple[int, int, str]  # a name group's: (port, instance = member bit, worker)


@dataclass
class Numbering:
    """The ids the switches and the host agents must agree on, derived from the network."""

    network: Network
    layout: Layout | None = None
    node_id: dict[str, int] = field(init=False)
    host_ip: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        nodes = list(self.network.graph.nodes)
        self.node_id = {n: i + 1 for i, n in enumerate(nodes)}
        hosts = self.network.hosts
        self.host_ip = {h: str(HOST_SUBNET[i + 1]) for i, h in enumerate(hosts)}

    def job_id(self, job: str) -> int:
        if self.layout is not None:
            return job_layout(self.layout, job).job_id
        jobs = list(dict.fromkeys(t.job for t in self.network.tasks))
        return jobs.index(job) + 1

    def task_id(self, job: str, task: str) -> int:
        names = [t.name for t in self.network.tasks if t.job == job]
        return names.index(task)


@dataclass
class SwitchProgram:
    """Everything one switch gets; `entities()` lists them in a safe write order."""

    switch: str
    table_entries: list[P4TableEntry] = field(default_factory=list)
    multicast_groups: list[P4MulticastGroupEntry] = field(default_factory=list)
    clone_sessions: list[P4CloneSessionEntry] = field(default_factory=list)

    def entities(self) -> list:
        return [*self.clone_sessions, *self.multicast_groups, *self.table_entries]


@dataclass(frozen=True)
class WorkerAssignment:
    """What a worker agent needs to send its contribution (published by the controller)."""

    worker: str
    job_id: int
    task_id: int
    flow_id: int
    next_node: int
    ps: str
    ps_ip: str
    rate_gbps: float
    workers_in_task: int
    result_flow_id: int
    version: int
    # the task's fraction of the model (Plan `model_share`): the worker sends that shard of
    # its gradient to this task's PS (dataplane/gradients.py `shard_ranges`); None: the whole
    # gradient
    model_share: float | None = None
    # Partial aggregation: the fragments in [start, end) of what the worker sends this task
    # travel as flow `flow_id` toward `next_node` (`controller.compiler.segments`); empty: all of
    # them as `flow_id` above (which is the first segment's when there are several).
    segments: tuple[Segment, ...] = ()


@dataclass(frozen=True)
class Segment:
    """A worker's flow for the fragments in [start, end) (fractions of its traffic)."""

    start: float
    end: float
    flow_id: int
    next_node: int


def generation(version: int) -> int:
    """The generation a plan version uses; a flow id's generation is flow_id // 2**14."""
    return (version - 1) % GENERATIONS


def job_layout(layout: Layout, job: str) -> JobLayout:
    if job not in layout:
        raise CompileError(f"job {job} has no ids (job id, flow ids, slots) assigned")
    return layout[job]


def compile_plan(
    network: Network,
    plan: Plan,
    version: int = 1,
    layout: Layout | None = None,
    mark_depth: int | None = None,
) -> tuple[dict[str, SwitchProgram], list[WorkerAssignment]]:
    """Compile `plan` as plan `version`, with each job's ids from `layout` if given (see the
    module docstring) and ports marking congestion from `mark_depth` queued packets (None:
    half their own queue); raises CompileError if the plan is inconsistent or exceeds the
    target."""
    # `mark_above`'s parameter: bmv2's enq_qdepth, 19 bits
    if mark_depth is not None and not 0 <= mark_depth < 1 << 19:
        raise CompileError(f"mark depth {mark_depth} is not within 0..{(1 << 19) - 1} packets")
    network = built_network(network, plan)
    ids = Numbering(network, layout)
    gen = generation(version)
    programs = {s: SwitchProgram(s) for s in network.switches}
    for name, prog in programs.items():
        _base_entries(network, plan, ids, name, prog, mark_depth)
    jobs = list(dict.fromkeys(tp.job for tp in plan.tasks))
    region = SLOTS_PER_PIPE // GENERATIONS
    share = region // max(1, len(jobs))
    assignments: list[WorkerAssignment] = []
    group_ids: dict[tuple[str, str], int] = {}  # (switch, job key) -> the last group id given
    firsts: dict[str, int] = {}  # job key -> the group id before its first
    # (switch, job key) -> name groups to number once every result group has its id, which
    # so stays what it was before name groups: [(replicas, the entries that use the group)]
    naming: dict[tuple[str, str], list[tuple[list[Replica], list[P4TableEntry]]]] = {}
    for task in number_tasks(network, plan, version, layout):
        tp, job_id, task_id = task.plan, task.job_id, task.task_id
        for (switch, flow_id), port in flow_routes(network, task).items():
            programs[switch].table_entries.append(
                _entry(
                    "ina_forward",
                    {"job": job_id, "task": task_id, "flow_id": flow_id},
                    "forward",
                    port=port,
                )
            )
        first = gen * GROUPS_PER_GENERATION + (
            0 if layout is None else job_layout(layout, tp.job).group_base
        )
        job_key = "" if layout is None else tp.job
        firsts[job_key] = first
        for seg in task.segments:
            for switch, replicas, entries in _aggregation(
                network, ids, tp, seg, job_id, task_id, gen
            ):
                programs[switch].table_entries += entries
                if replicas:
                    group_ids.setdefault((switch, job_key), first)
                    naming.setdefault((switch, job_key), []).append((replicas, entries))
        for switch, ports in result_children(network, task).items():
            key = (switch, job_key)
            group = group_ids[key] = group_ids.get(key, first) + 1
            prog = programs[switch]
            prog.multicast_groups.append(
                P4MulticastGroupEntry(group, replicas=[(p, 0) for p in ports])
            )
            prog.table_entries.append(
                _entry(
                    "result_multicast",
                    {"job": job_id, "task": task_id},
                    "set_result_group",
                    group=group,
                )
            )
        for switch in {p.switch for p in tp.aggregation}:
            prog = programs[switch]
            if not any(_is_slots_for(e, job_id) for e in prog.table_entries):
                base, count = jobs.index(tp.job) * share, share
                if layout is not None:
                    own = job_layout(layout, tp.job)
                    base, count = own.slot_base, own.slot_count
                prog.table_entries.append(
                    _entry(
                        "job_slots",
                        {"job": job_id, "generation": gen},
                        "set_job_slots",
                        base=gen * region + base,
                        count=count,
                    )
                )
        assignments += _assignments(ids, task, version)
    for (switch, job_key), points in naming.items():
        for replicas, entries in points:
            group = group_ids[(switch, job_key)] = group_ids[(switch, job_key)] + 1
            prog = programs[switch]
            prog.multicast_groups.append(
                P4MulticastGroupEntry(group, replicas=[(port, rid) for port, rid, _ in replicas])
            )
            prog.table_entries += [
                _entry(
                    "named_host",
                    {"group": group, "rid": rid},
                    "set_named_host",
                    addr=int(ipaddress.ip_address(ids.host_ip[worker])),
                )
                for _, rid, worker in replicas
            ]
            for entry in entries:
                assert isinstance(entry.action, P4TableAction)
                entry.action.args["name_group"] = group
    block = GROUPS_PER_GENERATION if layout is None else GROUP_BLOCK
    for (switch, job_key), last in group_ids.items():
        if last - firsts[job_key] > block:
            whose = f"job {job_key}" if job_key else "the plan"
            raise CompileError(
                f"switch {switch} needs {last - firsts[job_key]} multicast groups for {whose} "
                f"(a result group per task, a name group per aggregation point and segment), "
                f"more than the {block} it has"
            )
    return programs, assignments


def built_network(network: Network, plan: Plan) -> Network:
    """The network `plan` runs on: on a pool, the links its patch panel builds, with the
    panel's ports (`patch_panel.judged`); CompileError if the pool cannot build it."""
    built, problems = patch_panel.judged(network, plan)
    if problems:
        raise CompileError(f"plan is inconsistent: {problems[0]}")
    return built


def _entry(table: str, match: dict[str, object], action: str, **params: int) -> P4TableEntry:
    return P4TableEntry(table, match=P4TableMatch(match), action=P4TableAction(action, **params))


def _is_slots_for(entry: P4TableEntry, job_id: int) -> bool:
    return (
        entry.table_id == "job_slots" and entry.match is not None and entry.match["job"] == job_id
    )


def _base_entries(
    network: Network,
    plan: Plan,
    ids: Numbering,
    switch: str,
    prog: SwitchProgram,
    mark_depth: int | None = None,
) -> None:
    """Port→pipeline map, host ports bound to their hosts' jobs, collision clone sessions,
    congestion marking on every port and IPv4 routes to every host."""
    for port, pipe in sorted(network.pipeline_map(switch).items()):
        prog.table_entries.append(
            _entry("port_pipeline", {"ingress_port": port}, "set_pipeline", pipe=pipe)
        )
    for port, jobs in sorted(host_port_jobs(network, plan, ids, switch).items()):
        prog.table_entries.append(_entry("host_port", {"ingress_port": port}, "mark_host_port"))
        prog.table_entries += [
            _entry("host_job", {"ingress_port": port, "job": job}, "permit_job") for job in jobs
        ]
    ports = sorted(d["out_port"] for _, _, d in network.graph.out_edges(switch, data=True))
    prog.clone_sessions = [P4CloneSessionEntry(p, replicas=[(p, 0)]) for p in ports]
    prog.table_entries += [
        _entry("mark_threshold", {"egress_port": p}, "mark_from_queue")
        if mark_depth is None
        else _entry("mark_threshold", {"egress_port": p}, "mark_above", depth=mark_depth)
        for p in ports
    ]
    for ip, port in host_routes(network, ids, switch).items():
        prog.table_entries.append(
            _entry("ipv4_lpm", {"dst_addr": f"{ip}/32"}, "forward", port=port)
        )


@dataclass(frozen=True)
class SegmentNumbering:
    """The fragments [span) of a task as a coarse plan (`controller.compiler.segments`), its flows
    and their ids."""

    span: tuple[float, float]
    plan: TaskPlan
    flows: TaskFlows
    flow_ids: dict[FlowId, int]


@dataclass(frozen=True)
class TaskNumbering:
    """One task's flows with the ids its packets carry: what every southbound driver installs.
    A task without partial aggregation is one segment."""

    plan: TaskPlan
    segments: list[SegmentNumbering]
    job_id: int
    task_id: int
    result_flow: int


def number_tasks(
    network: Network, plan: Plan, version: int = 1, layout: Layout | None = None
) -> list[TaskNumbering]:
    """Give every flow of `plan` (as version `version`) an id unique across the plan: per task
    and segment, the workers' own flows in worker order and one per aggregation point, then
    the task's result flow. With a `layout`, each job's ids run from its own block."""
    ids = Numbering(network, layout)
    gen = generation(version)
    start = gen * FLOW_IDS_PER_GENERATION
    # Per block ("" for the whole plan without a layout): [next free flow id, end of block).
    blocks: dict[str, list[int]] = {}
    out = []
    for tp in plan.tasks:
        key = "" if layout is None else tp.job
        if key not in blocks:
            own = None if layout is None else job_layout(layout, tp.job)
            blocks[key] = (
                [max(1, start), start + FLOW_IDS_PER_GENERATION]
                if own is None
                else [start + own.flow_base, start + own.flow_base + own.flow_count]
            )
        block = blocks[key]
        parts = segment_plans(network, tp)
        whole = parts[0][2] if len(parts) == 1 else task_flows(network, tp)
        if whole.problems:
            raise CompileError(f"plan is inconsistent: {whole.problems[0]}")
        segments = []
        for span, part, flows in parts:
            if flows.problems:  # cannot happen for a consistent plan (controller.compiler.segments)
                raise CompileError(
                    f"{tp.job}/{tp.task}: fragments {span[0]:.6g}-{span[1]:.6g}"
                    f" as a coarse plan: {flows.problems[0]}"
                )
            flow_ids: dict[FlowId, int] = {w: block[0] + i for i, w in enumerate(tp.paths)}
            for point in part.aggregation:
                flow_ids[("agg", point.switch, point.pipeline)] = block[0] + len(flow_ids)
            block[0] += len(flow_ids)
            segments.append(SegmentNumbering(span, part, flows, flow_ids))
        result_flow = block[0]
        block[0] = result_flow + 1
        if block[0] > block[1]:
            room = FLOW_IDS_PER_GENERATION if layout is None else layout[tp.job].flow_count
            raise CompileError(
                f"{'the plan' if layout is None else 'job ' + tp.job} needs "
                f"more than {room} flow ids"
            )
        out.append(
            TaskNumbering(
                tp, segments, ids.job_id(tp.job), ids.task_id(tp.job, tp.task), result_flow
            )
        )
    return out


def flow_routes(network: Network, task: TaskNumbering) -> dict[tuple[str, int], int]:
    """(switch, flow id) → output port, for every flow leaving a switch on its planned path."""
    routes: dict[tuple[str, int], int] = {}
    for seg in task.segments:
        for trace in seg.flows.traces.values():
            for hop, nxt in pairwise(trace):
                if network.is_switch(hop.v):
                    routes.setdefault(
                        (hop.v, seg.flow_ids[hop.leaving]),
                        network.graph.edges[hop.v, nxt.v]["out_port"],
                    )
    return routes


def result_children(network: Network, task: TaskNumbering) -> dict[str, list[int]]:
    """Switch → ports to its children in the task's result tree, by switch name.

    The first reversed worker path to reach a node chooses its parent, so every worker receives
    each result exactly once even where the plan splits paths. A node is a child only if its
    branch leads to a worker: a switch whose workers chose other parents gets no copy."""
    parent: dict[str, str] = {}
    traces = task.segments[0].flows.traces.values()  # every segment has the same paths
    for trace in traces:
        for hop in reversed(trace):
            parent.setdefault(hop.u, hop.v)
    on_the_way: set[str] = set()
    for trace in traces:
        node = trace[0].u  # the worker
        while node in parent and node not in on_the_way:
            on_the_way.add(node)
            node = parent[node]
    children: dict[str, list[str]] = {}
    for child, up in parent.items():
        if child in on_the_way:
            children.setdefault(up, []).append(child)
    return {
        switch: sorted(network.graph.edges[switch, c]["out_port"] for c in below)
        for switch, below in sorted(children.items())
        if network.is_switch(switch)
    }


def host_port_jobs(
    network: Network, plan: Plan, ids: Numbering, switch: str
) -> dict[int, list[int]]:
    """Port facing a host → ids of the jobs that host is a worker or PS of in the plan (maybe
    none); the plan, not the topology, says which hosts a task uses (PARING places them)."""
    jobs: dict[str, set[int]] = {}
    for tp in plan.tasks:
        for host in (tp.ps, *tp.paths):
            jobs.setdefault(host, set()).add(ids.job_id(tp.job))
    return {
        data["in_port"]: sorted(jobs.get(host, ()))
        for host, _, data in network.graph.in_edges(switch, data=True)
        if not network.is_switch(host)
    }


def host_routes(network: Network, ids: Numbering, switch: str) -> dict[str, int]:
    """Host address → output port on a shortest path from `switch` (control packets, pings)."""
    first_hop = {
        dst: path[1]
        for dst, path in nx.single_source_shortest_path(
            hosts_do_not_forward(network.graph, switch), switch
        ).items()
        if dst in ids.host_ip
    }
    return {
        ids.host_ip[host]: network.graph.edges[switch, nxt]["out_port"]
        for host, nxt in sorted(first_hop.items())
    }


def _aggregation(
    network: Network,
    ids: Numbering,
    tp: TaskPlan,
    seg: SegmentNumbering,
    job_id: int,
    task_id: int,
    gen: int,
) -> list[tuple[str, list[Replica], list[P4TableEntry]]]:
    """Per aggregation point of one segment: its switch, the replicas of its name group
    (`naming_replicas`) and its `ina_aggregate` entries, whose `name_group` the caller sets.
    A point keeps its tag in every segment: the segments' fragments differ, so their partial
    sums never share a (fragment, tag)."""
    flows, flow_ids = seg.flows, seg.flow_ids
    out = []
    for point in seg.plan.aggregation:
        inflows = sorted(
            flows.inflow_ids.get((point.switch, point.pipeline), ()), key=flow_ids.__getitem__
        )  # every flow of the segment has an id
        if len(inflows) > MAX_FAN_IN:
            raise CompileError(
                f"{tp.job}/{tp.task}: fan-in {len(inflows)} at {point.switch} "
                f"exceeds the data plane's {MAX_FAN_IN}"
            )
        at_switch = [(a.switch, a.pipeline) for a in tp.aggregation if a.switch == point.switch]
        tag = at_switch.index((point.switch, point.pipeline)) + 1
        full = (1 << len(inflows)) - 1
        out_flow = flow_ids[("agg", point.switch, point.pipeline)]
        next_node = _next_aggregator(ids, tp, flows, out_flow, flow_ids)
        entries = []
        for bit, flow in enumerate(inflows):
            entries.append(
                _entry(
                    "ina_aggregate",
                    {
                        "job": job_id,
                        "task": task_id,
                        "pipe": point.pipeline,
                        "flow_id": flow_ids[flow],
                    },
                    "aggregate",
                    tag=_tag(gen, job_id, task_id, tag),
                    member=1 << bit,
                    full=full,
                    out_flow=out_flow,
                    next_node=next_node,
                    name_group=0,
                )
            )
        replicas = naming_replicas(network, seg, point.switch, inflows)
        out.append((point.switch, replicas, entries))
    return out


def naming_replicas(
    network: Network, seg: SegmentNumbering, switch: str, inflows: list[FlowId]
) -> list[Replica]:
    """(port, instance, worker) per member of a point at `switch`: the port its flow arrives
    on, its member bit, and the worker named when it is missing: its own, or for a member
    that is a switch's sum the first worker (by name) whose contribution is in that sum. That
    worker's resend reaches the slot that made the sum, which sends its stored sum again if
    it completed (`again`, p4src/README.md step 4.2) and is a duplicate there if not: a lost
    sum is repaired without its workers' own queries, and the switches need nothing new."""
    traces = seg.flows.traces
    replicas = []
    for bit, flow in enumerate(inflows):
        candidates = [flow] if isinstance(flow, str) else sorted(traces)
        worker, hop = next(
            (worker, h)
            for worker in candidates
            for h in traces[worker]
            if h.v == switch and h.arriving == flow
        )
        replicas.append((network.graph.edges[switch, hop.u]["out_port"], bit, worker))
    return replicas


def _tag(gen: int, job_id: int, task_id: int, index: int) -> int:
    """Non-zero, unique per switch across generations, jobs and tasks
    (16 bits: 2 generation, 5 job, 4 task, 5 point)."""
    if job_id >= 32 or task_id >= 16 or index >= 32:
        raise CompileError("too many jobs, tasks or aggregation points for 16-bit tags")
    return (gen << 14) | (job_id << 9) | (task_id << 5) | index


def _next_aggregator(ids: Numbering, tp: TaskPlan, flows: TaskFlows, flow_id: int, flow_ids) -> int:
    """Node id of the next point (or the PS) that merges the flow `flow_id`."""
    for trace in flows.traces.values():
        for hop in trace:
            if flow_ids[hop.arriving] == flow_id and hop.leaving != hop.arriving:
                return ids.node_id[hop.v]
    return ids.node_id[tp.ps]


def _assignments(ids: Numbering, task: TaskNumbering, version: int) -> list[WorkerAssignment]:
    tp = task.plan
    out = []
    for worker in tp.paths:
        segments = tuple(
            Segment(
                *seg.span, seg.flow_ids[worker], ids.node_id[_first_aggregator(tp, seg, worker)]
            )
            for seg in task.segments
        )
        first = segments[0]
        out.append(
            WorkerAssignment(
                worker,
                task.job_id,
                task.task_id,
                first.flow_id,
                first.next_node,
                tp.ps,
                ids.host_ip[tp.ps],
                tp.rate_gbps,
                len(tp.paths),
                task.result_flow,
                version,
                tp.model_share,
                segments if len(segments) > 1 else (),
            )
        )
    return out


def _first_aggregator(tp: TaskPlan, seg: SegmentNumbering, worker: str) -> str:
    """The first node merging `worker`'s flow in this segment (the PS if none does)."""
    trace = seg.flows.traces[worker]
    return next((h.v for h in trace if h.leaving != h.arriving), tp.ps)
