"""How the ARO model is solved: a rate search over feasibility models, then CP-SAT.

Rates are real (Gbps) everywhere a claim is made; only the variable-rate model uses a grid.

* Max-min part (all of Eq. 1, the min term of Eq. 3): bisection over a threshold where every
  task i gets a fixed rate. At fixed rates the model is a pure feasibility ILP (see `model`),
  and it is exact: a fixed rate is tested as the real rate it is. When all weights
  w_i = β_s·|T_s| are equal the tasks share one common rate and the only rates at which
  feasibility can change are capacity / flow count (`qsr.exact_rates`), so the search runs over
  those and needs no quantization: for one task the result is the real optimum, proven.
  ARO-QSR (`grid_only`) tests the paper's grid points instead and bounds what lies between
  them with the exact rates. Unequal weights give every task the rate ceil(t·w_min/w_i) grid
  levels for an integer threshold t.
* Several tasks: first every task's own optimum alone (`solo_optima`), whose rates cap each
  r[i] and so bound Eq. (2)/(3); when the tasks' routes can be joined at those caps
  (`at_caps`) that is the optimum. Otherwise the bisection (bounded by the caps) and then the
  variable-rate model on the grid (Eq. 2, and the μ term of Eq. 3), hinted with the
  bisection's routes. Its CP-SAT bound holds for grid rates only; any real solution rounds down
  to a grid solution losing less than one level per task, so bound + that loss (`slack`) holds
  for the real problem. When every job has one task and μ·Σ_s β_s·N < min_s β_s Eq. (3) is
  lexicographic at one-level resolution, and the bisection's rates serve as lower bounds of
  the grid model; its bound is then only the grid model's, and the bisection's bound is kept.
"""

from __future__ import annotations

import bisect
import math
import time
from collections import defaultdict
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from controller.solvers import progress
from controller.solvers.aro import model as aro_model
from controller.solvers.aro.model import Hint
from controller.solvers.aro.qsr import Resource, Scale, admits, exact_rates
from controller.solvers.aro.relax import relax
from controller.solvers.aro.unfold import TaskGraph

RELAXED_SHARE = 0.25  # of a feasibility probe's time, for refuting it on the merged relaxation
QUICK_SHARE = 0.1  # of a task's time alone, per quick refutation of a top candidate
REL = 1e-9  # relative tolerance of rate comparisons (the evaluator's progressive filling)

Rates = dict[int, float]  # task index → Gbps


@dataclass
class Result:
    """A solution (rates in Gbps, Eq. 1/2/3) with a bound valid for the real problem."""

    flows: Hint
    rates: Rates
    objective: float
    bound: float | None
    finished: bool  # the search ran to its end (no time-out)
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

    def until(self, deadline: float) -> SolverSettings:
        return SolverSettings(min(self.deadline, deadline), self.num_workers, self.seed, self.mu)


