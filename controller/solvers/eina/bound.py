"""A bound on the REAL (continuous-rate) EINA problem from the quantized model's bound.

Why it holds: take any real solution (trees, rates r*). Every constraint of the model is
Σ (flow count) · r ≤ cap, so n · floor(r*/s) ≤ floor(n · r*/s) ≤ floor(cap/s): rounding each
rate down to whole steps gives a solution of the quantized model (r^L is a whole number of
steps, `solver.py` insists). Hence Σ_p floor(r*_p/s) ≤ U, the quantized bound, and

    Σ_p r*_p < s · (U + |P|).

One PS: for fixed trees the real optimum is the smallest of r^U and cap / k over the
constraints it meets (k a flow count), so it is one of finitely many "candidate" values; the
bound is the largest candidate below s · (U + 1). That is what proves the 0.5 of EINA Fig. 1
optimal from a 0.01 Gbps grid. Several PSs: the optimum is an LP vertex, no such snapping;
the bound is s · (U + |P|). Either way `rack_bound`, which needs no tree, caps it.
"""

from __future__ import annotations

from fractions import Fraction

from controller.solvers.eina.instance import Instance


def real_bound(inst: Instance, step: Fraction, quantized_bound: int) -> Fraction:
    limit = step * (quantized_bound + len(inst.ps))
    if len(inst.ps) == 1:
        limit = max((v for v in candidates(inst) if v < limit), default=Fraction(0))
    return min(limit, rack_bound(inst))


def candidates(inst: Instance) -> set[Fraction]:
    """Every value the single-PS optimum can take: a capacity over a possible flow count."""
    n = len(inst.aggregators)
    values = {inst.r_high[0], *inst.host_cap.values(), *inst.b_in.values()}
    for j in inst.aggregators:
        values.update(inst.c[j] / k for k in range(1, inst.local[0][j] + n))
        values.update(inst.b_out[j] / k for k in range(1, n))
    return values


def rack_bound(inst: Instance) -> Fraction:
    """A bound on Σ_p r_p that needs no tree: what every PS's flows must share anyway.

    An aggregator j holding workers of every PS merges Σ_p a_{p,j} r_p ≥ min_p a_{p,j} · Σ_p r_p
    by (10), so Σ_p r_p ≤ c_j / min_p a_{p,j}; a worker in every task sends Σ_p r_p on its own
    link; and Σ_p r_p ≤ Σ_p r_p^U. In EINA every PS has all workers, so the tightest rack
    usually is the optimum, and this proves it for several PSs where the grid bound cannot.
    """
    P = range(len(inst.ps))
    bounds: list[Fraction] = [sum(inst.r_high, Fraction(0))]
    for j in inst.aggregators:
        least = min(inst.local[p][j] for p in P)
        if least > 0:
            bounds.append(inst.c[j] / least)
    bounds += [cap for w, cap in inst.host_cap.items() if len(inst.tasks_of[w]) == len(inst.ps)]
    return min(bounds)
