"""Partial aggregation on a data plane that merges whole flows: fragment segments.

A point with `share` s < 1 merges the fragments in [0, s) of what enters it (PARING Sec. V-C,
ATP's best effort). The switches key aggregation by flow id, not by fragment, so the compiler
cuts a task's fragment space [0, 1) at every share boundary: within one segment every point
merges either all or none of what enters it, and the segment is an ordinary (coarse) plan on
the same paths. Each segment gets its own flow ids; a worker sends each fragment under its
segment's flow id (WorkerAssignment `segments`, dataplane/worker.py), so fragment f of every
worker meets the same points, and each switch counts the right contributors per fragment.
All segments keep the task's job, task, PS and result tree: the PS finishes every fragment as
usual, by the `count` the packets carry.

Replaying a segment's plan gives, fragment by fragment, what the evaluator's coverage replay
(`controller.evaluator.evaluate.task_flows`) gives for the fractional plan, so the switches realise
the traffic the evaluator scored.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

from controller.evaluator.evaluate import TaskFlows, task_flows
from controller.model.network import Network
from controller.model.plan import TaskPlan

# Shares closer than this are one boundary (bisection noise would otherwise make empty
# segments that cost flow ids and table entries for no fragment).
TOLERANCE = 1e-9


def boundaries(tp: TaskPlan) -> list[float]:
    """0, every distinct share < 1 of the task's points, and 1, ascending."""
    cuts = [0.0]
    for s in sorted(a.share for a in tp.aggregation if a.share < 1 - TOLERANCE):
        if s - cuts[-1] > TOLERANCE:
            cuts.append(s)
    return [*cuts, 1.0]


def segment_plans(
    network: Network, tp: TaskPlan
) -> list[tuple[tuple[float, float], TaskPlan, TaskFlows]]:
    """Per segment [lo, hi): the coarse plan of its fragments (the points whose share covers
    it, merging whole flows, with the fan-ins their inflows give) and that plan's flows.

    A task without a partial point is one segment, the task itself."""
    cuts = boundaries(tp)
    if len(cuts) == 2:
        return [((0.0, 1.0), tp, task_flows(network, tp))]
    out = []
    for lo, hi in pairwise(cuts):
        kept = [replace(a, share=1.0) for a in tp.aggregation if a.share >= hi - TOLERANCE]
        part = replace(tp, aggregation=kept)
        inflows = task_flows(network, part).inflow_ids
        part = replace(
            part,
            aggregation=[
                replace(a, fan_in=len(inflows[(a.switch, a.pipeline)]))
                for a in kept
                if inflows.get((a.switch, a.pipeline))
            ],
        )
        out.append(((lo, hi), part, task_flows(network, part)))
    return out
