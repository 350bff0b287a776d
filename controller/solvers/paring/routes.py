"""From the aggregation tree H to the Plan's task: placement, physical paths, aggregation points.

A worker's path is the concatenation of its tree edges' physical paths up to the PS. A tree
switch with two or more children aggregates: one point per ingress pipeline its children
arrive on, listing the workers whose contributions it merges (flows of other subtrees that
only cross it are left alone, `controller.model.plan`). Pipelines do not share state, so such a
switch sends its parent one flow per pipeline it merges in, and a point's fan-in counts the
flows that enter it, not the children (as the evaluator and the compiler count). A pipeline
that one flow enters still merges it: the flow leaves as the switch's own, so a tree edge that
turns back at the switch does not bring a worker's flow to a node twice. A relay with one child
only forwards.

The tree gives a switch at most L children (`Tree.fan_in`, the data plane's fan-in), but a
child switch whose children arrive on several pipelines sends several flows: a point those
would take over L merges only L of them and lets the rest cross (`controller.solvers.fanin`),
and the evaluator then rates the plan as it is.
"""

from __future__ import annotations

import itertools
from collections import defaultdict

from controller.model.network import Network, Task
from controller.model.plan import AggregationPoint, TaskPlan
from controller.solvers.fanin import cap_fan_in
from controller.solvers.paring.logical import Logical
from controller.solvers.paring.steiner import Tree


def task_plan(network: Network, task: Task, tree: Tree, rate: float) -> TaskPlan:
    paths = {w: _path_up(tree, w) for w in sorted(tree.workers)}
    below: dict[str, set[str]] = defaultdict(set)  # vertex → workers of its subtree
    for w in tree.workers:
        v = w
        while v in tree.parent:
            v = tree.parent[v]
            below[v].add(w)
    kids: dict[str, list[str]] = defaultdict(list)
    for child, parent in tree.parent.items():
        kids[parent].append(child)
    points = []
    sent: dict[str, int] = {}  # vertex → flows it sends its parent (one per merging pipeline)

    def flows_from(v: str) -> int:
        if v not in sent:
            sent[v] = sent_up(v) if v in kids else int(v in tree.workers)  # a worker: its own
        return sent[v]

    def sent_up(v: str) -> int:
        children = kids[v]
        if len(children) < 2:  # a relay forwards what its child sends
            return sum(flows_from(c) for c in children)
        by_pipe: dict[int, list[str]] = defaultdict(list)
        for child in children:
            by_pipe[network.ingress_pipeline(tree.path[child][-2], v)].append(child)
        for pipe, members in sorted(by_pipe.items()):
            workers = sorted({w for c in members for w in ({c} if c in tree.workers else below[c])})
            points.append(
                AggregationPoint(
                    v, pipe, sum(flows_from(c) for c in members), tree.path[v][1], tuple(workers)
                )
            )
        return len(by_pipe)

    for v in sorted(kids):
        if v != tree.ps:
            flows_from(v)
    points.sort(key=lambda a: (a.switch, a.pipeline))
    return cap_fan_in(
        network, TaskPlan(task.job, task.name, tree.ps, rate, paths, points), tree.fan_in
    )


def tree_of(g: Logical, ps: str, parent: dict[str, str], workers: list[str]) -> Tree | None:
    """A tree given by its parents (CP-SAT's), each edge on the shortest physical path that
    crosses the fewest other tree vertices; None when an edge has no path that keeps off the
    vertices above its upper end and below its lower end (G' is a metric closure: CP-SAT may
    hang the PS's own switch below a vertex whose flow must then cross it). A switch with one
    child only forwards, so its child hangs from its parent instead: a feasibility model
    (joint.py) may leave such a relay off the child's way, and the child's flow would cross a
    node twice."""
    parent = _without_relays(parent, workers)
    nodes = {ps, *parent}
    tree = Tree(ps, dict(parent), {}, sorted(workers), fan_in=g.fan_in)
    below: dict[str, set[str]] = defaultdict(set)
    for child in parent:
        for up in tree.ancestors(child):
            below[up].add(child)
    for child, up in parent.items():
        # steiner.py reading (c): not through a vertex above `up` nor below `child`; then
        # the fewest tree vertices crossed and the least loaded links (as steiner._leg)
        paths = g.physical_paths(child, up, frozenset(tree.ancestors(up) | below[child]))
        if not paths:
            return None
        tree.path[child] = min(
            paths,
            key=lambda path: (
                sum(x in nodes for x in path[1:-1]),
                max(tree.load.get(e, 0) for e in itertools.pairwise(path)),
            ),
        )
        for e in itertools.pairwise(tree.path[child]):
            tree.load[e] = tree.load.get(e, 0) + 1
    return tree


def _without_relays(parent: dict[str, str], workers: list[str]) -> dict[str, str]:
    """`parent` with every one-child switch spliced out (its child moves up to its parent)."""
    parent = dict(parent)
    while True:
        kids: dict[str, list[str]] = defaultdict(list)
        for child, up in parent.items():
            kids[up].append(child)
        lone = next((v for v in parent if v not in workers and len(kids[v]) == 1), None)
        if lone is None:
            return parent
        parent[kids[lone][0]] = parent.pop(lone)


def aggregating_children(tree: Tree) -> dict[str, int]:
    """Children of the vertices that aggregate (the PS, switches with two or more): what
    line 23's rate is about; a one-child relay only forwards."""
    return {v: k for v, k in tree.children().items() if v == tree.ps or k >= 2}


def _path_up(tree: Tree, worker: str) -> list[str]:
    path, v = [worker], worker
    while v in tree.parent:
        path += tree.path[v][1:]
        v = tree.parent[v]
    return path
