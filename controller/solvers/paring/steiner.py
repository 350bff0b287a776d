"""Alg. 3 (degree-constrained Steiner tree from spiders) and Alg. 4 (minimum-cost spider).

The tree H grows from the PS by merging, each time, the spider of least ratio-cost (cost of
its legs / number of feet); a foot is a new worker, i.e. a free server not yet in H, so the
placement falls out of the tree. Readings where the text leaves room:

* Alg. 3 line 9 bounds a center's degree by ⌊3d(v)/2⌋ (Theorem 2). `slack` generalises the
  3/2: the solver runs slack 1 first (no vertex above d(v), so the tree keeps the rate r_2
  of step 2), then the paper's 3/2, then unlimited, taking the first that connects all n
  workers. The same bound applies to the vertex a spider attaches to (Theorem 2 lets only
  spiders' centers exceed d(v); a bound on the attach point keeps that true).
* Alg. 4 runs its minimum-cost flow (networkx) on G' restricted to the center's direct
  edges. G' is a metric closure (Alg. 1), so a leg through another vertex never costs less
  than the direct edge: the restriction keeps the flow's optimum, and only the i nearest
  terminals can carry flow, so only they are put in the network.
* Among equal-cost realisations of a leg, the one through the most aggregation-capable
  switches is taken, and those switches join H as relays (one child, degree 2): a leg
  E01 → PS crossing A00 costs the same as E01 → A00 → PS, and the relay A00 can take
  children later. A relay that never gets a second child does not aggregate (routes.py).
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from dataclasses import dataclass, field

import networkx as nx

from controller.solvers.paring.logical import Logical


@dataclass
class Tree:
    """H(W, F): parent of every non-root vertex and the physical path of each tree edge."""

    ps: str
    parent: dict[str, str] = field(default_factory=dict)
    path: dict[str, list[str]] = field(default_factory=dict)  # child → physical path to parent
    workers: list[str] = field(default_factory=list)

    def children(self) -> dict[str, int]:
        count: dict[str, int] = defaultdict(int)
        for p in self.parent.values():
            count[p] += 1
        return dict(count)

    def cost(self, g: Logical) -> int:
        """Σ x_e c_e over the tree edges: the traffic volume in gradients (O_2 / b)."""
        return sum(len(p) - 1 for p in self.path.values())

    def nodes(self) -> set[str]:
        return {self.ps, *self.parent}


@dataclass
class Spider:
    center: str
    feet: list[str]
    attach: str | None  # the H vertex the center hangs from (None: the center is in H)
    cost: int

    @property
    def ratio(self) -> float:
        return self.cost / len(self.feet)


def steiner_tree(g: Logical, ps: str, d: dict[str, int], n: int, slack: float) -> Tree | None:
    """Alg. 3; None when no spider fits the degree bounds before all n workers are in H."""
    tree = Tree(ps)
    deg: dict[str, int] = defaultdict(int)  # d'(v), current degree in H
    removed: set[str] = set()

    def limit(v: str) -> float:
        return math.floor(slack * d[v]) if slack != math.inf else math.inf

    m = 0
    while m < n:  # line 3 (repeat ... until m = n, line 20)
        q = n - m  # line 4
        while True:  # line 7
            best = _best_spider(g, tree, d, deg, removed, limit, n - m)  # lines 8-11
            if best is None:
                return None
            _merge(g, tree, best, deg, removed, limit)  # line 12
            m = len(tree.workers)  # lines 13-14 keep d'(v) in `deg`
            if m == n or q <= 6 or n - m < 7 * q / 8:  # line 15
                break
        if q > 6:  # lines 16-19
            removed |= {v for v in tree.nodes() if deg[v] >= 6 * d[v] / 5}
    return tree


def _best_spider(g: Logical, tree: Tree, d, deg, removed, limit, left: int) -> Spider | None:
    """Lines 8-11: for every center with d(v) ≥ 2 and each foot count i, Alg. 4's spider;
    the least ratio-cost wins (ties: more feet, then declaration order)."""
    in_tree = tree.nodes()
    terminals = [h for h in g.hosts if h not in in_tree and h not in removed]
    anchors = [u for u in in_tree if u not in removed and deg[u] + 1 <= limit(u)
               and (u == tree.ps or u in g.switches)]
    best: Spider | None = None
    for v in [tree.ps, *g.switches]:  # line 8
        if v in removed or d[v] < 2:
            continue
        joined = v in in_tree
        if not joined and not anchors:
            continue
        room = limit(v) - deg[v] - (0 if joined else 1)
        top = min(room, d[v], left)  # line 9
        if top < 1:
            continue
        near = sorted(terminals, key=lambda t: (g.c(v, t), g.hosts.index(t)))[:int(top)]
        for i in range(1, int(top) + 1):
            spider = min_cost_spider(g, v, i, near, [] if joined else
                                     [u for u in anchors if u != v])  # line 10 (Alg. 4)
            if spider and (best is None or (spider.ratio, -len(spider.feet)) <
                           (best.ratio, -len(best.feet))):
                best = spider
    return best


def min_cost_spider(g: Logical, v: str, j: int, terminals: list[str],
                    anchors: list[str]) -> Spider | None:
    """Alg. 4: a minimum-cost flow of j units from center v to the terminals' sink (feet), and
    when v is not yet in H one more unit to H (the component holding the PS, line 9)."""
    if len(terminals) < j:
        return None
    flow = nx.DiGraph()
    attach = bool(anchors)
    flow.add_node("center", demand=-(j + attach))
    flow.add_node("feet", demand=j)  # line 4: the sink t_v behind every terminal
    for t in terminals:  # line 5: capacity 1 through every other vertex
        if (v, t) in g.cost:
            flow.add_edge("center", ("t", t), weight=g.c(v, t), capacity=1)
            flow.add_edge(("t", t), "feet", weight=0, capacity=1)
    if attach:
        flow.add_node("H", demand=1)
        for u in anchors:
            if (v, u) in g.cost:
                flow.add_edge("center", ("h", u), weight=g.c(v, u), capacity=1)
                flow.add_edge(("h", u), "H", weight=0, capacity=1)
    try:
        cost, sent = nx.network_simplex(flow)
    except (nx.NetworkXUnfeasible, nx.NetworkXError):
        return None
    feet = [t for t in terminals if sent["center"].get(("t", t), 0) > 0]
    hook = next((u for u in anchors if sent["center"].get(("h", u), 0) > 0), None)
    return Spider(v, feet, hook, cost)


def _merge(g: Logical, tree: Tree, spider: Spider, deg, removed, limit) -> None:
    """Line 12: add the spider's legs to H, through relays where a leg's path allows."""
    v = spider.center
    if spider.attach is not None:
        _leg(g, tree, v, spider.attach, deg, removed, limit)
    for t in spider.feet:
        _leg(g, tree, t, v, deg, removed, limit)
        tree.workers.append(t)


def _leg(g: Logical, tree: Tree, child: str, parent: str, deg, removed, limit) -> None:
    """Hang `child` below `parent` along one shortest physical path: the path crossing the
    fewest H vertices, then the most switches that can relay (they join H on the way)."""
    in_tree = tree.nodes()

    def relay(x: str) -> bool:
        return x in g.capacity and x in g.switches and x not in in_tree and \
            x not in removed and limit(x) >= 2

    def score(path: list[str]) -> tuple[int, int]:
        inner = path[1:-1]
        return (sum(x in in_tree for x in inner), -sum(relay(x) for x in inner))

    path = min(g.physical_paths(child, parent), key=score)
    hop = [0] + [k for k, x in enumerate(path) if 0 < k < len(path) - 1 and relay(x)] + \
        [len(path) - 1]
    for a, b in itertools.pairwise(hop):
        lower, upper = path[a], path[b]
        tree.parent[lower] = upper
        tree.path[lower] = path[a:b + 1]
        deg[lower] += 1
        deg[upper] += 1
