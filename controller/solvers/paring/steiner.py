"""Alg. 3 (degree-constrained Steiner tree from spiders) and Alg. 4 (minimum-cost spider).

The tree H grows from the PS by merging, each time, the spider of least ratio-cost (cost of
its legs / number of feet); a foot is a new worker, i.e. a free server not yet in H, so the
placement falls out of the tree. Readings where the text leaves room:

* Alg. 3 line 9 bounds a center's degree by ⌊3d(v)/2⌋ (Theorem 2). `slack` generalises the
  3/2: the solver runs slack 1 first (no vertex above d(v), so the tree keeps the rate r_2
  of step 2), then the paper's 3/2, then unlimited, taking the first that connects all n
  workers. The same bound applies to the vertex a spider attaches to (Theorem 2 lets only
  spiders' centers exceed d(v); a bound on the attach point keeps that true).
* (b) Alg. 3 as printed can fill every slot of H with workers before the switches that
  would carry the rest join, and then stop short (no spider fits d(v)); the slack 3/2 and
  Theorem 2's 2/3 are its answer. `guard` (default; `--param as_printed=true` turns it off)
  takes the least ratio-cost spider after which H keeps a free slot and the free slots plus
  those the switches outside H can add (⌊slack d(v)⌋ - 2 each, net of their own parent)
  cover the workers still to come (relays a merge brings in count). G' being complete, some
  spider always passes when the slots added up at the start, so with slack 1 the tree
  reaches step 2's rate r_2.
* (c) A plan merges by worker (`controller.model.plan`): a flow must not cross a vertex above its
  parent before reaching it (that vertex would merge it early), nor a vertex below it (a
  mix of merged and unmerged workers). So a leg avoids the vertices above its upper end, a
  relay or new center may not sit on the way up of the vertex it hangs from, and a leg is
  costed by the shortest path that obeys this (equal to c(v1, v2) of G' but where G' would
  let a leg cross its own ancestors: k = 4 fat-tree, core C1 above A0_0 reaching a server
  below A0_0). For the same reason a switch one leg of a spider may cross does not become a
  relay on another leg of it (it would sit above a foot's flow, or below the center's).
* Alg. 4 runs its minimum-cost flow (networkx) on G' restricted to the center's direct
  edges. G' is a metric closure (Alg. 1), so a leg through another vertex never costs less
  than the direct edge (with (c), the restricted distances are still shortest paths): the
  restriction keeps the flow's optimum, and only the i nearest terminals can carry flow, so
  only they are put in the network.
* Among equal-cost realisations of a leg, the one through the most aggregation-capable
  switches is taken, and those switches join H as relays (one child, degree 2): a leg
  E01 → PS crossing A00 costs the same as E01 → A00 → PS, and the relay A00 can take
  children later. A relay that never gets a second child does not aggregate (routes.py).
"""

from __future__ import annotations

import copy
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
    load: dict[tuple[str, str], int] = field(default_factory=dict)  # tree flows per link
    fan_in: int = 0  # L: the most children a switch merges (0: unlimited); routes.py keeps it

    def children(self) -> dict[str, int]:
        count: dict[str, int] = defaultdict(int)
        for p in self.parent.values():
            count[p] += 1
        return dict(count)

    def nodes(self) -> set[str]:
        return {self.ps, *self.parent}

    def ancestors(self, v: str) -> frozenset[str]:
        """The vertices above v, up to the PS."""
        found = []
        while v in self.parent:
            v = self.parent[v]
            found.append(v)
        return frozenset(found)

    def upward(self, v: str) -> set[str]:
        """Every node v's aggregate crosses on its way to the PS."""
        crossed: set[str] = set()
        while v in self.parent:
            crossed.update(self.path[v][1:])
            v = self.parent[v]
        return crossed


@dataclass
class Spider:
    center: str
    feet: list[str]
    attach: str | None  # the H vertex the center hangs from (None: the center is in H)
    cost: int

    @property
    def ratio(self) -> float:
        return self.cost / len(self.feet)


