"""Best-effort partial aggregation (ATP's per-fragment best effort; PARING Sec. V-C's fine mode).

Given a plan that merges whole flows, a switch whose aggregation capacity would be exceeded at
rate r merges only the share s = C_s / (what enters it at r) of the fragments and forwards the
others raw (`AggregationPoint.share`, scored by the evaluator). Shares depend on the rate and
on the shares upstream (a partial point sends fractions onward), so at a trial rate they are
refined until they settle (a switch whose raw remainder would revisit a node keeps merging
whole flows); the largest rate the evaluator confirms is found by bisection,
with one rate level for all tasks. The compiler deploys such plans segment by segment of the
fragments (`controller.compiler.segments`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from controller.evaluator.evaluate import evaluate, task_flows
from controller.model.network import Network
from controller.model.plan import Plan, TaskPlan
from controller.solvers import SchemeInputError
from controller.solvers.fanin import cap_fan_in

ROUNDS = 60  # bisection steps: the rate to ~1e-15 of the largest link
SETTLE = 20  # share refinements at one rate (each settles one more level of the trees)


def best_effort(network: Network, plan: Plan, max_fan_in: int = 0) -> Plan:
    """`plan` with the shares that let the highest common rate through, rates re-evaluated.
    Raw remainders reach the points after a partial one as more flows: a point over
    `max_fan_in` then merges only that many (`fanin`; 0: unlimited)."""
    low = min((tp.rate_gbps for tp in plan.tasks), default=0.0)
    high = max((network.capacity(u, v) for u, v in network.graph.edges), default=0.0)
    best = plan
    for _ in range(ROUNDS):
        mid = (low + high) / 2
        trial = _with_shares(network, plan, mid)
        try:
            trial.tasks = [cap_fan_in(network, tp, max_fan_in) for tp in trial.tasks]
        except SchemeInputError:  # these shares send a raw flow back to a point it crossed
            high = mid  # unmerged, beyond the limit: a lower rate merges more, or `plan` stands
            continue
        result = evaluate(network, trial)  # trial rates are 0: only what the paths carry
        if all(te.rate_gbps >= mid * (1 - 1e-9) for te in result.tasks):
            low, best = mid, trial
        else:
            high = mid
    final = evaluate(network, best)
    for tp, te in zip(best.tasks, final.tasks, strict=True):
        tp.rate_gbps = min(te.rate_gbps, tp.rate_gbps) if best is plan else te.rate_gbps
    best.objective = sum(tp.rate_gbps for tp in best.tasks)
    best.link_loads = final.link_loads
    best.details["partial_aggregation"] = {
        f"{a.switch}:{a.pipeline}": a.share
        for tp in best.tasks
        for a in tp.aggregation
        if a.share < 1
    }
    return best


def _with_shares(network: Network, plan: Plan, rate: float) -> Plan:
    tasks = [replace(tp, rate_gbps=0.0, aggregation=list(tp.aggregation)) for tp in plan.tasks]
    whole = {sw for tp in tasks for sw in _revisited(tp)}
    for _ in range(SETTLE):
        reaching: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for tp in tasks:
            for (sw, _pipe), flows in task_flows(network, tp).arriving.items():
                reaching[sw] += [piece for cover in flows.values() for piece in cover]
        share = {
            sw: _share(network.spec(sw).aggregation_capacity_gbps, pieces, rate)
            for sw, pieces in reaching.items()
            if sw not in whole
        }
        changed = False
        for tp in tasks:
            points = [replace(a, share=share.get(a.switch, a.share)) for a in tp.aggregation]
            changed |= points != tp.aggregation
            tp.aggregation = points
        if not changed:
            break
    for tp in tasks:  # raw remainders are merged downstream too: fan-ins grow
        inflows = task_flows(network, tp).inflow_ids
        tp.aggregation = [
            replace(a, fan_in=len(inflows.get((a.switch, a.pipeline), ()))) for a in tp.aggregation
        ]
    return Plan(
        plan.scheme,
        plan.status,
        0.0,
        None,
        plan.solve_seconds,
        plan.seed,
        [
            TaskPlan(tp.job, tp.task, tp.ps, 0.0, tp.paths, tp.aggregation, tp.model_share)
            for tp in tasks
        ],
        topology=plan.topology,
        details=dict(plan.details),
    )


def _share(capacity: float | None, pieces: list[tuple[float, float]], rate: float) -> float:
    """The largest s with rate · Σ |piece ∩ [0, s)| ≤ capacity (bisection; 1 when it fits)."""

    def merged(s: float) -> float:
        return rate * sum(max(0.0, min(hi, s) - lo) for lo, hi in pieces)

    if capacity is None or merged(1.0) <= capacity:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if merged(mid) <= capacity else (low, mid)
    return 1.0 if low > 1 - 1e-7 else max(low, 1e-9)  # bisection noise is not a share


def _revisited(tp: TaskPlan) -> set[str]:
    """Switches that must merge whole flows: a raw remainder leaving them would cross again a
    node its path already crossed (a lateral tree edge such as E11 -> A10 -> E10 -> A10 ->
    core), and one flow cannot take two next hops at one node."""
    points = {a.switch for a in tp.aggregation}
    return {
        v
        for path in tp.paths.values()
        for i, v in enumerate(path)
        if v in points and set(path[i + 1 :]) & set(path[:i])
    }
