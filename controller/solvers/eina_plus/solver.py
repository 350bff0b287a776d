"""The scheme `eina-plus`: EINA's trees plus bypass, never below EINA or the baselines.

Steps:
1. `eina` and the baselines named by `candidates` (default grid, atp, rr) with the same
   seed, parameters and time limit, as they would run alone: their plans as they are. Their
   time is theirs (EINA stops when proven optimal, GRID may take longer than the limit on
   large instances), so EINA+ takes longer than its limit. "Never below" holds against the
   same plans; CP-SAT with 2 threads under a time limit is not repeatable, so a separate
   `eina` run that stops short of its optimum may land elsewhere.
2. Bisection on the total with equal rates, a routing for each by CP-SAT (`ratesearch.py`),
   until 60 % of the limit (at least 30 % of it), from the best total so far up to the
   tree-free bound.
3. EINA+'s own model (`model.py`), hinted with the best plan of steps 1-2 (`warmstart.py`),
   until 90 % of the limit (at least 20 % of it): improves on it and gives the bound.
Every candidate is rated by the same LP over the evaluator's own resources (`rerate.py`) and
the best total Σ_p r_p is the plan; `details.candidates` gives every candidate's total.
Status and bound are for the real problem the evaluator scores on this topology (see the
package docstring): the model's CP-SAT bound turned into one for real rates (s · (U + |P|),
`eina.bound`'s argument), capped by a tree-free bound; `optimal` only when the plan meets it,
else `timeout` when the time limit stopped the model's CP-SAT, `feasible` when it finished.
"""

from __future__ import annotations

import time
from fractions import Fraction

from ortools.sat.python import cp_model

from controller.model.network import Network, TopologyError
from controller.model.plan import Plan
from controller.solvers import SchemeInputError, SolveOptions, solve
from controller.solvers.common import weighted_objective
from controller.solvers.eina.instance import Instance, exact, read
from controller.solvers.eina.model import units
from controller.solvers.eina_plus import model, ratesearch, rerate, routes
from controller.solvers.eina_plus.warmstart import choice_of_plan
from controller.solvers.fanin import cap_fan_in
from controller.solvers.params import SchemeParams

SCHEME = "eina-plus"
BASELINES = "grid,atp,rr"
SEARCH_SHARE = 0.6  # of the time limit: the rate search ends by then
MODEL_SHARE = 0.2  # of the time limit at least, for the model (after the baselines)
RESERVE = 0.1  # of the time limit, for re-rating and the plan


def solve_plus(network: Network, options: SolveOptions) -> Plan:
    started = time.perf_counter()
    given = {**network.schemes.get("eina", {}), **options.params}
    params = SchemeParams(SCHEME, given)
    baselines = [s for s in params["candidates"].split(",") if s]
    unknown = [s for s in baselines if s not in ("grid", "atp", "rr", "random", "aggtree")]
    if unknown:
        raise TopologyError(
            network.source,
            "schemes.eina-plus.candidates (or --param candidates)",
            f"baselines to compare with are grid, atp, rr, "
            f"random, aggtree (comma-separated); got {', '.join(unknown)}",
        )
    inst = read(network, given)
    step = exact(params["step"])
    limit = options.limit()
    seed, workers = options.seed or 0, params["num_workers"]
    merges_all = {a: network.switch_spec(a).aggregates == "all" for a in inst.aggregators}
    ps_link = inst.ps_cap  # every flow reaching the PS loads its link and its aggregation
    r_low, r_high = float(inst.r_low), [float(v) for v in inst.r_high]

    def rated(plan_tasks) -> Plan | None:
        # A baseline (GRID's) or a normalised choice (`routes`) may merge more than L flows
        # at a point: it merges L of them and lets the others cross (`fanin`).
        plan_tasks = [cap_fan_in(network, tp, inst.fan_in) for tp in plan_tasks]
        plan = Plan(
            SCHEME, "feasible", 0.0, None, 0.0, options.seed, plan_tasks, topology=network.name
        )
        rates = rerate.best_rates(network, plan, r_low, r_high)
        if rates is None:
            return None
        for tp, r in zip(plan.tasks, rates, strict=True):
            tp.rate_gbps = r
        total = sum(rates)
        for tp, r in zip(plan.tasks, rates, strict=True):
            tp.model_share = r / total if total > 0 else 1 / len(rates)
        plan.objective = weighted_objective(network, plan)
        return plan

    candidates: dict[str, Plan] = {}
    failed: dict[str, str] = {}
    for name in ["eina", *baselines]:  # as they would run alone, so their plans are theirs
        own = {k: v for k, v in given.items() if k != "candidates"} if name == "eina" else {}
        try:
            base = solve(
                network,
                name,
                SolveOptions(time_limit=options.time_limit, seed=options.seed, params=own),
            )
        except ValueError as exc:  # e.g. GRID's LP cut short: one candidate fewer
            failed[name] = str(exc)
            continue
        try:
            plan = rated(base.tasks) if base.tasks else None
        except SchemeInputError as exc:  # its routes cannot keep the fan-in limit
            failed[name] = str(exc)
            continue
        if plan is not None:
            candidates[name] = plan
    bound = tree_free_bound(inst, merges_all, ps_link)
    best = max((c.objective for c in candidates.values()), default=0.0)
    found = ratesearch.search(
        inst,
        step,
        merges_all,
        ps_link,
        [1 / len(inst.ps)] * len(inst.ps),
        best,
        float(bound),
        max(started + SEARCH_SHARE * limit, time.perf_counter() + 0.3 * limit),
        seed,
        workers,
    )
    for k, choices in enumerate(reversed(found[-2:])):  # the two largest totals
        plan = rated(routes.task_plans(inst, choices))
        if plan is not None:
            candidates[f"rate search {k + 1}"] = plan
    pm = model.build(inst, step, merges_all, ps_link)
    if candidates:  # start from the best plan so far
        start = max(candidates.values(), key=lambda c: c.objective)
        choices = [choice_of_plan(network, inst, p, tp) for p, tp in enumerate(start.tasks)]
        levels = [units(exact(f"{tp.rate_gbps:.9f}"), step) for tp in start.tasks]
        model.hint(inst, pm, choices, levels, merges_all)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(
        started + (1 - RESERVE) * limit - time.perf_counter(), MODEL_SHARE * limit
    )
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = seed
    status = solver.solve(pm.model)
    quantized_bound = None
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        modelled = rated(routes.task_plans(inst, model.read_back(inst, pm, solver)))
        if modelled is not None:
            candidates["eina-plus model"] = modelled
        quantized_bound = int(solver.best_objective_bound + 1e-6)
    elif status == cp_model.INFEASIBLE:
        quantized_bound = -len(inst.ps)  # no rates on the grid: none real either (r^L on it)

    if quantized_bound is not None:
        bound = min(bound, grid_bound(inst, step, quantized_bound, ps_link))
    details = {
        "step_gbps": float(step),
        "cp_sat_status": solver.status_name(status),
        "model_bound_gbps": None if quantized_bound is None else float(quantized_bound * step),
        "candidates": {k: p.objective for k, p in candidates.items()},
        "failed_candidates": failed,
    }
    if not candidates:
        plan = Plan(
            SCHEME,
            "infeasible" if status == cp_model.INFEASIBLE else "timeout",
            0.0,
            max(float(bound), 0.0),
            0.0,
            options.seed,
            [],
            topology=network.name,
            details=details,
        )
    else:
        winner = max(candidates, key=lambda k: candidates[k].objective)
        plan = candidates[winner]
        details["winner"] = winner
        plan.details = details
        plan.bound = max(float(bound), plan.objective)
        finished = status in (cp_model.OPTIMAL, cp_model.INFEASIBLE)
        plan.status = (
            "optimal"
            if plan.objective >= float(bound) * (1 - 1e-9)
            else "feasible"
            if finished
            else "timeout"
        )
    plan.solve_seconds = time.perf_counter() - started
    return plan


