"""Unfolded, pipeline-decoupled graph of a Clos network for one task (ARO Sec. III-A).

Only directed shortest paths worker → PS are kept (hop counts on the physical graph). In a Clos
network (leaf-spine, fat-tree) these are exactly the up-down paths, so no candidate path goes up
after coming down. Leaves are unfolded into `in` (a worker's leaf on the way up) and `out` (the
PS's leaf on the way down); workers under the PS's leaf attach to its `out` node. Because every
task gets its own graph, one physical leaf can be `in` for one task and `out` for another.

A switch that aggregates for the task is split into one INP per ingress pipeline that receives
the task's traffic (chosen by the port→pipeline map of the incoming link) plus one OP; any other
switch is a common switch (CS). The nine link types of the paper follow from the node kinds.

Extension beyond the paper: a switch with an aggregation capacity also keeps a CS copy, so the
task's flows may cross it unmerged (and not use that capacity). The data plane merges every
flow of the task entering a pipeline it aggregates on, so a flow may take the copy only from
a pipeline whose INP is unused (`TaskGraph.bypass`, enforced by `model`). Without a capacity,
or on a switch with `aggregates: all` that charges crossing flows too, merging never costs
rate, and the paper's graph is kept.

The data plane's fan-in limit L (`max_fan_in`, 0: none, the paper's model): an INP merges at
most L flows (`model`). Where more than L of the task's workers can reach an aggregator, it
also gets the CS copy (`TaskGraph.mixed`), and there a flow may cross unmerged even from a
pipeline whose INP merges others: the plan's point then names the workers it merges, as the
data plane keys aggregation by incoming flow. Where at most L workers can reach a switch the
limit cannot bind, and the graph (and its optimum) is the one without the limit.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from controller.model.network import Network, Task

# Unfolded node: (kind, physical name, side, pipeline); kind in w / ps / cs / inp / op,
# side "in" / "out" for access switches (leaves), "" elsewhere; pipeline -1 unless an INP.
Node = tuple[str, str, str, int]
Edge = tuple[Node, Node]

LINK_TYPES = frozenset(
    {
        ("w", "cs"),
        ("w", "inp"),
        ("cs", "cs"),
        ("cs", "inp"),
        ("cs", "ps"),
        ("inp", "op"),
        ("op", "inp"),
        ("op", "cs"),
        ("op", "ps"),
    }
)


@dataclass
class TaskGraph:
    """One task's candidate routes as a DAG over unfolded nodes."""

    index: int
    task: Task
    ps: Node
    workers: list[Node]
    succ: dict[Node, list[Node]] = field(default_factory=lambda: defaultdict(list))
    pred: dict[Node, list[Node]] = field(default_factory=lambda: defaultdict(list))
    # Physical directed link of each unfolded edge; INP→OP edges are virtual (absent here).
    physical: dict[Edge, tuple[str, str]] = field(default_factory=dict)
    # Task workers left without any candidate path (only when switches were excluded).
    unreachable: list[str] = field(default_factory=list)
    # Edge into the CS copy of a capped aggregator → the INP its pipeline would use.
    bypass: dict[Edge, Node] = field(default_factory=dict)
    # L: the most flows an INP merges (0: unlimited), and the aggregators more than L workers
    # can reach, where a flow may cross a pipeline whose INP merges others (module docstring).
    fan_in: int = 0
    mixed: set[str] = field(default_factory=set)

    @property
    def edges(self) -> list[Edge]:
        return [(u, v) for u, vs in self.succ.items() for v in vs]

    @property
    def inps(self) -> list[Node]:
        return [u for u in self.order() if u[0] == "inp"]

    def add_edge(self, u: Node, v: Node, phys: tuple[str, str] | None) -> None:
        if v in self.succ[u]:
            return
        self.succ[u].append(v)
        self.pred[v].append(u)
        if phys is not None:
            self.physical[(u, v)] = phys

    def order(self) -> list[Node]:
        """Nodes in topological order, workers first (the graph is a DAG by construction)."""
        indeg = {n: len(self.pred[n]) for n in self._nodes()}
        ready = [n for n, d in indeg.items() if d == 0]
        out: list[Node] = []
        while ready:
            n = ready.pop()
            out.append(n)
            for v in self.succ.get(n, ()):
                indeg[v] -= 1
                if indeg[v] == 0:
                    ready.append(v)
        return out

    def _nodes(self) -> set[Node]:
        nodes = set(self.workers) | {self.ps}
        for u, vs in self.succ.items():
            nodes.add(u)
            nodes.update(vs)
        return nodes

    def max_flows(self) -> dict[Node, int]:
        """Most flows each node can emit for this task: an INP emits at most one (Eq. 8)."""
        most: dict[Node, int] = {}
        for n in self.order():
            if n[0] in ("w", "inp"):
                most[n] = 1
            else:
                most[n] = sum(most[u] for u in self.pred.get(n, ()))
        return most


def shortest_dag(
    network: Network, task: Task, excluded: Collection[str] = ()
) -> dict[str, list[str]]:
    """Physical successor lists of all shortest worker→PS paths, minus excluded switches.

    Distances are computed on the full network so that excluding switches (SRO stage 1) drops
    paths instead of creating longer ones.
    """
    graph = network.graph
    dist = {task.ps: 0}
    frontier = [task.ps]
    while frontier:
        nxt = []
        for v in frontier:
            for u in graph.predecessors(v):
                if u not in dist and (network.is_switch(u) or u in task.workers):
                    dist[u] = dist[v] + 1
                    nxt.append(u)
        frontier = nxt
    succ: dict[str, list[str]] = {}
    stack = [w for w in task.workers if w in dist]
    seen = set(stack)
    while stack:
        u = stack.pop()
        succ[u] = [
            v
            for v in graph.successors(u)
            if dist.get(v) == dist[u] - 1
            and v not in excluded
            and (v == task.ps or network.is_switch(v))
        ]
        for v in succ[u]:
            if v not in seen and v != task.ps:
                seen.add(v)
                stack.append(v)
    return succ


