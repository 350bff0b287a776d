"""EINA+'s model on CP-SAT: EINA's trees (Sec. III-B) with bypass, rates in steps.

Per PS p (root π[p]) the variables are, beside EINA's x, d, r:
  m[p, i]     non-root i merges flows of p (has an aggregation point); EINA: every tree node
  n[p, i]     local workers of i merged at i; EINA: all a_{p,i} of them
  u[p, i, j]  local workers of i sent UNMERGED to j (merged there, or at π[p] passed to the PS
              unmerged): the bypass; EINA: none
  x[p, i, j]  i's merged flow goes to j (EINA's x), Σ_j x[p, i, j] = m[p, i] (EINA's (2), (7))
  d[p, i]     depth, x ⇒ d_i ≥ d_j + 1 (EINA's (5), acyclicity; no d* in EINA+)
  M[p]        flows arriving at π[p] that it merges; the other ones reach the PS unmerged
Flow counts, all linear in these: In (received from the DCN, EINA's (12)), Out (sent into it,
(11)), Cap (charged to c_j, (10): merged flows on an `addressed` aggregator, every entering
flow on an `all` one) and S (flows on π[p]'s link to the PS). Each count times r_p is one
CP-SAT product (add_multiplication_equality), so Σ_p count · r_p ≤ cap is exact and every row
keeps the form `bound.py` needs (flow count · rate), which makes the grid argument hold.

Why the model holds every plan (so its bound is one for the evaluator's problem): on an edge
topology any valid plan can be rewritten, without raising any load, so that each flow goes
straight from the aggregator where it is made (its worker's rack, or where it was merged) to
the aggregator that merges it, or to π[p] and the PS: a flow crossing an aggregator unmerged
on its way elsewhere only adds that aggregator's DCN ingress and egress (and, on `all`, its
charge), and it keeps what each aggregator merges, so the fan-in limit L (`Instance.fan_in`)
holds as n[p, j] + In ≤ L and M[p] ≤ L. The model holds a little more than the plans: two
combinations the data plane's per-worker merge rule cannot express (`routes.py`), which
`realizable=True` excludes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from ortools.sat.python import cp_model

from controller.solvers.eina.instance import Instance
from controller.solvers.eina.model import units


@dataclass
class Choice:
    """One PS's routing in EINA+ terms (what the variables above say, read back)."""

    merged_local: dict[str, int]  # n[p, i], i ≠ π[p]
    unmerged: dict[tuple[str, str], int]  # u[p, i, j] > 0
    parent: dict[str, str]  # x[p, i, j] = 1: merging non-root i → j
    root_merged: int  # M[p]


@dataclass
class PlusModel:
    model: cp_model.CpModel
    r: list[cp_model.IntVar] = field(default_factory=list)
    vars: dict[tuple, cp_model.IntVar] = field(default_factory=dict)


def counts(inst: Instance, p: int, choice: Choice, merges_all: dict[str, bool]) -> dict:
    """Flow counts of one PS's choice: ("in"|"out"|"cap", j) and ("ps",) → count."""
    A, root, local = inst.aggregators, inst.home[inst.ps[p]], inst.local[p]
    into = dict.fromkeys(A, 0)
    out = dict.fromkeys(A, 0)
    for i, j in choice.parent.items():
        out[i] += 1
        into[j] += 1
    for (i, j), k in choice.unmerged.items():
        out[i] += k
        into[j] += k
    c: dict[tuple[str, ...], int] = {}
    for j in A:
        if merges_all[j]:
            c["cap", j] = local[j] + into[j]
        elif j == root:
            c["cap", j] = choice.root_merged
        else:
            c["cap", j] = choice.merged_local.get(j, 0) + into[j]
        c["in", j], c["out", j] = into[j], out[j]
    stay = local[root] - sum(k for (i, _j), k in choice.unmerged.items() if i == root)
    arrivals = stay + into[root]
    c["ps",] = arrivals - choice.root_merged + int(choice.root_merged > 0)
    return c