def grid_bound(inst: Instance, step: Fraction, quantized: int, ps_link: list[Fraction]) -> Fraction:
    """The model's bound U (steps) as one for real rates: Σ_p r_p < s · (U + |P|) (every row is
    Σ count · r ≤ cap, `eina.bound`). One PS: the real optimum of a fixed routing is r^U or a
    capacity over a flow count, so the largest such value below s · (U + 1) bounds it."""
    limit = step * (quantized + len(inst.ps))
    if len(inst.ps) > 1:
        return limit
    flows = sum(inst.local[0].values()) + len(inst.aggregators)  # no count exceeds this
    caps = {*inst.c.values(), *inst.b_in.values(), *inst.b_out.values(), *ps_link}
    values = {inst.r_high[0], *inst.host_cap.values()}
    values.update(cap / k for cap in caps for k in range(1, flows + 1))
    return max((v for v in values if v < limit), default=Fraction(0))


def tree_free_bound(
    inst: Instance, merges_all: dict[str, bool], ps_link: list[Fraction]
) -> Fraction:
    """Σ_p r_p without any routing: Σ_p r_p^U; a worker of every task sends Σ_p r_p on its
    link; an `aggregates: all` rack merges a_{p,j} flows of each p whatever the routing
    ((10)), so Σ_p r_p ≤ c_j / min_p a_{p,j} (bypass voids this on `addressed` racks); and
    `merge_budget`."""
    P = range(len(inst.ps))
    bounds = [
        sum(inst.r_high, Fraction(0)),
        merge_budget(inst, ps_link) / min(len(w) for w in inst.workers),
    ]
    for j in inst.aggregators:
        least = min(inst.local[p][j] for p in P)
        if merges_all[j] and least > 0:
            bounds.append(inst.c[j] / least)
    bounds += [cap for w, cap in inst.host_cap.items() if len(inst.tasks_of[w]) == len(inst.ps)]
    return min(bounds)


def merge_budget(inst: Instance, ps_link: list[Fraction]) -> Fraction:
    """Σ_p |W_p| r_p ≤ Σ_j c_j + Σ_p (π[p]'s PS link), whatever the routing: the |W_p| flows of
    p reach its PS as S_p flows, S_p r_p ≤ the PS link (and the PS's aggregation capacity),
    so merges remove |W_p| − S_p of them; a merge of F flows removes F − 1 and charges
    F r_p ≥ (F − 1) r_p to some c_j."""
    return sum(inst.c.values(), Fraction(0)) + sum(ps_link, Fraction(0))
