"""PARING's baselines (PARING Sec. V-B): `deepsys`, `deepsys-atp`, `deepsys-soar`,
`marina`, `panama`.

A plan routes the tasks a topology file defines, so placement is the file's: where PARING
places workers with DeepSys (racks filled first), the example files carry that placement and
these schemes only route.

* The DeepSys tree, shared by the three DeepSys schemes ("we resort to DeepSys for aggregation
  trees"): every node sends toward the PS on a shortest path, and among equal next hops takes
  the first switch of the next layer, i.e. the first in the topology's declaration order, as
  Fig. 1(a) routes "through the first core switch, as well as the first switch in both pods'
  aggregation layer". It is deterministic: the seed does not change it.
* `deepsys`: every gradient along the DeepSys tree, no INA.
* `deepsys-atp`: the DeepSys tree; each worker's gradient is aggregated at the first
  programmable switch it meets, else at the PS (Sec. V-B). A switch that is some worker's first
  programmable switch aggregates every gradient of the task reaching it, intermediate results
  included: in Fig. 1(b) the aggregation switch merges W1, W2 "as well as intermediate results
  from W3, W4" (their edge switch's), while the pod-0 aggregation switch, programmable but
  nobody's first, lets W5, W6's result pass to the PS. With the paper's placement this gives
  its 0.67 Gbps and 18 GB (`tests/test_baselines.py`). ATP's partial aggregation (a full switch
  aggregates what it can and forwards the rest) cannot be written as one path per worker: a
  full switch slows its workers down instead (at Fig. 1's 0.67 Gbps no switch overflows).
* `deepsys-soar`: SOAR's exact dynamic programme on the DeepSys tree: choose at most `k` INA
  switches (default: all) that minimise the total traffic, i.e. the sum over links of the
  flows crossing them. No budget reproduces the paper's DeepSys+SOAR values: they need a
  tree other than DeepSys's (`ina bench paring --paper-search`, docs/benchmarks/journal.md, PARING).
* `marina`: the aggregation tree is an approximate vertex-weighted Steiner tree over the workers
  and the PS (networkx's Mehlhorn 2-approximation; INA switches weigh `ina_weight`, default 0.5,
  other nodes 1, an edge the mean of its ends), oriented toward the PS; every INA switch in it
  aggregates. The tree is then reshaped to balance switch load: up to `rounds` times (default
  8), a subtree hanging off the busiest aggregator moves to another tree neighbour when the
  evaluator says the task gets faster.
* `panama`: PANAMA spreads INA traffic round-robin over several aggregation trees, one per
  top-tier switch (spines, cores), every switch on a tree aggregating. A worker has one path in
  a plan, so the round-robin is over workers (worker i on tree i mod T), not packets. The
  paper's PANAMA values are given by no coarse plan on shortest paths that merges only at
  programmable switches, nor by an even split over trees (docs/benchmarks/journal.md, PARING).
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from functools import cache

import networkx as nx
from networkx.algorithms.approximation import steiner_tree

from controller.evaluator.evaluate import evaluate
from controller.model.network import Network, Task, hosts_do_not_forward, hosts_do_not_forward_to
from controller.model.plan import Plan
from controller.solvers import SolveOptions
from controller.solvers.baselines.atp import _top_ina
from controller.solvers.baselines.inatree import (
    AggregationTree,
    can_aggregate,
    fan_in_limit,
    follow,
    shortest_paths,
    solve_trees,
)
from controller.solvers.common import plan_with_evaluated_rates
from controller.solvers.params import SchemeParams


def solve_deepsys(network: Network, options: SolveOptions) -> Plan:
    started = time.perf_counter()
    paths = {
        t.key: {w: follow(w, deepsys_tree(network, t)) for w in sorted(t.workers)}
        for t in network.tasks
    }
    return plan_with_evaluated_rates(network, "deepsys", paths, started=started, seed=options.seed)


def solve_deepsys_atp(network: Network, options: SolveOptions) -> Plan:
    def first_programmable(v: str, _p: int, merged: bool, _n: str) -> bool:
        return not merged and can_aggregate(network, v)

    def route(tree: AggregationTree, _rng: random.Random) -> None:
        nxt = deepsys_tree(network, tree.task)
        for w in sorted(tree.task.workers):
            tree.add(w, follow(w, nxt), first_programmable)

    return solve_trees(
        network, "deepsys-atp", options.seed, route, max_fan_in=fan_in_limit("deepsys-atp", options)
    )


def deepsys_tree(network: Network, task: Task, rng: random.Random | None = None) -> dict[str, str]:
    """Next hop toward the PS of every node on the workers' shortest paths: the first switch
    of the next layer (declaration order), or with `rng` one drawn as ECMP would."""
    dist = dict(
        nx.single_target_shortest_path_length(
            hosts_do_not_forward_to(network.graph, task.ps), task.ps
        )
    )
    order = {n: i for i, n in enumerate(network.graph.nodes)}
    nxt: dict[str, str] = {}
    frontier = sorted(task.workers)
    while frontier:
        v = frontier.pop()
        if v == task.ps or v in nxt:
            continue
        closer = sorted(
            (
                u
                for u in network.graph.successors(v)
                if dist.get(u, -1) == dist[v] - 1 and (u == task.ps or network.is_switch(u))
            ),
            key=order.__getitem__,
        )
        nxt[v] = rng.choice(closer) if rng else closer[0]
        frontier.append(nxt[v])
    return nxt


# ---------------------------------------------------------------- DeepSys + SOAR


def solve_deepsys_soar(network: Network, options: SolveOptions) -> Plan:
    budget = SchemeParams("deepsys-soar", options.params)["k"]
    k = len(network.switches) if budget is None else budget
    chosen: dict[str, list[str]] = {}

    def route(tree: AggregationTree, _rng: random.Random) -> None:
        task = tree.task
        nxt = deepsys_tree(network, task)
        selected = _soar(network, task, nxt, k)
        chosen["/".join(task.key)] = sorted(selected)
        for w in sorted(task.workers):
            tree.add(w, follow(w, nxt), lambda v, *_: v in selected)

    plan = solve_trees(
        network,
        "deepsys-soar",
        options.seed,
        route,
        max_fan_in=fan_in_limit("deepsys-soar", options),
    )
    plan.details["soar_switches"] = chosen
    return plan


def _soar(network: Network, task: Task, nxt: dict[str, str], k: int) -> set[str]:
    """SOAR's DP: at most k aggregating switches minimising Σ_links flows on the given tree.

    cost(v, d) is the traffic of v's subtree when v's flows, if not merged at v, travel d more
    links before the next merge (or the PS); a merging v sends one flow d links.
    """
    children: dict[str, list[str]] = defaultdict(list)
    hosts_at: dict[str, int] = defaultdict(int)
    for v, u in nxt.items():
        if network.is_switch(v):
            children[u].append(v)
        else:
            hosts_at[u] += 1
    top = nxt[task.workers[0]]
    while nxt.get(top, task.ps) != task.ps:
        top = nxt[top]

    @cache
    def cost(v: str, d: int) -> tuple[tuple[float, ...], tuple]:
        """Best cost of v's subtree per budget 0..k, with the choices that reach it."""
        keep, keep_how = _knapsack([cost(c, d + 1) for c in sorted(children[v])], k)
        keep = [hosts_at[v] * (1 + d) + x for x in keep]
        best = list(keep)
        how: list[tuple] = [(False, keep_how[j]) for j in range(k + 1)]
        if can_aggregate(network, v) and k > 0:
            merge, merge_how = _knapsack([cost(c, 1) for c in sorted(children[v])], k - 1)
            for j in range(1, k + 1):
                total = hosts_at[v] + d + merge[j - 1]
                if total < best[j] - 1e-12:
                    best[j], how[j] = total, (True, merge_how[j - 1])
        return tuple(best), tuple(how)

    selected: set[str] = set()

    def collect(v: str, d: int, j: int) -> None:
        merged, split = cost(v, d)[1][j]
        if merged:
            selected.add(v)
        for c, jc in zip(sorted(children[v]), split, strict=True):
            collect(c, 1 if merged else d + 1, jc)

    collect(top, 1, k)
    return selected


