"""`grid`: GRID's gradient routing (Fang et al., Sec. 4): the GRIA model, its LP relaxation, R-GRIA.

What is taken from the paper, per task (tasks are independent, as the paper says of PSs):

* Model (1): each worker n picks one aggregation node, an INA switch s or the PS α (x_n^s); it
  sends r_n^s ≤ x_n^s·T to it; r_n^s ≤ y_s (a switch forwards one aggregated flow at rate y_s);
  Σ_n r_n^s ≤ C_s (processing capacity); Σ_n r_n^α + Σ_s y_s ≤ B_α (PS ingress); max λ ≤ Σ_s r_n^s.
  T = B_α as in Table 1. C_s is the switch's `aggregation_capacity_gbps`, or the sum of its
  incoming link capacities when the file leaves it open (a switch cannot aggregate faster than
  it receives). B_α is the capacity of the PS's incoming links.
* LP relaxation x ∈ [0, 1], solved with OR-Tools GLOP; its λ is reported as `lp_value_gbps`,
  an upper bound for GRID's own model (not for the network: the evaluator may find more).
* R-GRIA (Alg. 1): worker n goes to s with probability r̃_n^s / Σ_s r̃_n^s, drawn with the seed,
  so each worker has exactly one aggregation node.

Interpretations, where the paper leaves the real topology out (Sec. 4.1 assumes links are never
the bottleneck, yet its Fig. 1 is decided by a 3 Gbps link):

* `links` (default true): the LP also carries one row per directed link for the flows of each
  candidate on a fixed shortest route (worker → s, s → PS, worker → PS; ECMP-drawn with the
  seed). When links are not binding this is exactly model (1); `links=false` gives the pure
  model, which is how ARO evaluated GRID.
* `candidates`: "all" INA switches (the paper), or "shortest": only INA switches on a shortest
  worker→PS path, ARO's up-down adaptation (own leaf, INA spines, the PS's leaf).
* `draws` (default 16): R-GRIA is repeated with successive draws of the seeded generator and the
  draw the evaluator scores best is kept; `draws=1` is Alg. 1 verbatim.
* Routing: each worker takes a least-loaded shortest path to its node, each node's merged flow
  likewise to the PS. A switch aggregates only the fragments addressed to it (GRID tags them
  <aggregation node, fragment>), so every aggregation point lists its workers and all other
  flows, raw or merged, cross it untouched: single aggregation per worker holds by
  construction. Workers that reach one node through different ingress pipelines form one
  point per pipeline (pipelines do not share state), each sending its own merged flow.
  `details["merged_at"]` lists, per worker, the switches that merge its gradient.
"""

from __future__ import annotations

import time
from collections import defaultdict
from itertools import pairwise

import networkx as nx
from ortools.linear_solver import pywraplp

from controller.evaluate import evaluate
from controller.network import Network, Task
from controller.plan import AggregationPoint, Plan, TaskPlan
from controller.solvers import SolveOptions
from controller.solvers.common import weighted_objective
from controller.solvers.inatree import (
    add_load,
    entry_point,
    least_loaded,
    rng_for,
    shortest_paths,
)
from controller.solvers.params import SchemeParams

PS = "@ps"  # the aggregation node "the PS itself" in assignments


class GridInfeasible(ValueError):
    pass


CANDIDATE_MODES = ("all", "shortest")

