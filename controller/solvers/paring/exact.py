"""Problem (1) solved exactly: the highest rate, then the least traffic volume, on CP-SAT.

The rate of a tree is r = min(R, B_v / k_v) over its aggregating vertices (k_v children), so
the optimal rate is one of R and the B_v / k: the candidates are tried from the highest down.
At a candidate r, the capacity constraints of (1) become degree bounds (children of v at most
⌊B_v / r⌋), and a tree exists only if the slots add up: one PS slot at least, and
⌊B_ps / r⌋ + Σ_{switches with ⌊B_v/r⌋ ≥ 2} (⌊B_v / r⌋ - 1) ≥ n (every used switch takes a slot
of its parent). Candidates failing that count are skipped without a solve; the first one CP-SAT
does not prove infeasible is the optimal rate. There CP-SAT minimises O_2 / b = Σ x_e c_e.

Variables, in (1)'s notation, over G' (Alg. 1), directed toward the PS:
  p[h] = x_h^p, w[h] = x_h^w (servers), s[v] = x_v^s (switches),
  y[a, b] = x_e for e = (a, b) with the gradient of a aggregated next at b,
  f[a, b] the number of workers whose gradient crosses (a, b): a single-commodity flow that
  replaces the cut constraints Σ_{e ∈ δ(P)} x_e ≥ f(P) (each worker sends one unit, the PS
  absorbs n, switches conserve: every worker then reaches the PS).
Constraints:
  Σ_h p[h] = 1, Σ_h w[h] = n, p[h] + w[h] ≤ 1                 (server assignment)
  Σ_b y[h, b] = w[h], Σ_b y[v, b] = s[v]                      (one parent each; PS none)
  Σ_a y[a, v] ≤ ⌊B_v / r⌋ s[v], Σ_a y[a, h] ≤ ⌊B_h / r⌋ p[h]   (capacity, as degrees)
  Σ_a y[a, v] ≤ L                                             (fan-in limit, L > 0)
  f[a, b] ≤ n y[a, b]; out - in = w[h] at a server other than the PS, n p[h] into the PS
Workers do not aggregate (degrees.py), so a server receives only as the PS. With
`servers_aggregate` (the paper's own model, where a server chosen as worker has the same B_v and
(1) bounds its degree, parent edge included, by max(⌊B_v / r⌋, 1)): a worker takes at most
⌊B_h / r⌋ - 1 children and forwards their flow, out - in = w[h]. The controller's hosts never
forward, so that variant scores problem (1) as printed, not a deployable plan.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from ortools.sat.python import cp_model

from controller.solvers.paring.degrees import Rate, floor_div, slots
from controller.solvers.paring.logical import INF, Logical


@dataclass
class Exact:
    rate: Rate  # the optimal rate (proven: every higher candidate is impossible)
    parent: dict[str, str] | None  # the tree found at that rate (None: none in time)
    ps: str | None
    workers: list[str]
    cost: int | None  # Σ x_e c_e of that tree
    cost_bound: int | None  # CP-SAT's proven lower bound on Σ x_e c_e at that rate
    cp_status: str
    candidates_tried: int


def candidate_rates(g: Logical, n: int) -> list[Rate]:
    """R and every B_v / k (k ≤ n + |V'_s|) not above R, highest first."""
    ks = range(1, n + len(g.switches) + 2)
    found = {g.rate_cap} if g.rate_cap != INF else set()
    for b in g.capacity.values():
        if b not in (0, INF):
            found |= {b / k for k in ks if b / k <= g.rate_cap}
    return sorted(found, reverse=True) or [INF]  # nothing limits the rate but the links


def slots_suffice(g: Logical, n: int, r: Rate, servers_aggregate: bool = False) -> bool:
    """The counting test above: could any tree reach rate r? (Aggregating workers add their
    ⌊B_h / r⌋ - 1 slots: the n largest are counted.)"""
    cap = n + len(g.switches) + 1
    relays = sum(slots(g, v, r, cap) - 1 for v in g.switches if slots(g, v, r, cap) >= 2)
    if servers_aggregate:
        relays += sum(
            sorted((max(floor_div(g.capacity[h], r, cap) - 1, 0) for h in g.hosts), reverse=True)[
                :n
            ]
        )
    best_ps = max((floor_div(g.capacity[h], r, cap) for h in g.hosts), default=0)
    return best_ps >= 1 and best_ps + relays >= n and len(g.hosts) > n


def solve(
    g: Logical,
    n: int,
    deadline: float,
    workers: int,
    seed: int,
    hint: tuple[str, dict[str, str], list[str], Rate] | None = None,
    servers_aggregate: bool = False,
    report: Callable[[Rate | None, Rate], None] | None = None,
) -> Exact:
    """The highest feasible candidate rate, and the least-cost tree there until `deadline`.

    `hint` = (ps, parent, workers, rate) of a known tree (PARING's), used as CP-SAT's start
    when it fits the candidate rate. `report(rate, bound)` hears each candidate tried (every
    higher one is refuted: a bound) and the rate of the tree found."""
    tried = 0
    for r in candidate_rates(g, n):
        if not slots_suffice(g, n, r, servers_aggregate):
            continue
        tried += 1
        if report:
            report(None, r)
        out = _solve_at(g, n, r, deadline, workers, seed, hint, servers_aggregate)
        if out.cp_status != "INFEASIBLE":
            out.candidates_tried = tried
            if report and out.parent is not None:
                report(r, r)
            return out
    return Exact(Fraction(0), None, None, [], None, None, "INFEASIBLE", tried)


def _solve_at(
    g: Logical,
    n: int,
    r: Rate,
    deadline: float,
    threads: int,
    seed: int,
    hint,
    servers_aggregate: bool = False,
) -> Exact:
    cap = n + len(g.switches) + 1
    m = cp_model.CpModel()
    p = {h: m.new_bool_var(f"p[{h}]") for h in g.hosts}
    w = {h: m.new_bool_var(f"w[{h}]") for h in g.hosts}
    s = {v: m.new_bool_var(f"s[{v}]") for v in g.switches}
    k = {v: slots(g, v, r, cap) for v in g.nodes}  # at a switch at most L (degrees.slots)
    y: dict[tuple[str, str], cp_model.IntVar] = {}
    f: dict[tuple[str, str], cp_model.IntVar] = {}
    for a in g.nodes:
        for b in g.nodes:
            if a != b and (a, b) in g.cost and k[b] >= 1:
                y[a, b] = m.new_bool_var(f"y[{a},{b}]")
                f[a, b] = m.new_int_var(0, n, f"f[{a},{b}]")
                m.add(f[a, b] <= n * y[a, b])
    out_y = {v: [y[e] for e in y if e[0] == v] for v in g.nodes}
    in_y = {v: [y[e] for e in y if e[1] == v] for v in g.nodes}
    m.add(sum(p.values()) == 1)
    m.add(sum(w.values()) == n)
    for h in g.hosts:
        m.add(p[h] + w[h] <= 1)
        m.add(sum(out_y[h]) == w[h])
        flow_in = sum(f[e] for e in f if e[1] == h)
        flow_out = sum(f[e] for e in f if e[0] == h)
        if servers_aggregate:  # a worker's degree ≤ ⌊B_h / r⌋, its parent edge included
            m.add(sum(in_y[h]) <= k[h] * p[h] + max(k[h] - 1, 0) * w[h])
            m.add(flow_out - flow_in == w[h] - n * p[h])
        else:
            m.add(sum(in_y[h]) <= k[h] * p[h])
            m.add(flow_out == w[h])
            m.add(flow_in == n * p[h])
    for v in g.switches:
        m.add(sum(out_y[v]) == s[v])
        m.add(sum(in_y[v]) <= k[v] * s[v])
        m.add(sum(f[e] for e in f if e[1] == v) == sum(f[e] for e in f if e[0] == v))
    m.minimize(sum(g.c(a, b) * var for (a, b), var in y.items()))
    if hint is not None and hint[3] >= r:
        _hint(m, g, hint, p, w, s, y, f)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(deadline - time.perf_counter(), 0.05)
    solver.parameters.num_workers = threads
    solver.parameters.random_seed = seed
    # Probing presolve takes seconds on the k = 6 fat-tree (54 servers: ~4,000 arcs) and
    # left no time to search; without it the 30 s default finds and improves solutions.
    solver.parameters.cp_model_probing_level = 0
    status = solver.solve(m)
    name = solver.status_name(status)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return Exact(r, None, None, [], None, None, name, 0)
    parent = {a: b for (a, b), var in y.items() if solver.value(var)}
    ps = next(h for h in g.hosts if solver.value(p[h]))
    placed = [h for h in g.hosts if solver.value(w[h])]
    cost = round(solver.objective_value)
    bound = int(solver.best_objective_bound + 1 - 1e-6)  # integral costs: ceil, safely
    return Exact(r, carrying(parent, placed), ps, placed, cost, min(bound, cost), name, 0)


def carrying(parent: dict[str, str], workers: list[str]) -> dict[str, str]:
    """The arcs on some worker's way to the PS (an idle cycle of switches is dropped)."""
    kept: dict[str, str] = {}
    for w in workers:
        v = w
        while v in parent and v not in kept:
            kept[v] = parent[v]
            v = parent[v]
    return kept


def _hint(m, g: Logical, hint, p, w, s, y, f) -> None:
    ps, parent, workers, _rate = hint
    load: dict[tuple[str, str], int] = {}
    for x in workers:
        v = x
        while v in parent:
            load[v, parent[v]] = load.get((v, parent[v]), 0) + 1
            v = parent[v]
    for h in g.hosts:
        m.add_hint(p[h], h == ps)
        m.add_hint(w[h], h in workers)
    for v in g.switches:
        m.add_hint(s[v], v in parent)
    for e, var in y.items():
        m.add_hint(var, e in load)
        m.add_hint(f[e], load.get(e, 0))