def steiner_tree(
    g: Logical,
    ps: str,
    d: dict[str, int],
    n: int,
    slack: float,
    guard: bool = True,
    load: dict | None = None,
) -> Tree | None:
    """Alg. 3; None when no spider fits the degree bounds before all n workers are in H.
    `load`: flows per link that earlier trees (other PSs' shards) already put there, so that
    equal-cost legs avoid them."""
    tree = Tree(ps, load=dict(load or {}), fan_in=g.fan_in)
    deg: dict[str, int] = defaultdict(int)  # d'(v), current degree in H
    removed: set[str] = set()

    def limit(v: str) -> float:  # no slack lifts a switch above L children and its parent
        most = math.floor(slack * d[v]) if slack != math.inf else math.inf
        return min(most, g.fan_in + 1) if g.fan_in and g.network.is_switch(v) else most

    m = 0
    while m < n:  # line 3 (repeat ... until m = n, line 20)
        q = n - m  # line 4
        while True:  # line 7
            for spider in _spiders(g, tree, d, deg, removed, limit, n - m):  # lines 8-11
                trial, trial_deg = copy.deepcopy(tree), defaultdict(int, deg)
                _merge(g, trial, spider, trial_deg, removed, limit)  # line 12
                if (
                    not guard
                    or slack == math.inf
                    or _room_left(g, trial, d, trial_deg, removed, limit, n)
                ):
                    tree, deg = trial, trial_deg
                    break
            else:
                return None
            m = len(tree.workers)  # lines 13-14 keep d'(v) in `deg`
            if m == n or q <= 6 or n - m < 7 * q / 8:  # line 15
                break
        if q > 6:  # lines 16-19
            removed |= {v for v in tree.nodes() if deg[v] >= 6 * d[v] / 5}
    return tree


def _room_left(g: Logical, tree: Tree, d, deg, removed, limit, n: int) -> bool:
    """Reading (b): H keeps a free slot, and its free slots plus the net slots the switches
    outside H could bring cover the workers still to come."""
    left = n - len(tree.workers)
    if left == 0:
        return True
    in_tree = tree.nodes()
    open_slots = sum(
        limit(u) - deg[u] for u in [tree.ps, *g.switches] if u in in_tree and u not in removed
    )
    pool = sum(
        max(limit(v) - 2, 0)
        for v in g.switches
        if v not in in_tree and v not in removed and d[v] >= 2
    )
    return open_slots >= 1 and open_slots + pool >= left


def _spiders(g: Logical, tree: Tree, d, deg, removed, limit, left: int) -> list[Spider]:
    """Lines 8-11: for every center with d(v) ≥ 2 and each foot count i, Alg. 4's spider,
    least ratio-cost first (ties: more feet, then declaration order). Legs are costed on the
    paths they may take (reading (c))."""
    in_tree = tree.nodes()
    terminals = [h for h in g.hosts if h not in in_tree and h not in removed]
    anchors = [
        u
        for u in [tree.ps, *g.switches]
        if u in in_tree and u not in removed and deg[u] + 1 <= limit(u)
    ]
    found: list[Spider] = []
    for v in [tree.ps, *g.switches]:  # line 8
        if v in removed or d[v] < 2:
            continue
        joined = v in in_tree
        hooks: dict[str, int] = {}
        if not joined:
            for u in anchors:
                if u != v and v not in tree.upward(u):
                    reach = g.hops_from(v, tree.ancestors(u))
                    if u in reach:
                        hooks[u] = reach[u]
            if not hooks:
                continue
        room = limit(v) - deg[v] - (0 if joined else 1)
        top = min(room, d[v], left)  # line 9
        if top < 1:
            continue
        reach = g.hops_from(v, tree.ancestors(v) if joined else frozenset(in_tree))
        near = sorted(
            (t for t in terminals if t in reach), key=lambda t: (reach[t], g.hosts.index(t))
        )[: int(top)]
        for i in range(1, int(top) + 1):
            spider = min_cost_spider(v, i, {t: reach[t] for t in near}, hooks)  # line 10
            if spider:
                found.append(spider)
    return sorted(found, key=lambda sp: (sp.ratio, -len(sp.feet)))  # stable: declaration


