"""Route generation (Algorithm 1, Sec. III-D) and the walks that build or replay flow counts.

Algorithm 1 turns the y values into one physical path per worker: a DFS walk follows edges with
remaining flow, and once a walk has passed an INP, every later flow entering that INP reuses the
recorded INP→PS subpath (an aggregated flow cannot split). The same walk with a least-loaded
choice gives an initial routing, and replaying a previous plan gives warm-start flows.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import pairwise

from controller.plan import AggregationPoint
from controller.solvers.aro.unfold import Edge, Node, TaskGraph

Flows = dict[Edge, int]


def generate(tg: TaskGraph, flows: Flows) -> tuple[dict[str, list[str]], list[AggregationPoint]]:
    """Algorithm 1: per-worker physical paths and the task's aggregation points."""
    remaining = dict(flows)
    onward: dict[Node, list[Node]] = {tg.ps: [tg.ps]}  # R[u], line 1
    paths: dict[str, list[str]] = {}
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
        paths[s[1]] = physical_path(walk)
    points = []
    for inp, rest in onward.items():
        if inp[0] != "inp":
            continue
        fan_in = sum(flows.get((u, inp), 0) for u in tg.pred[inp])
        points.append(AggregationPoint(inp[1], inp[3], fan_in, rest[2][1]))
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

    It satisfies (5)-(9) by construction and serves as the first incumbent of the searches.
    """
    load: dict[tuple[str, str], int] = defaultdict(int)
    flows: dict[tuple[int, Edge], int] = defaultdict(int)
    for tg in graphs:
        onward: set[Node] = {tg.ps}
        for s in tg.workers:
            u = s
            walked: list[Node] = []
            while u not in onward:
                walked.append(u)
                v = min(tg.succ[u], key=lambda v, u=u: load[tg.physical.get((u, v), ("", ""))])
                flows[tg.index, (u, v)] += 1
                if (u, v) in tg.physical:
                    load[tg.physical[(u, v)]] += 1
                u = v
            onward.update(n for n in walked if n[0] == "inp")
    return dict(flows)


def replay(tg: TaskGraph, paths: dict[str, list[str]]) -> Flows | None:
    """Flow counts of a previous plan's paths on this graph, or None if a path is not in it."""
    by_physical: dict[tuple[Node, tuple[str, str]], Edge] = {
        (u, ab): (u, v) for (u, v), ab in tg.physical.items()
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
