"""ATRO's model (Sec. III-B) on CP-SAT at a fixed rate r: a pure feasibility model.

At a fixed r the only nonlinear constraint, (14) (y_u^v + y_v^u)·r ≤ b_u^v, is linear: a
link carries at most k = floor(b/r) flows over both directions. `search` asks this model at
the few rates where some k changes. Variables, in the paper's notation:

  x[u, v]  (2)  the patch panel connects u and v; one variable per unordered pair, (6)
  y[u, v]  (3)  reduction flows u → v; a worker's is x[w, s] itself (readings below)
  a[u, v]  (15) u sends reduction traffic to v
  l[u]     (18) the layer of switch u, 1..L

Readings where the printed model is silent (it states no source or sink of flow):
  * a worker sends exactly one flow, on its one link: y_w^s = x_w^s;
  * hosts do not forward: no flow enters a worker, none leaves the PS (the PS is the sink);
  * (10)'s M is any constant above the flows an aggregator can receive; the model uses the
    smallest valid one, min(|N_w| + |N_agg|, k·η_u − 1 over its ports, data-plane fan-in,
    floor(c_u/r) when the switch has an aggregation capacity), which makes the LP relaxation
    count ports: that is what refutes a rate in presolve instead of by search;
  * (14) is written y_u^v + y_v^u ≤ k·x_u^v (with (16)-(17) folded in: no flow without a link).
Symmetry breaking (`symmetry`): pool switches that swap without changing the pool (same kind,
η, capacities to every other node) are ordered by port use, and interchangeable workers by
the index of their switch; any solution can be permuted into that order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import pairwise

from ortools.sat.python import cp_model

from controller.solvers.atro.instance import Instance, Pair


def admits(capacity_gbps: float, rate: float) -> int:
    """k = floor(b/r): flows a capacity admits at rate r, tolerant to rounding (r = b/k)."""
    return math.floor(capacity_gbps / rate * (1 + 1e-9) + 1e-12)


@dataclass
class Solution:
    """A built network and its routing: host → switch, flows y per directed pair, layers."""

    attach: dict[str, str]  # (8) every host's switch
    flows: dict[tuple[str, str], int]  # y_u^v > 0 between switches and into the PS
    built: set[Pair]  # x_u^v = 1 (unused links included; `routes` drops them, Sec. III-D)
    layers: dict[str, int]


@dataclass
class AtroModel:
    model: cp_model.CpModel
    inst: Instance
    x: dict[Pair, cp_model.IntVar] = field(default_factory=dict)
    y: dict[tuple[str, str], cp_model.IntVar] = field(default_factory=dict)
    a: dict[tuple[str, str], cp_model.IntVar] = field(default_factory=dict)
    l: dict[str, cp_model.IntVar] = field(default_factory=dict)

    def solution(self, solver: cp_model.CpSolver) -> Solution:
        built = {p for p, v in self.x.items() if solver.value(v)}
        hosts = set(self.inst.hosts())
        attach = {u: v for u, v in built if u in hosts}
        flows = {e: solver.value(v) for e, v in self.y.items() if solver.value(v)}
        return Solution(attach, flows, built, {s: solver.value(v) for s, v in self.l.items()})

    def hint(self, sol: Solution) -> None:
        for p, v in self.x.items():
            self.model.add_hint(v, int(p in sol.built))
        for e, v in self.y.items():
            self.model.add_hint(v, sol.flows.get(e, 0))
        for e, v in self.a.items():
            self.model.add_hint(v, int(sol.flows.get(e, 0) > 0))
        for s, v in self.l.items():
            self.model.add_hint(v, sol.layers.get(s, 1))


def build(inst: Instance, rate: float, symmetry: str = "none") -> AtroModel:
    """Constraints (2)-(21) at rate `rate` (Gbps); infeasible iff no network carries it."""
    m = AtroModel(cp_model.CpModel(), inst)
    md = m.model
    workers, ps, L = set(inst.workers), inst.ps, inst.layers
    k = {p: admits(b, rate) for p, b in inst.links.items()}
    # (2), (6): one x per unordered candidate pair; a link that admits no flow is never built.
    for p in inst.links:
        if k[p] >= 1:
            m.x[p] = md.new_bool_var(f"x_{p[0]}_{p[1]}")
    incident: dict[str, list[cp_model.IntVar]] = {u: [] for u in [*inst.switches, *inst.hosts()]}
    for (u, v), x in m.x.items():
        incident[u].append(x)
        incident[v].append(x)
    into: dict[str, list] = {s: [] for s in inst.switches}
    out: dict[str, list] = {s: [] for s in inst.switches}

    def directed(u: str, v: str, cap: int, x: cp_model.IntVar) -> cp_model.IntVar:
        y = m.y[u, v] = md.new_int_var(0, cap, f"y_{u}_{v}")  # (3)
        a = m.a[u, v] = md.new_bool_var(f"a_{u}_{v}")  # (15)
        md.add(a <= y)  # (16)
        md.add(y <= cap * a)  # (16)
        md.add(a <= x)  # (17)
        return y

    for (u, v), x in m.x.items():
        cap = k[u, v]
        if u in workers:
            into[v].append(x)  # reading: the worker's one flow, y_w^s = x_w^s
        elif u == ps:
            y = directed(v, ps, cap, x)  # reading: the PS only receives
            out[v].append(y)
            md.add(y <= cap * x)  # (14)
        else:
            y_uv, y_vu = directed(u, v, cap, x), directed(v, u, cap, x)
            out[u].append(y_uv)
            into[v].append(y_uv)
            out[v].append(y_vu)
            into[u].append(y_vu)
            md.add(y_uv + y_vu <= cap * x)  # (14)
    for s in inst.switches:
        md.add(sum(incident[s]) <= inst.ports[s])  # (7)
    for h in inst.hosts():
        md.add(sum(incident[h]) == 1)  # (7) with η = 1 and (8)
    for s in inst.aggregators:
        big_m = _big_m(inst, s, rate, k)
        md.add(sum(out[s]) <= 1)  # (9)
        md.add(sum(out[s]) <= sum(into[s]))  # (10), left
        md.add(sum(into[s]) <= big_m * sum(out[s]))  # (10), right
    for s in inst.common:
        md.add(sum(into[s]) == sum(out[s]))  # (13)
    md.add(sum(m.y[s, ps] for s in inst.switches if (s, ps) in m.y) >= 1)  # the PS receives
    for s in inst.switches:
        m.l[s] = md.new_int_var(1, L, f"l_{s}")  # (18)
    for (u, v), a in m.a.items():
        if v == ps:
            md.add(m.l[u] <= 1).only_enforce_if(a)  # (19) l_u ≤ 1 + L(1 − a_u^v)
        else:
            md.add(m.l[v] + 1 <= m.l[u]).only_enforce_if(a)  # (20), (21): u ≠ v switches
    if symmetry != "none":
        _break_symmetry(m, incident, workers=symmetry == "all")
    return m


def _big_m(inst: Instance, s: str, rate: float, k: dict[Pair, int]) -> int:
    """The smallest M valid in (10): the most flows aggregator s can receive at `rate`."""
    hosts = set(inst.workers)
    caps = sorted((1 if p[0] in hosts else c for p, c in k.items() if s in p and c >= 1),
                  reverse=True)  # a worker's link carries its one flow
    by_ports = sum(caps[:inst.ports[s]]) - 1  # one port's flow slot carries its output
    bounds = [len(inst.workers) + len(inst.aggregators), by_ports]
    if inst.max_fan_in is not None:
        bounds.append(inst.max_fan_in)
    if s in inst.agg_capacity:
        bounds.append(admits(inst.agg_capacity[s], rate))
    return max(0, min(bounds))


def _break_symmetry(m: AtroModel, incident: dict[str, list], workers: bool) -> None:
    inst = m.inst
    for group in interchangeable(inst, inst.switches, switches=True):
        for s, t in pairwise(group):
            m.model.add(sum(incident[s]) >= sum(incident[t]))
    if not workers:
        return
    index = {s: i for i, s in enumerate(inst.switches)}
    position = {
        w: sum(index[s] * x for (h, s), x in m.x.items() if h == w) for w in inst.workers}
    for group in interchangeable(inst, list(inst.workers), switches=False):
        for w, v in pairwise(group):
            m.model.add(position[w] <= position[v])


def interchangeable(inst: Instance, nodes: list[str], switches: bool) -> list[list[str]]:
    """Classes of nodes whose swap maps the pool onto itself (same kind, η and capacities to
    every other node). Swaps that are automorphisms compose, so comparing with a class's
    first member suffices."""
    def cap(u: str, v: str) -> float:
        return inst.links.get((u, v), inst.links.get((v, u), 0.0))

    others = [*inst.switches, *inst.hosts()]

    def same(s: str, t: str) -> bool:
        if switches and (inst.ports[s] != inst.ports[t]
                         or (s in inst.aggregators) != (t in inst.aggregators)
                         or inst.agg_capacity.get(s) != inst.agg_capacity.get(t)):
            return False
        return all(cap(s, v) == cap(t, v) for v in others if v not in (s, t))

    classes: list[list[str]] = []
    for node in nodes:
        home = next((c for c in classes if same(c[0], node)), None)
        if home is None:
            classes.append([node])
        else:
            home.append(node)
    return [c for c in classes if len(c) > 1]
