"""Alg. 2 steps 1 and 2 (PS selection, the rate loop, degree constraints) and line 23.

Reading (a): lines 14-15 (drop the switches with B_v < 2r, which cannot merge two gradients)
are applied before every test of line 11, the first included, as Theorem 2's proof defines
V_1. As printed, the first test counts them: each adds a gradient to |V_1 - {v_p}| but at most
one to the supply, and the loop can then step below a feasible rate (1 Gbps instead of 1.5 on
`ina bench paring` ratio instance 4). So read, line 11 holds exactly when a tree at rate r can
exist, and the loop visits the candidate rates B_v / k downward: r_2 is the optimal rate.

Rates are exact fractions, so that r = B_v / k gives ⌊B_v / r⌋ = k with no rounding.
Workers do not aggregate here (hosts never forward in this controller, and the paper's
experiments give capacity only to the PS): a worker's B_v is 0, so d(v) = 1, a leaf.
"""

from __future__ import annotations

import math
from fractions import Fraction

from controller.solvers.paring.logical import INF, Logical

Rate = Fraction | float


def floor_div(b: Rate, r: Rate, cap: int) -> int:
    """⌊B_v / r⌋, with an unlimited B_v (P4 switches, Sec. IV-C.5) counted as `cap`; at rate 0
    (R = 0, or no capacity anywhere) any number of gradients fits, B_v = 0 included."""
    if b == INF or r == 0:
        return cap
    if r == INF:
        return 0
    return min(math.floor(b / r), cap)


def slots(g: Logical, v: str, r: Rate, cap: int) -> int:
    """The children v may take at rate r: ⌊B_v / r⌋ (`floor_div`), and at a switch at most
    the data plane's fan-in L (`g.fan_in`; the PS is a server: no such limit)."""
    k = floor_div(g.capacity[v], r, cap)
    return min(k, g.fan_in) if g.fan_in and g.network.is_switch(v) else k


def select_ps(g: Logical, n: int) -> str:
    """Step 1 (lines 1-6): among the servers of largest capacity (T'), the one whose n nearest
    other servers are nearest on average; ties go to declaration order."""
    top = max(g.capacity[h] for h in g.hosts)
    candidates = [h for h in g.hosts if g.capacity[h] == top]  # line 2

    def ave(v: str) -> float:  # lines 4-5
        near = sorted(g.cost.get((v, t), INF) for t in g.hosts if t != v)[:n]
        return sum(near) / n

    return min(candidates, key=ave)  # line 6


def rate_and_degrees(g: Logical, ps: str, n: int) -> tuple[Rate, dict[str, int]]:
    """Step 2 (lines 7-20): the rate r_2 and the degree bound d(v) of every vertex."""
    cap = n + len(g.switches) + 1  # no vertex can use more children than that
    workers = n  # line 8: n servers besides the PS, each of capacity 0 (module docstring)
    everyone = [*g.switches, ps]  # V_2 without the workers, who add only to |V_1 - {v_p}|

    def demand(v1: list[str]) -> int:  # |V_1 - {v_p}|
        return len(v1) - 1 + workers

    def supply(v1: list[str], r: Rate) -> int:  # Σ_{v ∈ V_1} ⌊B_v / r⌋ (at most L at a switch)
        return sum(slots(g, v, r, cap) for v in v1)

    def useful(r: Rate) -> list[str]:  # lines 14-15: switches that can merge two gradients
        return [
            v for v in everyone if v == ps or (g.capacity[v] >= 2 * r and slots(g, v, r, cap) >= 2)
        ]

    def grows(v: str, r: Rate) -> bool:  # a lower rate can give v another slot
        return g.capacity[v] not in (0, INF) and not (
            g.fan_in and g.network.is_switch(v) and slots(g, v, r, cap) >= g.fan_in
        )

    total = sum(g.capacity[v] for v in everyone)
    r: Rate = min(g.rate_cap, total / demand(everyone))  # line 10
    v1 = useful(r)  # (a)
    while supply(v1, r) < demand(v1):  # line 11
        finite = [g.capacity[v] for v in everyone if grows(v, r)]  # line 12
        if not finite:
            break
        r = max(b / (floor_div(b, r, cap) + 1) for b in finite)  # line 13 (as its prose reads)
        v1 = useful(r)  # lines 14-15
    d: dict[str, int] = {}
    for v in g.switches:  # lines 17-18
        d[v] = slots(g, v, r, cap) + 1
    for v in g.hosts:  # lines 19-20
        d[v] = max(1, floor_div(g.capacity[v], r, cap)) if v == ps else 1
    return r, d


def tree_rate(g: Logical, ps: str, children: dict[str, int]) -> Rate:
    """Line 23: the rate the tree's degrees allow, r = min(B_v / children(v)) (children =
    d_H(v) - 1 for a switch, d_H(v) for the PS), capped by R."""
    r: Rate = g.rate_cap
    for v, k in children.items():
        if k >= 1 and (v == ps or v in g.switches):
            r = min(r, g.capacity[v] / k if g.capacity[v] != INF else INF)
    return r