def min_cost_spider(v: str, j: int, feet: dict[str, int], hooks: dict[str, int]) -> Spider | None:
    """Alg. 4: a minimum-cost flow of j units from center v to the terminals' sink (feet), and
    when v is not yet in H one more unit to H (the component holding the PS, line 9).
    `feet` and `hooks` give the cost of each leg the center may grow."""
    if len(feet) < j:
        return None
    flow = nx.DiGraph()
    attach = bool(hooks)
    flow.add_node("center", demand=-(j + attach))
    flow.add_node("feet", demand=j)  # line 4: the sink t_v behind every terminal
    for t, cost in feet.items():  # line 5: capacity 1 through every other vertex
        flow.add_edge("center", ("t", t), weight=cost, capacity=1)
        flow.add_edge(("t", t), "feet", weight=0, capacity=1)
    if attach:
        flow.add_node("H", demand=1)
        for u, cost in hooks.items():
            flow.add_edge("center", ("h", u), weight=cost, capacity=1)
            flow.add_edge(("h", u), "H", weight=0, capacity=1)
    try:
        cost, sent = nx.network_simplex(flow)
    except (nx.NetworkXUnfeasible, nx.NetworkXError):
        return None
    chosen = [t for t in feet if sent["center"].get(("t", t), 0) > 0]
    hook = next((u for u in hooks if sent["center"].get(("h", u), 0) > 0), None)
    return Spider(v, chosen, hook, cost)


def _merge(g: Logical, tree: Tree, spider: Spider, deg, removed, limit) -> None:
    """Line 12: add the spider's legs to H, through relays where a leg's path allows."""
    v = spider.center
    feet_blocked = tree.ancestors(v) if v in tree.nodes() else frozenset(tree.nodes())
    up: list[str] = []
    if spider.attach is not None:  # no relay where a foot's leg may cross (reading (c))
        crossed = frozenset(
            x
            for t in spider.feet
            for path in g.physical_paths(t, v, feet_blocked)
            for x in path[1:-1]
        )
        up = _leg(
            g, tree, v, spider.attach, tree.ancestors(spider.attach), deg, removed, limit, crossed
        )
    for t in spider.feet:
        _leg(g, tree, t, v, feet_blocked, deg, removed, limit, frozenset(up[1:-1]))
        tree.workers.append(t)


def _leg(
    g: Logical,
    tree: Tree,
    child: str,
    parent: str,
    blocked: frozenset[str],
    deg,
    removed,
    limit,
    no_relay: frozenset[str] = frozenset(),
) -> list[str]:
    """Hang `child` below `parent` along a shortest physical path avoiding `blocked`: the path
    crossing the fewest H vertices, then the most switches that can relay (they join H), then
    the one whose busiest link carries the fewest tree flows (PARING ignores link bandwidth,
    the evaluator does not: equal-cost paths are spread as ECMP would). A switch in
    `no_relay` (on the spider's other legs) stays a crossing: as a relay it would sit above
    or below flows that cross it, and merge them there. Returns the path."""
    in_tree = tree.nodes()
    above = tree.upward(parent)

    def relay(x: str) -> bool:
        return (
            x in g.switches
            and x not in in_tree
            and x not in removed
            and limit(x) >= 2
            and x not in above
            and x not in no_relay
        )

    def score(path: list[str]) -> tuple[int, int, int]:
        inner = path[1:-1]
        busiest = max(tree.load.get(e, 0) for e in itertools.pairwise(path))
        return (sum(x in in_tree for x in inner), -sum(relay(x) for x in inner), busiest)

    path = min(g.physical_paths(child, parent, blocked), key=score)
    hop = (
        [0]
        + [k for k, x in enumerate(path) if 0 < k < len(path) - 1 and relay(x)]
        + [len(path) - 1]
    )
    for a, b in itertools.pairwise(hop):
        lower, upper = path[a], path[b]
        tree.parent[lower] = upper
        tree.path[lower] = path[a : b + 1]
        deg[lower] += 1
        deg[upper] += 1
    for e in itertools.pairwise(path):
        tree.load[e] = tree.load.get(e, 0) + 1
    return path
