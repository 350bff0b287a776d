"""Building blocks shared by the baseline schemes: path choice and per-task aggregation trees.

Every baseline decides, per worker, a physical path and where the task's flows are summed. Under
the plan semantics (`controller.model.plan`) a flow that enters a (switch, pipeline) marked as an
aggregation point is merged there, unless the point names the workers it merges, and the
merged flow leaves toward one next hop. `AggregationTree` keeps each scheme's routes consistent
with that rule, so a scheme only states its intent (which paths, where it wants to aggregate)
and the physical consequences (forced merges, shared onward paths) follow here, the same way for
all. Schemes whose switches aggregate only what is addressed to them (ATP's aggregator ids,
SwitchML's racks) build an `addressed` tree: its points list their workers and every other flow
crosses them unmerged.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
from itertools import pairwise

import networkx as nx

from controller.evaluator.evaluate import task_flows
from controller.model.network import Network, Task, hosts_do_not_forward
from controller.model.plan import AggregationPoint, Plan, TaskPlan
from controller.solvers import SolveOptions
from controller.solvers.common import plan_with_evaluated_rates
from controller.solvers.params import SchemeParams

Point = tuple[str, int]  # (switch, ingress pipeline)
Source = str | Point  # what enters a point: a worker's own flow or another point's merged flow
# aggregate(switch, pipeline, already_merged, next_node) -> open an aggregation point here?
Policy = Callable[[str, int, bool, str], bool]
# route(tree, rng): add every worker of tree.task to its tree
Route = Callable[["AggregationTree", random.Random], None]


def never(_switch: str, _pipe: int, _merged: bool, _next: str) -> bool:
    return False


def entry_point(network: Network, u: str, v: str) -> Point:
    return (v, network.ingress_pipeline(u, v))


class AggregationTree:
    """One task's routes: worker paths plus aggregation points, each with its onward path.

    With `addressed`, a flow is merged at an existing point only if it was addressed to it (the
    policy said so when the flow first reached it); otherwise every flow entering it is merged.
    """

    def __init__(self, network: Network, task: Task, addressed: bool = False):
        self.network = network
        self.task = task
        self.addressed = addressed
        self.points: dict[Point, list[str]] = {}  # point -> path from its switch to the PS
        self.members: dict[Point, set[Source]] = {}  # addressed trees: who each point merges
        self.intended: dict[str, list[str]] = {}

    def add(self, worker: str, path: list[str], policy: Policy = never) -> list[str]:
        """Route `worker` along `path`, opening points where `policy` asks; returns the route."""
        self.intended[worker] = path
        return self._walk(path, policy)

    def _walk(self, path: list[str], policy: Policy) -> list[str]:
        route = [path[0]]
        seq, i, merged, seen = path, 1, False, set()
        source: Source = path[0]
        while i < len(seq):
            u, v = route[-1], seq[i]
            route.append(v)
            if i < len(seq) - 1 and self.network.is_switch(v):
                point = entry_point(self.network, u, v)
                if point in seen:
                    join = False
                elif point in self.points:
                    join = self._joins(point, source, policy(v, point[1], merged, seq[i + 1]))
                else:
                    join = policy(v, point[1], merged, seq[i + 1])
                    if join:
                        self.points[point] = seq[i:]
                        self.members[point] = set()
                if join:
                    seen.add(point)
                    self.members[point].add(source)
                    merged, seq, i, source = True, self.points[point], 1, point
                    continue
            i += 1
        return route

    def _joins(self, point: Point, source: Source, asked: bool) -> bool:
        return not self.addressed or source in self.members[point] or asked

    def _workers(self, point: Point, trail: frozenset[Point] = frozenset()) -> tuple[str, ...]:
        """The workers whose contributions reach `point`, through the points feeding it."""
        found: set[str] = set()
        for source in self.members[point]:
            if isinstance(source, str):
                found.add(source)
            elif source not in trail:
                found.update(self._workers(source, trail | {point}))
        return tuple(sorted(found))

    def task_plan(self) -> TaskPlan:
        """Final routes (re-walked through every point opened since) and the points they feed."""
        paths = {w: self._walk(p, never) for w, p in self.intended.items()}
        workers = {p: self._workers(p) if self.addressed else None for p in self.points}
        probe = TaskPlan(
            self.task.job,
            self.task.name,
            self.task.ps,
            0.0,
            paths,
            [
                AggregationPoint(s, p, 1, onward[1], workers[(s, p)])
                for (s, p), onward in self.points.items()
            ],
        )
        inflows = task_flows(self.network, probe).aggregator_inflows
        probe.aggregation = [
            # whole flows (no point takes a share): a whole count
            AggregationPoint(s, p, int(inflows[(s, p)]), onward[1], workers[(s, p)])
            for (s, p), onward in sorted(self.points.items())
            if inflows.get((s, p), 0) > 0
        ]
        return probe


def shortest_paths(network: Network, src: str, dst: str, limit: int = 256) -> list[list[str]]:
    """All shortest paths src→dst (sorted, at most `limit`)."""
    try:
        found = []
        for path in nx.all_shortest_paths(hosts_do_not_forward(network.graph, src), src, dst):
            found.append(path)
            if len(found) >= limit:
                break
    except nx.NetworkXNoPath:
        return []
    return sorted(found)


class PathCache:
    """All shortest paths per (src, dst), as `inatree.shortest_paths` lists them, from one
    breadth-first search per destination: R-GRIA asks for the same pairs in every draw and
    for every worker × candidate, RR for every hop of every worker's tree, and networkx's
    per-pair search on a filtered view dominated their solve times."""

    LIMIT = 256  # as `shortest_paths`; past it, that function's own choice of paths is used

    def __init__(self, network: Network):
        self.network = network
        self._paths: dict[tuple[str, str], list[list[str]]] = {}
        self._dist: dict[str, dict[str, int]] = {}
        self._suffixes: dict[str, dict[str, list[list[str]] | None]] = {}

    def __call__(self, src: str, dst: str) -> list[list[str]]:
        if (src, dst) not in self._paths:
            self._paths[src, dst] = self._search(src, dst)
        return self._paths[src, dst]

    def reaches(self, src: str, dst: str) -> bool:
        """Whether a path src→dst exists that crosses no other host (the paths' own search)."""
        return src in self._distances(dst)

    def _distances(self, dst: str) -> dict[str, int]:
        if dst not in self._dist:
            reverse = self.network.graph.reverse(copy=False)
            self._dist[dst] = nx.single_source_shortest_path_length(
                hosts_do_not_forward(reverse, dst), dst
            )
            self._suffixes[dst] = {}
        return self._dist[dst]

    def _search(self, src: str, dst: str) -> list[list[str]]:
        self._distances(dst)
        found = self._from(src, dst)
        if found is None:  # more than LIMIT paths
            return shortest_paths(self.network, src, dst, self.LIMIT)
        return found

    def _from(self, node: str, dst: str) -> list[list[str]] | None:
        """Sorted shortest paths node→dst: node, then each next hop's own in name order, which
        is already sorted (paths share their first node); memoised per destination."""
        memo, dist = self._suffixes[dst], self._dist[dst]
        if node not in memo:
            if node not in dist:
                memo[node] = []
            elif node == dst:
                memo[node] = [[dst]]
            else:
                found: list[list[str]] = []
                too_many = False
                for nxt in sorted(self.network.graph.successors(node)):
                    if nxt != dst and not self.network.is_switch(nxt):
                        continue  # hosts do not forward
                    if dist.get(nxt, -1) == dist[node] - 1:
                        tails = self._from(nxt, dst)
                        if tails is None or len(found) + len(tails) > self.LIMIT:
                            too_many = True
                            break
                        found += [[node, *tail] for tail in tails]
                memo[node] = None if too_many else found
        return memo[node]


def least_loaded(
    paths: Iterable[list[str]],
    network: Network,
    load: dict[tuple[str, str], float],
    rng: random.Random,
) -> list[str]:
    """The path whose busiest link would be least utilised; ties broken with the seeded rng."""

    def util(path: list[str]) -> float:
        return max((load.get(e, 0.0) + 1) / max(network.capacity(*e), 1e-9) for e in pairwise(path))

    scored = [(util(p), p) for p in paths]
    best = min(s for s, _ in scored)
    return rng.choice([p for s, p in scored if s <= best + 1e-12])


def add_load(load: dict[tuple[str, str], float], path: Iterable[str]) -> None:
    for e in pairwise(path):
        load[e] = load.get(e, 0.0) + 1


def access_switch(network: Network, host: str) -> str:
    """The switch a host hangs off (its first hop)."""
    return next(iter(sorted(network.graph.successors(host))))


def rng_for(seed: int | None) -> random.Random:
    return random.Random(0 if seed is None else seed)


def solve_trees(
    network: Network,
    scheme: str,
    seed: int | None,
    route: Route,
    *,
    addressed: bool = False,
    max_fan_in: int = 0,
) -> Plan:
    """The skeleton every tree baseline shares, so they differ only in `route`: one seeded rng
    for the whole solve, one tree per task in task order, rates from the evaluator, points
    within `max_fan_in` (`common.plan_with_evaluated_rates`)."""
    started = time.perf_counter()
    rng = rng_for(seed)
    plans = []
    for task in network.tasks:
        tree = AggregationTree(network, task, addressed)
        route(tree, rng)
        plans.append(tree.task_plan())
    return plan_with_evaluated_rates(
        network,
        scheme,
        {tp.key: tp.paths for tp in plans},
        {tp.key: tp.aggregation for tp in plans},
        started=started,
        seed=seed,
        max_fan_in=max_fan_in,
    )


def fan_in_limit(scheme: str, options: SolveOptions) -> int:
    """The data plane's fan-in limit a baseline plans within: a point over it merges that many
    of its flows and lets the others cross unmerged (`controller.solvers.fanin`)."""
    return SchemeParams(scheme, options.params)["max_fan_in"]


def ecmp_path(network: Network, src: str, dst: str, rng: random.Random) -> list[str]:
    """One shortest path drawn with the seed, as ECMP hashing would."""
    return rng.choice(shortest_paths(network, src, dst))


def ecmp_routes(network: Network, seed: int | None) -> dict[tuple[str, str], dict[str, list[str]]]:
    """Every task's workers on ECMP-drawn shortest paths (tasks in order, workers by name)."""
    rng = rng_for(seed)
    return {
        t.key: {w: ecmp_path(network, w, t.ps, rng) for w in sorted(t.workers)}
        for t in network.tasks
    }


def follow(start: str, parent: dict[str, str]) -> list[str]:
    """The chain start, parent[start], ... up to a node without a parent."""
    chain = [start]
    while chain[-1] in parent:
        chain.append(parent[chain[-1]])
    return chain


def can_aggregate(network: Network, node: str) -> bool:
    """An INA switch whose aggregation capacity is not zero."""
    if not network.is_ina(node):
        return False
    cap = network.spec(node).aggregation_capacity_gbps
    return cap is None or cap > 0
