"""GRID's problem (1) solved exactly for one task: CP-SAT feasibility probes over λ's values.

λ* is T or some capacity / count (`model.py`), and feasibility is monotone in λ (every count
limit floor(c / λ) shrinks as λ grows), so testing those values by bisection proves λ*: each
probe asks CP-SAT for an integral assignment x with, at the rate λ,

    Σ_s x_n^s = 1                                 (aggregation constraint)
    |N_s| ≤ floor(C_s / λ) · u_s,  x_n^s ≤ u_s    (processing capacity; u_s: s ∈ S')
    |N_s| ≤ L                                     (the data plane's fan-in, with L > 0)
    |N_α| + Σ_s u_s ≤ floor(B_α / λ)              (bandwidth constraint, y_s = λ for s ∈ S')
    n_e(x) ≤ floor(c_e / λ)                        (link rows, with `links`)

and λ ≤ T (sending rate constraint) by testing no value above T. CP-SAT works on integers only
here, so nothing is rounded: the bound is exact for (1). Products y·r, which the note on CP-SAT
found slow, never appear (notes/controller-facts.md: bisection on one common rate is fast).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import pairwise
from math import floor

from ortools.sat.python import cp_model

from controller.solvers.grid.model import PS, GridTask, value


@dataclass
class Outcome:
    assign: dict[str, str]
    value: Fraction  # λ of `assign`
    bound: Fraction  # proven: no assignment of (1) does better
    probes: list[tuple[float, str, float]] = field(default_factory=list)  # λ, status, seconds

    @property
    def proven(self) -> bool:
        return self.value >= self.bound


def solve(
    inst: GridTask,
    links: bool,
    hint: dict[str, str],
    deadline: float,
    workers: int = 1,
    seed: int = 0,
    report: Callable[[Fraction, Fraction], None] | None = None,
) -> Outcome:
    """The best assignment found by the deadline and the proven bound; starts from `hint`.
    `report(λ, bound)` hears each improvement of either as the search goes."""
    every_ps = dict.fromkeys(inst.task.workers, PS)
    start = max((hint, every_ps), key=lambda a: value(inst, a, links))
    out = Outcome(start, value(inst, start, links), inst.big_t)
    ceiling = inst.big_t
    if report:
        report(out.value, ceiling)
    if links:  # link rows only restrict: (1) without them bounds λ*, and is quick to prove
        pure = solve(inst, False, hint, deadline, workers, seed)
        ceiling = pure.bound
        out.probes += pure.probes
    above = [v for v in levels(inst, links) if out.value < v <= ceiling]  # undecided values
    if report:
        report(out.value, max(above, default=out.value))
    proofs, step_up = 0, False
    while above:
        # Bisection; but after a find above a proven infeasible value, first the next value
        # above the find: when the find is λ* (often, that close), one proof ends the search.
        v = above[0] if step_up else above[len(above) // 2]
        left = deadline - time.perf_counter()
        if left <= 0:
            break
        began = time.perf_counter()
        status, found = probe(inst, links, v, out.assign, left, workers, seed)
        out.probes.append((float(v), status, time.perf_counter() - began))
        if found is not None:
            out.assign, out.value = found, value(inst, found, links)
            above = [w for w in above if w > out.value]
        elif status == "INFEASIBLE":
            above = [w for w in above if w < v]
            proofs += 1
        else:
            break  # out of time: the undecided values stay possible
        if report:
            report(out.value, max(above, default=out.value))
        step_up = found is not None and proofs > 0
    out.bound = max(above, default=out.value)
    return out


def levels(inst: GridTask, links: bool) -> list[Fraction]:
    """Every value λ(x) can take: T, and capacity / count for each resource and count."""
    n = len(inst.task.workers)
    caps = {(inst.b_ps, n)} | {(c, n) for c in inst.cap.values()}
    if links:
        caps |= {(c, n + len(inst.cap)) for c in inst.link_cap.values()}
    found = {inst.big_t} | {c / k for c, most in caps for k in range(1, most + 1)}
    return sorted(v for v in found if 0 < v <= inst.big_t)


def probe(
    inst: GridTask,
    links: bool,
    rate: Fraction,
    hint: dict[str, str],
    seconds: float,
    workers: int,
    seed: int,
) -> tuple[str, dict[str, str] | None]:
    """Is there an integral x of value ≥ `rate`? CP-SAT's status, and such an x if found.

    Without link rows, workers with the same candidates are interchangeable, so each such
    group gets one count variable per node instead of a boolean per worker (same problem,
    none of the symmetry); with link rows every worker has its own routes, so groups of one."""

    def most(cap: Fraction) -> int:
        return floor(cap / rate)

    def open_route(src: str, node: str) -> bool:
        return not links or inst.narrowest(src, node) >= rate

    k_ps = most(inst.b_ps)
    usable = {s for s, c in inst.cap.items() if most(c) >= 1 and open_route(s, PS)}
    allowed = {
        n: tuple(
            s
            for s in inst.nodes(n)
            if (s in usable or (s == PS and k_ps >= 1)) and open_route(n, s)
        )
        for n in inst.task.workers
    }
    if any(not nodes for nodes in allowed.values()):
        return "INFEASIBLE", None
    # How many workers s can take: C_s / λ, and with link rows also what its incoming links
    # can bring (each worker arrives over the last link of its route; a cut the LP would not
    # see while u_s is fractional).
    takes = {
        s: min(most(inst.cap[s]), len(allowed), inst.fan_in or len(allowed)) for s in usable
    }  # the fan-in row |N_s| ≤ L (model.py) too
    if links:
        last: dict[str, dict[tuple[str, str], int]] = {}
        for n, nodes in allowed.items():
            for s in nodes:
                if s != PS:
                    hop = inst.route(n, s)[-2:]
                    e = (hop[0], hop[1])
                    last.setdefault(s, {})[e] = last.get(s, {}).get(e, 0) + 1
        for s, arrivals in last.items():
            takes[s] = min(
                takes[s], sum(min(k, most(inst.link_cap[e])) for e, k in arrivals.items())
            )
        k_ps = min(
            k_ps,
            sum(
                most(inst.link_cap[u, inst.task.ps])
                for u in {r[-2] for (_, t), r in inst.routes.items() if t == PS}
            ),
        )
    by_key: dict[tuple, list[str]] = {}
    for n in sorted(allowed):
        by_key.setdefault((n,) if links else allowed[n], []).append(n)
    groups = list(by_key.values())
    model = cp_model.CpModel()
    z: dict[tuple[int, str], cp_model.IntVar] = {}  # workers of group g sent to node s
    for g, members in enumerate(groups):
        for s in allowed[members[0]]:
            z[g, s] = model.new_int_var(0, len(members), f"z[{g},{s}]")
        model.add(sum(z[g, s] for s in allowed[members[0]]) == len(members))
    u = {s: model.new_bool_var(f"u[{s}]") for s in sorted({s for _, s in z if s != PS})}
    total = len(inst.task.workers)
    for s, used in u.items():
        mine = [(var, len(groups[g])) for (g, t), var in z.items() if t == s]
        model.add(sum(v for v, _ in mine) <= takes[s] * used)
        for var, size in mine:
            model.add(var <= size * used)
    to_ps = [var for (_, t), var in z.items() if t == PS]
    model.add(sum(to_ps) + sum(u.values()) <= k_ps)
    # Redundant cover (implied by the rows above), so the LP sees how many switches it needs.
    model.add(sum(takes[s] * used for s, used in u.items()) + sum(to_ps) >= total)
    if links:
        _link_rows(inst, model, {(groups[g][0], s): v for (g, s), v in z.items()}, u, most)
    for (g, s), var in z.items():
        model.add_hint(var, sum(hint.get(n) == s for n in groups[g]))
    for s, used in u.items():
        model.add_hint(used, s in hint.values())
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = seconds
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = seed
    status = solver.solve(model)
    name = solver.status_name(status)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return name, None
    found = {}
    for g, members in enumerate(groups):
        queue = iter(members)
        for s in allowed[members[0]]:
            for _ in range(solver.value(z[g, s])):
                found[next(queue)] = s
    return name, found


def _link_rows(inst: GridTask, model: cp_model.CpModel, x: dict, u: dict, most) -> None:
    terms: dict[tuple[str, str], list] = {}
    for (n, s), var in x.items():
        for e in pairwise(inst.route(n, s)):
            terms.setdefault(e, []).append(var)
    for s, used in u.items():
        for e in pairwise(inst.route(s, PS)):
            terms.setdefault(e, []).append(used)
    for e, used in sorted(terms.items()):
        limit = most(inst.link_cap[e])
        if len(used) > limit:
            model.add(sum(used) <= limit)
