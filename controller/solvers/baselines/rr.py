"""`rr`: EINA's random routing baseline (EINA Sec. II-C and IV-A), with multi-aggregation.

EINA describes RR only by its outcome (Fig. 1c) and by contrast with ATP and GRID: traffic may
be aggregated several times. Read with EINA's model (Sec. III-A), each worker hands its
gradient to its own edge aggregator; every aggregator holding workers then forwards its merged
flow to another aggregator drawn at random (with the seed), which merges it again, and so on
up to the PS's aggregator, the root. Draws that would close a loop are excluded, so the result
is a random tree; an idle aggregator drawn as a parent joins the tree and draws its own parent.
The aggregators are EINA's edge aggregators: the INA switches that hosts hang off; between them
traffic takes an ECMP-drawn shortest path through the fabric, merged nowhere else. EINA's
depth limit d* is not applied: the drawn tree is as deep as the draws make it.
"""

from __future__ import annotations

import random
from itertools import pairwise

from controller.model.network import Network, Task
from controller.model.plan import Plan
from controller.solvers import SolveOptions
from controller.solvers.baselines.inatree import (
    AggregationTree,
    PathCache,
    access_switch,
    can_aggregate,
    fan_in_limit,
    follow,
    solve_trees,
)


def solve(network: Network, options: SolveOptions) -> Plan:
    aggregators = {access_switch(network, h) for h in network.hosts}
    aggregators = {s for s in aggregators if can_aggregate(network, s)}
    paths = PathCache(network)  # every worker walks the tree's hops: the same pairs again

    def route(tree: AggregationTree, rng: random.Random) -> None:
        task = tree.task
        parent = _random_tree(network, task, aggregators, rng)
        for w in sorted(task.workers):
            stops = [w, *follow(access_switch(network, w), parent), task.ps]
            path = [w]
            for a, b in pairwise(stops):
                path += rng.choice(paths(a, b))[1:] if a != b else []  # ECMP's draw
            tree.add(w, path, lambda v, *_: v in aggregators)

    return solve_trees(network, "rr", options.seed, route, max_fan_in=fan_in_limit("rr", options))


def _random_tree(
    network: Network, task: Task, aggregators: set[str], rng: random.Random
) -> dict[str, str]:
    """Parent of each aggregator that carries the task's traffic; the PS's switch is the root."""
    root = access_switch(network, task.ps)
    parent: dict[str, str] = {}

    def reaches(x: str, a: str) -> bool:
        while x in parent:
            x = parent[x]
        return x == a

    queue = sorted({access_switch(network, w) for w in task.workers} & aggregators - {root})
    rng.shuffle(queue)
    while queue:
        a = queue.pop(0)
        if a in parent:
            continue
        options = sorted((aggregators | {root}) - {a})
        choice = rng.choice([j for j in options if j == root or not reaches(j, a)])
        parent[a] = choice
        if choice != root and choice not in parent:
            queue.append(choice)
    return parent
