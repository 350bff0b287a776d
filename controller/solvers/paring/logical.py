"""Alg. 1 (model conversion): the logical topology G' = (V', E') PARING plans on.

V' holds the task's free servers (V'_h) and the switches that can aggregate (V'_s); E' joins
every pair with cost c(v1, v2), the fewest hops between them in the physical topology (hosts
never forward, so a path's inner nodes are switches; two servers cabled together are 1 hop
apart, their link a path of its own). `physical_paths` gives the hop-count
shortest paths realising one logical edge.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import networkx as nx

from controller.model.network import Network, Task
from controller.solvers import SchemeInputError
from controller.solvers.baselines.inatree import can_aggregate

INF = math.inf


@dataclass
class Logical:
    """G' and what the algorithms read from it, in the paper's symbols."""

    network: Network
    task: Task
    hosts: list[str]  # V'_h: the task's free servers, in declaration order
    switches: list[str]  # V'_s: aggregation-capable switches, in declaration order
    capacity: dict[str, Fraction | float]  # B_v: a host's as PS; INF = unlimited (IV-C.5)
    cost: dict[tuple[str, str], int]  # c(v1, v2), both orders
    rate_cap: Fraction | float  # R (INF when the topology states none)
    _fabric: nx.Graph = field(repr=False, default_factory=nx.Graph)
    _paths: dict[tuple, list[list[str]]] = field(repr=False, default_factory=dict)
    _hops: dict[tuple, dict[str, int]] = field(repr=False, default_factory=dict)
    # L: the most children a switch merges (the data plane's fan-in); 0: unlimited, as in (1)
    fan_in: int = 0

    @property
    def nodes(self) -> list[str]:
        return self.hosts + self.switches

    def c(self, a: str, b: str) -> int:
        return 0 if a == b else self.cost[(a, b)]

    def physical_paths(
        self, a: str, b: str, blocked: frozenset[str] = frozenset(), limit: int = 64
    ) -> list[list[str]]:
        """Hop-count shortest physical paths a → b through switches only, none in `blocked`
        (cached); [] when there is none."""
        key = (a, b, blocked)
        if key not in self._paths:
            view = nx.subgraph_view(
                self._fabric,
                filter_node=lambda x: (
                    x in (a, b) or (self.network.is_switch(x) and x not in blocked)
                ),
            )
            found = []
            try:
                for path in nx.all_shortest_paths(view, a, b):
                    found.append(path)
                    if len(found) >= limit:
                        break
            except nx.NetworkXNoPath:
                pass
            self._paths[key] = sorted(found)
        return self._paths[key]

    def hops_from(self, a: str, blocked: frozenset[str] = frozenset()) -> dict[str, int]:
        """Fewest hops from `a` to every node through switches not in `blocked` (a BFS that
        never forwards through a host). Without `blocked` it is c(a, ·) of Alg. 1."""
        key = (a, blocked)
        if key in self._hops:
            return self._hops[key]
        dist = {a: 0}
        frontier = [a]
        while frontier:
            nxt = []
            for x in frontier:
                if x != a and not self.network.is_switch(x):
                    continue
                for y in self._fabric.neighbors(x) if x in self._fabric else ():
                    if y not in dist and y not in blocked:
                        dist[y] = dist[x] + 1
                        nxt.append(y)
            frontier = nxt
        self._hops[key] = dist
        return dist


def exact(value: float | None) -> Fraction | float:
    """A capacity as an exact fraction (so ⌊B/r⌋ never suffers rounding), None → INF."""
    return INF if value is None else Fraction(value)


def convert(network: Network, task: Task, fan_in: int = 0) -> Logical:
    """Alg. 1: lines 1-3 keep free servers and aggregation-capable switches, lines 4-6 add an
    edge of hop-count cost between every pair (BFS from each vertex: unit costs, so Floyd's
    all-pairs result is the same)."""
    fabric = nx.Graph()
    for u, v, data in network.graph.edges(data=True):
        if data["capacity_gbps"] > 0 and network.graph.edges[v, u]["capacity_gbps"] > 0:
            fabric.add_edge(u, v)
    hosts = list(task.free_hosts)  # lines 1-2: occupied servers removed
    switches = [s for s in network.switches if can_aggregate(network, s)]  # line 3
    switch_only = fabric.subgraph(s for s in network.switches if s in fabric)
    dist = {s: nx.single_source_shortest_path_length(switch_only, s) for s in switch_only}
    access = {
        h: [s for s in fabric.neighbors(h) if network.is_switch(s)] if h in fabric else []
        for h in hosts
    }
    cost: dict[tuple[str, str], int] = {}
    nodes = hosts + switches

    def hops(a: str, b: str) -> float:
        if fabric.has_edge(a, b):  # neighbours, two hosts cabled together included
            return 1
        starts = access.get(a, [a])
        ends = access.get(b, [b])
        extra = (a in access) + (b in access)
        return (
            min((dist[s].get(t, INF) for s in starts for t in ends if s in dist), default=INF)
            + extra
        )

    for i, a in enumerate(nodes):  # lines 4-6
        for b in nodes[i + 1 :]:
            h = hops(a, b)
            if h < INF:
                cost[(a, b)] = cost[(b, a)] = int(h)
    capacity: dict[str, Fraction | float] = {
        s: exact(network.spec(s).aggregation_capacity_gbps) for s in switches
    }
    for host in hosts:
        capacity[host] = exact(network.ps_capacity(task, host))
    reachable = [h for h in hosts if any((h, x) in cost for x in hosts if x != h)]
    if len(reachable) < len(task.workers) + 1:
        raise SchemeInputError(
            f"{network.source}: task {task.job}/{task.name} needs {len(task.workers)} workers "
            f"and a PS but only {len(reachable)} free servers reach each other"
        )
    return Logical(
        network,
        task,
        hosts,
        switches,
        capacity,
        cost,
        exact(task.rate_cap_gbps),
        fabric,
        fan_in=fan_in,
    )
