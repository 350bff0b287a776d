"""Solving the quantized model: CP-SAT under a deadline, with the trees and bound read back."""

from __future__ import annotations

import time
from dataclasses import dataclass
from fractions import Fraction

from ortools.sat.python import cp_model

from controller.solvers import progress
from controller.solvers.eina.instance import Instance
from controller.solvers.eina.model import EinaModel, build
from controller.solvers.eina.rates import Parents


@dataclass
class Outcome:
    cp_status: str  # CP-SAT's own word: OPTIMAL, FEASIBLE, INFEASIBLE, UNKNOWN
    parents: Parents | None  # None without a solution
    levels: list[int]  # r_p in steps
    objective: int  # Σ r_p in steps
    bound: int | None  # CP-SAT's proven bound on Σ r_p in steps (None: nothing proven)


def solve(inst: Instance, step: Fraction, deadline: float, seed: int, workers: int) -> Outcome:
    """CP-SAT until `deadline` (a time.perf_counter() value), the model build included."""
    m = build(inst, step)
    _hint_star(inst, m)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(deadline - time.perf_counter(), 0.01)
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = seed
    status = solver.solve(m.model, _Reporter(step) if progress.watching() else None)
    name = solver.status_name(status)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):  # INFEASIBLE, or nothing in time
        return Outcome(name, None, [], 0, None)
    parents: Parents = [{} for _ in inst.ps]
    for (p, i, j), x in m.x.items():
        if solver.value(x):
            parents[p][i] = j
    levels = [solver.value(r) for r in m.r]
    # The bound is integral (Σ of integers): CP-SAT's float bound is floored safely.
    bound = int(solver.best_objective_bound + 1e-6)
    return Outcome(name, parents, levels, sum(levels), max(bound, sum(levels)))


class _Reporter(cp_model.CpSolverSolutionCallback):
    """Each solution CP-SAT finds, with its bound, as Σ r_p in Gbps (`progress`)."""

    def __init__(self, step: Fraction):
        super().__init__()
        self.step = float(step)

    def on_solution_callback(self) -> None:
        progress.report(
            self.objective_value * self.step, self.best_objective_bound * self.step, "total rate"
        )


def _hint_star(inst: Instance, m: EinaModel) -> None:
    """Start from the star (every worker rack straight to π[p], relays idle, r_p = r_p^L):
    feasible whenever d̂ ≥ 1 and r^L fits, and CP-SAT can take long to find one alone on
    large instances (50 aggregators x 4 PSs: none in 10 s without it)."""
    for p, r in enumerate(m.r):
        m.model.add_hint(r, r.proto.domain[0])
        root = inst.home[inst.ps[p]]
        for (q, i, j), x in m.x.items():
            if q == p:
                on = int(j == root and inst.local[p][i] > 0)
                m.model.add_hint(x, on)
                m.model.add_hint(m.z[q, i, j], on * r.proto.domain[0])
        for (q, i), d in m.d.items():
            if q == p and i != root:
                m.model.add_hint(d, 1)
