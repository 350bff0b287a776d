"""Maximise r (5) by bisection over the rates where feasibility can change; each probe is the
feasibility model of `model` at one fixed rate.

Why this is exact for real rates: r enters the model only through floor(b/r) (14) and
floor(c/r) (an aggregation capacity), which are constant on (b/(k+1), b/k]. So "some network
carries rate r" is constant between consecutive values cap/k (the candidates) and can only get
harder as r grows: the optimum is the largest feasible candidate, and once candidate j is
refuted no real rate above candidate j−1 is feasible (that is the bound on a time-out).
A link carries at most |N_w| + |N_agg| distinct flows per task (every worker's and every
aggregator's output, each once by loop freedom), so k runs up to that summed over the tasks.

Several tasks at one common rate t (the max-min part) are exact the same way: every
constraint is a flow count times t against a capacity. Raising one task with the others fixed
(the sum part, `raise_one`) is a greedy step over that task's own candidates, not a proof.

`formulation=aggregated` (the decomposition, `relaxed`): a bisection on the merged model alone
first (`_ceiling`: its lowest refuted candidate is a bound), then the exact model starts at the
highest rate the merged model carries; every exact probe asks the merged model first (a
refutation there is one of (2)-(21)) and routes the merged model's network exactly before
searching alone. A first probe that runs out of its share of time does not end the search.
"""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass, field
from fractions import Fraction

from ortools.sat.python import cp_model

from controller.solvers import progress
from controller.solvers.atro.instance import Instance
from controller.solvers.atro.model import AtroModel, Solution, build, exact
from controller.solvers.atro.relaxed import follow, relax

RELAXATION_SHARE, RELAXATION_MOST = 0.25, 10.0  # of a probe's time, seconds: the merged model
GUIDED_SHARE = 0.5  # of what is left then, for the exact model on the merged model's network
TOP_SHARE = 0.6  # of the time left, for the first exact probe (where the merged model is)


@dataclass
class Outcome:
    solution: Solution | None
    rate: Fraction  # the common rate of the searched tasks the solution carries (0: none)
    bound: Fraction  # no real common rate above it is feasible (with `fixed` ones: greedy)
    finished: bool  # the bisection closed (rate == bound) or refuted everything
    log: list[str] = field(default_factory=list)


def ceiling(inst: Instance, i: int) -> Fraction:
    """Task i alone: a worker sends on one of its links, the PS receives on one of its own."""
    t = inst.tasks[i]

    def best(h: str) -> Fraction:
        return max((exact(b) for (u, _v), b in inst.links.items() if u == h), default=Fraction(0))

    limits = [exact(c) for group, c in inst.ps_limits.items() if i in group]
    if i in inst.rate_caps:
        limits.append(exact(inst.rate_caps[i]))
    return min([best(h) for h in (*t.workers, t.ps)] + limits)


def candidates(inst: Instance, tasks: list[int]) -> list[Fraction]:
    """Common rates of `tasks` where feasibility can change: capacity / flow count."""
    top = min(ceiling(inst, i) for i in tasks)
    most = sum(len(inst.tasks[i].workers) + len(inst.aggregators) for i in tasks)
    caps = {
        exact(c)
        for c in (
            *inst.links.values(),
            *inst.agg_capacity.values(),
            *inst.ps_limits.values(),
            *inst.rate_caps.values(),
        )
        if c > 0
    }
    return sorted({c / k for c in caps for k in range(1, most + 1) if c / k <= top})


