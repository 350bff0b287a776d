"""ATRO's model (Sec. III-B) on CP-SAT at fixed rates: a pure feasibility model.

At a fixed r the only nonlinear constraint, (14) (y_u^v + y_v^u)·r ≤ b_u^v, is linear: a
link carries at most k = floor(b/r) flows over both directions. `search` asks this model at
the few rates where some k changes. Variables, in the paper's notation, per task i (several
tasks share the pool beyond the paper: x is common, everything else is per task, and (14)
sums every task's flows at its rate, in whole units of the rates' common denominator):

  x[u, v]     (2)  the patch panel connects u and v; one variable per unordered pair, (6)
  y[i, u, v]  (3)  task i's reduction flows u → v; a worker's is x[w, s] itself (readings)
  a[i, u, v]  (15) u sends task i's reduction traffic to v
  l[i, u]     (18) the layer of switch u in task i, 1..L

Readings where the printed model is silent (it states no source or sink of flow):
  * a worker sends exactly one flow per task, on its one link: y_w^s = x_w^s;
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
from fractions import Fraction
from itertools import pairwise

from ortools.sat.python import cp_model

from controller.solvers.atro.instance import Instance, Pair


def admits(capacity_gbps: float, rate: float) -> int:
    """k = floor(b/r): flows a capacity admits at rate r, tolerant to rounding (r = b/k)."""
    return math.floor(capacity_gbps / rate * (1 + 1e-9) + 1e-12)


def exact(value: float) -> Fraction:
    """The number as written in the file (0.1 is 1/10), so scaled capacities are exact."""
    return Fraction(str(value))


@dataclass
class Solution:
    """A built network and its routing: host → switch, flows y per task and directed pair
    (between switches and into the task's PS), layers per task and switch."""

    attach: dict[str, str]  # (8) every host's switch
    flows: dict[tuple[int, str, str], int]  # y[i, u, v] > 0
    built: set[Pair]  # x_u^v = 1 (unused links included; `routes` drops them, Sec. III-D)
    layers: dict[tuple[int, str], int]


@dataclass
class AtroModel:
    model: cp_model.CpModel
    inst: Instance
    x: dict[Pair, cp_model.IntVar] = field(default_factory=dict)
    y: dict[tuple[int, str, str], cp_model.IntVar] = field(default_factory=dict)
    a: dict[tuple[int, str, str], cp_model.IntVar] = field(default_factory=dict)
    l: dict[tuple[int, str], cp_model.IntVar] = field(default_factory=dict)  # noqa: E741 (18)

    # Interchangeable workers counted per switch (`classes`): class → switch → n_c^s.
    count: dict[tuple[int, str], cp_model.IntVar] = field(default_factory=dict)
    groups: list[list[str]] = field(default_factory=list)

    def solution(self, solver: cp_model.CpSolver) -> Solution:
        built = {p for p, v in self.x.items() if solver.value(v)}
        for c, members in enumerate(self.groups):  # the counts back to workers, in order
            queue = iter(members)
            for s in self.inst.switches:
                if (c, s) in self.count:
                    built |= {(next(queue), s) for _ in range(solver.value(self.count[c, s]))}
        hosts = set(self.inst.hosts())
        attach = {u: v for u, v in built if u in hosts}
        flows = {e: solver.value(v) for e, v in self.y.items() if solver.value(v)}
        return Solution(attach, flows, built, {k: solver.value(v) for k, v in self.l.items()})

    def hint(self, sol: Solution) -> None:
        for p, v in self.x.items():
            self.model.add_hint(v, int(p in sol.built))
        for (c, s), v in self.count.items():
            self.model.add_hint(v, sum(sol.attach.get(w) == s for w in self.groups[c]))
        for e, v in self.y.items():
            self.model.add_hint(v, sol.flows.get(e, 0))
        for e, v in self.a.items():
            self.model.add_hint(v, int(sol.flows.get(e, 0) > 0))
        for k, v in self.l.items():
            self.model.add_hint(v, sol.layers.get(k, 1))


def build(
    inst: Instance, rates: dict[int, Fraction], symmetry: str = "none", classes: bool = False
) -> AtroModel:
    """Constraints (2)-(21) with task i at rate `rates[i]` (Gbps); infeasible iff no network
    carries them. Tasks missing from `rates` are left out (a task alone, for its own optimum).
    `classes`: the workers as counts per switch (`worker_classes`), the same feasible rates."""
    m = AtroModel(cp_model.CpModel(), inst)
    md = m.model
    tasks = {i: t for i, t in enumerate(inst.tasks) if i in rates}
    L = inst.layers
    scale = math.lcm(*(r.denominator for r in rates.values()))
    unit = {i: int(r * scale) for i, r in rates.items()}  # C_i: task i's rate in units
    cap = {p: math.floor(exact(b) * scale) for p, b in inst.links.items()}  # B_p
    # Fixed load of a host link: one flow per task the host works for.
    sends = {h: sum(unit[i] for i, t in tasks.items() if h in t.workers) for h in inst.hosts()}
    ps_of = {i: t.ps for i, t in tasks.items()}
    hosts = [h for h in inst.hosts() if sends[h] or h in ps_of.values()]
    m.groups = (
        worker_classes(inst, [h for h in hosts if h not in ps_of.values()], sends, cap, tasks)
        if classes
        else []
    )
    counted = {w for g in m.groups for w in g}
    hosts = [h for h in hosts if h not in counted]
    # (2), (6): one x per unordered pair; a link that carries nothing at these rates is not built.
    for (u, v), b in cap.items():
        if u in sends:  # a host link: the host takes part and its own flows fit
            if u not in hosts or sends[u] > b:
                continue
        elif b < min(unit.values()):  # no task's flow fits
            continue
        most = inst.multiplicity.get((u, v), 1)
        m.x[u, v] = (
            md.new_int_var(0, most, f"x_{u}_{v}") if most > 1 else md.new_bool_var(f"x_{u}_{v}")
        )
    incident: dict[str, list[cp_model.IntVar]] = {u: [] for u in [*inst.switches, *hosts]}
    for (u, v), x in m.x.items():
        incident[u].append(x)
        incident[v].append(x)
    into: dict[tuple[int, str], list[cp_model.IntVar]] = {
        (i, s): [] for i in tasks for s in inst.switches
    }
    out: dict[tuple[int, str], list[cp_model.IntVar]] = {
        (i, s): [] for i in tasks for s in inst.switches
    }
    for c, members in enumerate(m.groups):  # (7)-(8) for a class: each member on one link
        w = members[0]
        for s in inst.switches:
            if (w, s) in cap and sends[w] <= cap[w, s]:
                n = m.count[c, s] = md.new_int_var(0, len(members), f"n{c}_{s}")
                incident[s].append(n)
                for i, t in tasks.items():
                    if w in t.workers:
                        into[i, s].append(n)  # reading: one flow per worker, y_w^s = x_w^s
        md.add(sum(v for (k, _s), v in m.count.items() if k == c) == len(members))

    def directed(i: int, u: str, v: str, most: int, x: cp_model.IntVar) -> cp_model.IntVar:
        y = m.y[i, u, v] = md.new_int_var(0, most, f"y{i}_{u}_{v}")  # (3)
        a = m.a[i, u, v] = md.new_bool_var(f"a{i}_{u}_{v}")  # (15)
        md.add(a <= y)  # (16)
        md.add(y <= most * a)  # (16)
        md.add(a <= x)  # (17)
        return y

    for (u, v), x in m.x.items():
        b = cap[u, v]
        k = inst.multiplicity.get((u, v), 1)
        if u in sends:  # a host link
            for i, t in tasks.items():
                if u in t.workers:
                    into[i, v].append(x)  # reading: the worker's one flow, y_w^s = x_w^s
            load = []
            for i in (i for i, ps in ps_of.items() if ps == u):  # reading: the PS only receives
                y = directed(i, v, u, (b - sends[u]) // unit[i], x)
                out[i, v].append(y)
                load.append(unit[i] * y)
            if load:
                md.add(sum(load) <= (b - sends[u]) * x)  # (14), the worker flows fixed
            continue
        load = []
        for i in tasks:
            y_uv = directed(i, u, v, k * (b // unit[i]), x)
            y_vu = directed(i, v, u, k * (b // unit[i]), x)
            out[i, u].append(y_uv)
            into[i, v].append(y_uv)
            out[i, v].append(y_vu)
            into[i, u].append(y_vu)
            load.append(unit[i] * (y_uv + y_vu))
        md.add(sum(load) <= b * x)  # (14)
    for s in inst.switches:
        md.add(sum(incident[s]) <= inst.ports[s])  # (7)
    for h in hosts:
        md.add(sum(incident[h]) == 1)  # (7) with η = 1 and (8)
    for s in inst.aggregators:
        for i in tasks:
            big_m = _big_m(inst, s, i, rates[i], cap, unit[i])
            md.add(sum(out[i, s]) <= 1)  # (9)
            md.add(sum(out[i, s]) <= sum(into[i, s]))  # (10), left
            md.add(sum(into[i, s]) <= big_m * sum(out[i, s]))  # (10), right
        if s in inst.agg_capacity and len(tasks) > 1:  # every task's merged flows together
            md.add(
                sum(unit[i] * sum(into[i, s]) for i in tasks)
                <= math.floor(exact(inst.agg_capacity[s]) * scale)
            )
    for s in inst.common:
        for i in tasks:
            md.add(sum(into[i, s]) == sum(out[i, s]))  # (13)
    received_by: dict[int, list] = {}
    for i, ps in ps_of.items():
        received = received_by[i] = [m.y[i, s, ps] for s in inst.switches if (i, s, ps) in m.y]
        md.add(sum(received) >= 1)  # the PS receives
        for s in inst.switches:
            if s != inst.merged:
                m.l[i, s] = md.new_int_var(1, L, f"l{i}_{s}")  # (18)
    for group, limit in inst.ps_limits.items():  # beyond the paper: a PS that aggregates
        inside = [i for i in group if i in received_by]
        if inside:
            md.add(
                sum(unit[i] * y for i in inside for y in received_by[i])
                <= math.floor(exact(limit) * scale)
            )
    for (i, u, v), a in m.a.items():
        if inst.merged in (u, v):  # what (19)-(21) say through any one common switch
            if v != ps_of[i]:
                md.add(m.l[i, v] <= L - 1 if u == inst.merged else m.l[i, u] >= 2).only_enforce_if(
                    a
                )
        elif v == ps_of[i]:
            md.add(m.l[i, u] <= 1).only_enforce_if(a)  # (19) l_u ≤ 1 + L(1 − a_u^v)
        else:
            md.add(m.l[i, v] + 1 <= m.l[i, u]).only_enforce_if(a)  # (20), (21)
    if symmetry != "none":
        _break_symmetry(m, incident, workers=symmetry == "all" and not classes)
    return m


def worker_classes(
    inst: Instance, senders: list[str], sends: dict[str, int], cap: dict[Pair, int], tasks: dict
) -> list[list[str]]:
    """Workers that swap without changing the instance: the same tasks, the same candidate
    switches at the same capacities. Any network maps to one where only the number of a
    class's members at each switch matters, so counting them (n_c^s, x summed over the class)
    loses no solution and keeps every infeasibility proof valid for (2)-(21)."""
    key: dict[tuple, list[str]] = {}
    for w in senders:
        roles = tuple(w in t.workers for t in tasks.values())
        links = tuple(
            cap.get((w, s)) if cap.get((w, s), -1) >= sends[w] else None for s in inst.switches
        )
        key.setdefault((roles, links), []).append(w)
    return list(key.values())


def _big_m(inst: Instance, s: str, i: int, rate: Fraction, cap: dict[Pair, int], unit: int) -> int:
    """The smallest M valid in (10): the most flows of task i aggregator s can receive."""
    workers, ps = set(inst.tasks[i].workers), inst.tasks[i].ps
    hosts = set(inst.hosts()) - {ps}

    def flows(p: Pair, c: int) -> int:  # task i's flows the link can carry
        return (1 if p[0] in workers else 0) if p[0] in hosts else c // unit

    per_link = sorted(
        (flows(p, c) for p, c in cap.items() if s in p for _ in range(inst.multiplicity.get(p, 1))),
        reverse=True,
    )
    by_ports = sum(per_link[: inst.ports[s]]) - 1  # one port's flow slot carries its output
    bounds = [len(workers) + len(inst.aggregators), by_ports]
    if inst.max_fan_in is not None:
        bounds.append(inst.max_fan_in)
    if s in inst.agg_capacity:
        bounds.append(math.floor(exact(inst.agg_capacity[s]) / rate))
    return max(0, min(bounds))


def _break_symmetry(m: AtroModel, incident: dict[str, list], workers: bool) -> None:
    inst = m.inst
    for group in interchangeable(inst, inst.switches, switches=True):
        for s, t in pairwise(group):
            m.model.add(sum(incident[s]) >= sum(incident[t]))
    if not workers:
        return
    index = {s: i for i, s in enumerate(inst.switches)}
    position = {w: sum(index[s] * x for (h, s), x in m.x.items() if h == w) for w in inst.senders()}
    for group in interchangeable(
        inst, sorted(inst.senders(), key=inst.hosts().index), switches=False
    ):
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
        roles = [(s in t_.workers, s == t_.ps) for t_ in inst.tasks]
        if not switches and roles != [(t in t_.workers, t == t_.ps) for t_ in inst.tasks]:
            return False
        if switches and (
            inst.ports[s] != inst.ports[t]
            or (s in inst.aggregators) != (t in inst.aggregators)
            or inst.agg_capacity.get(s) != inst.agg_capacity.get(t)
        ):
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
