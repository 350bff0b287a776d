"""`geryon`: no INA, each gradient on the least congested short path (GRID Sec. 6.1).

GRID runs Geryon as "the shortest path to the PS for each gradient under the resource
constraints", and its Fig. 1(a) shows what that means: W4 takes a one-hop-longer path to keep
off a congested link. Here workers are placed one by one (in name order) on the path, among
those at most `slack` hops (default 1) longer than the shortest, whose busiest link would carry
the fewest flows per Gbps; ties go to the shorter path, then to the seeded draw.
"""

from __future__ import annotations

import time
from itertools import islice, pairwise

import networkx as nx

from controller.model.network import Network, hosts_do_not_forward
from controller.model.plan import Plan
from controller.solvers import SolveOptions
from controller.solvers.baselines.inatree import add_load, rng_for
from controller.solvers.common import plan_with_evaluated_rates
from controller.solvers.params import SchemeParams


def solve(network: Network, options: SolveOptions) -> Plan:
    started = time.perf_counter()
    rng = rng_for(options.seed)
    slack = SchemeParams("geryon", options.params)["slack"]
    load: dict[tuple[str, str], float] = {}
    paths = {}
    for task in network.tasks:
        chosen = {}
        for w in sorted(task.workers):
            candidates = _near_shortest(network, w, task.ps, slack)

            def score(path: list[str]) -> tuple[float, int]:
                worst = max(
                    (load.get(e, 0.0) + 1) / max(network.capacity(*e), 1e-9) for e in pairwise(path)
                )
                return (round(worst, 9), len(path))

            best = min(score(p) for p in candidates)
            chosen[w] = rng.choice([p for p in candidates if score(p) == best])
            add_load(load, chosen[w])
        paths[task.key] = chosen
    return plan_with_evaluated_rates(network, "geryon", paths, started=started, seed=options.seed)


def _near_shortest(
    network: Network, src: str, dst: str, slack: int, cap: int = 64
) -> list[list[str]]:
    """Simple paths at most `slack` hops longer than the shortest (at most `cap` of them)."""
    found = []
    shortest = None
    graph = hosts_do_not_forward(network.graph, src)
    for path in islice(nx.shortest_simple_paths(graph, src, dst), cap):
        shortest = shortest or len(path)
        if len(path) > shortest + slack:
            break
        found.append(path)
    return found
