"""The LP relaxation of GRID's problem (1) (Alg. 1 step 1), solved with OR-Tools GLOP."""

from __future__ import annotations

import time
from collections import defaultdict
from itertools import pairwise

import networkx as nx
from ortools.linear_solver import pywraplp

from controller.model.network import Network, hosts_do_not_forward
from controller.solvers import SchemeInputError
from controller.solvers.grid.model import PS, GridTask


class GridInfeasible(SchemeInputError):
    """GLOP gave no solution. The LP always has one (every rate 0), so this is GLOP stopped by
    the time limit (or failing): the message says which, and the CLI shows it (exit 2)."""


def _unsolved(what: str, status: int, time_limit: float | None) -> GridInfeasible:
    if status == pywraplp.Solver.NOT_SOLVED and time_limit:
        return GridInfeasible(
            f"grid: {what} was not solved within the time limit "
            f"({time_limit:g} s): give a longer --time-limit"
        )
    return GridInfeasible(f"grid: GLOP failed on {what} (OR-Tools status {status})")


class Relaxed:
    """The relaxed solution of one task: r̃_n^s per worker and node, and λ̃."""

    def __init__(self, value: float, status: str, rates: dict[str, dict[str, float]]):
        self.value, self.status, self.rates = value, status, rates


def solve(network: Network, inst: GridTask, links: bool, time_limit: float | None) -> Relaxed:
    """(1) with x ∈ [0, 1]; with `links`, one row per directed link over the fixed routes."""
    started, task = time.perf_counter(), inst.task
    solver = pywraplp.Solver.CreateSolver("GLOP")
    # Rates in units of T (at most B_α, which no rate exceeds anyway): GLOP's tolerances are
    # absolute, and a T of 1e-9 Gbps, taken as it is, read as 0 and made the LP "infeasible".
    unit = float(min(inst.big_t, inst.b_ps)) or 1.0
    big_t, inf = float(inst.big_t) / unit, solver.infinity()
    lam = solver.NumVar(0, inf, "lambda")
    y = {s: solver.NumVar(0, inf, f"y[{s}]") for s in sorted(inst.cap)}
    r: dict[tuple[str, str], pywraplp.Variable] = {}
    chosen: dict[str, list[pywraplp.Variable]] = defaultdict(list)  # x_n^s per switch s
    for n in task.workers:
        x = {s: solver.NumVar(0, 1, f"x[{n},{s}]") for s in inst.nodes(n)}
        solver.Add(sum(x.values()) == 1)  # aggregation constraint
        for s in inst.cand[n]:
            chosen[s].append(x[s])
        for s in inst.nodes(n):
            r[n, s] = solver.NumVar(0, inf, f"r[{n},{s}]")
            solver.Add(r[n, s] <= big_t * x[s])  # sending rate constraint
            if s != PS:
                solver.Add(r[n, s] <= y[s])  # aggregation node constraint
        solver.Add(lam <= sum(r[n, s] for s in inst.nodes(n)))
    for s, cap in sorted(inst.cap.items()):  # processing capacity constraint
        solver.Add(sum(r[n, s] for n in task.workers if (n, s) in r) <= float(cap) / unit)
    if inst.fan_in:  # the data plane's fan-in: Σ_n x_n^s ≤ L
        for _switch, xs in sorted(chosen.items()):
            if len(xs) > inst.fan_in:
                solver.Add(sum(xs) <= inst.fan_in)
    # bandwidth constraint
    solver.Add(sum(r[n, PS] for n in task.workers) + sum(y.values()) <= float(inst.b_ps) / unit)
    if links:
        _link_rows(network, inst, solver, r, y, unit)
    solver.Maximize(lam)
    _limit_to_what_is_left(solver, started, time_limit)  # building the rows counts too
    status = solver.Solve()
    names = {pywraplp.Solver.OPTIMAL: "optimal", pywraplp.Solver.FEASIBLE: "feasible"}
    if status not in names:
        raise _unsolved(f"the LP of task {task.job}/{task.name}", status, time_limit)
    value = lam.solution_value()  # in units of T until returned
    # Among the LP optima, the one moving the least traffic (hops × rate): ties between optima
    # are otherwise broken by the simplex path, which scatters rates over far nodes.
    _limit_to_what_is_left(solver, started, time_limit)  # the limit covers both stages
    solver.Add(lam >= value * (1 - 1e-7))
    hops = _hops(network, inst)
    solver.Minimize(
        sum(var * hops(n, s) for (n, s), var in r.items())
        + sum(var * hops(s, PS) for s, var in y.items())
    )
    status = solver.Solve()
    if status not in names:
        raise _unsolved(f"the second LP stage of {task.job}/{task.name}", status, time_limit)
    rates: dict[str, dict[str, float]] = defaultdict(dict)
    for (n, s), var in r.items():
        rates[n][s] = max(0.0, var.solution_value()) * unit
    return Relaxed(value * unit, names[status], dict(rates))


def _limit_to_what_is_left(
    solver: pywraplp.Solver, started: float, time_limit: float | None
) -> None:
    if time_limit:
        left = time_limit - (time.perf_counter() - started)
        solver.SetTimeLimit(max(1, int(left * 1000)))  # 0 would mean no limit


def _hops(network: Network, inst: GridTask):
    lengths: dict[str, dict[str, int]] = {}

    def hops(a: str, b: str) -> int:
        b = inst.task.ps if b == PS else b
        if a not in lengths:
            lengths[a] = nx.single_source_shortest_path_length(
                hosts_do_not_forward(network.graph, a), a
            )
        return lengths[a][b]

    return hops


def _link_rows(
    network: Network,
    inst: GridTask,
    solver: pywraplp.Solver,
    r: dict[tuple[str, str], pywraplp.Variable],
    y: dict[str, pywraplp.Variable],
    unit: float,
) -> None:
    """Capacity rows for each directed link, with every candidate flow on its fixed route
    (capacities in the LP's rate unit)."""
    terms: dict[tuple[str, str], list[pywraplp.Variable]] = defaultdict(list)
    for (n, s), var in sorted(r.items()):
        for e in pairwise(inst.route(n, s)):
            terms[e].append(var)
    for s, var in sorted(y.items()):
        for e in pairwise(inst.route(s, PS)):
            terms[e].append(var)
    for e, used in sorted(terms.items()):
        solver.Add(sum(used) <= network.capacity(*e) / unit)
