"""Plan building: each PS's tree of aggregators becomes worker paths and aggregation points.

A worker's path is worker → π[w] → DCN → parent → DCN → ... → π[p] → PS. Every aggregator
on a tree merges every flow of that task entering it (its local workers' and its children's,
constraint (10)), so each one is an aggregation point with that fan-in, next hop the DCN
switch (or, at the root, the PS). PS p holds r_p / Σ r of the model (Sec. III-C, MTREE),
the task's `model_share`, so all shards arrive together.
"""

from __future__ import annotations

from controller.model.plan import AggregationPoint, TaskPlan
from controller.solvers.eina.instance import Instance
from controller.solvers.eina.rates import Parents, flow_counts


def task_plans(inst: Instance, parents: Parents, rates: list[float]) -> list[TaskPlan]:
    entering, _sent, _received = flow_counts(inst, parents)
    plans = []
    for p, tree in enumerate(parents):
        job, name = inst.tasks[p]
        ps = inst.ps[p]
        paths = {w: _path(inst, tree, w, ps) for w in inst.workers[p]}
        points = [
            AggregationPoint(j, 0, entering[p][j], inst.fabric if j in tree else ps)
            for j in inst.aggregators
            if entering[p][j] > 0
        ]
        share = rates[p] / sum(rates) if sum(rates) > 0 else 1 / len(rates)
        plans.append(TaskPlan(job, name, ps, rates[p], paths, points, model_share=share))
    return plans


def _path(inst: Instance, tree: dict[str, str], worker: str, ps: str) -> list[str]:
    node = inst.home[worker]
    path = [worker, node]
    while node in tree:
        node = tree[node]
        path += [inst.fabric, node]
    path.append(ps)
    return path
