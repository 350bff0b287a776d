"""The aggregated relaxation: every common switch of the pool merged into one node.

Why: on pools where the monolithic model (2)-(21) times out (several tasks, 90 workers), what
decides a rate is counting the aggregators' ports, and the common switches only pass flows on
(13). Merging them into one node C leaves a model of a few hundred variables whose
infeasibility CP-SAT proves in a fraction of a second, and a relaxation's infeasibility is the
real problem's: every network of the pool maps onto a solution of the merged model.

The mapping, constraint by constraint (so a reader can check validity against the paper):
  * C has η_C = Σ η_c over the common switches (7); links between common switches disappear
    (they only used ports);
  * the links between C and an aggregator s are one integer x_C^s ≤ the number of common
    switches with a candidate to s, of capacity the largest of theirs (14), summed;
  * a host's link to C has the largest capacity of its candidates among the common switches
    (8), (14);
  * flow conservation (13) holds for C summed over the common switches;
  * (9)-(10) at the aggregators are unchanged (their M is computed with C's parallel links,
    which only raises it);
  * layers (18)-(21): C has none; an aggregator sending to C is at layer ≥ 2 and one
    receiving from C at layer ≤ L − 1 (a common switch lies between it and the PS, or above
    it); flows through C between aggregators lose their layer order.
A feasible merged model says nothing (it is only a relaxation); `search.probe` asks it first
and takes only its refutations.
"""

from __future__ import annotations

from dataclasses import replace

from ortools.sat.python import cp_model

from controller.solvers.atro.instance import Instance, Pair
from controller.solvers.atro.model import AtroModel

MERGED = "C*"  # not a valid switch name in a topology file, so it cannot collide


def relax(inst: Instance) -> Instance | None:
    """The merged instance, or None when merging would change nothing (≤ 1 common switch)."""
    if len(inst.common) <= 1:
        return None
    common = set(inst.common)
    links: dict[Pair, float] = {}
    parallel: dict[Pair, int] = {}
    for (u, v), b in inst.links.items():
        if u in common and v in common:
            continue  # inside C
        if u in common:
            u, v = v, u
        if v in common:
            v = MERGED
        links[u, v] = max(links.get((u, v), 0.0), b)
        if v == MERGED and u in inst.aggregators:  # a host keeps one link, its best candidate
            parallel[u, v] = parallel.get((u, v), 0) + 1
    ports = {s: inst.ports[s] for s in inst.aggregators}
    ports[MERGED] = sum(inst.ports[c] for c in inst.common)
    return replace(
        inst,
        switches=[*inst.aggregators, MERGED],
        common=[MERGED],
        ports=ports,
        links=links,
        multiplicity={p: k for p, k in parallel.items() if k > 1},
        merged=MERGED,
    )


def follow(exact: AtroModel, merged: AtroModel, solver: cp_model.CpSolver) -> None:
    """Constrain the exact model to the merged model's network as seen from the aggregators:
    the workers of each class and the PS at each aggregator, the links and flows between
    aggregators and to the PS, and as many links and flows between each aggregator and the
    common switches as the merged model has to C. What is left to the exact model is which
    common switches carry that, within their ports and layers (the routing)."""
    md, value, star = exact.model, solver.value, merged.inst.merged
    common = set(exact.inst.common)
    home = {w: k for k, group in enumerate(merged.groups) for w in group}
    for (k, s), n in merged.count.items():  # workers at an aggregator (C: the rest)
        if s != star:
            md.add(
                sum(
                    v
                    for (c, t), v in exact.count.items()
                    if t == s and home[exact.groups[c][0]] == k
                )
                == value(n)
            )

    def side(end: str) -> list[str]:
        return sorted(common) if end == star else [end]

    for (u, v), x in merged.x.items():
        ends = {frozenset((p, q)) for p in side(u) for q in side(v)}
        md.add(sum(z for pair, z in exact.x.items() if frozenset(pair) in ends) == value(x))
    for (i, u, v), y in merged.y.items():
        md.add(
            sum(exact.y[i, p, q] for p in side(u) for q in side(v) if (i, p, q) in exact.y)
            == value(y)
        )
