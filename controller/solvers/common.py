"""Helpers shared by schemes that choose paths and aggregation points but not rates."""

from __future__ import annotations

import time

from controller.evaluator.evaluate import evaluate
from controller.model.network import Network, Task
from controller.model.plan import AggregationPoint, Plan, Status, TaskPlan
from controller.solvers.fanin import cap_fan_in


def plan_with_evaluated_rates(
    network: Network,
    scheme: str,
    paths: dict[tuple[str, str], dict[str, list[str]]],
    aggregation: dict[tuple[str, str], list[AggregationPoint]] | None = None,
    *,
    started: float,
    seed: int | None = None,
    status: Status = "heuristic",
    max_fan_in: int = 0,
) -> Plan:
    """Build a Plan whose rates are the evaluator's max-min fair rates for the given paths.

    Heuristic schemes decide routes only; the rates their routes achieve are a property of the
    network, so they come from the evaluator rather than from each scheme's own arithmetic.
    A point over `max_fan_in` merges only that many flows (`fanin`; 0: unlimited).
    """
    aggregation = aggregation or {}
    tasks = [
        cap_fan_in(
            network,
            TaskPlan(t.job, t.name, t.ps, 0.0, paths[t.key], aggregation.get(t.key, [])),
            max_fan_in,
        )
        for t in network.tasks
    ]
    plan = Plan(scheme, status, 0.0, None, 0.0, seed, tasks, topology=network.name)
    result = evaluate(network, plan)
    for tp, te in zip(plan.tasks, result.tasks, strict=True):
        tp.rate_gbps = te.rate_gbps
    plan.link_loads = result.link_loads
    plan.objective = weighted_objective(network, plan)
    plan.solve_seconds = time.perf_counter() - started
    return plan


def weighted_objective(network: Network, plan: Plan, mu: float = 0.001) -> float:
    """ARO's objective family: Eq. (1) for one task, (2) for one job, (3) for several jobs."""
    per_job: dict[str, float] = {}
    for tp in plan.tasks:
        per_job[tp.job] = per_job.get(tp.job, 0.0) + tp.rate_gbps
    if len(per_job) <= 1:
        return sum(per_job.values())
    weighted = [network.jobs_beta.get(job, 1.0) * total for job, total in per_job.items()]
    return min(weighted) + mu * sum(weighted)


def task_by_key(network: Network, key: tuple[str, str]) -> Task:
    return next(t for t in network.tasks if t.key == key)
