"""Which coarse plans give the paper's DeepSys+SOAR and PANAMA numbers? (docs/benchmarks/journal.md)

An exhaustive search at the two points the paper states (Sec. V-C-3): every shortest-path tree
carrying DeepSys's placement to the PS (each node used takes one of its next hops toward the
PS) and every set of the programmable switches on it merging what they receive (coarse: all
flows or none). Each plan is counted the way the evaluator scores it: a link carries one
gradient per flow crossing it, a merging switch (and the PS) takes its incoming flows against
its 10 Gbps, a link its flows against 10 Gbps, rate = min(R, 10 / the largest count). A plan
matches a paper value when its rate and its volume in gradient-hops equal it (GiB × 1024 /
1627 MB, the paper's volumes being GiB). Volume never grows when a switch merges, so a tree
whose every programmable switch merging still exceeds the target is skipped, and so is any
partial choice that cannot come down to it: the search stays exhaustive.
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from functools import cache
from itertools import combinations
from typing import Any

import networkx as nx

from controller.model.network import Network, Task, build_network, hosts_do_not_forward_to
from controller.solvers.baselines.placing import deepsys_tree

GIB_PER_GRADIENT = 1627 / 1024  # one gradient of 1627 MB crossing one link, in GiB
# (scheme, workers, switches) → the paper's rate (a fraction of 10 Gbps) and volume (GiB):
# the rates from Sec. V-C-3's communication-time gains (81.8 % over PANAMA = 1 - (10/11)/5).
PAPER = {
    ("deepsys-soar", 15, 8): (Fraction(10, 7), 60.4),
    ("panama", 15, 8): (Fraction(10, 11), 58.8),
    ("deepsys-soar", 20, 12): (Fraction(10, 7), 65.1),
    ("panama", 20, 12): (Fraction(10, 7), 60.4),
}


def trees(network: Network, task: Task) -> Iterator[dict[str, str]]:
    """Every shortest-path tree toward the PS spanning the workers (node → next hop)."""
    graph = network.graph
    dist = nx.single_target_shortest_path_length(hosts_do_not_forward_to(graph, task.ps), task.ps)
    dist = dict(dist)
    closer = {
        v: sorted(
            u
            for u in graph.successors(v)
            if dist.get(u, -1) == dist[v] - 1 and (u == task.ps or network.is_switch(u))
        )
        for v in dist
    }

    def grow(parent: dict[str, str], todo: list[str]) -> Iterator[dict[str, str]]:
        while todo and (todo[0] in parent or todo[0] == task.ps):
            todo = todo[1:]
        if not todo:
            yield dict(parent)
            return
        v = todo[0]
        for u in closer[v]:
            parent[v] = u
            yield from grow(parent, [*todo[1:], u])
            del parent[v]

    yield from grow({}, sorted(task.workers))


def counter(parent: dict[str, str], task: Task, rate_cap: float):
    """f(merging) → (rate Gbps, volume in gradient-hops) of the coarse plan on this tree:
    a worker sends one flow, a merging switch one, any other node all it receives."""
    depth: dict[str, int] = {}

    def level(v: str) -> int:
        if v not in depth:
            depth[v] = 0 if v == task.ps else 1 + level(parent[v])
        return depth[v]

    order = sorted(parent, key=level, reverse=True)  # leaves first
    leaves = set(parent) - set(parent.values())

    @cache
    def scored(merging: frozenset[str]) -> tuple[Fraction, int]:
        inflow = dict.fromkeys([*parent, task.ps], 0)
        sent = {}
        for v in order:
            sent[v] = 1 if v in leaves or v in merging else inflow[v]
            inflow[parent[v]] += sent[v]
        busiest = max([*sent.values(), *(inflow[v] for v in merging | {task.ps})])
        return min(Fraction(rate_cap), Fraction(10, busiest)), sum(sent.values())

    return lambda merging: scored(frozenset(merging))


def search(
    network: Network, target_rate: Fraction, target_hops: int, any_switch: bool = False
) -> dict[str, Any]:
    """The plans of `network`'s task with exactly that rate and volume; among them those on
    DeepSys's tree and those SOAR would return (least volume for their number of merging
    switches on their tree); the least volume of any plan."""
    task = network.tasks[0]
    cap = task.rate_cap_gbps or 10.0
    ina = {s for s in network.switches if any_switch or network.is_ina(s)}
    deepsys = deepsys_tree(network, task)
    found, least, n_trees = [], None, 0
    for parent in trees(network, task):
        n_trees += 1
        f = counter(parent, task, cap)
        cands = sorted(ina & set(parent))
        least = min(least or 10**9, f(set(cands))[1])
        hits = _merging_sets(f, cands, (target_rate, target_hops))
        if hits:
            best = [
                min(f(set(c))[1] for j in range(k + 1) for c in combinations(cands, j))
                for k in range(len(cands) + 1)
            ]  # SOAR's optimum for budget k
            found += [
                {
                    "tree": _racks(network, parent),
                    "merging": sorted(s),
                    "deepsys_tree": all(deepsys.get(v) == u for v, u in parent.items()),
                    "soar_optimal": best[len(s)] == target_hops,
                }
                for s in hits
            ]
    return {
        "trees": n_trees,
        "least_hops": least,
        "matches": len(found),
        "on_deepsys_tree": sum(m["deepsys_tree"] for m in found),
        "soar_optimal": sum(m["soar_optimal"] for m in found),
        "soar_optimal_on_deepsys_tree": sum(m["soar_optimal"] and m["deepsys_tree"] for m in found),
        "soar_optimal_budgets": sorted({len(m["merging"]) for m in found if m["soar_optimal"]}),
        "examples": [m for m in found if m["soar_optimal"]][:3] + found[:2],
    }


def _merging_sets(f, cands: list[str], target: tuple[Fraction, int]) -> list[set[str]]:
    """Every subset of `cands` whose plan f scores exactly `target`."""
    hits: list[set[str]] = []

    def choose(i: int, chosen: set[str]) -> None:
        if f(chosen | set(cands[i:]))[1] > target[1]:
            return  # merging more cannot go below the target: prune
        if i == len(cands):
            if f(chosen) == target:
                hits.append(chosen)
            return
        choose(i + 1, chosen | {cands[i]})
        choose(i + 1, chosen)

    choose(0, set())
    return hits


def _racks(network: Network, parent: dict[str, str]) -> dict[str, str]:
    """A tree told by its switch hops (edge → aggregation → core), hosts left out."""
    return {v: u for v, u in sorted(parent.items()) if network.is_switch(v)}


def run_search(doc_for) -> list[dict[str, Any]]:
    """Every paper value of PAPER under both layouts; `doc_for(workers, switches, layout)`
    builds the bench's fat-tree (fat_tree_doc)."""
    rows = []
    for (scheme, workers, switches), (rate, gib) in PAPER.items():
        hops = round(gib / GIB_PER_GRADIENT)
        for layout in ("pods", "spread"):
            network = build_network(doc_for(workers, switches, layout))
            rows.append(
                {
                    "scheme": scheme,
                    "workers": workers,
                    "switches": switches,
                    "layout": layout,
                    "paper_rate_gbps": float(rate),
                    "paper_gib": gib,
                    "paper_hops": hops,
                    **search(network, rate, hops),
                }
            )
    return rows
