"""Any plan on the edge topology read back as EINA+ choices, to start CP-SAT from the best
candidate (EINA's trees or a baseline's plan), not only from EINA's.

From the evaluator's replay (`task_flows` traces): a worker's first merge (at home, elsewhere,
or none: its flow reaches the PS unmerged) and, for each merged flow, where it is merged next
(none: π[p] passes it to the PS). A flow crossing an aggregator unmerged on its way elsewhere
is read as going straight there (the model's normal form); the hint is only a start, CP-SAT
repairs what does not fit.
"""

from __future__ import annotations

from controller.evaluator.evaluate import task_flows
from controller.model.network import Network
from controller.model.plan import TaskPlan
from controller.solvers.eina.instance import Instance
from controller.solvers.eina_plus.model import Choice


def choice_of_plan(network: Network, inst: Instance, p: int, tp: TaskPlan) -> Choice:
    root = inst.home[inst.ps[p]]
    tf = task_flows(network, tp)
    # EINA+ merges whole flows: the count is a whole number
    ch = Choice({}, {}, {}, int(tf.aggregator_inflows.get((root, 0), 0)))
    merged_flows = set()
    for w, trace in tf.traces.items():
        home, first = inst.home[w], None
        for hop in trace:
            if hop.leaving != hop.arriving:
                merged_flows.add(hop.v)
                if hop.arriving == w:
                    first = hop.v
                elif isinstance(hop.arriving, tuple):
                    ch.parent[hop.arriving[1]] = hop.v
        if first == home and home != root:
            ch.merged_local[home] = ch.merged_local.get(home, 0) + 1
        elif home != first and not (first is None and home == root):
            key = (home, first or root)
            ch.unmerged[key] = ch.unmerged.get(key, 0) + 1
    for j in merged_flows - {root}:
        ch.parent.setdefault(j, root)  # π[p] passes it on unmerged
    return ch
