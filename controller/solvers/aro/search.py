"""How the quantized ARO model is solved: a rate search over feasibility models, then CP-SAT.

* Max-min part (all of Eq. 1, the min term of Eq. 3): bisection over a threshold t where every
  task i gets the fixed level ceil(t·w_min/w_i), w_i = β_s·|T_s| of its job. At fixed levels
  the model is a pure feasibility ILP (see `model`). When all w_i are equal the only levels at
  which feasibility can change are floor(cap/k) for a resource capacity and a flow count k, so
  the search runs over that candidate set (about 20 values for N = 100 instead of 100). For one
  task this is exact: the optimum of the quantized model, proven.
* Several tasks (Eq. 2, and the μ term of Eq. 3): the variable-rate model, hinted with the
  bisection's routes. When every job has one task and μ·Σ_s β_s·N < min_s β_s (true for the
  defaults: μ = 0.001, N = 100, fewer than ten jobs) Eq. (3) is lexicographic at one-level
  resolution, so the bisection's levels are valid lower bounds r[i] ≥ level[i] there.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from controller.solvers.aro import model as aro_model
from controller.solvers.aro.model import Hint
from controller.solvers.aro.qsr import Resource, Scale
from controller.solvers.aro.relax import relax
from controller.solvers.aro.unfold import TaskGraph


@dataclass
class Result:
    """A solution of the quantized model, with its proven bound (both in Gbps, Eq. 1/2/3)."""

    flows: Hint
    levels: dict[int, int]
    objective: float
    bound: float | None
    proven: bool
    log: list[str] = field(default_factory=list)


@dataclass
class SolverSettings:
    deadline: float  # time.perf_counter() value
    num_workers: int = 2
    seed: int = 0
    mu: float = 0.001

    def left(self) -> float:
        return self.deadline - time.perf_counter()


class Search:
    """The model's data plus the per-task job structure that shapes the objective."""

    def __init__(
        self, graphs: list[TaskGraph], resources: list[Resource], scale: Scale,
        jobs: dict[int, tuple[str, float]], settings: SolverSettings,
    ):
        self.graphs, self.resources, self.scale, self.settings = graphs, resources, scale, settings
        self.jobs = jobs  # task index → (job name, beta)
        self.tasks_of: dict[str, list[int]] = defaultdict(list)
        for i, (job, _beta) in jobs.items():
            self.tasks_of[job].append(i)
        self.weight = {i: beta * len(self.tasks_of[job]) for i, (job, beta) in jobs.items()}
        self.relaxed = relax(graphs, resources)
        self.solo: dict[int, int] = {}  # per-task level caps proven by `solo_refute`
        most = {tg.index: tg.max_flows() for tg in graphs}
        self.most_load = {
            id(r): sum(most[i][e[0]] for i, es in r.terms.items() for e in es)
            for r in resources}

    # --- objective ----------------------------------------------------------------------
    def objective(self, levels: dict[int, int]) -> float:
        """Eq. (1)/(2)/(3) in Gbps for per-task levels."""
        per_job = {job: sum(levels[i] for i in idx) for job, idx in self.tasks_of.items()}
        if len(per_job) == 1:
            return self.scale.gbps(sum(per_job.values()))
        beta = {job: self.jobs[idx[0]][1] for job, idx in self.tasks_of.items()}
        weighted = [beta[j] * v for j, v in per_job.items()]
        return self.scale.gbps(min(weighted) + self.settings.mu * sum(weighted))

    def levels_for(self, t: int) -> dict[int, int]:
        w_min = min(self.weight.values())
        return {i: math.ceil(t * w_min / w - 1e-9) for i, w in self.weight.items()}

    def candidates(self) -> list[int]:
        if len(set(self.weight.values())) == 1:
            values = {
                r.cap // k for r in self.resources for k in range(1, self.most_load[id(r)] + 1)}
            return sorted(v for v in values if v >= 1)
        w_min = min(self.weight.values())
        top = max(r.cap for r in self.resources) * max(self.weight.values()) / w_min
        return list(range(1, math.ceil(top) + 1))

    # --- fixed-rate checks --------------------------------------------------------------
    def fits(self, flows: Hint, levels: dict[int, int]) -> bool:
        for r in self.resources:
            used = sum(levels[i] * flows.get((i, e), 0) for i, es in r.terms.items() for e in es)
            if used > r.cap:
                return False
        return True

    def supported(self, flows: Hint, cands: list[int]) -> int:
        """Index of the largest candidate threshold these routes carry (-1: none)."""
        lo, hi = -1, len(cands)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.fits(flows, self.levels_for(cands[mid])):
                lo = mid
            else:
                hi = mid
        return lo

    def _solver(self) -> cp_model.CpSolver:
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = max(0.01, self.settings.left())
        solver.parameters.num_workers = self.settings.num_workers
        solver.parameters.random_seed = self.settings.seed
        return solver

    def feasible(self, levels: dict[int, int], hint: Hint | None) -> tuple[str, Hint | None]:
        """Pure feasibility ILP at fixed levels: 'feasible', 'infeasible' or 'unknown'."""
        if self.settings.left() <= 0.01:
            return "unknown", None
        if self.relaxed is not None:
            small = aro_model.build(*self.relaxed, levels=levels)
            if self._solver().solve(small.model) == cp_model.INFEASIBLE:
                return "infeasible", None
        am = aro_model.build(self.graphs, self.resources, levels=levels)
        if hint:
            am.hint(hint)
        solver = self._solver()
        status = solver.solve(am.model)
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return "feasible", am.flows(solver)
        if status == cp_model.INFEASIBLE:
            return "infeasible", None
        if status == cp_model.MODEL_INVALID:
            raise RuntimeError(am.model.validate())
        return "unknown", None

    # --- phase 1: bisection -------------------------------------------------------------
    def bisect(self, incumbents: list[Hint]) -> Result:
        """Largest feasible threshold, by bisection over the candidates.

        With several tasks, the candidate just above the incumbent is first checked task by
        task on the per-task relaxation (`solo_refute`): one refuted task proves the max-min.
        """
        cands = self.candidates()
        best, lo = incumbents[0], -1
        for flows in incumbents:
            idx = self.supported(flows, cands)
            if idx > lo:
                best, lo = flows, idx
        hi, timed_out, log = len(cands), False, []
        if len(self.graphs) > 1 and lo + 1 < len(cands):
            self.solo, log = self.solo_refute(self.levels_for(cands[lo + 1]), 0.3 * self.settings.left())
            if self.solo:
                w_min = min(self.weight.values())
                top = min(self.solo[i] * self.weight[i] / w_min for i in self.solo)
                hi = next((k for k, c in enumerate(cands) if c > top + 1e-9), len(cands))
        while hi - lo > 1:
            mid = (lo + hi) // 2
            started = time.perf_counter()
            verdict, flows = self.feasible(self.levels_for(cands[mid]), best)
            log.append(f"t={cands[mid]} {verdict} {time.perf_counter() - started:.3f}s")
            if verdict == "feasible":
                assert flows is not None
                best, lo = flows, max(mid, self.supported(flows, cands))
            elif verdict == "infeasible":
                hi = mid
            else:
                timed_out = True
                break
        levels = self.levels_for(cands[lo]) if lo >= 0 else {i: 0 for i in self.weight}
        bound_levels = self.levels_for(cands[hi - 1]) if hi > 0 else {i: 0 for i in self.weight}
        return Result(best, levels, self.objective(levels), self.upper(bound_levels),
                      proven=not timed_out, log=log)

    def upper(self, maxmin: dict[int, int]) -> float:
        """A valid bound on Eq. (1)-(3) from the bisection's unrefuted levels (`maxmin`).

        For one task it is exact. Otherwise rates can differ per task, so the sums are bounded
        by the per-task relaxations (`solo`) and the min term by `maxmin` only if every job has
        a single task (then the bisection is exact for it).
        """
        if len(self.weight) == 1:
            return self.objective(maxmin)
        cap = {i: self.solo.get(i, max(r.cap for r in self.resources)) for i in self.weight}
        beta = {job: self.jobs[idx[0]][1] for job, idx in self.tasks_of.items()}
        total = {job: beta[job] * sum(cap[i] for i in idx) for job, idx in self.tasks_of.items()}
        if len(total) == 1:
            return self.scale.gbps(sum(total.values()))
        single = all(len(idx) == 1 for idx in self.tasks_of.values())
        least = min(
            beta[job] * sum((maxmin if single else cap)[i] for i in idx)
            for job, idx in self.tasks_of.items())
        return self.scale.gbps(least + self.settings.mu * sum(total.values()))

    def solo_refute(self, levels: dict[int, int], share: float) -> tuple[dict[int, int], list]:
        """Per-task relaxation: can task i reach `levels[i]` alone on the network?

        A task cannot be faster with the others present, so a refuted level bounds r[i] from
        above for every solution. Returns {task: largest level left open} for refuted tasks.
        """
        caps, log = {}, []
        for tg in self.graphs:
            own = [Resource(r.key, r.capacity_gbps, {tg.index: r.terms[tg.index]}, r.cap)
                   for r in self.resources if tg.index in r.terms]
            settings = SolverSettings(
                min(self.settings.deadline, time.perf_counter() + share / len(self.graphs)),
                self.settings.num_workers, self.settings.seed, self.settings.mu)
            alone = Search([tg], own, self.scale, {tg.index: self.jobs[tg.index]}, settings)
            verdict, _ = alone.feasible({tg.index: levels[tg.index]}, None)
            log.append(f"solo {tg.task.name} at {levels[tg.index]}: {verdict}")
            if verdict == "infeasible":
                caps[tg.index] = levels[tg.index] - 1
        return caps, log

    # --- phase 2: variable rates --------------------------------------------------------
    def lexicographic(self) -> bool:
        """Eq. (3) equals max-min-then-μ-sum at one-level resolution (module docstring)."""
        if len(self.tasks_of) < 2 or any(len(v) > 1 for v in self.tasks_of.values()):
            return False
        betas = [self.jobs[v[0]][1] for v in self.tasks_of.values()]
        return self.settings.mu * sum(betas) * self.scale.levels < min(betas)

    def refine(self, first: Result, floor: dict[int, int] | None = None) -> Result:
        """CP-SAT on the variable-rate model, hinted with the bisection's routes.

        `floor` gives per-task lower bounds on the levels (SRO passes its stage-1 rates).
        """
        if self.settings.left() <= 0.05:
            return first
        lexi = self.lexicographic()
        floor = floor or {}
        ps_caps: dict[int, int] = defaultdict(int)
        for r in self.resources:
            for i, edges in r.terms.items():
                if r.key[0] == "link" and any(e[1][0] == "ps" for e in edges):
                    ps_caps[i] += r.cap
        top = {i: min(ps_caps[i], self.solo.get(i, ps_caps[i])) for i in self.weight}
        bounds = {
            i: (max(first.levels[i] if lexi else 0, min(floor.get(i, 0), first.levels[i])),
                max(top[i], first.levels[i]))
            for i in self.weight}
        am = aro_model.build(self.graphs, self.resources, rate_bounds=bounds)
        scale_back = self._objective(am)
        am.hint(first.flows, first.levels)
        solver = self._solver()
        status = solver.solve(am.model)
        log = first.log + [f"refine {solver.status_name(status)} {solver.wall_time:.3f}s"]
        bound = self.scale.gbps(solver.best_objective_bound / scale_back)
        bound = min(bound, first.bound) if first.bound is not None else bound
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return Result(first.flows, first.levels, first.objective, bound, proven=False,
                          log=log)
        levels = {i: solver.value(v) for i, v in am.r.items()}
        return Result(am.flows(solver), levels, self.objective(levels), bound,
                      proven=status == cp_model.OPTIMAL, log=log)

    def _objective(self, am: aro_model.AroModel) -> float:
        """Set Eq. (2) or (3) as integer objective; returns the divisor back to level units."""
        if len(self.tasks_of) == 1:
            am.model.maximize(sum(am.r.values()))
            return 1.0
        scale_beta, mu_inv = 1000, round(1 / self.settings.mu)
        beta = {job: round(self.jobs[idx[0]][1] * scale_beta) for job, idx in self.tasks_of.items()}
        top = sum(b * sum(list(am.r[i].proto.domain)[-1] for i in self.tasks_of[j])
                  for j, b in beta.items())
        m = am.model.new_int_var(0, top, "min_job")
        for job, idx in self.tasks_of.items():
            am.model.add(m <= beta[job] * sum(am.r[i] for i in idx))
        am.model.maximize(
            mu_inv * m + sum(beta[j] * sum(am.r[i] for i in idx) for j, idx in self.tasks_of.items()))
        return float(scale_beta * mu_inv)
