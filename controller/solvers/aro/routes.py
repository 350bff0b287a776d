"""Route generation (Algorithm 1, Sec. III-D) and the walks that build or replay flow counts.

Algorithm 1 turns the y values into one physical path per worker: a DFS walk follows edges with
remaining flow, and once a walk has passed an INP, every later flow entering that INP reuses the
recorded INP→PS subpath (an aggregated flow cannot split). The same walk with a least-loaded
choice gives an initial routing, and replaying a previous plan gives warm-start flows.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import pairwise

from controller.model.plan import AggregationPoint
from controller.solvers.aro.unfold import Edge, Node, TaskGraph

Flows = dict[Edge, int]


def generate(tg: TaskGraph, flows: Flows) -> tuple[dict[str, list[str]], list[AggregationPoint]]:
    """Algorithm 1: per-worker physical paths and the task's aggregation points. A point whose
    pipeline some flow crosses unmerged (`unfold`: over the fan-in limit) names its workers."""
    remaining = dict(flows)
    onward: dict[Node, list[Node]] = {tg.ps: [tg.ps]}  # R[u], line 1
    paths: dict[str, list[str]] = {}
    merged: dict[Node, set[str]] = defaultdict(set)
    crossed: set[Node] = set()
    for s in tg.workers:  # line 5
        walk: list[Node] = []
        u = s
        while u not in onward:  # line 8
            walk.append(u)
            v = next(v for v in tg.succ[u] if remaining.get((u, v), 0) > 0)  # line 10
            remaining[(u, v)] -= 1  # line 11
            u = v
        walk.extend(onward[u])  # line 14
        for j, n in enumerate(walk):  # lines 17-21
            if n[0] == "inp" and n not in onward:
                onward[n] = walk[j:]
            if n[0] == "inp":
                merged[n].add(s[1])
        crossed.update(tg.bypass[e] for e in pairwise(walk) if e in tg.bypass)
        paths[s[1]] = physical_path(walk)
    points = []
    for inp, rest in onward.items():
        if inp[0] != "inp":
            continue
        fan_in = sum(flows.get((u, inp), 0) for u in tg.pred[inp])
        workers = tuple(sorted(merged[inp])) if inp in crossed else None
        points.append(AggregationPoint(inp[1], inp[3], fan_in, rest[2][1], workers))
    return paths, sorted(points, key=lambda a: (a.switch, a.pipeline))


def physical_path(walk: list[Node]) -> list[str]:
    """Unfolded nodes → physical names; an INP and its OP are the same switch."""
    out: list[str] = []
    for n in walk:
        if not out or out[-1] != n[1]:
            out.append(n[1])
    return out


def greedy_flows(graphs: list[TaskGraph]) -> dict[tuple[int, Edge], int]:
    """A feasible routing: each worker walks to the PS over the least-loaded physical links.

    It satisfies (5)-(9) by construction and the bypass rule of `unfold` by its choices: it
    merges where it can, and a pipeline a flow crossed unmerged is not aggregated on; when a
    walk finds every way on closed it starts the task again with that pipeline unmerged (a
    task can always cross every capped aggregator unmerged). An INP that merges L flows (the
    fan-in limit) takes no more; the next ones cross its switch's copy (`TaskGraph.mixed`).
    It is the searches' first incumbent.
    """
    load: dict[tuple[str, str], int] = defaultdict(int)
    flows: dict[tuple[int, Edge], int] = {}
    for tg in graphs:
        closed: set[Node] = set()
        while True:
            mine, conflict = _greedy_task(tg, load, closed)
            if conflict is None:
                break
            closed.add(conflict)
        for (u, v), n in mine.items():
            flows[tg.index, (u, v)] = n
            if (u, v) in tg.physical:
                load[tg.physical[(u, v)]] += n
    return flows


def _greedy_task(
    tg: TaskGraph,
    load: dict[tuple[str, str], int],
    closed: set[Node],
) -> tuple[Flows, Node | None]:
    """One task's greedy walks, never merging at a `closed` INP; or the INP that blocked."""
    flows: Flows = defaultdict(int)
    mine: dict[tuple[str, str], int] = defaultdict(int)
    onward: set[Node] = {tg.ps}
    unmerged = set(closed)  # INPs whose pipeline a flow crossed unmerged
    full = {inp for inp in tg.inps if tg.fan_in > 0 and inp[1] in tg.mixed}  # may fill up
    for s in tg.workers:
        u = s
        walked: list[Node] = []
        while u not in onward:
            walked.append(u)
            ways = [
                v
                for v in tg.succ[u]
                if v not in unmerged
                and not (
                    (u, v) in tg.bypass and tg.bypass[(u, v)] in onward and v[1] not in tg.mixed
                )
                and not (v in full and sum(flows.get((p, v), 0) for p in tg.pred[v]) >= tg.fan_in)
            ]
            if not ways:
                return flows, next(tg.bypass[(u, v)] for v in tg.succ[u] if (u, v) in tg.bypass)
            merging = [v for v in ways if (u, v) not in tg.bypass] or ways

            def cost(v, u=u):  # u=u: this hop's u
                edge = tg.physical.get((u, v), ("", ""))
                return load[edge] + mine[edge]

            v = min(merging, key=cost)
            if (u, v) in tg.bypass and v[1] not in tg.mixed:
                unmerged.add(tg.bypass[(u, v)])
            flows[(u, v)] += 1
            if (u, v) in tg.physical:
                mine[tg.physical[(u, v)]] += 1
            u = v
        onward.update(n for n in walked if n[0] == "inp")
    return dict(flows), None


def replay(tg: TaskGraph, paths: dict[str, list[str]]) -> Flows | None:
    """Flow counts of a previous plan's paths on this graph, or None if a path is not in it."""
    by_physical: dict[tuple[Node, tuple[str, str]], Edge] = {
        (u, ab): (u, v) for (u, v), ab in tg.physical.items() if (u, v) not in tg.bypass
    }
    flows: Flows = defaultdict(int)
    passed: set[Node] = set()
    for w in tg.workers:
        path = paths.get(w[1])
        if not path:
            return None
        u = w
        for a, b in pairwise(path):
            if u in passed:
                break
            if u[0] == "inp":
                passed.add(u)
                op = tg.succ[u][0]
                flows[(u, op)] += 1
                u = op
            edge = by_physical.get((u, (a, b)))
            if edge is None:
                return None
            flows[edge] += 1
            u = edge[1]
    return dict(flows)
