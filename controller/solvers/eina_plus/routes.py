"""EINA+'s Plan: each PS's choice (merges, bypasses, trees) as worker paths and merge points.

A worker merged at its rack i: worker → i → DCN → parent → ... → π[p] → PS. One sent unmerged
to j: worker → i → DCN → j, then j's route. At π[p] the first M arriving flows are merged and
the rest go on to the PS unmerged. Where a switch merges only some of the flows entering it
(bypass), its aggregation point lists the workers it merges (`workers`), which the evaluator
and the data plane read as "merge these, forward the others untouched".

The merge decision is per worker and switch, not per visit, so two choices the model allows
cannot be expressed: a worker bypassing its rack i towards an aggregator whose merged flow
comes back through i (i merges it there), and a worker of π[p]'s own rack bypassing towards
an aggregator whose flow π[p] then merges. `normalize` turns them into expressible ones (the
worker is merged at i, or stays at π[p] and is merged there); the LP then rates the result.
"""

from __future__ import annotations

from dataclasses import replace

from controller.model.plan import AggregationPoint, TaskPlan
from controller.solvers.eina.instance import Instance
from controller.solvers.eina_plus.model import Choice


def task_plans(inst: Instance, choices: list[Choice]) -> list[TaskPlan]:
    return [_task(inst, p, ch) for p, ch in enumerate(choices)]


def normalize(inst: Instance, p: int, ch: Choice) -> Choice:
    """A bypass towards one's own descendant becomes a merge at home (see module docstring)."""
    root = inst.home[inst.ps[p]]
    merged, unmerged = dict(ch.merged_local), {}
    for (i, j), k in ch.unmerged.items():
        chain, node = set(), j
        while node != root:
            chain.add(node)
            node = ch.parent[node]
        if i != root and i in chain:
            merged[i] = merged.get(i, 0) + k
        else:
            unmerged[i, j] = k
    return replace(ch, merged_local=merged, unmerged=unmerged)


def _task(inst: Instance, p: int, ch: Choice) -> TaskPlan:
    ch = normalize(inst, p, ch)
    while True:
        plan, returning = _build(inst, p, ch)
        if not returning:
            return plan
        # π[p]'s own workers whose flow π[p] would merge on its way back: keep them home
        unmerged = dict(ch.unmerged)
        for j, k in returning.items():
            unmerged[inst.home[inst.ps[p]], j] -= k
        ch = replace(ch, unmerged={key: k for key, k in unmerged.items() if k})


def _build(inst: Instance, p: int, ch: Choice) -> tuple[TaskPlan, dict[str, int]]:
    ps, root, fabric = inst.ps[p], inst.home[inst.ps[p]], inst.fabric

    def onward(j: str) -> list[str]:  # from aggregator j (after j) to the PS
        path = []
        while j != root:
            j = ch.parent[j]
            path += [fabric, j]
        return [*path, ps]

    paths: dict[str, list[str]] = {}
    sent_from_root: dict[str, str] = {}  # π[p]'s own worker → where it bypassed to
    arriving: dict[str, list[list[str]]] = {j: [] for j in inst.aggregators}  # flows, as workers
    for i in inst.aggregators:
        queue = list(inst.workers_at(p, i))
        if i != root:
            k = ch.merged_local.get(i, 0)
            for w in queue[:k]:
                paths[w] = [w, i, *onward(i)]
                arriving[i].append([w])
            queue = queue[k:]
        for (src, j), k in sorted(ch.unmerged.items()):
            if src == i:
                for w in queue[:k]:
                    paths[w] = [w, i, fabric, j, *onward(j)]
                    arriving[j].append([w])
                    if i == root:
                        sent_from_root[w] = j
                queue = queue[k:]
        for w in queue:  # only at the root: the rest reach π[p] locally
            paths[w] = [w, i, ps]
            arriving[i].append([w])
    order = sorted(ch.parent, key=lambda i: -len(onward(i)))  # children before parents
    points, contents = [], {}
    for i in order:
        if arriving[i]:  # a normalised choice may leave an aggregator nothing to merge
            contents[i] = sorted(w for unit in arriving[i] for w in unit)
            arriving[ch.parent[i]].append(contents[i])
            entering = [w for w in paths if i in paths[w][1:-1]]
            listed = None if len(entering) == len(contents[i]) else tuple(contents[i])
            points.append(AggregationPoint(i, 0, len(arriving[i]), fabric, listed))
    returning: dict[str, int] = {}
    if ch.root_merged and arriving[root]:

        def dirty(unit: list[str]) -> bool:  # holds a π[p] worker that left and comes back
            return any(w in sent_from_root for w in unit)

        units = sorted(arriving[root], key=lambda u: (dirty(u), -len(u)))[: ch.root_merged]
        for unit in units:
            for w in unit:
                if w in sent_from_root:
                    returning[sent_from_root[w]] = returning.get(sent_from_root[w], 0) + 1
        merged = sorted(w for unit in units for w in unit)
        listed = None if len(merged) == len(paths) else tuple(merged)
        points.append(AggregationPoint(root, 0, len(units), ps, listed))
    job, name = inst.tasks[p]
    return TaskPlan(job, name, ps, 0.0, paths, points), returning
