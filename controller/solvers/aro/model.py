"""The CP-SAT model of ARO (Sec. III-B), with quantized rates (QSR).

Two forms share every routing constraint (4)-(9):

* fixed rates (`levels` given): the products y·r of (10) become linear, and since a link's
  flow count only needs y ≤ floor(cap/r) when one task uses it, most of (10) turns into
  variable domains. This pure feasibility model is what the rate searches solve.
* variable rates (`levels` None): r[i] is an integer variable; each product of (10) is encoded
  through order literals [load ≥ k] of the small-domain factor (the flow count):
  [load ≥ k] ⇒ r ≤ floor(cap/k) when one task uses the resource, and
  [load ≥ k] ⇒ z ≥ k·r with Σ_i z_i ≤ cap when several do.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from controller.solvers.aro.qsr import Resource
from controller.solvers.aro.unfold import Edge, TaskGraph

Hint = dict[tuple[int, Edge], int]  # (task index, unfolded edge) → flow count


@dataclass
class AroModel:
    model: cp_model.CpModel
    graphs: list[TaskGraph]
    y: dict[tuple[int, Edge], cp_model.IntVar] = field(default_factory=dict)
    r: dict[int, cp_model.IntVar] = field(default_factory=dict)

    def flows(self, solver: cp_model.CpSolver) -> Hint:
        return {k: solver.value(v) for k, v in self.y.items() if solver.value(v)}

    def hint(self, flows: Hint, levels: dict[int, int] | None = None) -> None:
        """Warm start (AddHint) from a previous solution; absent edges are hinted at zero.

        The INP→OP entries of `y` are the x variables (8), so x is hinted through them.
        """
        for key, var in self.y.items():
            self.model.add_hint(var, flows.get(key, 0))
        for i, var in self.r.items():
            if levels and i in levels:
                self.model.add_hint(var, levels[i])


def build(
    graphs: list[TaskGraph],
    resources: list[Resource],
    levels: dict[int, int] | None = None,
    rate_bounds: dict[int, tuple[int, int]] | None = None,
) -> AroModel:
    """Constraints (4)-(10) for all tasks; fixed `levels` or variable rates in `rate_bounds`."""
    m = AroModel(cp_model.CpModel(), graphs)
    upper = _edge_upper_bounds(graphs, resources, levels)
    for tg in graphs:
        i = tg.index
        for u, v in tg.edges:
            if u[0] == "inp":
                continue  # the INP→OP link carries x (8), created below
            m.y[i, (u, v)] = m.model.new_int_var(0, upper[i, (u, v)], "")  # (4)
        for inp in tg.inps:
            x = m.model.new_bool_var("")  # (6)
            m.y[i, (inp, tg.succ[inp][0])] = x  # (8): the INP emits x flows
            inflow = sum(m.y[i, (u, inp)] for u in tg.pred[inp])
            most = sum(upper[i, (u, inp)] for u in tg.pred[inp])
            m.model.add(inflow >= x)  # (7), left side scaled by M
            m.model.add(inflow <= most * x)  # (7), right side
            if 0 < tg.fan_in < most:
                m.model.add(inflow <= tg.fan_in)  # the data plane's fan-in limit L
        for (a, b), inp in tg.bypass.items():
            # A flow may cross a capped aggregator unmerged only from a pipeline it does not
            # aggregate on (`unfold`), unless more than L flows could enter it (`mixed`).
            if inp in tg.succ and b[1] not in tg.mixed:
                m.model.add(m.y[i, (a, b)] == 0).only_enforce_if(m.y[i, (inp, tg.succ[inp][0])])
        for w in tg.workers:
            m.model.add(sum(m.y[i, (w, v)] for v in tg.succ[w]) == 1)  # (5)
        for z in tg.order():
            if z[0] in ("op", "cs") and tg.pred.get(z) and tg.succ.get(z):
                m.model.add(  # (9)
                    sum(m.y[i, (u, z)] for u in tg.pred[z])
                    == sum(m.y[i, (z, v)] for v in tg.succ[z])
                )
    if levels is not None:
        _fixed_capacity(m, resources, levels)
    else:
        assert rate_bounds is not None
        for i, (lo, hi) in rate_bounds.items():
            m.r[i] = m.model.new_int_var(lo, hi, f"r{i}")
        _variable_capacity(m, resources, rate_bounds)
    return m


def _edge_upper_bounds(
    graphs: list[TaskGraph], resources: list[Resource], levels: dict[int, int] | None
) -> dict[tuple[int, Edge], int]:
    """Most flows an edge can carry: what its tail can emit, and at fixed rates its capacity."""
    upper: dict[tuple[int, Edge], int] = {}
    for tg in graphs:
        most = tg.max_flows()
        for u, v in tg.edges:
            upper[tg.index, (u, v)] = most[u]
    if levels is not None:
        for res in resources:
            for i, edges in res.terms.items():
                allowed = res.cap // levels[i] if levels[i] > 0 else res.cap * 10**6
                for e in edges:
                    upper[i, e] = min(upper[i, e], allowed)
    return upper


def _fixed_capacity(m: AroModel, resources: list[Resource], levels: dict[int, int]) -> None:
    """(10) at fixed rates: a linear constraint where the domains alone do not imply it."""
    for res in resources:
        terms = [(levels[i], m.y[i, e]) for i, edges in res.terms.items() for e in edges]
        if len(terms) <= 1 or sum(lv * _ub(v) for lv, v in terms) <= res.cap:
            continue
        m.model.add(sum(lv * v for lv, v in terms) <= res.cap)


def _variable_capacity(
    m: AroModel, resources: list[Resource], bounds: dict[int, tuple[int, int]]
) -> None:
    """(10) with y·r products encoded by order literals on the flow count (module docstring)."""
    for res in resources:
        shares = []
        for i, edges in res.terms.items():
            load, most = _load(m, [m.y[i, e] for e in edges])
            shares.append((i, load, most))
        if len(shares) == 1:
            i, load, most = shares[0]
            _single_product(m, load, most, m.r[i], bounds[i], res.cap)
            continue
        zs = []
        for i, load, most in shares:
            z = m.model.new_int_var(0, res.cap, "")
            _shared_product(m, load, most, m.r[i], bounds[i], res.cap, z)
            zs.append(z)
        m.model.add(sum(zs) <= res.cap)


def _load(m: AroModel, ys: list[cp_model.IntVar]) -> tuple[cp_model.IntVar, int]:
    most = sum(_ub(y) for y in ys)
    if len(ys) == 1:
        return ys[0], most
    load = m.model.new_int_var(0, most, "")
    m.model.add(load == sum(ys))
    return load, most


def _single_product(
    m: AroModel,
    load: cp_model.IntVar,
    most: int,
    r: cp_model.IntVar,
    bounds: tuple[int, int],
    cap: int,
) -> None:
    """load·r ≤ cap: [load ≥ k] ⇒ r ≤ floor(cap/k), one literal per distinct floor value."""
    lo, hi = bounds
    last = None
    for k in range(1, most + 1):
        allowed = cap // k
        if allowed >= hi:
            continue
        if allowed < max(lo, 1):  # k or more flows fit only at r = 0
            _only_at_zero(m, load, k, r, lo)
            return
        if allowed == last:
            continue
        last = allowed
        at_least = m.model.new_bool_var("")
        m.model.add(load <= k - 1).only_enforce_if(~at_least)
        m.model.add(r <= allowed).only_enforce_if(at_least)


def _shared_product(
    m: AroModel,
    load: cp_model.IntVar,
    most: int,
    r: cp_model.IntVar,
    bounds: tuple[int, int],
    cap: int,
    z: cp_model.IntVar,
) -> None:
    """z ≥ load·r: [load ≥ k] ⇒ z ≥ k·r, with the literals chained by implication."""
    lo, _hi = bounds
    previous = None
    for k in range(1, most + 1):
        if k * max(lo, 1) > cap:  # k or more flows fit only at r = 0
            _only_at_zero(m, load, k, r, lo)
            return
        at_least = m.model.new_bool_var("")
        m.model.add(load <= k - 1).only_enforce_if(~at_least)
        m.model.add(z >= k * r).only_enforce_if(at_least)
        if previous is not None:
            m.model.add_implication(at_least, previous)
        previous = at_least


def _only_at_zero(m: AroModel, load: cp_model.IntVar, k: int, r: cp_model.IntVar, lo: int) -> None:
    """[load ≥ k] ⇒ r = 0 (impossible when r ≥ lo > 0): a 0-level capacity still carries a
    task whose rate rounds down to level 0."""
    if lo > 0:
        m.model.add(load <= k - 1)
        return
    many = m.model.new_bool_var("")
    m.model.add(load <= k - 1).only_enforce_if(~many)
    m.model.add(r <= 0).only_enforce_if(many)


def _ub(var: cp_model.IntVar) -> int:
    return list(var.proto.domain)[-1]
