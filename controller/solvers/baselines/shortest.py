"""`shortest`: every worker on a shortest path to its PS, no in-network aggregation.

Among equal-cost shortest paths one is drawn per worker with the seed, as ECMP hashing would;
the same seed gives the same plan. This is the no-INA reference point (ARO Fig. 1a).
"""

from __future__ import annotations

import random
import time

import networkx as nx

from controller.model.network import Network, hosts_do_not_forward
from controller.model.plan import Plan
from controller.solvers import SolveOptions
from controller.solvers.common import plan_with_evaluated_rates


def solve(network: Network, options: SolveOptions) -> Plan:
    started = time.perf_counter()
    rng = random.Random(options.seed if options.seed is not None else 0)
    paths = {}
    for task in network.tasks:
        paths[task.key] = {
            w: rng.choice(
                sorted(nx.all_shortest_paths(hosts_do_not_forward(network.graph, w), w, task.ps))
            )
            for w in task.workers
        }
    return plan_with_evaluated_rates(network, "shortest", paths, started=started, seed=options.seed)