def carried(inst: Instance, sol: Solution, tasks: list[int]) -> Fraction:
    """The highest common rate of `tasks` a solution's routing carries: min over links of
    b / (every task's flows, both directions) (14), and over aggregators c / inflow."""
    load: dict[tuple[str, str], int] = {}
    for (_i, u, v), n in sol.flows.items():
        key = (u, v) if (u, v) in inst.links else (v, u)
        load[key] = load.get(key, 0) + n
    for i in tasks:
        for w in inst.tasks[i].workers:
            key = (w, sol.attach[w])
            load[key] = load.get(key, 0) + 1
    rate = min(exact(inst.links[key]) / n for key, n in load.items())
    for s, c in inst.agg_capacity.items():
        inflow = sum(n for (_i, _u, v), n in sol.flows.items() if v == s)
        inflow += sum(1 for i in tasks for w in inst.tasks[i].workers if sol.attach[w] == s)
        if inflow:
            rate = min(rate, exact(c) / inflow)
    for group, c in inst.ps_limits.items():
        inflow = sum(
            n
            for (i, _u, v), n in sol.flows.items()
            if i in group and i in tasks and v == inst.tasks[i].ps
        )
        if inflow:
            rate = min(rate, exact(c) / inflow)
    for i in tasks:
        if i in inst.rate_caps:
            rate = min(rate, exact(inst.rate_caps[i]))
    return rate


def maximise(
    inst: Instance,
    tasks: list[int],
    deadline: float,
    *,
    workers: int = 2,
    seed: int = 0,
    symmetry: str = "none",
    formulation: str = "workers",
    fixed: dict[int, Fraction] | None = None,
    above: Fraction = Fraction(0),
    hint: Solution | None = None,
    top: Fraction | None = None,
) -> Outcome:
    """Bisection on one common rate of `tasks` (the others in `fixed` keep theirs), over the
    candidates in (above, top]; stops with what is proven when `deadline` (perf_counter)
    passes."""
    fixed = fixed or {}
    cands = [c for c in candidates(inst, tasks) if c > above and (top is None or c <= top)]
    lo, hi, best = -1, len(cands), hint
    log: list[str] = []
    first: list[int] = []  # probes before the bisection, each with a share of the time
    if formulation == "aggregated" and (merged := relax(inst)) is not None:
        # The exact model starts at the highest rate the merged model carries (its network
        # to route), which is the optimum when the merged model decided every rate above.
        hi, merged_lo = _ceiling(merged, cands, fixed, tasks, deadline, workers, seed, log)
        first = [merged_lo if merged_lo >= 0 else hi - 1]
    limit = hi  # probes go below it: hi, unless a first probe ran out of its share of time
    while limit - lo > 1:
        first = [k for k in first if lo < k < limit]
        top_first = bool(first)
        mid = first.pop(0) if top_first else _middle(cands, lo, limit)
        started = time.perf_counter()
        until = started + TOP_SHARE * (deadline - started) if top_first else deadline
        rates = {**fixed, **dict.fromkeys(tasks, cands[mid])}
        verdict, sol = probe(inst, rates, until, workers, seed, symmetry, best, formulation)
        log.append(f"r={float(cands[mid]):.6g} {verdict} {time.perf_counter() - started:.3f}s")
        if verdict.startswith("feasible"):
            assert sol is not None  # a feasible verdict comes with its solution
            best = sol
            lo = mid
            if not fixed:  # the routes may carry more than asked
                reach = carried(inst, sol, tasks)
                lo = max(mid, bisect.bisect_right(cands, reach) - 1)
        elif verdict.startswith("infeasible"):
            hi = limit = mid
        elif top_first:  # undecided: search below it, the bound stays
            limit = mid
        else:
            break
        progress.report(
            float(cands[lo]) if lo >= 0 else None,
            float(cands[hi - 1]) if hi else None,
            "common rate",
        )
    rate = cands[lo] if lo >= 0 else above
    bound = cands[hi - 1] if hi >= 1 else above
    return Outcome(best if lo >= 0 else None, rate, bound, hi - lo <= 1, log)