def _knapsack(parts: list[tuple[tuple[float, ...], tuple]], k: int):
    """Min-cost split of a budget over children: per budget, total and each child's share."""
    best = [0.0] * (k + 1)
    split: list[tuple[int, ...]] = [()] * (k + 1)
    for costs, _ in parts:
        new = [float("inf")] * (k + 1)
        new_split: list[tuple[int, ...]] = [()] * (k + 1)
        for j in range(k + 1):
            for jc in range(j + 1):
                total = best[j - jc] + costs[jc]
                if total < new[j]:
                    new[j], new_split[j] = total, (*split[j - jc], jc)
        best, split = new, new_split
    return best, split


# ---------------------------------------------------------------- MARINA


def solve_marina(network: Network, options: SolveOptions) -> Plan:
    started = time.perf_counter()
    params = SchemeParams("marina", options.params)
    weight_ina, rounds = params["ina_weight"], params["rounds"]
    parents = {}
    for task in network.tasks:
        undirected = _marina_graph(network, task, weight_ina)
        tree = steiner_tree(undirected, [*task.workers, task.ps], weight="weight")
        parents[task.key] = dict(nx.bfs_predecessors(tree, task.ps))
    plan = _marina_plan(network, parents, options)
    for _ in range(rounds):
        better = _reshape(network, parents, plan, options)
        if better is None:
            break
        plan = better
    plan.solve_seconds = time.perf_counter() - started
    return plan