def build_task_graph(
    network: Network,
    index: int,
    task: Task,
    aggregators: Collection[str],
    excluded: Collection[str] = (),
    dropped: Iterable[Edge] = (),
    max_fan_in: int = 0,
) -> TaskGraph:
    """Unfold and decouple one task's shortest-path DAG.

    `aggregators`: switches acting as INA devices for this task (APP may drop some; they are
    then plain CS). `excluded`: switches removed with their paths (SRO stage 1). `dropped`:
    unfolded links removed (SRO stage 2 removes the links into INPs stage 1 left unused).
    `max_fan_in`: the data plane's limit L (module docstring; 0: none).
    """
    phys = shortest_dag(network, task, excluded)
    # Prune nodes that no longer reach the PS (only matters when switches are excluded).
    alive = {task.ps}
    changed = True
    while changed:
        changed = False
        for u, vs in phys.items():
            if u not in alive and any(v in alive for v in vs):
                alive.add(u)
                changed = True
    side = _sides(network, task, phys)

    def node_for(u: str) -> Node:
        if u == task.ps:
            return ("ps", u, "", -1)
        if not network.is_switch(u):
            return ("w", u, "", -1)
        return ("cs", u, side[u], -1) if u not in aggregators else ("op", u, side[u], -1)

    def entry(u: str, v: str) -> Node:
        """Node through which traffic from u enters v: the INP of the ingress pipeline."""
        if v in aggregators and network.is_switch(v):
            return ("inp", v, side[v], network.ingress_pipeline(u, v))
        return node_for(v)

    def capped(u: str) -> bool:
        # `aggregates: all` (EINA's edge aggregators) charges a crossing flow as if merged, so
        # crossing unmerged never pays there: no CS copy.
        spec = network.switch_spec(u) if u in aggregators else None
        return (
            spec is not None
            and spec.aggregation_capacity_gbps is not None
            and spec.aggregates != "all"
        )

    reach = _reaching(phys, task.workers)
    mixed = {
        u
        for u in aggregators
        if max_fan_in > 0 and u in phys and network.is_switch(u) and reach[u] > max_fan_in
    }

    def crossable(u: str) -> bool:
        return capped(u) or u in mixed

    def bypass(u: str) -> Node:
        return ("cs", u, side[u], -1)

    tg = TaskGraph(index, task, node_for(task.ps), [], fan_in=max_fan_in, mixed=mixed)
    drop = set(dropped)
    for u, vs in phys.items():
        if u not in alive:
            continue
        tails = [node_for(u)] + ([bypass(u)] if crossable(u) else [])
        for v in vs:
            if v not in alive:
                continue
            b = entry(u, v)
            for a in tails:
                if (a, b) not in drop:
                    tg.add_edge(a, b, (u, v))
                    if b[0] == "inp":
                        tg.add_edge(b, node_for(v), None)  # virtual INP→OP link
                if crossable(v):
                    tg.add_edge(a, bypass(v), (u, v))
                    tg.bypass[(a, bypass(v))] = b
    _drop_dead_ends(tg)
    tg.workers = [node_for(w) for w in task.workers if tg.succ.get(node_for(w))]
    tg.unreachable = [w for w in task.workers if not tg.succ.get(node_for(w))]
    return tg


def _reaching(phys: dict[str, list[str]], workers: Iterable[str]) -> dict[str, int]:
    """How many workers have a path through each node."""
    found: dict[str, set[str]] = defaultdict(set)
    for w in workers:
        stack = [w]
        while stack:
            u = stack.pop()
            for v in phys.get(u, ()):
                if w not in found[v]:
                    found[v].add(w)
                    stack.append(v)
    return defaultdict(int, {v: len(ws) for v, ws in found.items()})


def _sides(network: Network, task: Task, phys: dict[str, list[str]]) -> dict[str, str]:
    """`out` for switches feeding the PS, `in` for other switches that workers attach to."""
    side: dict[str, str] = defaultdict(str)
    for u, vs in phys.items():
        for v in vs:
            if v == task.ps:
                side[u] = "out"
    for w in task.workers:
        for v in phys.get(w, ()):
            if side[v] != "out":
                side[v] = "in"
    return side


def _drop_dead_ends(tg: TaskGraph) -> None:
    """Remove switch nodes that no flow can reach or that cannot reach the PS."""
    while True:
        nodes = set(tg.succ) | set(tg.pred)
        dead = {
            n
            for n in nodes
            if n[0] not in ("w", "ps") and (not tg.succ.get(n) or not tg.pred.get(n))
        }
        if not dead:
            return
        for n in dead:
            for v in tg.succ.pop(n, []):
                tg.pred[v].remove(n)
                tg.physical.pop((n, v), None)
                tg.bypass.pop((n, v), None)
            for u in tg.pred.pop(n, []):
                tg.succ[u].remove(n)
                tg.physical.pop((u, n), None)
                tg.bypass.pop((u, n), None)


def ina_switches(network: Network) -> list[str]:
    """INA-capable switches that may aggregate (an aggregation capacity of 0 forbids it)."""
    return [
        s
        for s in network.switches
        if network.is_ina(s) and network.spec(s).aggregation_capacity_gbps != 0
    ]
