"""The schemes `eina` (MIQCP stand-in) and `eina-iqcp` (Sec. III-C): solve, re-rate, report.

CP-SAT has no continuous variables, so EINA's MIQCP (real r_p) is solved on a grid:
* `eina`: step 0.01 Gbps (`step` parameter). Why 0.01: capacities are given to 0.1 Gbps (Fig. 1's
  0.8; the edge generator rounds to 0.1), so the grid holds every capacity exactly and its
  optimum is within |P| x 0.01 Gbps of the real one (under 0.1 % of the paper's 20-25 Gbps
  totals), while a 400 Gbps rate is only 40,000 steps (CP-SAT's domains stay small).
* `eina-iqcp`: step 1 Gbps, the paper's IQCP (integral r_p).
Either way the trees CP-SAT picks are then re-rated by an LP (`rates.py`), so the plan's rates
are the best real rates for those trees, and `bound` / `status` are about the REAL problem
(`bound.py`): `optimal` only when the plan reaches a bound valid for continuous rates, else
`feasible` with that bound and its gap when CP-SAT finished (the grid's optimum falls short of
the real one), `timeout` when the time limit stopped CP-SAT first (also when it found nothing
and the plan is the star, every worker rack straight to its PS's aggregator, and when not even
that fits r^L);
`infeasible` when CP-SAT proved the quantized model infeasible, which (r^L on the grid) proves
the real one infeasible too.
"""

from __future__ import annotations

import time
from fractions import Fraction

from controller.model.network import Network, TopologyError
from controller.model.plan import Plan
from controller.solvers import SolveOptions
from controller.solvers.common import weighted_objective
from controller.solvers.eina import search
from controller.solvers.eina.bound import rack_bound, real_bound
from controller.solvers.eina.instance import (
    exact,
    read,
    refuse_over_fan_in,
    refuse_unmergeable,
)
from controller.solvers.eina.rates import best_rates
from controller.solvers.eina.routes import task_plans
from controller.solvers.params import SchemeParams

PLAN_RESERVE = 1.0  # seconds (at most 5 % of the limit) for the LP re-rating and the plan
MAX_STEPS = 10_000_000  # per rate: keeps every sum of (10)-(12) far from CP-SAT's int64 limits


def solve_eina(network: Network, options: SolveOptions) -> Plan:
    return run(network, options, "eina")


def solve_iqcp(network: Network, options: SolveOptions) -> Plan:
    return run(network, options, "eina-iqcp")


def run(network: Network, options: SolveOptions, scheme: str) -> Plan:
    """One of the two schemes; `solve` has set the time limit (the catalog's default)."""
    started = time.perf_counter()
    # eina-iqcp reads eina's section too
    given = {**network.schemes.get("eina", {}), **options.params}
    params = SchemeParams(scheme, given)
    inst = read(network, given)
    refuse_unmergeable(inst, network, scheme)
    refuse_over_fan_in(inst, network, scheme)
    step = exact(params["step"])
    if max(inst.r_high) / step > MAX_STEPS:
        raise TopologyError(
            network.source,
            "schemes.eina.step (or --param step)",
            f"a {float(step):g} Gbps step makes r_p up to "
            f"{float(max(inst.r_high)):g} Gbps "
            f"more than {MAX_STEPS:,} steps; use a coarser step or set r_max",
        )
    if inst.r_low % step:
        raise TopologyError(
            network.source,
            "schemes.eina.r_min (or --param r_min)",
            f"r_p^L must be a whole number of rate steps ({float(step):g} Gbps) "
            "for the bound to hold for real rates",
        )
    limit = options.limit()
    details = {
        "step_gbps": float(step),
        "depth_limit": inst.depth_limit,
        "d_hat": inst.d_hat,
        "r_min_gbps": float(inst.r_low),
        "r_max_gbps": [float(v) for v in inst.r_high],
    }
    plan = Plan(
        scheme,
        "infeasible",
        0.0,
        None,
        0.0,
        options.seed,
        [],
        topology=network.name,
        details=details,
    )
    if any(inst.r_low > high for high in inst.r_high):
        details["cp_sat_status"] = "not run: r_p^L above r_p^U"
        plan.bound = 0.0
    else:
        # Keep a little of the limit for the LP re-rating and the plan.
        deadline = started + limit - min(PLAN_RESERVE, 0.05 * limit)
        out = search.solve(inst, step, deadline, options.seed or 0, params["num_workers"])
        if (
            out.parents is None
            and out.cp_status != "INFEASIBLE"
            and inst.d_hat >= 1
            and (_star_fits(inst))
        ):
            out = _star(inst)  # CP-SAT found nothing in time: the star is a plan
        details["cp_sat_status"] = out.cp_status
        if out.parents is None:
            plan.status = "infeasible" if out.cp_status == "INFEASIBLE" else "timeout"
        else:
            _fill(network, plan, inst, out, step)
    plan.solve_seconds = time.perf_counter() - started
    return plan


def _star(inst) -> search.Outcome:
    """Every worker rack straight to π[p]: what the plan falls back to when CP-SAT found no
    solution in time (it is a feasible tree whenever d̂ ≥ 1); no quantized bound."""
    parents = [
        {i: inst.home[ps] for i in inst.aggregators if i != inst.home[ps] and inst.local[p][i] > 0}
        for p, ps in enumerate(inst.ps)
    ]
    return search.Outcome("UNKNOWN (star fallback)", parents, [], 0, None)


def _star_fits(inst) -> bool:
    """The star within the fan-in limit: π[p] merges every worker rack and its own workers."""
    return not inst.fan_in or all(
        sum(1 for j, n in local.items() if n and j != inst.home[ps]) + local[inst.home[ps]]
        <= inst.fan_in
        for ps, local in zip(inst.ps, inst.local, strict=True)
    )


def _fill(network: Network, plan: Plan, inst, out: search.Outcome, step: Fraction) -> None:
    parents = out.parents
    assert parents is not None  # called once a tree was found
    try:
        rates = best_rates(inst, parents)
    except RuntimeError:  # the star cannot meet r^L: nothing found, nothing proven
        plan.status = "timeout"
        return
    plan.tasks = task_plans(inst, parents, rates)
    plan.objective = weighted_objective(network, plan)  # one job: Σ_p r_p (13)
    bound = rack_bound(inst) if out.bound is None else real_bound(inst, step, out.bound)
    plan.bound = max(float(bound), plan.objective)
    proven = plan.objective >= float(bound) * (1 - 1e-9)
    plan.status = "optimal" if proven else "feasible" if out.cp_status == "OPTIMAL" else "timeout"
    plan.details.update(
        {
            "model_objective_gbps": float(out.objective * step),
            "model_bound_gbps": None if out.bound is None else float(out.bound * step),
            "trees": [dict(t) for t in parents],
        }
    )
