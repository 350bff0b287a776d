"""Two PSs solved jointly and exactly (Sec. IV-C.3's problem, not its greedy): the highest
r_1 + r_2 over two trees on the same n workers, one per PS, sharing the switches' B_v.

The joint problem is bilinear (Σ_p r_p k_v^p ≤ B_v, k_v^p the children of v in tree p), but
for fixed trees the rates solve the LP  max r_1 + r_2  s.t.  k_v^1 r_1 + k_v^2 r_2 ≤ B_v
(switches), k_ps^p r_p ≤ B_ps^p (each PS), r_1 + r_2 ≤ R, r ≥ 0, whose optimum is a vertex:
two of these rows tight. Every row has integer coefficients in [0, n] (a vertex has at most n
children: each child's subtree holds a worker) and a capacity of the instance on the right, so
the optimum is one of the finitely many intersections of two such rows (`candidates`, exact
fractions). They are tried from the highest sum down; at a fixed (r_1, r_2) the question "do
two trees fit?" is linear, and CP-SAT answers it on integers (exact.py's tree model once per
PS, the workers shared, the switch rows Σ_p r_p · children_p(v) ≤ B_v scaled to integers).
The first candidate CP-SAT does not refute is the optimal sum; all above it are proven
impossible, so it is a bound even when time runs out. Links are ignored, as in problem (1):
they only lower a rate, so the bound holds for the evaluator's problem too.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from ortools.sat.python import cp_model

from controller.solvers.paring.exact import carrying
from controller.solvers.paring.logical import INF, Logical


@dataclass
class Joint:
    bound: Fraction  # proven: no two trees give a larger r_1 + r_2
    rates: tuple[Fraction, Fraction] | None  # the rates of the trees found at `bound`
    trees: list[tuple[str, dict[str, str]]] | None  # per PS: (ps, parent) of those trees
    workers: list[str]
    probes: int
    stopped: bool = False  # the deadline ended the search before it settled `bound`


def candidates(
    gs: list[Logical], n: int, above: Fraction, ceiling: Fraction
) -> list[tuple[Fraction, Fraction]]:
    """Every vertex (r_1, r_2) of a rate LP of two trees with above < r_1 + r_2 ≤ ceiling,
    highest sum first (module docstring)."""
    rows = {(Fraction(1), Fraction(0), Fraction(0)), (Fraction(0), Fraction(1), Fraction(0))}
    if gs[0].rate_cap != INF:  # r ≥ 0 (as -r ≤ 0) above, R here unless there is none
        rows.add((Fraction(1), Fraction(1), Fraction(gs[0].rate_cap)))
    for v in gs[0].switches:
        b = gs[0].capacity[v]
        if b not in (0, INF):
            rows |= {
                (Fraction(a), Fraction(c), Fraction(b))
                for a in range(n + 1)
                for c in range(n + 1)
                if a or c
            }
    for p, g in enumerate(gs):
        for b in {g.capacity[h] for h in g.hosts} - {0, INF}:
            rows |= {
                (Fraction(k * (p == 0)), Fraction(k * (p == 1)), Fraction(b))
                for k in range(1, n + 1)
            }
    found = set()
    for (a1, b1, c1), (a2, b2, c2) in itertools.combinations(rows, 2):
        det = a1 * b2 - a2 * b1
        if det == 0:
            continue
        r1, r2 = (c1 * b2 - c2 * b1) / det, (a1 * c2 - a2 * c1) / det
        if r1 >= 0 and r2 >= 0 and above < r1 + r2 <= ceiling:
            found.add((r1, r2))
    return sorted(found, key=lambda r: (-(r[0] + r[1]), r))


def solve(
    gs: list[Logical],
    n: int,
    above: Fraction,
    ceiling: Fraction,
    deadline: float,
    threads: int,
    seed: int,
    report: Callable[[Fraction | None, Fraction], None] | None = None,
) -> Joint:
    """The optimal r_1 + r_2 if it is above `above` (else `bound` = `above`: nothing better
    exists), or the highest candidate not refuted by `deadline`. `report(sum, bound)` hears
    each candidate probed (every higher one is refuted: a bound) and the sum found."""
    refuted: list[tuple[Fraction, Fraction]] = []
    probes = 0
    for r in candidates(gs, n, above, ceiling):
        if any(r[0] >= x[0] and r[1] >= x[1] for x in refuted):  # more than an impossible pair
            continue
        if time.perf_counter() >= deadline:
            return Joint(r[0] + r[1], None, None, [], probes, stopped=True)
        probes += 1
        if report:
            report(None, r[0] + r[1])
        status, trees, workers = _fit(gs, n, r, deadline, threads, seed)
        if status == "INFEASIBLE":
            refuted.append(r)
            continue
        if trees is None:  # time ran out on this candidate: it stays possible
            return Joint(r[0] + r[1], None, None, [], probes, stopped=True)
        if report:
            report(r[0] + r[1], r[0] + r[1])
        return Joint(r[0] + r[1], r, trees, workers, probes)
    return Joint(above, None, None, [], probes)


def _fit(
    gs: list[Logical],
    n: int,
    rates: tuple[Fraction, Fraction],
    deadline: float,
    threads: int,
    seed: int,
):
    """Two trees at `rates`: exact.py's variables per PS p (p[h], s[v], y[a, b], f[a, b]),
    the workers w[h] shared, one PS each, and Σ_p r_p · children_p(v) ≤ B_v."""
    m = cp_model.CpModel()
    hosts, switches = gs[0].hosts, gs[0].switches
    w = {h: m.new_bool_var(f"w[{h}]") for h in hosts}
    m.add(sum(w.values()) == n)
    pss, into, arcs = [], [], []
    for idx, (g, r) in enumerate(zip(gs, rates, strict=True)):
        p = {h: m.new_bool_var(f"p{idx}[{h}]") for h in hosts}
        s = {v: m.new_bool_var(f"s{idx}[{v}]") for v in switches}
        kps = {
            h: n if r == 0 or g.capacity[h] == INF else min(n, math.floor(g.capacity[h] / r))
            for h in hosts
        }
        y, f = {}, {}
        for a in g.nodes:
            for b in g.nodes:
                takes = kps[b] >= 1 if b in p else g.capacity[b] > 0
                if a != b and (a, b) in g.cost and takes:
                    y[a, b] = m.new_bool_var(f"y{idx}[{a},{b}]")
                    f[a, b] = m.new_int_var(0, n, f"f{idx}[{a},{b}]")
                    m.add(f[a, b] <= n * y[a, b])
        ins = {v: [y[e] for e in y if e[1] == v] for v in g.nodes}
        m.add(sum(p.values()) == 1)
        for h in hosts:
            m.add(sum(y[e] for e in y if e[0] == h) == w[h])
            m.add(sum(ins[h]) <= kps[h] * p[h])
            m.add(sum(f[e] for e in f if e[0] == h) == w[h])
            m.add(sum(f[e] for e in f if e[1] == h) == n * p[h])
        for v in switches:
            m.add(sum(y[e] for e in y if e[0] == v) == s[v])
            m.add(sum(ins[v]) <= min(n, g.fan_in or n) * s[v])  # at most L: the fan-in
            m.add(sum(f[e] for e in f if e[1] == v) == sum(f[e] for e in f if e[0] == v))
        pss.append(p)
        into.append(ins)
        arcs.append(y)
    for h in hosts:  # distinct PSs, none a worker
        m.add(sum(p[h] for p in pss) + w[h] <= 1)
    for v in switches:  # the joint capacity row, scaled to integers
        cap = gs[0].capacity[v]
        if cap == INF:
            continue
        cap = Fraction(cap)
        scale = math.lcm(cap.denominator, *(r.denominator for r in rates))
        m.add(
            sum(int(r * scale) * sum(ins[v]) for r, ins in zip(rates, into, strict=True))
            <= int(cap * scale)
        )
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(deadline - time.perf_counter(), 0.05)
    solver.parameters.num_workers = threads
    solver.parameters.random_seed = seed
    solver.parameters.cp_model_probing_level = 0  # as exact.py: presolve time is search time
    status = solver.solve(m)
    name = solver.status_name(status)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return name, None, []
    workers = [h for h in hosts if solver.value(w[h])]
    trees = []
    for p, y in zip(pss, arcs, strict=True):
        ps = next(h for h in hosts if solver.value(p[h]))
        parent = {a: b for (a, b), var in y.items() if solver.value(var)}
        trees.append((ps, carrying(parent, workers)))
    return name, trees, workers
