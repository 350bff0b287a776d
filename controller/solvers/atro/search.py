"""Maximise r (5) by bisection over the rates where feasibility can change; each probe is the
feasibility model of `model` at one fixed rate.

Why this is exact for real rates: r enters the model only through floor(b/r) (14) and
floor(c/r) (an aggregation capacity), which are constant on (b/(k+1), b/k]. So "some network
carries rate r" is constant between consecutive values cap/k (the candidates) and can only get
harder as r grows: the optimum is the largest feasible candidate, and once candidate j is
refuted no real rate above candidate j−1 is feasible (that is the bound on a time-out).
A link carries at most |N_w| + |N_agg| distinct flows (every worker's and every aggregator's
output, each once by loop freedom), so k runs up to that.
"""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from controller.solvers.atro.instance import Instance
from controller.solvers.atro.model import Solution, build

REL = 1e-9


@dataclass
class Outcome:
    solution: Solution | None
    rate: float  # the best rate the solution carries (0 without one)
    bound: float  # no real rate above it is feasible
    finished: bool  # the bisection closed (rate == bound) or refuted everything
    log: list[str] = field(default_factory=list)


def ceiling(inst: Instance) -> float:
    """A worker sends its flow on one of its links, the PS receives on one of its own."""
    def best(h: str) -> float:
        return max((b for (u, _v), b in inst.links.items() if u == h), default=0.0)
    return min(best(h) for h in inst.hosts())


def candidates(inst: Instance) -> list[float]:
    top = ceiling(inst) * (1 + REL)
    most = len(inst.workers) + len(inst.aggregators)
    caps = {*inst.links.values(), *inst.agg_capacity.values()}
    values = sorted({c / k for c in caps if c > 0 for k in range(1, most + 1) if c / k <= top})
    out: list[float] = []
    for v in values:  # merge values equal up to rounding
        if not out or v > out[-1] * (1 + REL):
            out.append(v)
    return out


def carried(inst: Instance, sol: Solution) -> float:
    """The highest rate a solution's routing carries: min over links b/(y_u^v + y_v^u) (14)
    and aggregators c/inflow."""
    load: dict[tuple[str, str], int] = {}
    for (u, v), n in sol.flows.items():
        key = (u, v) if (u, v) in inst.links else (v, u)
        load[key] = load.get(key, 0) + n
    for w in inst.workers:
        key = (w, sol.attach[w])
        load[key] = load.get(key, 0) + 1
    rate = min(inst.links[key] / n for key, n in load.items())
    for s, c in inst.agg_capacity.items():
        inflow = sum(n for (u, v), n in sol.flows.items() if v == s)
        inflow += sum(1 for w in inst.workers if sol.attach[w] == s)
        if inflow:
            rate = min(rate, c / inflow)
    return rate


def maximise(inst: Instance, deadline: float, *, workers: int = 2, seed: int = 0,
             symmetry: str = "none") -> Outcome:
    """Bisection; stops with the bound proven so far when `deadline` (perf_counter) passes."""
    cands = candidates(inst)
    lo, hi, best, log = -1, len(cands), None, []
    while hi - lo > 1:
        mid = _middle(cands, lo, hi)
        started = time.perf_counter()
        verdict, sol = probe(inst, cands[mid], deadline, workers, seed, symmetry, best)
        log.append(f"r={cands[mid]:.6g} {verdict} {time.perf_counter() - started:.3f}s")
        if verdict == "feasible":
            best = sol
            reach = carried(inst, sol)
            lo = max(mid, bisect.bisect_right(cands, reach * (1 + REL)) - 1)
        elif verdict == "infeasible":
            hi = mid
        else:
            break
    rate = cands[lo] if lo >= 0 else 0.0
    bound = cands[hi - 1] if hi >= 1 else 0.0
    return Outcome(best, rate, bound, hi - lo <= 1, log)


def probe(inst: Instance, rate: float, deadline: float, workers: int, seed: int,
          symmetry: str, hint: Solution | None = None) -> tuple[str, Solution | None]:
    """'feasible' (with a network), 'infeasible', or 'unknown' (out of time)."""
    left = deadline - time.perf_counter()
    if left <= 0.01:
        return "unknown", None
    am = build(inst, rate, symmetry)
    if hint is not None:
        am.hint(hint)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = left
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = seed
    status = solver.solve(am.model)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return "feasible", am.solution(solver)
    if status == cp_model.INFEASIBLE:
        return "infeasible", None
    if status == cp_model.MODEL_INVALID:
        raise RuntimeError(am.model.validate())
    return "unknown", None


def _middle(cands: list[float], lo: int, hi: int) -> int:
    """The candidate nearest the middle value strictly between lo and hi. Bisection in value,
    not in list position: the candidates crowd at low rates (b/k for large k), where probes
    are feasible and slow to solve, while the high ones are few and refuted in presolve;
    halving the value range takes about 2·log2(|N_w|) probes at most."""
    low = cands[lo] if lo >= 0 else 0.0
    target = (low + cands[hi - 1]) / 2
    return min(max(bisect.bisect_left(cands, target), lo + 1), hi - 1)
