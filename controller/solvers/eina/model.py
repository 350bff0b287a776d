"""EINA's model (Sec. III-B) on CP-SAT, rates counted in units of a step (Gbps per unit).

Variables, in the paper's notation, per PS p (index into `Instance.ps`):
  x[p, i, j]  aggregator i sends its (aggregated) flow for p to aggregator j     (binary)
  d[p, i]     i's depth in p's tree, in hops to the root π[p]                     (integer)
  r[p]        every worker's sending rate to p, in steps                          (integer)
  z[p, i, j]  = x[p, i, j] · r[p], the rate i sends to j for p: it turns the quadratic
              products of (10)-(12) into linear sums (exact: x is binary).

With the data plane's fan-in limit L (`Instance.fan_in`), j merges at most L flows of each p:
Σ_i x[p, i, j] + a_{p,j} ≤ L.

Capacities become whole steps rounded down (floor(cap / step)); since every constraint
coefficient is a flow count, floor(r*/step) of any real solution r* fits them, which is what
`bound.py` relies on. The readings of the garbled (9)-(12) are in the package docstring.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

from ortools.sat.python import cp_model

from controller.solvers.eina.bound import rack_bound
from controller.solvers.eina.instance import Instance

Arc = tuple[int, str, str]  # (p, i, j)


@dataclass
class EinaModel:
    model: cp_model.CpModel
    x: dict[Arc, cp_model.IntVar] = field(default_factory=dict)
    z: dict[Arc, cp_model.IntVar] = field(default_factory=dict)
    d: dict[tuple[int, str], cp_model.IntVar] = field(default_factory=dict)
    r: list[cp_model.IntVar] = field(default_factory=list)


def units(value: Fraction, step: Fraction) -> int:
    """Whole steps that fit in `value` (a capacity is never exceeded by rounding)."""
    return math.floor(value / step)


def build(inst: Instance, step: Fraction) -> EinaModel:
    m = EinaModel(cp_model.CpModel())
    A, P = inst.aggregators, range(len(inst.ps))
    d_hat = inst.d_hat
    for p in P:
        low = math.ceil(inst.r_low / step)
        high = units(inst.r_high[p], step)
        # (1); `solver.py` reports infeasibility itself when low > high (an empty domain)
        m.r.append(m.model.new_int_var(low, high, f"r{p}"))
        root = inst.home[inst.ps[p]]
        for i in A:
            if i == root:
                m.d[p, i] = m.model.new_constant(0)  # (3) d[p, π[p]] = 0
                continue  # reading of (9): the root sends nothing (depth 0 ≥ Σ_j x)
            m.d[p, i] = m.model.new_int_var(1, max(1, d_hat), f"d{p}_{i}")  # (4)
            for j in A:
                if j != i:
                    m.x[p, i, j] = m.model.new_bool_var(f"x{p}_{i}_{j}")
                    m.z[p, i, j] = m.model.new_int_var(0, high, f"z{p}_{i}_{j}")
        for i in A:
            if i == root:
                continue
            out = [m.x[p, i, j] for j in A if j != i]
            into = [m.x[p, k, i] for k in A if k != i and (p, k, i) in m.x]
            if d_hat < 1:  # d* = 1: only π[p] may be on a path; nobody else can send
                m.model.add(sum(out) == 0)
            if inst.local[p][i] > 0:
                m.model.add(sum(out) == 1)  # (2) i ∈ A_W sends its aggregate to one j
            else:
                m.model.add(sum(out) <= 1)  # (7) a relay i ∈ A_E sends at most once
                m.model.add(sum(out) <= sum(into))  # (8) ... and only what it received
                for x_in in into:  # reading of (9): ... and forwards whatever it receives
                    m.model.add(x_in <= sum(out))
            for j in A:
                if j == i:
                    continue
                x, z = m.x[p, i, j], m.z[p, i, j]
                m.model.add(m.d[p, i] == m.d[p, j] + 1).only_enforce_if(x)  # (5) and (6)
                m.model.add(z == m.r[p]).only_enforce_if(x)  # z = x · r
                m.model.add(z == 0).only_enforce_if(~x)
                if inst.c[j] == 0:  # (10) at r_p = 0 too: j merges nothing, so adopts nothing
                    m.model.add(x == 0)
        for j in A if inst.fan_in else ():  # j merges its children and a_j: at most L flows
            children = [m.x[p, i, j] for i in A if (p, i, j) in m.x]
            if len(children) + inst.local[p][j] > inst.fan_in:
                m.model.add(sum(children) + inst.local[p][j] <= inst.fan_in)

    def z_into(j: str) -> list:
        return [z for (p, i, k), z in m.z.items() if k == j]

    def z_out(i: str) -> list:
        return [z for (p, k, j), z in m.z.items() if k == i]

    for j in A:
        local = [inst.local[p][j] * m.r[p] for p in P if inst.local[p][j]]
        m.model.add(sum(z_into(j)) + sum(local) <= units(inst.c[j], step))  # (10)
        m.model.add(sum(z_out(j)) <= units(inst.b_in[j], step))  # (11)
        m.model.add(sum(z_into(j)) <= units(inst.b_out[j], step))  # (12)
    for w, cap in inst.host_cap.items():  # a worker's own link (never binding in the paper)
        m.model.add(sum(m.r[p] for p in inst.tasks_of[w]) <= units(cap, step))
    # Implied by (10) and the links (`bound.rack_bound`), stated so CP-SAT's bound sees it.
    m.model.add(sum(m.r) <= units(rack_bound(inst), step))
    m.model.maximize(sum(m.r))  # (13)
    return m