def build(
    inst: Instance,
    step: Fraction,
    merges_all: dict[str, bool],
    ps_link: list[Fraction],
    realizable: bool = False,
) -> PlusModel:
    """The model; `realizable` adds the data plane's per-worker merge rule (`routes.py`): a
    worker bypasses its rack only towards an aggregator no deeper than the rack, and π[p]'s
    own workers stay at π[p]. Without it the model is a relaxation, which is what the bound
    needs; with it every solution is a plan as it stands."""
    pm = PlusModel(cp_model.CpModel())
    mdl, v = pm.model, pm.vars
    A, P = inst.aggregators, range(len(inst.ps))
    total = {p: sum(inst.local[p].values()) for p in P}
    load: dict[tuple, list] = {}  # resource → Σ_p count · r_p terms
    for p in P:
        root, local = inst.home[inst.ps[p]], inst.local[p]
        high = units(inst.r_high[p], step)
        r = mdl.new_int_var(math.ceil(inst.r_low / step), high, f"r{p}")  # (1)
        pm.r.append(r)
        into: dict[str, list[Any]] = {j: [] for j in A}  # terms of flows into / out of j
        out: dict[str, list[Any]] = {j: [] for j in A}
        for i in A:
            v["d", p, i] = (
                mdl.new_constant(0)
                if i == root
                else mdl.new_int_var(1, max(1, len(A) - 1), f"d{p}_{i}")
            )
        for i in A:
            if i != root:
                v["m", p, i] = mdl.new_bool_var(f"m{p}_{i}")
                v["n", p, i] = mdl.new_int_var(0, local[i], f"n{p}_{i}")
                mdl.add(v["n", p, i] <= local[i] * v["m", p, i])
            for j in A:
                if j == i:
                    continue
                if local[i] and not (realizable and i == root):
                    u = v["u", p, i, j] = mdl.new_int_var(0, local[i], f"u{p}_{i}_{j}")
                    out[i].append(u)
                    into[j].append(u)
                    if realizable and j != root:  # j is then no descendant of i
                        used = mdl.new_bool_var(f"b{p}_{i}_{j}")
                        mdl.add(u == 0).only_enforce_if(~used)
                        mdl.add(v["d", p, j] <= v["d", p, i]).only_enforce_if(used)
                if i != root:
                    v["x", p, i, j] = mdl.new_bool_var(f"x{p}_{i}_{j}")
                    out[i].append(v["x", p, i, j])
                    into[j].append(v["x", p, i, j])
                    mdl.add(v["d", p, i] >= v["d", p, j] + 1).only_enforce_if(v["x", p, i, j])
        for i in A:
            if i == root:
                continue
            mdl.add(sum(v["x", p, i, j] for j in A if j != i) == v["m", p, i])
            sent = [v["u", p, i, j] for j in A if ("u", p, i, j) in v]
            mdl.add(v["n", p, i] + sum(sent) == local[i])  # every local worker goes somewhere
            for k in A:  # only a merging aggregator receives flows to merge
                if ("u", p, k, i) in v:
                    mdl.add(v["u", p, k, i] <= local[k] * v["m", p, i])
                if k != i and k != root:
                    mdl.add(v["x", p, k, i] <= v["m", p, i])
            mdl.add(v["n", p, i] + sum(into[i]) >= v["m", p, i])  # it merges something
        stay = local[root] - sum(v["u", p, root, j] for j in A if ("u", p, root, j) in v)
        arrivals = stay + sum(into[root])
        v["M", p] = mdl.new_int_var(0, total[p] + len(A), f"M{p}")
        v["mr", p] = mdl.new_bool_var(f"mr{p}")
        mdl.add(v["M", p] <= arrivals)
        mdl.add(v["M", p] >= v["mr", p])
        mdl.add(v["M", p] <= (total[p] + len(A)) * v["mr", p])
        for j in A:  # (10) at r_p = 0 too: an aggregator without capacity merges nothing
            if inst.c[j] == 0:
                mdl.add(v["mr", p] == 0 if j == root else v["m", p, j] == 0)
        if inst.fan_in:  # the fan-in limit L: what j merges of p (kept by any rewritten plan)
            mdl.add(v["M", p] <= inst.fan_in)
            for j in A:
                if j != root:
                    mdl.add(v["n", p, j] + sum(into[j]) <= inst.fan_in)
        rows: dict[tuple[str, ...], Any] = {("ps",): arrivals - v["M", p] + v["mr", p]}
        for j in A:
            rows["in", j], rows["out", j] = sum(into[j]), sum(out[j])
            if merges_all[j]:
                rows["cap", j] = local[j] + sum(into[j])
            elif j == root:
                rows["cap", j] = v["M", p]
            else:
                rows["cap", j] = v["n", p, j] + sum(into[j])
        for key, expr in rows.items():
            cnt = mdl.new_int_var(0, total[p] + len(A), f"k{p}_{key}")
            mdl.add(cnt == expr)
            prod = mdl.new_int_var(0, (total[p] + len(A)) * high, f"l{p}_{key}")
            mdl.add_multiplication_equality(prod, [cnt, r])
            v["count", p, key] = cnt
            v["load", p, key] = prod
            load.setdefault(key if key != ("ps",) else ("ps", p), []).append(prod)
    for j in A:
        mdl.add(sum(load["cap", j]) <= units(inst.c[j], step))  # (10)
        mdl.add(sum(load["out", j]) <= units(inst.b_in[j], step))  # (11)
        mdl.add(sum(load["in", j]) <= units(inst.b_out[j], step))  # (12)
    for p in P:
        mdl.add(sum(load["ps", p]) <= units(ps_link[p], step))  # π[p] → PS: link, PS's capacity
    for w, cap in inst.host_cap.items():  # a worker's own link: one flow per PS
        mdl.add(sum(pm.r[p] for p in inst.tasks_of[w]) <= units(cap, step))
    # Implied (`solver.merge_budget`), stated so CP-SAT's bound sees it.
    mdl.add(
        sum(total[p] * pm.r[p] for p in P)
        <= units(sum(inst.c.values(), Fraction(0)) + sum(ps_link, Fraction(0)), step)
    )
    mdl.maximize(sum(pm.r))  # (13)
    return pm


