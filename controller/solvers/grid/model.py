"""GRID's problem (1) for one task, with exact (rational) data, and the value of an assignment.

With x integral, every constraint of (1) is an upper bound on r and y, so all workers can send
at the common rate λ and y_s = λ for the used switches S'. The value of an assignment is then

    λ(x) = min(T, C_s / |N_s| (s ∈ S'), B_α / (|N_α| + |S'|), c_e / n_e(x) (link rows)),

N_s the workers x sends to s, N_α those sent to the PS, n_e(x) the flows x puts on link e when
the `links` rows are in: one per worker→node route crossing e and one per used switch whose
route to the PS crosses e. λ* of (1) is therefore always T or some capacity / count, which is
what lets `exact.py` prove it by testing those values only.

The data plane's fan-in limit L (`max_fan_in`) is one more row of (1): |N_s| ≤ L. It is taken
per switch, as (1) has one aggregation node and one merged flow per switch; a switch's points
(one per pipeline its workers enter by) then merge at most L flows each.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import pairwise

from controller.model.network import Network, Task
from controller.solvers.baselines.inatree import PathCache
from controller.solvers.params import SchemeParams

PS = "@ps"  # the aggregation node "the PS itself" in assignments

Edge = tuple[str, str]
Resource = tuple[str, ...]  # ("switch", s), ("ps",), ("link", u, v)


@dataclass
class GridTask:
    """Problem (1) for one task: candidates per worker, C_s, B_α, T, and the fixed routes."""

    task: Task
    big_t: Fraction  # T, the maximum sending rate
    b_ps: Fraction  # B_α, the PS's ingress bandwidth
    cap: dict[str, Fraction]  # C_s per candidate switch
    cand: dict[str, list[str]]  # per worker, its candidate switches (the PS is always one)
    # (n, node) → route worker→node; (s, PS) → route s→PS; node PS means the task's PS
    routes: dict[Edge, list[str]]
    link_cap: dict[Edge, Fraction]
    # L: the most workers one switch merges (the data plane's fan-in); 0: unlimited, as in (1)
    fan_in: int = 0
    _narrowest: dict[Edge, Fraction] = field(default_factory=dict, repr=False)

    def nodes(self, worker: str) -> list[str]:
        return self.cand[worker] + [PS]

    def route(self, src: str, node: str) -> list[str]:
        return self.routes[src, node]

    def narrowest(self, src: str, node: str) -> Fraction:
        """The smallest link capacity on the route src→node (no flow fits above that rate)."""
        if (src, node) not in self._narrowest:
            self._narrowest[src, node] = min(
                self.link_cap[e] for e in pairwise(self.route(src, node))
            )
        return self._narrowest[src, node]


def max_rate(params: SchemeParams, b_ps: float) -> Fraction:
    """T: `max_rate_gbps` if given, else B_α (GRID Table 1: "the ingress bandwidth of the PS")."""
    value = params["max_rate_gbps"]
    value = b_ps if value is None else value
    return exact(value)


def exact(value: float) -> Fraction:
    """A float as the decimal it was written as (100.1, not its binary neighbour)."""
    return Fraction(repr(float(value)))


def ps_ingress(network: Network, task: Task) -> float:
    return sum(network.capacity(u, task.ps) for u in network.graph.predecessors(task.ps))


def switch_capacity(network: Network, switch: str) -> float:
    """C_s: the switch's `aggregation_capacity_gbps`, or, left open, the sum of its incoming
    links (a switch cannot aggregate faster than it receives)."""
    cap = network.spec(switch).aggregation_capacity_gbps
    if cap is None:
        return sum(network.capacity(u, switch) for u in network.graph.predecessors(switch))
    return cap


def build(
    network: Network, task: Task, params: SchemeParams, paths: PathCache, rng: random.Random | None
) -> GridTask:
    """The task's instance; routes are drawn with `rng` (one shortest path per worker→node and
    per switch→PS, in a fixed order), or left out when `rng` is None (R-GRIA without links)."""
    mode = params["candidates"]
    ina = [
        s
        for s in sorted(network.switches)
        if network.is_ina(s) and switch_capacity(network, s) > 0 and paths.reaches(s, task.ps)
    ]
    cand = {}
    for n in task.workers:
        if mode == "all":  # those it reaches without crossing a host (one cabled to the PS
            cand[n] = [s for s in ina if paths.reaches(n, s)]  # reaches no switch)
        else:
            on_path = {v for p in paths(n, task.ps) for v in p}
            cand[n] = [s for s in ina if s in on_path]
    b_ps = ps_ingress(network, task)
    inst = GridTask(
        task,
        max_rate(params, b_ps),
        exact(b_ps),
        {s: exact(switch_capacity(network, s)) for c in cand.values() for s in c},
        cand,
        {},
        {},
        params["max_fan_in"],
    )
    if rng is not None:
        draw_routes(network, inst, paths, rng)
    return inst


def draw_routes(network: Network, inst: GridTask, paths: PathCache, rng: random.Random) -> None:
    """ECMP with the seed: one shortest route per candidate flow, as the LP's link rows use."""
    ps = inst.task.ps
    for src, node in sorted((n, s) for n in inst.task.workers for s in inst.nodes(n)):
        inst.routes[src, node] = rng.choice(paths(src, ps if node == PS else node))
    for s in sorted(inst.cap):
        inst.routes[s, PS] = rng.choice(paths(s, ps))
    for route in inst.routes.values():
        for e in pairwise(route):
            inst.link_cap[e] = exact(network.capacity(*e))


def counts(inst: GridTask, assign: dict[str, str], links: bool) -> dict[Resource, int]:
    """How many rate-λ flows each resource of (1) carries under an integral assignment."""
    used: dict[Resource, int] = {("ps",): 0}
    opened = sorted({s for s in assign.values() if s != PS})
    for node in assign.values():
        key = ("ps",) if node == PS else ("switch", node)
        used[key] = used.get(key, 0) + 1
    used["ps",] += len(opened)
    if links:
        flows = [inst.route(n, node) for n, node in assign.items()]
        flows += [inst.route(s, PS) for s in opened]
        for route in flows:
            for e in pairwise(route):
                used["link", *e] = used.get(("link", *e), 0) + 1
    return used


def capacity(inst: GridTask, resource: Resource) -> Fraction:
    kind = resource[0]
    if kind == "ps":
        return inst.b_ps
    if kind == "switch":
        return inst.cap[resource[1]]
    return inst.link_cap[resource[1], resource[2]]


def value(inst: GridTask, assign: dict[str, str], links: bool) -> Fraction:
    """λ(x), exactly (module docstring); 0 for an x that sends a switch more than L workers
    (no plan of the problem with the limit)."""
    used = counts(inst, assign, links)
    if inst.fan_in and any(r[0] == "switch" and k > inst.fan_in for r, k in used.items()):
        return Fraction(0)
    return min([inst.big_t] + [capacity(inst, r) / k for r, k in used.items() if k > 0])
