"""ECMP-routed INA baselines: `atp`, `random` (ARO's upgrade of ATP) and `switchml`.

All three keep the default ECMP routing (one shortest path per worker drawn with the seed) and
differ only in where they aggregate:

* `atp` (GRID Sec. 6.1, ARO Sec. II-C, EINA Sec. II-C): at the first INA switch with
  aggregation capacity on each worker's path, and again at the PS-side switch when it is INA
  (ATP's two-level worker-ToR / PS-ToR design; ARO's Fig. 3a counts on it). `ps_side=false`
  is the one-level reading of GRID and EINA (data "can only be aggregated on the nearest
  aggregator once"): GRID's figures pass it, and `eina-fig1.yaml` sets it in its `schemes`
  section, which gives EINA's stated 0.4 Gbps (0.333 with the two-level form).
  ATP packets name their aggregator, so a switch merges only what is addressed to it: an
  aggregated flow crosses later first-level aggregators unmerged (an addressed tree).
  PARING's DeepSys+ATP differs (its own tree, `controller.solvers.baselines.placing`).
  `levels=all` is not ATP: every INA switch on the ECMP path aggregates every flow entering it
  (multi-level, as RANDOM but without steering through an INA switch). It exists to measure
  what aggregation above the racks would give GRID's Fig. 12(b) baselines (BENCHMARKS.md).
* Why GRID's Fig. 1 gives 2.25 Gbps here, not the paper's 2.43: ATP's best effort is per
  fragment. When S1's 9 Gbps is exhausted, *part of each* worker's fragments skip it and reach
  the PS raw, filling the 0.75 Gbps left on L1: 2.25 + 0.75 / 4 = 2.43. A plan gives each
  worker one path and one treatment per switch, so a worker either is merged at S1 or crosses
  it raw. With k of W1-W4 merged on their default paths, L1 carries 1 + (4 - k) flows and S1
  k flows: the rate is min(3 / (5 - k), 9 / k), best at k = 4 (2.25); 2.43 would need one
  worker's traffic split between two treatments, i.e. a fragment-level (multi-path) plan.
  `partial=true` makes that plan: points with a `share` of the fragments
  (`controller.solvers.partial`), 2.4375 Gbps on GRID's Fig. 1 (deployed segment by segment,
  `controller.compiler.segments`).
* `random` (ARO Sec. IV-A): ATP's ECMP restricted to paths through a randomly drawn INA switch
  of the top tier (an INA spine in leaf-spine), aggregating at every INA switch on the way, so
  flows may be aggregated two or three times as ARO notes.
* `switchml` (GRID Sec. 6.1): rack-scale aggregation at each worker's own switch, the result
  sent on to the PS ("for fair evaluation" as GRID runs it); a rack's switch merges only its
  rack's workers, so other racks' results cross it on their way to the PS (addressed tree).

In `random`, a flow entering a pipeline that another worker's rule made an aggregation point is
merged there too: ARO's RANDOM aggregates at every INA switch on the way.
"""

from __future__ import annotations

import random

from controller.model.network import Network
from controller.model.plan import Plan
from controller.solvers import SolveOptions
from controller.solvers.baselines.inatree import (
    AggregationTree,
    access_switch,
    can_aggregate,
    ecmp_path,
    fan_in_limit,
    shortest_paths,
    solve_trees,
)
from controller.solvers.params import SchemeParams

_TIER_RANK = {"core": 3, "spine": 2, "aggregation": 1}


def solve_atp(network: Network, options: SolveOptions) -> Plan:
    params = SchemeParams("atp", options.params)
    ps_side = params["ps_side"]
    if params["levels"] == "all":
        plan = _every_ina_plan(network, options)
    else:
        plan = atp_plan(network, options, "atp", ps_side)
    if params["partial"]:  # ATP's best effort per fragment (solvers/partial.py)
        from controller.solvers.partial import best_effort

        return best_effort(network, plan, params["max_fan_in"])
    return plan


def _every_ina_plan(network: Network, options: SolveOptions) -> Plan:
    """ECMP paths, every INA switch on the way merging every flow of the task entering it."""

    def route(tree: AggregationTree, rng: random.Random) -> None:
        for w in tree.task.workers:
            tree.add(
                w, ecmp_path(network, w, tree.task.ps, rng), lambda v, *_: can_aggregate(network, v)
            )

    return solve_trees(network, "atp", options.seed, route, max_fan_in=fan_in_limit("atp", options))


def atp_plan(network: Network, options: SolveOptions, scheme: str, ps_side: bool) -> Plan:
    """ECMP paths, aggregation at each flow's first INA switch (and the PS-side one)."""

    def route(tree: AggregationTree, rng: random.Random) -> None:
        ps = tree.task.ps

        def first_ina(v: str, _p: int, merged: bool, nxt: str) -> bool:
            return can_aggregate(network, v) and (not merged or (ps_side and nxt == ps))

        for w in tree.task.workers:
            tree.add(w, ecmp_path(network, w, ps, rng), first_ina)

    return solve_trees(
        network,
        scheme,
        options.seed,
        route,
        addressed=True,
        max_fan_in=fan_in_limit(scheme, options),
    )


def solve_random(network: Network, options: SolveOptions) -> Plan:
    top = _top_ina(network)

    def route(tree: AggregationTree, rng: random.Random) -> None:
        for w in tree.task.workers:
            paths = shortest_paths(network, w, tree.task.ps)
            apexes = sorted({v for p in paths for v in p[1:-1] if v in top})
            if apexes:
                apex = rng.choice(apexes)
                paths = [p for p in paths if apex in p]
            tree.add(w, rng.choice(paths), lambda v, *_: can_aggregate(network, v))

    return solve_trees(
        network, "random", options.seed, route, max_fan_in=fan_in_limit("random", options)
    )


def _top_ina(network: Network) -> set[str]:
    """INA switches of the highest tier present (spines in leaf-spine, cores in fat-tree)."""
    rank = {s: _TIER_RANK.get(network.switch_spec(s).tier, 0) for s in network.switches}
    top = max(rank.values(), default=0)
    return {s for s, k in rank.items() if top > 0 and k == top and can_aggregate(network, s)}


def solve_switchml(network: Network, options: SolveOptions) -> Plan:
    def route(tree: AggregationTree, rng: random.Random) -> None:
        for w in tree.task.workers:
            tor = access_switch(network, w)

            def at_tor(v, _p, merged, _n, tor=tor):
                return v == tor and can_aggregate(network, v)

            tree.add(w, ecmp_path(network, w, tree.task.ps, rng), at_tor)

    return solve_trees(
        network,
        "switchml",
        options.seed,
        route,
        addressed=True,
        max_fan_in=fan_in_limit("switchml", options),
    )
