"""The data plane's fan-in limit for schemes that choose paths and aggregation points but not
rates (the baselines).

A point where more flows would be merged than the limit merges only some of them and lets the
others cross unmerged: it names the `workers` it merges (`controller.model.plan`), as the data plane
keys aggregation by incoming flow. The flows kept are the ones carrying most workers (the
merge that saves most traffic). Points are capped upstream first: flows another point no
longer merges reach the points after it as more flows, which are then capped in turn. A route
that comes back through a switch (RR's random trees) holds only where that switch merges; if
capping leaves such a flow unmerged, the scheme refuses the limit in one paragraph.
"""

from __future__ import annotations

from dataclasses import replace

from controller.evaluator.evaluate import FlowId, TaskFlows, task_flows
from controller.model.network import Network
from controller.model.plan import AggregationPoint, TaskPlan
from controller.solvers import SchemeInputError

Point = tuple[str, int]


def cap_fan_in(network: Network, tp: TaskPlan, limit: int) -> TaskPlan:
    """`tp` with every aggregation point merging at most `limit` flows (0: unlimited)."""
    if limit <= 0:
        return tp
    points, capped_any = list(tp.aggregation), False
    while True:
        tf = task_flows(network, replace(tp, aggregation=points))
        over = [p for p in points if len(tf.inflow_ids.get(_at(p), ())) > limit]
        if not over:
            break
        depth = _depths(tf)
        point = min(over, key=lambda p: (depth.get(_at(p), 0), _at(p)))
        kept, capped_any = _kept_workers(tf, point, limit), True
        points = [
            p if p is not point else replace(point, workers=kept)
            for p in points
            if p is not point or kept
        ]
    tf = task_flows(network, replace(tp, aggregation=points))
    fan_in = {at: len(ids) for at, ids in tf.inflow_ids.items()}
    capped = replace(
        tp, aggregation=[replace(p, fan_in=fan_in[_at(p)]) for p in points if fan_in.get(_at(p))]
    )
    problems = task_flows(network, capped).problems if capped_any else []
    if problems:  # a path through a switch twice holds only while it merges there
        raise SchemeInputError(
            f"{tp.job}/{tp.task}: within the fan-in limit of {limit} a flow would cross a "
            f"point unmerged on a path that returns to it ({problems[0]}); the scheme's "
            f"routes need that merge: --param max_fan_in=0 plans the paper's model"
        )
    return capped


def _at(point: AggregationPoint) -> Point:
    return (point.switch, point.pipeline)


def _depths(tf: TaskFlows) -> dict[Point, int]:
    """How many points a point's merged flows have passed before it (0: only workers' own)."""
    depth: dict[Point, int] = {}

    def of(at: Point, trail: frozenset[Point]) -> int:
        if at not in depth:
            feeders = [(f[1], f[2]) for f in tf.inflow_ids.get(at, ()) if isinstance(f, tuple)]
            depth[at] = max((of(f, trail | {at}) + 1 for f in feeders if f not in trail), default=0)
        return depth[at]

    for at in tf.inflow_ids:
        of(at, frozenset())
    return depth


def _kept_workers(tf: TaskFlows, point: AggregationPoint, limit: int) -> tuple[str, ...]:
    """Workers whose flows `point` keeps merging: whole groups of flows that share a worker
    (a flow is merged or not as a whole), largest first, at most `limit` flows in all; fewer
    workers than it merges now, so that capping ends."""
    at = _at(point)
    carried = {f: _contents(tf, f, frozenset()) for f in tf.inflow_ids[at]}
    groups: list[tuple[set[FlowId], set[str]]] = []
    for flow, workers in carried.items():
        joined = [g for g in groups if g[1] & workers]
        flows, members = {flow}, set(workers)
        for g in joined:
            flows |= g[0]
            members |= g[1]
            groups.remove(g)
        groups.append((flows, members))
    groups.sort(key=lambda g: (-len(g[1]) / len(g[0]), sorted(g[1])))
    kept: set[str] = set()
    room = limit
    for flows, members in groups:
        if len(flows) <= room:
            kept |= members
            room -= len(flows)
    merged = set().union(*carried.values())
    return tuple(sorted(kept)) if kept < merged else ()


def _contents(tf: TaskFlows, flow: FlowId, trail: frozenset[Point]) -> set[str]:
    """The workers whose contributions a flow carries: a worker's own, or what a point merged."""
    if isinstance(flow, str):
        return {flow}
    at = (flow[1], flow[2])
    if at in trail:
        return set()
    return set().union(*(_contents(tf, f, trail | {at}) for f in tf.inflow_ids.get(at, ())))
