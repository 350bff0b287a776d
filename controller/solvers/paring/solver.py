"""The scheme `paring` (Alg. 2): place the task and route it on the aggregation tree.

Objectives (Eq. 1): the rate r first, the traffic volume Σ x_e c_e b second. The plan's rate
is the evaluator's for the chosen paths (it also checks links, which the paper ignores); the
algorithm's own r (line 23) and r_2 (step 2) are in `details`. Status `heuristic`: the
algorithm proves no bound (Theorem 2's 2/3 is a worst case, not a certificate).
"""

from __future__ import annotations

import contextlib
import time
from fractions import Fraction
from typing import Any

from controller.evaluator.evaluate import evaluate
from controller.model.network import Network, Task
from controller.model.plan import Plan, Status
from controller.solvers import SchemeInputError, SolveOptions, progress
from controller.solvers.params import SchemeParams
from controller.solvers.paring import exact, joint, several
from controller.solvers.paring.alg2 import run_paring
from controller.solvers.paring.degrees import Rate
from controller.solvers.paring.logical import INF
from controller.solvers.paring.routes import task_plan, tree_of
from controller.solvers.paring.steiner import Tree
from controller.solvers.partial import best_effort


def placed_tasks(network: Network, scheme: str) -> list[Task]:
    """The tasks of the one job to place: one task, or one per PS (Sec. IV-C.3)."""
    jobs = {t.job for t in network.tasks}
    free = [t for t in network.tasks if t.placement == "free"]
    if len(jobs) != 1 or len(free) != len(network.tasks):
        raise SchemeInputError(
            f"{network.source}: {scheme} places one job: the topology needs exactly one job, "
            f"its tasks `placement: free` (one task, or one per PS; topologies/README.md, "
            f"jobs); it has {len(jobs)} job(s) and {len(network.tasks)} task(s), {len(free)} "
            f"of them free"
        )
    return free


def solve_paring(network: Network, options: SolveOptions) -> Plan:
    started = time.perf_counter()
    params = SchemeParams("paring", options.params)
    gradient_gb, as_printed = params["gradient_gb"], params["as_printed"]
    fan_in = params["max_fan_in"]
    tasks = placed_tasks(network, "paring")
    if len(tasks) > 1:  # Sec. IV-C.3: the model sharded over several PSs
        fine = params["fine"]  # each shard fine on what the others left
        plan = several.plan_of(
            network,
            several.run_several(network, tasks, as_printed, fine, fan_in),
            "paring",
            "heuristic",
            options.seed,
        )
        if fine:
            plan.details["partial_aggregation"] = {
                f"{tp.task}:{a.switch}:{a.pipeline}": a.share
                for tp in plan.tasks
                for a in tp.aggregation
                if a.share < 1
            }
        several.describe(plan, network, gradient_gb)
        plan.solve_seconds = time.perf_counter() - started
        return plan
    task = tasks[0]
    out, plan = _tree_within(network, task, as_printed, fan_in, "paring", "heuristic", options.seed)
    if params["fine"]:  # Sec. V-C's fine mode: switches merge a share, rest raw
        plan = best_effort(network, plan, fan_in)  # raw remainders count against L
    plan.details.update(
        {
            "algorithm_rate_gbps": _num(out.rate),
            "step2_rate_gbps": _num(out.step2_rate),
            "degree_slack": _num(out.slack),
        }
    )
    describe(plan, network, out.tree, gradient_gb)
    plan.solve_seconds = time.perf_counter() - started
    return plan


def _tree_within(
    network: Network,
    task: Task,
    as_printed: bool,
    fan_in: int,
    scheme: str,
    status: Status,
    seed: int | None,
) -> tuple[Any, Plan]:
    """PARING's tree and its plan within the fan-in limit. The tree model counts children
    per switch; a child merging on several pipelines sends several flows, and where capping
    them would send a flow unmerged through a point its path returns to, the tree is built
    again with fewer children per switch."""
    for limit in range(fan_in, 0, -1) if fan_in else [0]:
        out = run_paring(network, task, as_printed, limit)
        try:
            return out, plan_for(network, task, out.tree, out.rate, scheme, status, seed)
        except SchemeInputError:
            if limit == 1:
                raise
    raise AssertionError("unreachable")


