"""Bisection on the total rate with the rates' proportions fixed: with r fixed, every row of
the model is linear (CP-SAT's presolve drops the products), and finding a routing is much
easier than optimising rates and routing at once (12 aggregators x 5 PSs: a routing at 40 Gbps
in about 1 s, where the full model reached 32-39 Gbps in 20 s).

The checks use the model's `realizable` form, so every routing found is a plan as it stands.
A check that finds nothing in its time slice counts as "no" (it proves nothing: the search is
a heuristic; the bound comes from the full model). Each routing found is a candidate; the LP
(`rerate.py`) then sets its best real rates, which may leave the proportions.
"""

from __future__ import annotations

import time
from fractions import Fraction

from ortools.sat.python import cp_model

from controller.solvers.eina.instance import Instance
from controller.solvers.eina_plus import model

CHECK_SECONDS = 3.0  # per feasibility check at most
PRECISION = 0.005  # stop when the bracket is within 0.5 % of its top


def search(
    inst: Instance,
    step: Fraction,
    merges_all: dict[str, bool],
    ps_link: list[Fraction],
    weights: list[float],
    low: float,
    high: float,
    deadline: float,
    seed: int,
    workers: int,
) -> list[list[model.Choice]]:
    """Routings found for totals in (low, high], best last."""
    found = []
    while high - low > PRECISION * high and time.perf_counter() < deadline - 0.1:
        mid = (low + high) / 2
        levels = [int(w * mid / float(step)) for w in weights]
        choices = _check(
            inst,
            step,
            merges_all,
            ps_link,
            levels,
            min(CHECK_SECONDS, deadline - time.perf_counter()),
            seed,
            workers,
        )
        if choices is None:
            high = mid
        else:
            low = mid
            found.append(choices)
    return found


def _check(inst, step, merges_all, ps_link, levels, seconds, seed, workers):
    pm = model.build(inst, step, merges_all, ps_link, realizable=True)
    for r, level in zip(pm.r, levels, strict=True):
        pm.model.add(r == level)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(seconds, 0.01)
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = seed
    status = solver.solve(pm.model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    return model.read_back(inst, pm, solver)