def probe(
    inst: Instance,
    rates: dict[int, Fraction],
    deadline: float,
    workers: int,
    seed: int,
    symmetry: str,
    hint: Solution | None = None,
    formulation: str = "workers",
) -> tuple[str, Solution | None]:
    """'feasible' (with a network), 'infeasible' ('infeasible (merged)': refuted by the
    aggregated relaxation), or 'unknown' (out of time). `formulation`: workers (one x per
    worker, the paper's), classes (interchangeable workers counted), aggregated (classes,
    after the relaxation of `relaxed` failed to refute the rates)."""
    merged = relax(inst) if formulation == "aggregated" else None
    if merged is not None:
        left = deadline - time.perf_counter()
        status, rm, rsolver = _solve(
            build(merged, rates, "none", classes=True),
            min(RELAXATION_SHARE * left, RELAXATION_MOST),
            workers,
            seed,
        )
        if status == cp_model.INFEASIBLE:
            return "infeasible (merged)", None
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):  # route its network exactly
            am = build(inst, rates, symmetry, classes=True)
            follow(am, rm, rsolver)
            left = deadline - time.perf_counter()
            status, am, solver = _solve(am, GUIDED_SHARE * left, workers, seed)
            if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                return "feasible (merged network)", am.solution(solver)
    left = deadline - time.perf_counter()
    if left <= 0.01:
        return "unknown", None
    # Alone, the per-worker model found networks faster than the counted one (measured in
    # BENCHMARKS.md, ATRO multi), so `aggregated` falls back to it.
    am = build(inst, rates, symmetry, classes=formulation == "classes")
    if hint is not None:
        am.hint(hint)
    status, am, solver = _solve(am, left, workers, seed)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return "feasible", am.solution(solver)
    if status == cp_model.INFEASIBLE:
        return "infeasible", None
    if status == cp_model.MODEL_INVALID:
        raise RuntimeError(am.model.validate())
    return "unknown", None


def _ceiling(
    merged: Instance,
    cands: list[Fraction],
    fixed: dict[int, Fraction],
    tasks: list[int],
    deadline: float,
    workers: int,
    seed: int,
    log: list[str],
) -> tuple[int, int]:
    """Bisection on the merged relaxation alone: the index of its lowest refuted candidate
    (len(cands) when none is), a bound for the real problem as every refutation is one, and
    of its highest feasible one (-1: none)."""
    lo, hi = -1, len(cands)
    while hi - lo > 1:
        mid = _middle(cands, lo, hi)
        started = time.perf_counter()
        left = deadline - time.perf_counter()
        rates = {**fixed, **dict.fromkeys(tasks, cands[mid])}
        status, _am, _solver = _solve(
            build(merged, rates, "none", classes=True),
            min(RELAXATION_SHARE * left, RELAXATION_MOST),
            workers,
            seed,
        )
        verdict = {
            cp_model.INFEASIBLE: "infeasible",
            cp_model.OPTIMAL: "feasible",
            cp_model.FEASIBLE: "feasible",
        }.get(status, "unknown")
        log.append(
            f"merged r={float(cands[mid]):.6g} {verdict} {time.perf_counter() - started:.3f}s"
        )
        if verdict == "feasible":
            lo = mid
        elif verdict == "infeasible":
            hi = mid
        else:
            break
    return hi, lo


def _solve(
    am: AtroModel, seconds: float, workers: int, seed: int
) -> tuple[cp_model.CpSolverStatus, AtroModel, cp_model.CpSolver]:
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(seconds, 0.01)
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = seed
    return solver.solve(am.model), am, solver


def _middle(cands: list[Fraction], lo: int, hi: int) -> int:
    """The candidate nearest the middle value strictly between lo and hi. Bisection in value,
    not in list position: the candidates crowd at low rates (b/k for large k), where probes
    are feasible and slow to solve, while the high ones are few and refuted in presolve;
    halving the value range takes about 2·log2(|N_w|) probes at most."""
    low = cands[lo] if lo >= 0 else Fraction(0)
    target = (low + cands[hi - 1]) / 2
    return min(max(bisect.bisect_left(cands, target), lo + 1), hi - 1)
