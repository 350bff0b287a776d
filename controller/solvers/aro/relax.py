"""A smaller relaxation of the model for refuting rates: interchangeable CS switches merged.

Proving that a rate is infeasible is the slow part of the rate search on large leaf-spines,
because CP-SAT must rule out every permutation of the many identical INA-agnostic spines.
Merging common switches with the same neighbours (and landing pipelines) into one node whose
links have the summed capacities is a relaxation: any routing maps onto it (flows add up, and
each link's y·r ≤ cap sums to the merged link's constraint), so "infeasible" there is a proof
for the real model. Feasible answers are always taken from the real model.
"""

from __future__ import annotations

from controller.solvers.aro.qsr import Resource
from controller.solvers.aro.unfold import Node, TaskGraph


def merge_classes(graphs: list[TaskGraph]) -> dict[str, str]:
    """CS switch → representative, for switches every task sees with the same neighbours."""
    signature: dict[str, list] = {}
    for tg in graphs:
        for u, vs in tg.succ.items():
            if u[0] == "cs" and not u[2]:
                sig = (tg.index, tuple(sorted(tg.pred[u])), tuple(sorted(vs)))
                signature.setdefault(u[1], []).append(sig)
    groups: dict[tuple, list[str]] = {}
    for name, sigs in signature.items():
        groups.setdefault(tuple(sigs), []).append(name)
    return {s: min(g) for g in groups.values() if len(g) > 1 for s in g}


def relax(
    graphs: list[TaskGraph], resources: list[Resource]
) -> tuple[list[TaskGraph], list[Resource]] | None:
    """The merged graphs and resources, or None when nothing merges."""
    rep = merge_classes(graphs)
    if not rep:
        return None

    def node(n: Node) -> Node:
        return ("cs", rep[n[1]], "", -1) if n[0] == "cs" and n[1] in rep else n

    merged = []
    for tg in graphs:
        new = TaskGraph(tg.index, tg.task, tg.ps, list(tg.workers))
        for u, v in tg.edges:
            ab = tg.physical.get((u, v))
            new.add_edge(
                node(u),
                node(v),
                None if ab is None else (rep.get(ab[0], ab[0]), rep.get(ab[1], ab[1])),
            )
        merged.append(new)
    by_key: dict[tuple[str, ...], Resource] = {}
    for r in resources:
        key = tuple(rep.get(k, k) for k in r.key)
        out = by_key.setdefault(key, Resource(key, 0.0, {}, 0))
        out.capacity_gbps += r.capacity_gbps
        out.cap += r.cap
        for i, edges in r.terms.items():
            mine = out.terms.setdefault(i, [])
            for u, v in edges:
                if (node(u), node(v)) not in mine:
                    mine.append((node(u), node(v)))
    return merged, list(by_key.values())