def plan_for(
    network: Network,
    task: Task,
    tree: Tree,
    rate: float | Fraction,
    scheme: str,
    status: Status,
    seed: int | None,
) -> Plan:
    """The Plan of one placed tree, rated by the evaluator (the claimed rate is never above
    what the paths carry)."""
    tp = task_plan(network, task, tree, 0.0)
    plan = Plan(scheme, status, 0.0, None, 0.0, seed, [tp], topology=network.name)
    result = evaluate(network, plan)
    tp.rate_gbps = float(min(result.tasks[0].rate_gbps, rate))
    plan.objective = tp.rate_gbps
    plan.link_loads = evaluate(network, plan).link_loads
    return plan


def describe(plan: Plan, network: Network, tree: Tree, gradient_gb: float) -> None:
    """Placement, traffic volume (O_2) and the one-line summary `ina solve` prints."""
    volume = evaluate(network, plan).link_loads
    links = sum(ll.flows for ll in volume)
    tp = plan.tasks[0]
    seconds = gradient_gb * 8 / tp.rate_gbps if tp.rate_gbps > 0 else INF
    plan.details.update(
        {
            "placement": {"ps": tp.ps, "workers": sorted(tp.paths)},
            "tree": dict(sorted(tree.parent.items())),
            "traffic_volume_gradients": links,
            "gradient_gb": gradient_gb,
            "traffic_volume_gb": links * gradient_gb,
            "communication_seconds": _num(seconds),
            "summary": (
                f"placement: PS {tp.ps}, workers {', '.join(sorted(tp.paths))}; rate "
                f"{tp.rate_gbps:.4g} Gbps, traffic volume {links * gradient_gb:.4g} GB "
                f"({links:.4g} gradient-hops x {gradient_gb:g} GB), communication time "
                f"{seconds:.4g} s"
            ),
        }
    )


def _num(value: Rate) -> Any:
    return None if value == INF else float(value)


