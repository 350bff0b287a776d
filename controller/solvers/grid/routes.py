"""From an assignment (one aggregation node per worker) to a task's paths and points.

A switch aggregates only the fragments addressed to it (GRID tags them <aggregation node,
fragment>), so every aggregation point lists its workers and all other flows, raw or merged,
cross it untouched: single aggregation per worker holds by construction. Workers that reach one
node through different ingress pipelines form one point per pipeline (pipelines do not share
state), each sending its own merged flow.
"""

from __future__ import annotations

import random
from collections import defaultdict
from itertools import pairwise

from controller.model.network import Network, Task
from controller.model.plan import AggregationPoint, TaskPlan
from controller.solvers.baselines.inatree import PathCache, add_load, entry_point, least_loaded
from controller.solvers.grid.model import PS, GridTask


def least_loaded_routes(
    network: Network,
    task: Task,
    assign: dict[str, str],
    rng: random.Random,
    paths: PathCache | None = None,
) -> TaskPlan:
    """Each worker on a least-loaded shortest path to its node, each node's merged flow
    likewise to the PS (R-GRIA's routing: the paper fixes nodes, not paths)."""
    paths = paths or PathCache(network)
    load: dict[tuple[str, str], float] = {}

    def path(src: str, dst: str) -> list[str]:
        chosen = least_loaded(paths(src, dst), network, load, rng)
        add_load(load, chosen)
        return chosen

    prefix: dict[str, list[str]] = {}
    for n in sorted(task.workers):
        if assign[n] != PS:
            prefix[n] = path(n, assign[n])
    return _task_plan(
        network,
        task,
        assign,
        prefix,
        lambda point: path(point[0], task.ps),
        lambda n: path(n, task.ps),
    )


def fixed_routes(network: Network, inst: GridTask, assign: dict[str, str]) -> TaskPlan:
    """The routes the model's link rows charge: worker→node, then the node's route to the PS."""
    task = inst.task
    prefix = {n: inst.route(n, s) for n, s in sorted(assign.items()) if s != PS}
    return _task_plan(
        network,
        task,
        assign,
        prefix,
        lambda point: inst.route(point[0], PS),
        lambda n: inst.route(n, PS),
    )


def _task_plan(
    network: Network,
    task: Task,
    assign: dict[str, str],
    prefix: dict[str, list[str]],
    onward_of,
    direct_of,
) -> TaskPlan:
    members: dict[tuple[str, int], list[str]] = defaultdict(list)
    for n in sorted(prefix):
        members[entry_point(network, prefix[n][-2], assign[n])].append(n)
    onward = {point: onward_of(point) for point in sorted(members)}
    paths = {}
    for n in sorted(task.workers):
        if assign[n] == PS:
            paths[n] = list(direct_of(n))
        else:
            paths[n] = prefix[n] + onward[entry_point(network, prefix[n][-2], assign[n])][1:]
    points = [
        AggregationPoint(s, p, len(ws), onward[(s, p)][1], tuple(ws))
        for (s, p), ws in sorted(members.items())
    ]
    return TaskPlan(task.job, task.name, task.ps, 0.0, paths, points)


def merges(network: Network, tp: TaskPlan) -> dict[str, list[str]]:
    """Per worker, the switches where its gradient is merged, in path order (GRID wants one)."""
    return {
        w: [
            v
            for u, v in pairwise(path[:-1])
            if network.is_switch(v)
            and (point := tp.point_at(*entry_point(network, u, v)))
            and point.merges(w)
        ]
        for w, path in sorted(tp.paths.items())
    }
