"""The structural accelerations of Sec. III-C: SRO and APP (QSR lives in `qsr`).

APP keeps max(1, floor(alpha·n)) of the n INA switches of each AA group per task. An AA group
is a set of INA switches that are interchangeable for the task: same predecessors and
successors in its shortest-path DAG (all INA spines of a leaf-spine; per pod and per core
group in a fat-tree). Access switches (a worker's leaf, the PS's leaf) are never pruned, and
keeping at least one per group is the paper's "at least one per level per pod" rule. Members
are taken in order of the variance of their INPs' scores (the most flows each INP may receive),
round robin across tasks over a shared list per group. A pruned switch still forwards the
task's traffic as a CS; it only stops aggregating it.

Ties on variance are broken by name only. In generated leaf-spines every INA spine maps the
leaves to its pipelines the same way, so all members of a group have the same multiset of INP
scores (measured on the SJST default, seeds 0-5): no score-based tie-break can tell them
apart, and the kept sets are equivalent up to renaming. The paper keeps ⌊αn⌋ (Sec. III-C),
so the throughput APP costs there comes from the count, not from the choice.

SRO stage 1 drops the INA-agnostic non-access switches (CS spines) with their paths; stage 2
removes the links into INPs that stage 1 could use but left idle, and starts from the stage-1
routes and rates as lower bounds. "Used" also counts each task's own stage-1 routes (found for
its per-task cap): with them kept, stage 2 starts every task alone at its stage-1 optimum
(Fig. 11 λ = 4 seed 0: three tasks' final searches alone went from open after 3-4 s to
50 Gbps in 0.1 s).
"""

from __future__ import annotations

from collections import defaultdict

from controller.model.network import Network
from controller.solvers.aro.unfold import Edge, Node, TaskGraph, build_task_graph


def access_switches(network: Network) -> set[str]:
    """Switches with a host attached (leaves / edge switches)."""
    return {
        s
        for s in network.switches
        if any(not network.is_switch(n) for n in network.graph.successors(s))
    }


def inp_scores(tg: TaskGraph) -> dict[Node, int]:
    """Score of an INP: the most flows its upstream nodes may send it (Fig. 6)."""
    most = tg.max_flows()
    return {inp: sum(most[u] for u in tg.pred[inp]) for inp in tg.inps}


def score_variance(tg: TaskGraph, switch: str, scores: dict[Node, int]) -> float:
    values = [s for inp, s in scores.items() if inp[1] == switch]
    if not values:
        return 0.0
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values)


def aa_groups(tg: TaskGraph, candidates: set[str]) -> list[list[str]]:
    """INA switches of the task's graph that are interchangeable (same DAG neighbours)."""
    pred: dict[str, set[str]] = defaultdict(set)
    succ: dict[str, set[str]] = defaultdict(set)
    for a, b in tg.physical.values():
        succ[a].add(b)
        pred[b].add(a)
    groups: dict[tuple[frozenset[str], frozenset[str]], list[str]] = defaultdict(list)
    for s in sorted(candidates):
        if s in pred:
            groups[frozenset(pred[s]), frozenset(succ[s])].append(s)
    return list(groups.values())


def app_select(network: Network, alpha: float, ina: list[str]) -> dict[int, set[str]]:
    """Aggregators kept per task index by aggregator pre-pruning."""
    access = access_switches(network)
    prunable = set(ina) - access
    pool: dict[frozenset[str], list[str]] = {}  # round-robin list per AA group
    chosen: dict[int, set[str]] = {}
    for i, task in enumerate(network.tasks):
        tg = build_task_graph(network, i, task, ina)
        scores = inp_scores(tg)
        keep = set(ina) & access
        for group in aa_groups(tg, prunable):
            quota = max(1, int(alpha * len(group)))
            members = frozenset(group)
            picked: set[str] = set()
            while len(picked) < quota:
                left = [s for s in pool.get(members, []) if s not in picked]
                if not left:
                    pool[members] = sorted(group)
                    left = [s for s in pool[members] if s not in picked]
                best = min(left, key=lambda s: (score_variance(tg, s, scores), s))
                pool[members].remove(best)
                picked.add(best)
            keep |= picked
        chosen[i] = keep
    return chosen


def sro_excluded(network: Network) -> set[str]:
    """Stage 1 of SRO: the INA-agnostic switches above the access layer."""
    return (
        set(network.switches)
        - access_switches(network)
        - {s for s in network.switches if network.is_ina(s)}
    )


def idle_inp_links(
    graphs: list[TaskGraph],
    flows: dict[tuple[int, Edge], int],
) -> dict[int, set[Edge]]:
    """Per task, the links into INPs that stage 1 offered but its routes did not use."""
    dropped: dict[int, set[Edge]] = {}
    for tg in graphs:
        idle = {inp for inp in tg.inps if not flows.get((tg.index, (inp, tg.succ[inp][0])), 0)}
        dropped[tg.index] = {(u, inp) for inp in idle for u in tg.pred[inp]}
    return dropped