def solve_paring_opt(network: Network, options: SolveOptions) -> Plan:
    """`paring-opt`: PARING's tree, then problem (1) on CP-SAT warm-started with it (exact.py).

    `bound` is the optimal rate (every higher candidate is impossible), valid for the
    evaluator's problem too (links only lower a rate). `optimal` when the plan reaches it and
    CP-SAT proved its traffic volume least at that rate; otherwise `feasible`, and
    `details.volume_bound_gb` is CP-SAT's lower bound on the volume at that rate. With several
    PSs: PARING's shards (several.py), `feasible`, `bound` = min(R, Σ_p the optimal single-PS
    rate of PS p's capacity) (several.rate_bounds), `details.rate_optimal` when reached; with
    two PSs the joint problem is then searched exactly (joint.py): its trees replace PARING's
    when they rate higher, and `bound` falls to the first candidate sum not refuted."""
    started = time.perf_counter()
    params = SchemeParams("paring-opt", options.params)
    gradient_gb, threads = params["gradient_gb"], params["num_workers"]
    limit, fan_in = options.limit(), params["max_fan_in"]
    if params["fine"]:
        raise SchemeInputError(
            f"{network.source}: paring-opt: `fine` is not modelled: paring-opt solves the "
            "coarse problem (1) (a switch merges all the gradients it takes or none), so its "
            "`optimal` and `bound` would not hold for partial aggregation; use `--scheme "
            "paring --param fine=true` (PARING's tree, shares by controller/solvers/partial.py)"
        )
    tasks = placed_tasks(network, "paring-opt")
    if len(tasks) > 1:  # Sec. IV-C.3: PARING's shards, bounded by the exact single-PS rates
        plan = several.plan_of(
            network,
            several.run_several(network, tasks, params["as_printed"], fan_in=fan_in),
            "paring-opt",
            "feasible",
            options.seed,
        )
        report = _reporter("summed rate")
        report(plan.objective, INF)
        bounds, stopped = several.rate_bounds(
            network, tasks, started + limit, threads, options.seed or 0, report, fan_in
        )
        if len(tasks) == 2 and bounds != INF:  # two PSs: the joint optimum (joint.py)
            pair = joint.solve(
                several.shard_graphs(network, tasks, fan_in),
                len(tasks[0].workers),
                Fraction(plan.objective),
                Fraction(bounds),
                started + limit,
                threads,
                options.seed or 0,
                report,
            )
            if pair.trees is not None:
                better = several.joint_plan(network, tasks, pair, options.seed, fan_in)
                plan = better if better and better.objective > plan.objective else plan
            bounds = min(bounds, pair.bound)
            stopped = pair.stopped
            plan.details["joint_candidates_probed"] = pair.probes
        plan.bound = max(float(bounds), plan.objective)
        plan.details["rate_optimal"] = plan.objective >= float(bounds) * (1 - 1e-9)
        several.describe(plan, network, gradient_gb)
        plan.solve_seconds = time.perf_counter() - started
        _timed_out(plan, limit, stopped)
        report(plan.objective, plan.bound)
        return plan
    task = tasks[0]
    heur = run_paring(network, task, params["as_printed"], fan_in)
    g, n = heur.logical, len(task.workers)
    hint = (heur.tree.ps, heur.tree.parent, heur.tree.workers, heur.rate)
    first, first_plan = _tree_within(
        network, task, params["as_printed"], fan_in, "paring-opt", "feasible", options.seed
    )
    plans = [first_plan]
    report = _reporter("rate")
    report(plans[0].objective, INF)
    found = exact.solve(g, n, started + limit, threads, options.seed or 0, hint, report=report)
    trees = [first.tree]
    tree = (
        None
        if found.parent is None or found.ps is None
        else tree_of(g, found.ps, found.parent, found.workers)
    )
    if tree is not None:
        with contextlib.suppress(SchemeInputError):  # a tree the data plane cannot cap
            plans.append(
                plan_for(
                    network, task, tree, float(found.rate), "paring-opt", "feasible", options.seed
                )
            )
            trees.append(tree)
    volumes = [sum(ll.flows for ll in p.link_loads) for p in plans]
    best = max(range(len(plans)), key=lambda i: (plans[i].objective, -volumes[i]))
    plan, rate_bound = plans[best], float(found.rate)
    plan.bound = max(rate_bound, plan.objective)
    proven_volume = found.cp_status == "OPTIMAL" and volumes[best] <= (found.cost or 0)
    if plan.objective >= rate_bound * (1 - 1e-9) and proven_volume:
        plan.status = "optimal"
    plan.details.update(
        {
            "cp_sat_status": found.cp_status,
            "rate_candidates_solved": found.candidates_tried,
            "paring_rate_gbps": plans[0].objective,
            "paring_volume_gb": volumes[0] * gradient_gb,
            "volume_bound_gb": None if found.cost_bound is None else found.cost_bound * gradient_gb,
        }
    )
    describe(plan, network, trees[best], gradient_gb)
    plan.solve_seconds = time.perf_counter() - started
    _timed_out(plan, limit, found.cp_status in {"UNKNOWN", "FEASIBLE"})
    report(plan.objective, plan.bound)
    return plan


def _reporter(what: str):
    """Progress (`ina solve --progress`): the best rate so far (PARING's plan, then the rate
    of CP-SAT's trees in problem (1), last the plan's) and the candidate rates refuted above."""

    def report(best: Rate | None, bound: Rate) -> None:
        progress.report(
            None if best is None else float(best), None if bound == INF else float(bound), what
        )

    return report


def _timed_out(plan: Plan, limit: float, stopped: bool) -> None:
    """A plan not proven optimal whose search the time limit stopped reads `timeout`: a
    search said so (`stopped`: CP-SAT answered UNKNOWN or FEASIBLE, which it only does at its
    time limit, what is left of ours), or the clock ran out between searches."""
    if plan.status != "optimal" and (stopped or plan.solve_seconds >= limit):
        plan.status = "timeout"
