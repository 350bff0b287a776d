"""The best rates for any plan's paths, as the evaluator charges them: max Σ_p r_p by LP.

Used on every candidate EINA+ compares (its own structure, EINA's trees, the baselines'
plans), so they are compared on one footing: the evaluator's own resources (links and
aggregator charges, `aggregates: all` or `addressed` per switch), not each scheme's claim.
A plan's max-min fair rates are one feasible point of this LP, so re-rating never lowers
a baseline's total.
"""

from __future__ import annotations

from ortools.linear_solver import pywraplp

from controller.evaluator.evaluate import resources, task_flows
from controller.model.network import Network
from controller.model.plan import Plan


def best_rates(
    network: Network, plan: Plan, r_low: float, r_high: list[float]
) -> list[float] | None:
    """Rates per task (plan order) maximising their sum, or None when the paths are invalid
    or cannot reach r_low."""
    plans, flows = {}, {}
    for tp in plan.tasks:
        label = f"{tp.job}/{tp.task}"
        plans[label] = tp
        flows[label] = task_flows(network, tp)
        if flows[label].problems:
            return None
    demand, capacity = resources(network, plans, flows)
    lp = pywraplp.Solver.CreateSolver("GLOP")
    r = {label: lp.NumVar(r_low, high, label) for label, high in zip(plans, r_high, strict=True)}
    rows: dict = {}
    for t, uses in demand.items():
        for e, n in uses.items():
            rows.setdefault(e, []).append(n * r[t])
    for e, row in rows.items():
        lp.Add(sum(row) <= capacity[e])
    lp.Maximize(sum(r.values()))
    if lp.Solve() != pywraplp.Solver.OPTIMAL:
        return None
    # GLOP's answer may sit a hair (~1e-9) above a capacity: within the evaluator's tolerance
    return [r[label].solution_value() for label in plans]
