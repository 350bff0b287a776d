"""`spar`: SPAR's greedy aggregator placement with shortest-path routing (ATRO Sec. IV-A).

As ATRO runs it: only top-of-rack switches may host aggregators, aggregators are taken to have
enough capacity, and traffic between elements follows shortest paths (ECMP-drawn with the
seed). Greedily, one aggregator at a time, SPAR places the next one where the evaluated
throughput grows most, until `aggregators` are placed (default: every candidate) or none helps.

In a plan an aggregator can only sit on hardware that can aggregate, so the candidates are the
INA switches that hosts hang off; a study that lets SPAR choose freely marks every ToR INA in
the topology and sets `aggregators` to the budget (ATRO: 4).
"""

from __future__ import annotations

import random
import time

from controller.model.network import Network
from controller.model.plan import Plan
from controller.solvers import SolveOptions
from controller.solvers.baselines.inatree import (
    AggregationTree,
    access_switch,
    can_aggregate,
    ecmp_routes,
    fan_in_limit,
    solve_trees,
)
from controller.solvers.params import SchemeParams


def solve(network: Network, options: SolveOptions) -> Plan:
    started = time.perf_counter()
    routes = ecmp_routes(network, options.seed)
    tors = sorted(
        {access_switch(network, h) for h in network.hosts}
        & {s for s in network.switches if can_aggregate(network, s)}
    )
    budget = SchemeParams("spar", options.params)["aggregators"]
    budget = len(tors) if budget is None else budget
    placed: set[str] = set()
    plan = _plan(network, routes, placed, options)
    while len(placed) < budget:
        trials = [
            (_plan(network, routes, placed | {s}, options), s) for s in tors if s not in placed
        ]
        if not trials:
            break
        best, where = max(trials, key=lambda ps: (ps[0].objective, -tors.index(ps[1])))
        if best.objective <= plan.objective + 1e-9:
            break
        plan, placed = best, placed | {where}
    plan.details["aggregators"] = sorted(placed)
    plan.solve_seconds = time.perf_counter() - started
    return plan


def _plan(network: Network, routes: dict, placed: set[str], options: SolveOptions) -> Plan:
    """The routes drawn up front, aggregated at `placed`."""

    def route(tree: AggregationTree, _rng: random.Random) -> None:
        for w, path in routes[tree.task.key].items():
            tree.add(w, path, lambda v, *_: v in placed)

    return solve_trees(
        network, "spar", options.seed, route, max_fan_in=fan_in_limit("spar", options)
    )