def _marina_graph(network: Network, task: Task, weight_ina: float) -> nx.Graph:
    """The links between switches, weighted toward INA switches, and each of the task's hosts
    by one link, its first hop toward the PS (the PS by its last hop from a worker that
    reaches it through a switch, beside any worker cabled to it): hosts stay leaves of the
    Steiner tree, since hosts do not forward."""
    graph = nx.Graph()

    def weight(node: str) -> float:
        return weight_ina if can_aggregate(network, node) else 1.0

    for u, v in network.graph.edges:
        if network.is_switch(u) and network.is_switch(v):
            graph.add_edge(u, v, weight=(weight(u) + weight(v)) / 2)
    ps_on_a_switch = False
    for w in task.workers:
        path = nx.shortest_path(hosts_do_not_forward(network.graph, w), w, task.ps)
        graph.add_edge(w, path[1], weight=(weight(w) + weight(path[1])) / 2)
        if len(path) > 2 and not ps_on_a_switch:
            graph.add_edge(path[-2], task.ps, weight=(weight(path[-2]) + weight(task.ps)) / 2)
            ps_on_a_switch = True
    return graph


def _marina_plan(network: Network, parents: dict, options: SolveOptions) -> Plan:
    def route(tree: AggregationTree, _rng: random.Random) -> None:
        for w in sorted(tree.task.workers):
            tree.add(w, follow(w, parents[tree.task.key]), lambda v, *_: can_aggregate(network, v))

    return solve_trees(
        network, "marina", options.seed, route, max_fan_in=fan_in_limit("marina", options)
    )


def _reshape(network: Network, parents: dict, plan: Plan, options: SolveOptions) -> Plan | None:
    """Move one subtree off the busiest aggregator if that speeds the plan up."""
    loads = evaluate(network, plan).aggregator_loads
    if not loads:
        return None
    hot = max(
        loads,
        key=lambda a: (
            a.load_gbps
            / max(network.spec(a.switch).aggregation_capacity_gbps or float("inf"), 1e-9)
        ),
    )
    task = next(t for t in network.tasks if "/".join(t.key) == hot.task)
    parent = parents[task.key]
    for child in sorted(c for c, p in parent.items() if p == hot.switch):
        below = _subtree(parent, child)
        for alt in sorted(network.graph.successors(child)):
            if (
                alt == hot.switch
                or alt in below
                or (alt not in parent and alt != task.ps)
                or not (alt == task.ps or network.is_switch(alt))
            ):  # hosts do not forward
                continue
            trial = {**parents, task.key: {**parent, child: alt}}
            candidate = _marina_plan(network, trial, options)
            if candidate.objective > plan.objective + 1e-9:
                parents[task.key] = trial[task.key]
                return candidate
    return None


def _subtree(parent: dict[str, str], root: str) -> set[str]:
    below = {root}
    changed = True
    while changed:
        changed = False
        for v, p in parent.items():
            if p in below and v not in below:
                below.add(v)
                changed = True
    return below


# ---------------------------------------------------------------- PANAMA


def solve_panama(network: Network, options: SolveOptions) -> Plan:
    apexes = sorted(
        _top_ina(network)
        | {s for s in network.switches if network.switch_spec(s).tier in ("spine", "core")}
    )

    def route(tree: AggregationTree, rng: random.Random) -> None:
        for i, w in enumerate(sorted(tree.task.workers)):
            paths = shortest_paths(network, w, tree.task.ps)
            if apexes:
                via = [p for p in paths if apexes[i % len(apexes)] in p]
                paths = via or paths
            tree.add(w, rng.choice(paths), lambda v, *_: can_aggregate(network, v))

    return solve_trees(
        network, "panama", options.seed, route, max_fan_in=fan_in_limit("panama", options)
    )
