"""`aggtree`: AggTree's greedy aggregation tree, as ARO runs it (ARO Sec. II-C and IV-A).

Workers are routed one by one (in name order). Each takes, among its shortest paths to the PS,
the one with the most available bandwidth: a link of capacity b already carrying w of the
task's flows offers b / (w + 1), an INA switch with aggregation rate limit C already merging k
flows offers C / (k + 1), and a path is worth its smallest offer, counted only up to where it
joins the existing tree (beyond that no new flow is added). Every INA switch on the way
aggregates. As ARO notes, once a worker's flow is merged at its leaf, the choice of spine is
the merged flow's, made when the first worker there was routed, so spines are picked for
(possibly aggregated) flows rather than for raw workers. Ties go to the seeded draw.
"""

from __future__ import annotations

import random
from itertools import pairwise

from controller.model.network import Network
from controller.model.plan import Plan
from controller.solvers import SolveOptions
from controller.solvers.baselines.inatree import (
    AggregationTree,
    can_aggregate,
    entry_point,
    fan_in_limit,
    shortest_paths,
    solve_trees,
)


def solve(network: Network, options: SolveOptions) -> Plan:
    return solve_trees(
        network, "aggtree", options.seed, _route, max_fan_in=fan_in_limit("aggtree", options)
    )


def _route(tree: AggregationTree, rng: random.Random) -> None:
    """Workers in name order, each on the path with the best offer given the flows so far."""
    network, task = tree.network, tree.task
    links: dict[tuple[str, str], int] = {}
    merging: dict[str, int] = {}
    for w in sorted(task.workers):
        offers = [
            (_offer(network, tree, p, links, merging), p)
            for p in shortest_paths(network, w, task.ps)
        ]
        best = max(o for o, _ in offers)
        path = rng.choice([p for o, p in offers if o >= best - 1e-12])
        before = set(tree.points)
        route = tree.add(w, path, lambda v, *_: can_aggregate(network, v))
        _commit(network, tree, route, before, links, merging)


def _new_part(network: Network, tree: AggregationTree, path: list[str]):
    """Links and aggregators a new flow along `path` adds, up to where it joins the tree."""
    for u, v in pairwise(path):
        yield ("link", u, v)
        if v == path[-1] or not network.is_switch(v):
            continue
        point = entry_point(network, u, v)
        if point in tree.points:
            yield ("agg", v, v)
            return
        if can_aggregate(network, v):
            yield ("agg", v, v)


def _offer(
    network: Network,
    tree: AggregationTree,
    path: list[str],
    links: dict[tuple[str, str], int],
    merging: dict[str, int],
) -> float:
    worst = float("inf")
    for kind, u, v in _new_part(network, tree, path):
        if kind == "link":
            worst = min(worst, network.capacity(u, v) / (links.get((u, v), 0) + 1))
        else:
            cap = network.spec(v).aggregation_capacity_gbps
            if cap is not None:
                worst = min(worst, cap / (merging.get(v, 0) + 1))
    return worst


def _commit(
    network: Network,
    tree: AggregationTree,
    route: list[str],
    before: set,
    links: dict[tuple[str, str], int],
    merging: dict[str, int],
) -> None:
    """Count the flows the route added: up to the first point that existed before it."""
    for u, v in pairwise(route):
        links[(u, v)] = links.get((u, v), 0) + 1
        if v == route[-1] or not network.is_switch(v):
            continue
        point = entry_point(network, u, v)
        if point in tree.points:
            merging[v] = merging.get(v, 0) + 1
            if point in before:
                return