def solve(network: Network, options: SolveOptions) -> Plan:
    started = time.perf_counter()
    params = SchemeParams("grid", options.params, ("links", "candidates", "draws"))
    rng = rng_for(options.seed)
    use_links = params.flag("links", True)
    mode = params.choice("candidates", "all", CANDIDATE_MODES)
    draws = params.integer("draws", 16, minimum=1, maximum=100_000)

    lps = {t.key: _solve_lp(network, t, mode, use_links, rng, options.time_limit)
           for t in network.tasks}
    best: Plan | None = None
    for draw in range(draws):
        assignment = {t.key: _round(lps[t.key], rng) for t in network.tasks}
        tasks = [_route(network, t, assignment[t.key], rng) for t in network.tasks]
        plan = Plan("grid", "heuristic", 0.0, None, 0.0, options.seed, tasks,
                    topology=network.name)
        result = evaluate(network, plan)
        for tp, te in zip(plan.tasks, result.tasks):
            tp.rate_gbps = te.rate_gbps
        plan.link_loads = result.link_loads
        plan.objective = weighted_objective(network, plan)
        plan.details = {"draw": draw, "assignment": {
            "/".join(k): {n: ("PS" if s == PS else s) for n, s in sorted(a.items())}
            for k, a in assignment.items()}}
        if best is None or plan.objective > best.objective + 1e-9:
            best = plan
    assert best is not None
    best.details.update({
        "lp_value_gbps": {"/".join(k): lp.value for k, lp in lps.items()},
        "lp_status": {"/".join(k): lp.status for k, lp in lps.items()},
        "draws": draws,
        "links_in_lp": use_links,
        "candidates": mode,
        "merged_at": {tp.job + "/" + tp.task: _merges(network, tp) for tp in best.tasks},
    })
    best.solve_seconds = time.perf_counter() - started
    return best


class _Lp:
    """The relaxed solution of one task: r̃_n^s per worker and node, and λ̃."""

    def __init__(self, value: float, status: str, rates: dict[str, dict[str, float]]):
        self.value, self.status, self.rates = value, status, rates


def _capacity(network: Network, switch: str) -> float:
    cap = network.spec(switch).aggregation_capacity_gbps
    if cap is None:
        return sum(network.capacity(u, switch) for u in network.graph.predecessors(switch))
    return cap


def _candidates(network: Network, task: Task, worker: str, mode: str) -> list[str]:
    ina = [s for s in sorted(network.switches) if network.is_ina(s) and _capacity(network, s) > 0]
    if mode == "all":
        return ina
    on_path = {v for p in shortest_paths(network, worker, task.ps) for v in p}
    return [s for s in ina if s in on_path]


def _solve_lp(network: Network, task: Task, mode: str, use_links: bool, rng,
              time_limit: float | None) -> _Lp:
    solver = pywraplp.Solver.CreateSolver("GLOP")
    if time_limit:
        solver.SetTimeLimit(int(time_limit * 1000))
    b_ps = sum(network.capacity(u, task.ps) for u in network.graph.predecessors(task.ps))
    big_t = b_ps
    inf = solver.infinity()
    lam = solver.NumVar(0, inf, "lambda")
    cand = {n: _candidates(network, task, n, mode) for n in task.workers}
    switches = sorted({s for c in cand.values() for s in c})
    y = {s: solver.NumVar(0, inf, f"y[{s}]") for s in switches}
    r: dict[tuple[str, str], pywraplp.Variable] = {}
    for n in task.workers:
        nodes = cand[n] + [PS]
        x = {s: solver.NumVar(0, 1, f"x[{n},{s}]") for s in nodes}
        solver.Add(sum(x.values()) == 1)
        for s in nodes:
            r[n, s] = solver.NumVar(0, inf, f"r[{n},{s}]")
            solver.Add(r[n, s] <= big_t * x[s])
            if s != PS:
                solver.Add(r[n, s] <= y[s])
        solver.Add(lam <= sum(r[n, s] for s in nodes))
    for s in switches:
        solver.Add(sum(r[n, s] for n in task.workers if (n, s) in r) <= _capacity(network, s))
    solver.Add(sum(r[n, PS] for n in task.workers) + sum(y.values()) <= b_ps)
    if use_links:
        _link_rows(network, task, solver, r, y, rng)
    solver.Maximize(lam)
    status = solver.Solve()
    names = {pywraplp.Solver.OPTIMAL: "optimal", pywraplp.Solver.FEASIBLE: "feasible"}
    if status not in names:
        raise GridInfeasible(f"grid: the LP of task {task.job}/{task.name} has no solution "
                             f"(OR-Tools status {status})")
    value = lam.solution_value()
    # Among the LP optima, the one moving the least traffic (hops × rate): ties between optima
    # are otherwise broken by the simplex path, which scatters rates over far nodes.
    solver.Add(lam >= value * (1 - 1e-7))
    hops = _hops(network, task)
    solver.Minimize(sum(var * hops(n, s) for (n, s), var in r.items())
                    + sum(var * hops(s, PS) for s, var in y.items()))
    if solver.Solve() not in names:
        raise GridInfeasible(f"grid: the second LP stage of {task.job}/{task.name} failed")
    rates: dict[str, dict[str, float]] = defaultdict(dict)
    for (n, s), var in r.items():
        rates[n][s] = max(0.0, var.solution_value())
    return _Lp(value, names[status], dict(rates))