class Search:
    """The model's data plus the per-task job structure that shapes the objective.

    `ceiling[i]`: a rate task i cannot exceed in any routing (`qsr.task_ceiling`).
    `grid_only`: ARO-QSR, the common-rate search tests the grid's points only.
    """

    def __init__(
        self,
        graphs: list[TaskGraph],
        resources: list[Resource],
        scale: Scale,
        jobs: dict[int, tuple[str, float]],
        settings: SolverSettings,
        ceiling: dict[int, float],
        grid_only: bool = False,
    ):
        self.graphs, self.resources, self.scale, self.settings = graphs, resources, scale, settings
        self.jobs = jobs  # task index → (job name, beta)
        self.ceiling, self.grid_only = ceiling, grid_only
        self.tasks_of: dict[str, list[int]] = defaultdict(list)
        for i, (job, _beta) in jobs.items():
            self.tasks_of[job].append(i)
        self.weight = {i: beta * len(self.tasks_of[job]) for i, (job, beta) in jobs.items()}
        self.common = len(set(self.weight.values())) == 1  # one common rate for all tasks
        self.relaxed = relax(graphs, resources)
        self.solo: Rates = {}  # per-task rate caps proven by `solo_optima`
        self.solo_reached: Rates = {}  # rates the tasks reach alone
        self.log: list[str] = []  # phases before the bisection
        self.build_seconds = 0.0  # last time taken to build the joint fixed-rate model
        most = {tg.index: tg.max_flows() for tg in graphs}
        self.most_load = {
            id(r): sum(most[i][e[0]] for i, es in r.terms.items() for e in es) for r in resources
        }
        self._exact: list[float] | None = None

    # --- objective ----------------------------------------------------------------------
    def objective(self, rates: Rates) -> float:
        """Eq. (1)/(2)/(3) in Gbps for per-task rates."""
        per_job = {job: sum(rates[i] for i in idx) for job, idx in self.tasks_of.items()}
        if len(per_job) == 1:
            return sum(per_job.values())
        beta = {job: self.jobs[idx[0]][1] for job, idx in self.tasks_of.items()}
        weighted = [beta[j] * v for j, v in per_job.items()]
        return min(weighted) + self.settings.mu * sum(weighted)

    def slack(self) -> float:
        """What one more grid level for every task adds to the objective at most."""
        unit = self.scale.gbps(1)
        if len(self.tasks_of) == 1:
            return unit * len(self.weight)
        per_job = [self.jobs[idx[0]][1] * len(idx) for idx in self.tasks_of.values()]
        return unit * (max(per_job) + self.settings.mu * sum(per_job))

    def exact(self) -> list[float]:
        """The common rates where real feasibility can change (`qsr.exact_rates`)."""
        if self._exact is None:
            self._exact = exact_rates(self.resources, self.most_load)
        return self._exact

    def rates_for(self, c: float) -> Rates:
        """Per-task rates of candidate threshold `c` (a rate, or grid levels when weighted)."""
        if self.common:
            return dict.fromkeys(self.weight, c)
        w_min = min(self.weight.values())
        return {i: self.scale.gbps(math.ceil(c * w_min / w - 1e-9)) for i, w in self.weight.items()}

    def candidates(self) -> list[float]:
        if self.common and not self.grid_only:
            return self.exact()
        if self.common:
            values = {
                r.cap // k for r in self.resources for k in range(1, self.most_load[id(r)] + 1)
            }
            return [self.scale.gbps(v) for v in sorted(values) if v >= 1]
        # Thresholds up to where some task would pass its ceiling (no solution beyond).
        w_min = min(self.weight.values())
        top = min(self.scale.level(self.ceiling[i]) * w / w_min for i, w in self.weight.items())
        return list(range(1, math.floor(top + 1e-9) + 1))

    # --- fixed-rate checks --------------------------------------------------------------
    def fits(self, flows: Hint, rates: Rates) -> bool:
        for r in self.resources:
            used = sum(rates[i] * flows.get((i, e), 0) for i, es in r.terms.items() for e in es)
            if used > r.capacity_gbps * (1 + REL) + 1e-12:
                return False
        return True

    def valid(self, flows: Hint) -> bool:
        """No flow crosses a capped aggregator unmerged where the task merges, unless more
        flows can reach it than an INP merges, and no INP merges more than that (`unfold`)."""
        for tg in self.graphs:
            for edge, inp in tg.bypass.items():
                if (
                    flows.get((tg.index, edge))
                    and inp in tg.succ
                    and flows.get((tg.index, (inp, tg.succ[inp][0])))
                    and edge[1][1] not in tg.mixed
                ):
                    return False
            for inp in tg.inps if tg.fan_in > 0 else ():
                if sum(flows.get((tg.index, (u, inp)), 0) for u in tg.pred[inp]) > tg.fan_in:
                    return False
        return True

    def supported(self, flows: Hint, cands: list[float]) -> int:
        """Index of the largest candidate threshold these routes carry (-1: none)."""
        lo, hi = -1, len(cands)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.fits(flows, self.rates_for(cands[mid])):
                lo = mid
            else:
                hi = mid
        return lo

    def _probe(
        self,
        resources: list[Resource],
        rates: Rates,
    ) -> tuple[list[Resource], dict[int, int]]:
        """Resources and integer levels whose fixed-level model is exactly `rates`.

        A common rate t: each resource admits floor(cap/t) flows, at level 1. Different rates
        are grid rates: their levels against the grid's capacities (`qsr` docstring).
        """
        if len(set(rates.values())) == 1:
            t = next(iter(rates.values()))
            if t > 0:
                return (
                    [
                        Resource(r.key, r.capacity_gbps, r.terms, admits(r.capacity_gbps, t))
                        for r in resources
                    ],
                    dict.fromkeys(rates, 1),
                )
        levels = {i: round(v / self.scale.gbps(1)) for i, v in rates.items()}
        assert all(_same(self.scale.gbps(levels[i]), v) for i, v in rates.items()), rates
        return resources, levels

    def _solver(self, budget: float | None = None) -> cp_model.CpSolver:
        solver = cp_model.CpSolver()
        left = self.settings.left() if budget is None else min(budget, self.settings.left())
        solver.parameters.max_time_in_seconds = max(0.01, left)
        solver.parameters.num_workers = self.settings.num_workers
        solver.parameters.random_seed = self.settings.seed
        return solver

    def feasible(
        self,
        rates: Rates,
        hint: Hint | None,
        budget: float | None = None,
    ) -> tuple[str, Hint | None]:
        """Pure feasibility ILP at fixed rates: 'feasible', 'infeasible' or 'unknown'."""
        if self.settings.left() <= 0.01:
            return "unknown", None
        if self.relaxed is not None:
            graphs, merged = self.relaxed
            small = aro_model.build(graphs, *self._probe(merged, rates))
            # Only a refutation helps here, so it gets a quarter of the time.
            share = RELAXED_SHARE * (self.settings.left() if budget is None else budget)
            if self._solver(share).solve(small.model) == cp_model.INFEASIBLE:
                return "infeasible", None
        started = time.perf_counter()
        res, levels = self._probe(self.resources, rates)
        am = aro_model.build(self.graphs, res, levels=levels)
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
    def alone(self, tg: TaskGraph, resources: list[Resource], settings: SolverSettings) -> Search:
        """The same search for task `tg` alone on `resources`."""
        return Search(
            [tg],
            resources,
            self.scale,
            {tg.index: self.jobs[tg.index]},
            settings,
            {tg.index: self.ceiling[tg.index]},
            self.grid_only,
        )

    def solo_optima(self, incumbents: list[Hint], share: float) -> Hint:
        """Each task's own optimum on the network without the other tasks.

        The other tasks only take capacity away, so task i's optimum alone caps r[i] in every
        joint solution; the caps (`self.solo`) bound Eq. (1)-(3) from above, which is monotone
        in every rate. Each task gets an equal part of what is left of `share` seconds; a task
        whose search times out keeps its valid bound as its cap. Returns the union of the
        tasks' own routes: the joint candidate at the caps.
        """
        end = time.perf_counter() + share
        union: Hint = {}
        for k, tg in enumerate(self.graphs):
            own = [
                Resource(r.key, r.capacity_gbps, {tg.index: r.terms[tg.index]}, r.cap)
                for r in self.resources
                if tg.index in r.terms
            ]
            slot = (end - time.perf_counter()) / (len(self.graphs) - k)
            alone = self.alone(tg, own, self.settings.until(time.perf_counter() + slot))
            mine = [{key: n for key, n in f.items() if key[0] == tg.index} for f in incumbents]
            mine = [f for f in mine if f]  # an empty routing would "carry" any rate
            started = time.perf_counter()
            flows, reached, top, finished, _ = alone.threshold(mine, QUICK_SHARE * slot)
            cap = min(top[tg.index], self.ceiling[tg.index])
            self.solo[tg.index], self.solo_reached[tg.index] = cap, reached[tg.index]
            union.update(flows)
            self.log.append(
                f"solo {self.jobs[tg.index][0]}/{tg.task.name}: {reached[tg.index]:g}"
                f"{'' if finished and _same(cap, reached[tg.index]) else f' (≤ {cap:g})'}"
                f" {time.perf_counter() - started:.3f}s"
            )
        return union

    def at_caps(self, union: Hint, budget: float) -> Result | None:
        """The joint plan at every task's own optimum, when one exists: optimal by definition.

        Tasks meet only on shared links, so their own routes often fit together as they are.
        Otherwise the tasks are joined one by one: a task whose routes do not fit what the
        previous ones left is re-routed alone, at its cap, on that residual capacity (a small
        single-task model, hinted with its own routes). Gives up after `budget` seconds.
        """
        if any(not _same(self.solo[i], self.solo_reached[i]) for i in self.solo):
            return None  # some task's own optimum is not known: nothing to try
        caps, end = dict(self.solo_reached), time.perf_counter() + budget
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
        return Result(union, caps, value, value, finished=True)

    def _join(
        self,
        tg: TaskGraph,
        own: Hint,
        placed: Hint,
        caps: Rates,
        budget: float,
    ) -> Hint | None:
        """Routes of task `tg` at its cap on the capacity that the `placed` routes leave."""
        residual = []
        for r in self.resources:
            if tg.index not in r.terms:
                continue
            used = sum(caps[i] * placed.get((i, e), 0) for i, es in r.terms.items() for e in es)
            left = r.capacity_gbps - used
            if left < -REL * r.capacity_gbps - 1e-12:
                return None
            left = max(0.0, left)
            residual.append(
                Resource(r.key, left, {tg.index: r.terms[tg.index]}, self.scale.cap(left))
            )
        alone = self.alone(tg, residual, self.settings.until(time.perf_counter() + budget))
        rate = {tg.index: caps[tg.index]}
        if alone.fits(own, rate):
            return own
        started = time.perf_counter()
        verdict, flows = alone.feasible(rate, own)
        self.log.append(
            f"join {self.jobs[tg.index][0]}/{tg.task.name} at {caps[tg.index]:g}: "
            f"{verdict} {time.perf_counter() - started:.3f}s"
        )
        return flows

    # --- phase 1: bisection -------------------------------------------------------------
    def threshold(
        self,
        incumbents: list[Hint],
        quick: float = 0.0,
    ) -> tuple[Hint, Rates, Rates, bool, list[str]]:
        """Largest feasible threshold by bisection over the candidates.

        Returns the best routes, their rates, per-task rates `top` such that no real solution
        has every task i above top[i] (the max-min part's bound, `_top`), whether the search
        finished, and a log. The per-task caps (`self.solo`), when known, exclude thresholds
        some task cannot reach. With `quick` > 0 the top candidates are first refuted one by
        one, `quick` seconds each, until one is not: the highest rates usually fail in
        presolve, so a bound survives even when a later probe runs out of time.
        """
        cands = self.candidates()
        incumbents = [f for f in incumbents if self.valid(f)] or incumbents[:1]
        best, lo = incumbents[0], -1
        for incumbent in incumbents:
            idx = self.supported(incumbent, cands)
            if idx > lo:
                best, lo = incumbent, idx
        hi, timed_out, log = len(cands), False, []
        caps = {i: min(self.solo.get(i, math.inf), self.ceiling[i]) for i in self.weight}
        hi = next(
            (
                k
                for k, c in enumerate(cands)
                if any(v > caps[i] * (1 + REL) for i, v in self.rates_for(c).items())
            ),
            len(cands),
        )
        while quick and hi - lo > 1:
            verdict, flows = self.feasible(self.rates_for(cands[hi - 1]), None, quick)
            log.append(f"t={cands[hi - 1]:g} {verdict} (quick)")
            if verdict != "infeasible":
                if flows is not None:
                    best, lo = flows, hi - 1
                break
            hi -= 1
        while hi - lo > 1:
            mid = _middle(cands, lo, hi)
            started = time.perf_counter()
            verdict, flows = self.feasible(self.rates_for(cands[mid]), best)
            log.append(f"t={cands[mid]:g} {verdict} {time.perf_counter() - started:.3f}s")
            if verdict == "feasible":
                assert flows is not None
                best, lo = flows, max(mid, self.supported(flows, cands))
            elif verdict == "infeasible":
                hi = mid
            else:
                timed_out = True
                break
            progress.report(
                cands[lo] if lo >= 0 else None, cands[hi - 1] if hi else None, "common rate"
            )
        zero = dict.fromkeys(self.weight, 0.0)
        rates = self.rates_for(cands[lo]) if lo >= 0 else zero
        return best, rates, self._top(cands, hi), not timed_out, log

    def _top(self, cands: list[float], hi: int) -> Rates:
        """Rates no real solution exceeds at every task, given candidates ≥ cands[hi] fail.

        Exact candidates: feasibility only changes at them, so the last one not refuted is a
        bound. Grid points: the real optimum lies below the refuted point, at most at the
        largest exact rate below it (one common rate), or below the point itself (weighted).
        With nothing refuted, each task's ceiling.
        """
        if self.common and not self.grid_only:
            return self.rates_for(cands[hi - 1]) if hi > 0 else dict.fromkeys(self.weight, 0.0)
        if hi >= len(cands):
            return dict(self.ceiling)
        if self.common:
            below = [e for e in self.exact() if e < cands[hi] * (1 - REL)]
            return self.rates_for(below[-1] if below else 0.0)
        return self.rates_for(cands[hi])

    def bisect(self, incumbents: list[Hint]) -> Result:
        """The max-min part by `threshold`, with the bound of `upper`."""
        best, rates, top, finished, log = self.threshold(incumbents)
        return Result(
            best, rates, self.objective(rates), self.upper(top), finished=finished, log=log
        )

    def upper(self, maxmin: Rates | None) -> float:
        """A valid bound on Eq. (1)-(3) for the real problem.

        `maxmin`: rates such that no solution has every task above them (`threshold`). For one
        task that is the bound. Otherwise rates can differ per task, so the sums are bounded
        by the per-task caps (`solo`, else the ceilings), and the min term also by `maxmin`
        when every job has a single task (then some task i has r[i] ≤ maxmin[i], we do not
        know which).
        """
        cap = {i: min(self.solo.get(i, math.inf), self.ceiling[i]) for i in self.weight}
        if len(self.weight) == 1:
            (i,) = self.weight
            return min(cap[i], maxmin[i]) if maxmin is not None else cap[i]
        if len(self.tasks_of) == 1:
            return sum(cap.values())
        beta = {job: self.jobs[idx[0]][1] for job, idx in self.tasks_of.items()}
        total = {job: beta[job] * sum(cap[i] for i in idx) for job, idx in self.tasks_of.items()}
        least = min(total.values())
        if maxmin is not None and all(len(idx) == 1 for idx in self.tasks_of.values()):
            least = min(least, max(beta[j] * maxmin[idx[0]] for j, idx in self.tasks_of.items()))
        return least + self.settings.mu * sum(total.values())

    # --- phase 2: variable rates --------------------------------------------------------
    def lexicographic(self) -> bool:
        """Eq. (3) equals max-min-then-μ-sum at one-level resolution (module docstring)."""
        if len(self.tasks_of) < 2 or any(len(v) > 1 for v in self.tasks_of.values()):
            return False
        betas = [self.jobs[v[0]][1] for v in self.tasks_of.values()]
        return self.settings.mu * sum(betas) * self.scale.levels < min(betas)

    def refine(self, first: Result, floor: Rates | None = None) -> Result:
        """CP-SAT on the variable-rate model over the grid, hinted with the bisection's routes.

        `floor` gives per-task lower bounds on the rates (SRO passes its stage-1 rates). The
        result's bound is CP-SAT's plus `slack` when no lower bound restricted the model (a
        real solution rounds down to a grid one), else the bisection's.
        """
        if self.settings.left() <= 3 * self.build_seconds + 0.05:
            return first  # the variable-rate model could not even be built in time
        lexi = self.lexicographic()
        floor = floor or {}
        level = self.scale.level
        ps_caps: dict[int, int] = defaultdict(int)
        for r in self.resources:
            for i, edges in r.terms.items():
                if r.key[0] == "link" and any(e[1][0] == "ps" for e in edges):
                    ps_caps[i] += r.cap
        start = {i: level(first.rates[i]) for i in self.weight}
        top = {
            i: min(ps_caps[i], level(min(self.solo.get(i, math.inf), self.ceiling[i])))
            for i in self.weight
        }
        bounds = {
            i: (
                max(start[i] if lexi else 0, min(level(floor.get(i, 0.0)), start[i])),
                max(top[i], start[i]),
            )
            for i in self.weight
        }
        # CP-SAT's bound is the grid model's only without lower bounds and with the exact
        # integer weights of `_objective`.
        restricted = any(lo > 0 for lo, _hi in bounds.values()) or not self._integral_weights()
        am = aro_model.build(self.graphs, self.resources, rate_bounds=bounds)
        scale_back = self._objective(am)
        am.hint(first.flows, start)
        solver = self._solver()
        status = solver.solve(am.model)
        log = [*first.log, f"refine {solver.status_name(status)} {solver.wall_time:.3f}s"]
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            # No solution, so CP-SAT's bound is meaningless: keep the bisection's.
            return Result(
                first.flows, first.rates, first.objective, first.bound, finished=False, log=log
            )
        bound = first.bound if first.bound is not None else math.inf
        if not restricted:
            grid_bound = self.scale.gbps(solver.best_objective_bound / scale_back)
            bound = min(bound, grid_bound + self.slack())
        rates = {i: self.scale.gbps(solver.value(v)) for i, v in am.r.items()}
        return Result(
            am.flows(solver),
            rates,
            self.objective(rates),
            None if math.isinf(bound) else bound,
            finished=status == cp_model.OPTIMAL,
            log=log,
        )

    def _integral_weights(self) -> bool:
        scaled = [self.jobs[idx[0]][1] * 1000 for idx in self.tasks_of.values()]
        return (
            all(abs(b - round(b)) < 1e-9 for b in scaled)
            and abs(1 / self.settings.mu - round(1 / self.settings.mu)) < 1e-9
        )

    def _objective(self, am: aro_model.AroModel) -> float:
        """Set Eq. (2) or (3) as integer objective; returns the divisor back to level units."""
        if len(self.tasks_of) == 1:
            am.model.maximize(sum(am.r.values()))
            return 1.0
        scale_beta, mu_inv = 1000, round(1 / self.settings.mu)
        beta = {job: round(self.jobs[idx[0]][1] * scale_beta) for job, idx in self.tasks_of.items()}
        top = sum(
            b * sum(list(am.r[i].proto.domain)[-1] for i in self.tasks_of[j])
            for j, b in beta.items()
        )
        m = am.model.new_int_var(0, top, "min_job")
        for job, idx in self.tasks_of.items():
            am.model.add(m <= beta[job] * sum(am.r[i] for i in idx))
        am.model.maximize(
            mu_inv * m
            + sum(beta[j] * sum(am.r[i] for i in idx) for j, idx in self.tasks_of.items())
        )
        return float(scale_beta * mu_inv)


def _middle(cands: list[float], lo: int, hi: int) -> int:
    """The candidate nearest the middle value between lo and hi, kept in their middle half.

    Exact rates crowd at low values (cap/k for large k), where probes are feasible and slow;
    splitting the value range first reaches the high, quickly refuted rates, as a bisection
    over the paper's quantized levels did. The clamp keeps the number of probes logarithmic.
    """
    low = cands[lo] if lo >= 0 else 0.0
    target = (low + cands[hi - 1]) / 2
    quarter = max(1, (hi - lo) // 4)
    return min(max(bisect.bisect_left(cands, target), lo + quarter), hi - quarter)


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= REL * max(abs(a), abs(b), 1e-12)
