"""How the quantized ARO model is solved: a rate search over feasibility models, then CP-SAT.

* Max-min part (all of Eq. 1, the min term of Eq. 3): bisection over a threshold t where every
  task i gets the fixed level ceil(t·w_min/w_i), w_i = β_s·|T_s| of its job. At fixed levels
  the model is a pure feasibility ILP (see `model`). When all w_i are equal the only levels at
  which feasibility can change are floor(cap/k) for a resource capacity and a flow count k, so
  the search runs over that candidate set (about 20 values for N = 100 instead of 100). For one
  task this is exact: the optimum of the quantized model, proven.
* Several tasks: first every task's own optimum alone (`solo_optima`), whose levels cap each
  r[i] and so bound Eq. (2)/(3); when the tasks' routes can be joined at those caps
  (`at_caps`) that is the optimum. Otherwise the bisection (bounded by the caps) and then the
  variable-rate model (Eq. 2, and the μ term of Eq. 3), hinted with the bisection's routes.
  When every job has one task and μ·Σ_s β_s·N < min_s β_s (true for the defaults: μ = 0.001,
  N = 100, fewer than ten jobs) Eq. (3) is lexicographic at one-level resolution, so the
  bisection's levels are valid lower bounds r[i] ≥ level[i] there.
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

RELAXED_SHARE = 0.25  # of a feasibility probe's time, for refuting it on the merged relaxation
QUICK_SHARE = 0.1  # of a task's time alone, per quick refutation of a top candidate


@dataclass
class Result:
    """A solution of the quantized model, with its proven bound (both in Gbps, Eq. 1/2/3)."""

    flows: Hint
    levels: dict[int, int]
    objective: float
    bound: float | None
    proven: bool
    log: list[str] = field(default_factory=list)
    solo_flows: Hint = field(default_factory=dict)  # each task's own routes (`solo_optima`)


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
        self.solo: dict[int, int] = {}  # per-task level caps proven by `solo_optima`
        self.solo_reached: dict[int, int] = {}  # levels the tasks reach alone
        self.log: list[str] = []  # phases before the bisection
        self.build_seconds = 0.0  # last time taken to build the joint fixed-level model
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

    def _solver(self, budget: float | None = None) -> cp_model.CpSolver:
        solver = cp_model.CpSolver()
        left = self.settings.left() if budget is None else min(budget, self.settings.left())
        solver.parameters.max_time_in_seconds = max(0.01, left)
        solver.parameters.num_workers = self.settings.num_workers
        solver.parameters.random_seed = self.settings.seed
        return solver

    def feasible(
        self, levels: dict[int, int], hint: Hint | None, budget: float | None = None,
    ) -> tuple[str, Hint | None]:
        """Pure feasibility ILP at fixed levels: 'feasible', 'infeasible' or 'unknown'."""
        if self.settings.left() <= 0.01:
            return "unknown", None
        if self.relaxed is not None:
            small = aro_model.build(*self.relaxed, levels=levels)
            # Only a refutation helps here, so it gets a quarter of the time.
            share = RELAXED_SHARE * (self.settings.left() if budget is None else budget)
            if self._solver(share).solve(small.model) == cp_model.INFEASIBLE:
                return "infeasible", None
        started = time.perf_counter()
        am = aro_model.build(self.graphs, self.resources, levels=levels)
        self.build_seconds = time.perf_counter() - started
        if hint:
            am.hint(hint)
        solver = self._solver(budget)
        status = solver.solve(am.model)
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return "feasible", am.flows(solver)
        if status == cp_model.INFEASIBLE:
            return "infeasible", None
        if status == cp_model.MODEL_INVALID:
            raise RuntimeError(am.model.validate())
        return "unknown", None

    # --- phase 0: per-task relaxations --------------------------------------------------
    def solo_optima(self, incumbents: list[Hint], share: float) -> Hint:
        """Each task's own optimum on the network without the other tasks.

        The other tasks only take capacity away, so task i's optimum alone caps r[i] in every
        joint solution; the caps (`self.solo`) bound Eq. (1)-(3) from above, which is monotone
        in every rate. Each task gets an equal part of what is left of `share` seconds; a task
        whose search times out keeps its unrefuted level as its cap. Returns the union of the
        tasks' own routes: the joint candidate at the caps.
        """
        end = time.perf_counter() + share
        union: Hint = {}
        for k, tg in enumerate(self.graphs):
            own = [Resource(r.key, r.capacity_gbps, {tg.index: r.terms[tg.index]}, r.cap)
                   for r in self.resources if tg.index in r.terms]
            slot = (end - time.perf_counter()) / (len(self.graphs) - k)
            settings = SolverSettings(
                min(self.settings.deadline, time.perf_counter() + slot),
                self.settings.num_workers, self.settings.seed, self.settings.mu)
            alone = Search([tg], own, self.scale, {tg.index: self.jobs[tg.index]}, settings)
            mine = [{key: n for key, n in f.items() if key[0] == tg.index} for f in incumbents]
            mine = [f for f in mine if f]  # an empty routing would "carry" any rate
            started = time.perf_counter()
            flows, reached, top, proven, _ = alone.threshold(mine, QUICK_SHARE * slot)
            self.solo[tg.index], self.solo_reached[tg.index] = top[tg.index], reached[tg.index]
            union.update(flows)
            self.log.append(
                f"solo {self.jobs[tg.index][0]}/{tg.task.name}: {reached[tg.index]}"
                f"{'' if proven else f' (≤ {top[tg.index]}, open)'}"
                f" {time.perf_counter() - started:.3f}s")
        return union

    def at_caps(self, union: Hint, budget: float) -> Result | None:
        """The joint plan at every task's own optimum, when one exists: optimal by definition.

        Tasks meet only on shared links, so their own routes often fit together as they are.
        Otherwise the tasks are joined one by one: a task whose routes do not fit what the
        previous ones left is re-routed alone, at its cap, on that residual capacity (a small
        single-task model, hinted with its own routes). Gives up after `budget` seconds.
        """
        if self.solo != self.solo_reached:
            return None  # some task's own optimum is not known: nothing to try
        caps, end = dict(self.solo), time.perf_counter() + budget
        if not self.fits(union, caps):
            joined: Hint = {}
            # The tasks with the highest caps need the most room: they pick their routes first.
            ordered = sorted(self.graphs, key=lambda g: -caps[g.index])
            for k, tg in enumerate(ordered):
                own = {key: n for key, n in union.items() if key[0] == tg.index}
                share = (end - time.perf_counter()) / (len(self.graphs) - k)
                flows = self._join(tg, own, joined, caps, share)
                if flows is None:
                    return None
                joined.update(flows)
            union = joined
        self.log.append("joint at the solo caps: optimal")
        value = self.objective(caps)
        return Result(union, caps, value, value, proven=True)

    def _join(
        self, tg: TaskGraph, own: Hint, placed: Hint, caps: dict[int, int], budget: float,
    ) -> Hint | None:
        """Routes of task `tg` at its cap on the capacity that the `placed` routes leave."""
        residual = []
        for r in self.resources:
            if tg.index not in r.terms:
                continue
            used = sum(caps[i] * placed.get((i, e), 0) for i, es in r.terms.items() for e in es)
            residual.append(Resource(r.key, r.capacity_gbps, {tg.index: r.terms[tg.index]},
                                     r.cap - used))
        if any(r.cap < 0 for r in residual):
            return None
        alone = Search([tg], residual, self.scale, {tg.index: self.jobs[tg.index]},
                       SolverSettings(min(self.settings.deadline, time.perf_counter() + budget),
                                      self.settings.num_workers, self.settings.seed,
                                      self.settings.mu))
        level = {tg.index: caps[tg.index]}
        if alone.fits(own, level):
            return own
        started = time.perf_counter()
        verdict, flows = alone.feasible(level, own)
        self.log.append(f"join {self.jobs[tg.index][0]}/{tg.task.name} at {caps[tg.index]}: "
                        f"{verdict} {time.perf_counter() - started:.3f}s")
        return flows

    # --- phase 1: bisection -------------------------------------------------------------
    def threshold(
        self, incumbents: list[Hint], quick: float = 0.0,
    ) -> tuple[Hint, dict[int, int], dict[int, int], bool, list[str]]:
        """Largest feasible threshold by bisection over the candidates.

        Returns the best routes, their levels, the levels of the largest unrefuted threshold
        (an upper bound on the max-min part), whether the search finished, and a log. The
        per-task caps (`self.solo`), when known, exclude thresholds some task cannot reach.
        With `quick` > 0 the top candidates are first refuted one by one, `quick` seconds
        each, until one is not: the highest rates usually fail in presolve, so a bound
        survives even when a later probe runs out of time.
        """
        cands = self.candidates()
        best, lo = incumbents[0], -1
        for flows in incumbents:
            idx = self.supported(flows, cands)
            if idx > lo:
                best, lo = flows, idx
        hi, timed_out, log = len(cands), False, []
        if self.solo:
            w_min = min(self.weight.values())
            top = min(self.solo[i] * self.weight[i] / w_min for i in self.solo)
            hi = next((k for k, c in enumerate(cands) if c > top + 1e-9), len(cands))
        while quick and hi - lo > 1:
            verdict, flows = self.feasible(self.levels_for(cands[hi - 1]), None, quick)
            log.append(f"t={cands[hi - 1]} {verdict} (quick)")
            if verdict != "infeasible":
                if flows is not None:
                    best, lo = flows, hi - 1
                break
            hi -= 1
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
        zero = {i: 0 for i in self.weight}
        levels = self.levels_for(cands[lo]) if lo >= 0 else zero
        top_levels = self.levels_for(cands[hi - 1]) if hi > 0 else zero
        return best, levels, top_levels, not timed_out, log

    def bisect(self, incumbents: list[Hint]) -> Result:
        """The max-min part by `threshold`, with the bound of `upper`."""
        best, levels, top_levels, proven, log = self.threshold(incumbents)
        return Result(best, levels, self.objective(levels), self.upper(top_levels),
                      proven=proven, log=log)

    def upper(self, maxmin: dict[int, int]) -> float:
        """A valid bound on Eq. (1)-(3) from the bisection's unrefuted levels (`maxmin`).

        For one task it is exact. Otherwise rates can differ per task, so the sums are bounded
        by the per-task caps (`solo`), and the min term also by `maxmin` when every job has a
        single task (then the bisection refuted "every task above its `maxmin` level").
        """
        if len(self.weight) == 1:
            return self.objective(maxmin)
        cap = {i: self.solo.get(i, max(r.cap for r in self.resources)) for i in self.weight}
        beta = {job: self.jobs[idx[0]][1] for job, idx in self.tasks_of.items()}
        total = {job: beta[job] * sum(cap[i] for i in idx) for job, idx in self.tasks_of.items()}
        if len(total) == 1:
            return self.scale.gbps(sum(total.values()))
        least = min(total.values())
        if all(len(idx) == 1 for idx in self.tasks_of.values()):
            # Some task i has r[i] ≤ maxmin[i] in every solution, and we do not know which.
            least = min(least, max(beta[j] * maxmin[idx[0]] for j, idx in self.tasks_of.items()))
        return self.scale.gbps(least + self.settings.mu * sum(total.values()))

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
        if self.settings.left() <= 3 * self.build_seconds + 0.05:
            return first  # the variable-rate model could not even be built in time
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
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            # No solution, so CP-SAT's bound is meaningless: keep the bisection's.
            return Result(first.flows, first.levels, first.objective, first.bound,
                          proven=False, log=log)
        bound = self.scale.gbps(solver.best_objective_bound / scale_back)
        bound = min(bound, first.bound) if first.bound is not None else bound
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
        am.model.maximize(mu_inv * m + sum(
            beta[j] * sum(am.r[i] for i in idx) for j, idx in self.tasks_of.items()))
        return float(scale_beta * mu_inv)