def _hops(network: Network, task: Task):
    lengths: dict[str, dict[str, int]] = {}

    def hops(a: str, b: str) -> int:
        b = task.ps if b == PS else b
        if a not in lengths:
            lengths[a] = nx.single_source_shortest_path_length(network.graph, a)
        return lengths[a][b]
    return hops


def _link_rows(network: Network, task: Task, solver: pywraplp.Solver,
               r: dict[tuple[str, str], pywraplp.Variable], y: dict[str, pywraplp.Variable],
               rng) -> None:
    """Capacity rows for each directed link, with every candidate on one fixed shortest route."""
    terms: dict[tuple[str, str], list[pywraplp.Variable]] = defaultdict(list)
    for (n, s), var in sorted(r.items()):
        route = rng.choice(shortest_paths(network, n, task.ps if s == PS else s))
        for e in pairwise(route):
            terms[e].append(var)
    for s, var in sorted(y.items()):
        for e in pairwise(rng.choice(shortest_paths(network, s, task.ps))):
            terms[e].append(var)
    for e, used in sorted(terms.items()):
        solver.Add(sum(used) <= network.capacity(*e))


def _round(lp: _Lp, rng) -> dict[str, str]:
    """Alg. 1 lines 5-7: one aggregation node per worker, drawn proportionally to r̃_n^s."""
    choice = {}
    for n in sorted(lp.rates):
        nodes = sorted(lp.rates[n])
        weights = [lp.rates[n][s] for s in nodes]
        choice[n] = rng.choices(nodes, weights)[0] if sum(weights) > 0 else PS
    return choice


def _route(network: Network, task: Task, assign: dict[str, str], rng) -> TaskPlan:
    """Paths to the chosen nodes over the real topology; each point merges its own workers."""
    load: dict[tuple[str, str], float] = {}
    prefix: dict[str, list[str]] = {}
    members: dict[tuple[str, int], list[str]] = defaultdict(list)
    for n in sorted(task.workers):
        if assign[n] != PS:
            prefix[n] = _path(network, n, assign[n], load, rng)
            members[entry_point(network, prefix[n][-2], assign[n])].append(n)
    onward = {point: _path(network, point[0], task.ps, load, rng) for point in sorted(members)}
    paths = {}
    for n in sorted(task.workers):
        if assign[n] == PS:
            paths[n] = _path(network, n, task.ps, load, rng)
        else:
            paths[n] = prefix[n] + onward[entry_point(network, prefix[n][-2], assign[n])][1:]
    points = [AggregationPoint(s, p, len(ws), onward[(s, p)][1], tuple(ws))
              for (s, p), ws in sorted(members.items())]
    return TaskPlan(task.job, task.name, task.ps, 0.0, paths, points)


def _path(network: Network, src: str, dst: str, load: dict[tuple[str, str], float],
          rng) -> list[str]:
    path = least_loaded(shortest_paths(network, src, dst), network, load, rng)
    add_load(load, path)
    return path


def _merges(network: Network, tp: TaskPlan) -> dict[str, list[str]]:
    """Per worker, the switches where its gradient is merged, in path order (GRID wants one)."""
    return {
        w: [v for u, v in pairwise(path[:-1]) if network.is_switch(v)
            and (point := tp.point_at(*entry_point(network, u, v))) and point.merges(w)]
        for w, path in sorted(tp.paths.items())
    }