def hint(
    inst: Instance,
    pm: PlusModel,
    choices: list[Choice],
    levels: list[int],
    merges_all: dict[str, bool],
) -> None:
    """Start CP-SAT at a known solution (EINA's trees): so it never ends below it."""
    v = pm.vars
    for p, ch in enumerate(choices):
        pm.model.add_hint(pm.r[p], levels[p])
        root = inst.home[inst.ps[p]]
        depth = _depths(ch.parent, root)
        for key, var in v.items():
            if len(key) < 2 or key[1] != p:
                continue
            kind = key[0]
            if kind == "m":
                val = int(key[2] in ch.parent)
            elif kind == "n":
                val = ch.merged_local.get(key[2], 0)
            elif kind == "u":
                val = ch.unmerged.get((key[2], key[3]), 0)
            elif kind == "x":
                val = int(ch.parent.get(key[2]) == key[3])
            elif kind == "d":
                if key[2] == root:
                    continue
                val = depth.get(key[2], 1)
            elif kind == "M":
                val = ch.root_merged
            elif kind == "mr":
                val = int(ch.root_merged > 0)
            else:
                val = counts(inst, p, ch, merges_all)[key[2]]
                if kind == "load":
                    val *= levels[p]
            pm.model.add_hint(var, val)


def _depths(parent: dict[str, str], root: str) -> dict[str, int]:
    out = {}
    for i in parent:
        node, k = i, 0
        while node != root:
            node, k = parent[node], k + 1
        out[i] = k
    return out


def read_back(inst: Instance, pm: PlusModel, solver: cp_model.CpSolver) -> list[Choice]:
    v, out = pm.vars, []
    for p in range(len(inst.ps)):
        ch = Choice({}, {}, {}, solver.value(v["M", p]))
        for key, var in v.items():
            if len(key) < 3 or key[1] != p:
                continue
            val = solver.value(var)
            if key[0] == "n" and val:
                ch.merged_local[key[2]] = val
            elif key[0] == "u" and val:
                ch.unmerged[key[2], key[3]] = val
            elif key[0] == "x" and val:
                ch.parent[key[2]] = key[3]
        out.append(ch)
    return out
