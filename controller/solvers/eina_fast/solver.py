"""The scheme `eina-fast`: bisection on the total rate, greedy trees, EINA's LP for the rates.

1. Rates in fixed proportions (equal at first: every PS has every worker), scaled by T;
   bisect T between 0 and the tree-free bound for the largest T the greedy (`greedy.trees`)
   builds trees for.
2. Those trees re-rated by EINA's LP (`eina.rates.best_rates`): the best real rates for them.
3. Repeat 1-2 with the proportions the LP found, while time is left and the total grows.
`bound` is `eina.bound.rack_bound` (no tree needed, proven), so `optimal` is printed only
when the plan reaches it; otherwise `feasible` with the proven gap.
"""

from __future__ import annotations

import time

from controller.model.network import Network
from controller.model.plan import Plan
from controller.solvers import SolveOptions
from controller.solvers.common import weighted_objective
from controller.solvers.eina.bound import rack_bound
from controller.solvers.eina.instance import read, refuse_over_fan_in, refuse_unmergeable
from controller.solvers.eina.rates import best_rates
from controller.solvers.eina.routes import task_plans
from controller.solvers.eina_fast.greedy import trees

SCHEME = "eina-fast"
BISECTIONS = 30  # halvings of the bracket: 1e-9 of the bound; the LP then sets the rates
ROUNDS = 5  # re-proportioning rounds at most


def solve_fast(network: Network, options: SolveOptions) -> Plan:
    started = time.perf_counter()
    inst = read(network, {**network.schemes.get("eina", {}), **options.params})
    refuse_unmergeable(inst, network, SCHEME)
    refuse_over_fan_in(inst, network, SCHEME)
    limit = options.limit()
    bound = rack_bound(inst)
    n = len(inst.ps)
    weights = [1.0 / n] * n
    best: tuple[float, list[dict[str, str]], list[float]] | None = None
    rounds = 0
    for rounds in range(1, ROUNDS + 1):  # noqa: B007 (reported after the loop)
        found = _bisect(inst, weights, float(bound))
        if found is None:
            break
        rates = best_rates(inst, found)
        total = sum(rates)
        if best is not None and total <= best[0] * (1 + 1e-9):
            break
        best = (total, found, rates)
        if total <= 0 or time.perf_counter() - started > limit / 2:
            break
        weights = [r / total for r in rates]
    details = {"bound_source": "tree-free rack bound", "rounds": rounds}
    plan = Plan(
        SCHEME,
        "infeasible",
        0.0,
        float(bound),
        0.0,
        options.seed,
        [],
        topology=network.name,
        details=details,
    )
    if best is None:  # not even rate r^L fits the greedy: it proves nothing
        plan.status = "heuristic"
        plan.bound = None
    else:
        total, parents, rates = best
        plan.tasks = task_plans(inst, parents, rates)
        plan.objective = weighted_objective(network, plan)
        plan.bound = max(float(bound), plan.objective)
        proven = plan.objective >= float(bound) * (1 - 1e-9)
        plan.status = "optimal" if proven else "feasible"
        details["trees"] = [dict(t) for t in parents]
    plan.solve_seconds = time.perf_counter() - started
    return plan


def _bisect(inst, weights: list[float], high: float) -> list[dict[str, str]] | None:
    low_trees = trees(inst, [max(float(inst.r_low), 0.0)] * len(weights))
    if low_trees is None:
        return None
    top = trees(inst, [max(w * high, float(inst.r_low)) for w in weights])
    if top is not None:  # the bound itself fits (often, EINA's optimum is the rack bound)
        return top
    low, best = 0.0, low_trees
    for _ in range(BISECTIONS):
        mid = (low + high) / 2
        rates = [max(w * mid, float(inst.r_low)) for w in weights]
        found = trees(inst, rates)
        if found is None:
            high = mid
        else:
            low, best = mid, found
    return best
