"""From a solution (x, y, layers) to the Plan: the patch-panel connections and the paths.

Connections: every built link that carries a flow, in either direction; a link with
x_u^v = 1 but y_u^v + y_v^u = 0 is not used by the AllReduce and is dropped (Sec. III-D), and
so is a switch left without links. Switch ports are numbered 1, 2, ... per switch (hosts first,
then switches, in pool order); a host has one port.

Paths: flows are followed from the highest layer down (every flow u → v has l_u > l_v by (20),
so that order is topological). An aggregator merges every flow entering it into one, sent on
its one outgoing link (9)-(10); a common switch hands its incoming flows to its outgoing links
in the numbers y_u^v says (13). A worker's path is its flow's nodes until merged, then the
merged flow's. An aggregator that receives a single flow just forwards it (no aggregation
point: merging one flow changes nothing and costs switch state).
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.model.plan import AggregationPoint
from controller.solvers.atro.instance import Instance
from controller.solvers.atro.model import Solution


@dataclass
class _Flow:
    members: list[str]  # workers whose contributions it carries


def used_links(inst: Instance, sol: Solution) -> list[tuple[str, str]]:
    """Built links carrying a flow of some task (Sec. III-D), as (host or switch, switch)
    pairs in P order."""
    hosts = set(inst.hosts())
    busy = {frozenset((u, v)) for (_i, u, v) in sol.flows}
    return [p for p in inst.links if p in sol.built and (p[0] in hosts or frozenset(p) in busy)]


def patch_panel(inst: Instance, sol: Solution) -> list[dict]:
    """The connections to make: switch port ↔ switch or host port, with b_u^v."""
    links = used_links(inst, sol)
    hosts = set(inst.hosts())
    ports: dict[str, dict[str, int]] = {}
    for s in inst.switches:
        mine = [u for u, v in links if v == s and u in hosts]
        mine += [u if v == s else v for u, v in links if s in (u, v) and u not in hosts]
        ports[s] = {n: i for i, n in enumerate(mine, start=1)}
    out = []
    for u, v in links:
        a, b = (v, u) if u in hosts else (u, v)  # the switch end first
        out.append(
            {
                "a": a,
                "a_port": ports[a][b],
                "b": b,
                "b_port": None if b in hosts else ports[b][a],
                "capacity_gbps": inst.links[u, v],
            }
        )
    return out


def paths(
    inst: Instance, sol: Solution, i: int
) -> tuple[dict[str, list[str]], list[AggregationPoint]]:
    """Task i's worker paths and aggregation points."""
    task = inst.tasks[i]
    path = {w: [w, sol.attach[w]] for w in task.workers}
    waiting: dict[str, list[_Flow]] = {s: [] for s in inst.switches}
    for w in task.workers:
        waiting[sol.attach[w]].append(_Flow([w]))
    points = []
    aggregators = set(inst.aggregators)
    for s in sorted(inst.switches, key=lambda s: -sol.layers[i, s]):
        flows = waiting[s]
        if not flows:
            continue
        outs = [(v, n) for (j, u, v), n in sol.flows.items() if j == i and u == s]
        if s in aggregators and len(flows) > 1:
            ((nxt, _one),) = outs  # (9)-(10): one flow out
            points.append(AggregationPoint(s, 0, len(flows), nxt))
            flows = [_Flow([w for f in flows for w in f.members])]
        queue = list(flows)
        for v, n in outs:
            for f in queue[:n]:
                for w in f.members:
                    path[w].append(v)
                if v != task.ps:
                    waiting[v].append(f)
            queue = queue[n:]
        assert not queue, f"{s}: flows without an outgoing link (13)"
    assert all(p[-1] == task.ps for p in path.values())
    return path, points
