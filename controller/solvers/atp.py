"""ECMP-routed INA baselines: `atp`, `random` (ARO's upgrade of ATP) and `switchml`.

All three keep the default ECMP routing (one shortest path per worker drawn with the seed) and
differ only in where they aggregate:

* `atp` (GRID Sec. 6.1, ARO Sec. II-C, PARING Sec. V-B): at the first INA switch with
  aggregation capacity on each worker's path, and again at the PS-side switch when it is INA
  (ATP's two-level worker-ToR / PS-ToR design; ARO's Fig. 3a counts on it). `ps_side=false`
  gives PARING's reading ("first programmable switch or the PS"), used by `deepsys-atp`.
  ATP's best-effort overflow, where part of a worker's fragments skip a full switch and reach
  the PS unaggregated, splits one worker's traffic over two treatments; a plan has one path per
  worker and merges whole flows, so here a full switch slows its workers down instead. That is
  why GRID's Fig. 1 gives 2.25 Gbps here where the paper's fluid count gives 2.43
  (9 Gbps / 4 workers at S1, plus (3 − 2.25) / 4 of overflow on the S1 uplink).
* `random` (ARO Sec. IV-A): ATP's ECMP restricted to paths through a randomly drawn INA switch
  of the top tier (an INA spine in leaf-spine), aggregating at every INA switch on the way, so
  flows may be aggregated two or three times as ARO notes.
* `switchml` (GRID Sec. 6.1): rack-scale aggregation at each worker's own switch, the result
  sent on to the PS ("for fair evaluation" as GRID runs it).

Everywhere, a flow entering a pipeline that another worker's rule made an aggregation point is
merged there too: that is what the data plane does, and the evaluator scores what it does.
"""

from __future__ import annotations

import time

from controller.network import Network
from controller.plan import Plan
from controller.solvers import SolveOptions
from controller.solvers.inatree import (
    AggregationTree,
    access_switch,
    can_aggregate,
    ecmp_path,
    plan_from_trees,
    rng_for,
    shortest_paths,
)

_TIER_RANK = {"core": 3, "spine": 2, "aggregation": 1}


def solve_atp(network: Network, options: SolveOptions) -> Plan:
    return atp_plan(network, options, "atp", bool(options.params.get("ps_side", True)))


def atp_plan(network: Network, options: SolveOptions, scheme: str, ps_side: bool) -> Plan:
    """ECMP paths, aggregation at each flow's first INA switch (and the PS-side one)."""
    started = time.perf_counter()
    rng = rng_for(options.seed)
    trees = []
    for task in network.tasks:
        tree = AggregationTree(network, task)

        def first_ina(v: str, _p: int, merged: bool, nxt: str, ps: str = task.ps) -> bool:
            return can_aggregate(network, v) and (not merged or (ps_side and nxt == ps))
        for w in task.workers:
            tree.add(w, ecmp_path(network, w, task.ps, rng), first_ina)
        trees.append(tree)
    return plan_from_trees(network, scheme, trees, started=started, seed=options.seed)


def solve_random(network: Network, options: SolveOptions) -> Plan:
    started = time.perf_counter()
    rng = rng_for(options.seed)
    top = _top_ina(network)
    trees = []
    for task in network.tasks:
        tree = AggregationTree(network, task)
        for w in task.workers:
            paths = shortest_paths(network, w, task.ps)
            apexes = sorted({v for p in paths for v in p[1:-1] if v in top})
            if apexes:
                apex = rng.choice(apexes)
                paths = [p for p in paths if apex in p]
            tree.add(w, rng.choice(paths), lambda v, *_: can_aggregate(network, v))
        trees.append(tree)
    return plan_from_trees(network, "random", trees, started=started, seed=options.seed)


def _top_ina(network: Network) -> set[str]:
    """INA switches of the highest tier present (spines in leaf-spine, cores in fat-tree)."""
    rank = {s: _TIER_RANK.get(network.spec(s).tier, 0) for s in network.switches}
    top = max(rank.values(), default=0)
    return {s for s, k in rank.items() if top > 0 and k == top and can_aggregate(network, s)}


def solve_switchml(network: Network, options: SolveOptions) -> Plan:
    started = time.perf_counter()
    rng = rng_for(options.seed)
    trees = []
    for task in network.tasks:
        tree = AggregationTree(network, task)
        for w in task.workers:
            tor = access_switch(network, w)
            tree.add(w, ecmp_path(network, w, task.ps, rng),
                     lambda v, _p, merged, _n, tor=tor: v == tor and can_aggregate(network, v))
        trees.append(tree)
    return plan_from_trees(network, "switchml", trees, started=started, seed=options.seed)
