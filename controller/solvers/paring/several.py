"""Several PSs (Sec. IV-C.3): one training task whose model is sharded over P parameter servers.

The paper: "First, we greedily assign servers for multiple PSs referring to Step 1 in Alg. 2.
Then, for each PS, we use Alg. 3 to obtain the solution of the subtask, and update the
aggregation capacity B_v for vertices in the cluster after each run of Alg. 3." Readings:

* A subtask is a shard of the model (the word Sec. IV-C.2 uses for a part of the gradient):
  every worker sends PS p its shard, so all subtasks aggregate the same n workers. The first
  subtask places them (Alg. 3's feet are free servers); the later ones keep them as terminals,
  as Sec. IV-C.1 says Alg. 3 does for a task whose workers are already placed.
* "Greedily ... referring to Step 1": Step 1 (lines 1-6) is run P times, each time among the
  servers no earlier PS took; no PS is ever a worker.
* "Update B_v": after subtask p at rate r_p (line 23), every vertex that aggregates k of its
  children loses r_p · k; the next subtask runs steps 2-3 on what is left. R bounds a worker's
  whole sending rate, so subtask p gets R - Σ_{q<p} r_q (a subtask left with nothing sends at
  rate 0, directly to its PS, and gets no share).
* "Combining the results": shard p gets model_share r_p / Σ r, so every shard ends at once and
  the job moves b in b / Σ r (controller/evaluator/sharding.py); its traffic volume is
  Σ_p share_p · b · (gradient-hops of tree p).
* Fine mode (Sec. V-C) with several PSs: shard p's tree is built as above, then made fine on
  what the shards before it left (`residual`: links, switch B_v and R less their use at their
  rates), by the one-PS fine mode (`controller.solvers.partial.best_effort`): its rate r_p and
  shares. "Update B_v" then subtracts what shard p really merges, fractional flows included,
  so the next tree and its shares see only the capacity left. Each shard is a task with its
  own points and shares, deployed segment by segment like a one-PS fine plan.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from fractions import Fraction

from controller.evaluator import sharding
from controller.evaluator.evaluate import evaluate, resources, task_flows
from controller.model.network import Network, Task
from controller.model.plan import Plan, Status, TaskPlan
from controller.solvers import SchemeInputError
from controller.solvers.paring import degrees
from controller.solvers.paring.alg2 import Outcome, grow
from controller.solvers.paring.degrees import Rate
from controller.solvers.paring.exact import solve as solve_exactly
from controller.solvers.paring.logical import INF, Logical, convert, exact
from controller.solvers.paring.routes import aggregating_children, task_plan, tree_of
from controller.solvers.paring.steiner import steiner_tree
from controller.solvers.partial import best_effort


@dataclass
class Subtask:
    task: Task
    outcome: Outcome
    fine: TaskPlan | None = None  # fine mode: the shard with its shares, at outcome.rate


def run_several(
    network: Network,
    tasks: list[Task],
    as_printed: bool = False,
    fine: bool = False,
    fan_in: int = 0,
) -> list[Subtask]:
    """Sec. IV-C.3 on the tasks of one placed job, in their declaration order (fine: each
    shard made fine on what the shards before it left, module docstring); in every shard's
    tree a switch takes at most `fan_in` children (0: unlimited)."""
    g = convert(network, tasks[0], fan_in)  # Alg. 1 (the job's tasks share their free servers)
    n, count = len(tasks[0].workers), len(tasks)
    if len(g.hosts) < n + count:
        raise SchemeInputError(
            f"{network.source}: job {tasks[0].job} needs {n} workers and {count} PSs but has "
            f"{len(g.hosts)} free servers"
        )
    pss: list[str] = []
    for task in tasks:  # Step 1, once per PS, among the servers left
        g_p = _as_ps_of(g, network, task, [h for h in g.hosts if h not in pss])
        pss.append(degrees.select_ps(g_p, n))
    capacity = dict(g.capacity)
    left = g.rate_cap  # R, shared by a worker's shards
    out: list[Subtask] = []
    workers: list[str] | None = None
    load: dict = {}
    for task, ps in zip(tasks, pss, strict=True):
        # the first shard places the workers: on servers that reach every PS
        hosts = (
            [h for h in g.hosts if h == ps or (h not in pss and all((h, q) in g.cost for q in pss))]
            if workers is None
            else [h for h in g.hosts if h == ps or h in workers]
        )
        g_p = replace(_as_ps_of(g, network, task, hosts, capacity), rate_cap=left)
        outcome = _star(g_p, ps, n) if left <= 0 else grow(g_p, ps, n, as_printed, load)
        load = outcome.tree.load  # the links the shards so far use (equal-cost legs avoid them)
        workers = workers or list(outcome.tree.workers)
        if fine:
            shard = _fine_shard(network, task, outcome, _fine(out), len(tasks))
            out.append(Subtask(task, replace(outcome, rate=shard.rate_gbps), shard))
            left_over = residual(network, _fine(out))
            for v in g.switches:  # update B_v by what the shards merge, shares included
                if capacity[v] != INF:
                    capacity[v] = _snap(left_over.spec(v).aggregation_capacity_gbps)
            if left != INF:
                left = _snap(
                    next(
                        t.rate_cap_gbps
                        for t in left_over.tasks
                        if (t.job, t.name) == (task.job, task.name)
                    )
                )
            continue
        out.append(Subtask(task, outcome))
        r = outcome.rate
        if r > 0 and r != INF:
            for v, k in aggregating_children(outcome.tree).items():  # update B_v
                if capacity[v] != INF:
                    capacity[v] = max(capacity[v] - r * k, Fraction(0))
            left = left - r if left != INF else INF
    return out


def _fine(subtasks: list[Subtask]) -> list[TaskPlan]:
    """The fine-mode shards so far (fine mode sets every one)."""
    return [s.fine for s in subtasks if s.fine is not None]


def _fine_shard(
    network: Network, task: Task, outcome: Outcome, before: list[TaskPlan], count: int
) -> TaskPlan:
    """Shard p's tree as a task of the job, its rate and shares those of the one-PS fine mode
    on what the shards `before` it left."""
    tp = task_plan(network, task, outcome.tree, 0.0)
    tp.model_share = 1 / count  # sharded: R is the job's
    if outcome.rate <= 0:
        return tp
    left = residual(network, before)
    alone = Plan("paring", "heuristic", 0.0, None, 0.0, None, [tp], topology=network.name)
    carried = evaluate(left, alone).tasks[0].rate_gbps  # links left, B_v left, R left
    tp.rate_gbps = min(float(outcome.rate), carried)
    return best_effort(left, alone, outcome.tree.fan_in).tasks[0]


def residual(network: Network, shards: list[TaskPlan]) -> Network:
    """`network` less what `shards` use at their rates (the evaluator's resources): link
    capacities, switch aggregation capacities, and the job's rate cap R."""
    if not shards:
        return network
    plans = {f"{tp.job}/{tp.task}": tp for tp in shards}
    demand, _ = resources(network, plans, {k: task_flows(network, tp) for k, tp in plans.items()})
    used: dict = defaultdict(float)
    for label, uses in demand.items():
        for key, k in uses.items():
            used[key] += k * plans[label].rate_gbps
    graph = network.graph.copy()  # fresh attribute dicts: the original stays as it was
    for key, amount in used.items():
        if key[0] == "link":
            a, b = key[1], key[2]
            for e in ((a, b), (b, a)) if graph.edges[a, b].get("shared") else ((a, b),):
                graph.edges[e]["capacity_gbps"] = max(0.0, graph.edges[e]["capacity_gbps"] - amount)
        elif key[0] == "aggregator" and network.is_switch(key[1]):
            spec = graph.nodes[key[1]]["spec"]
            graph.nodes[key[1]]["spec"] = spec.model_copy(
                update={
                    "aggregation_capacity_gbps": max(0.0, spec.aggregation_capacity_gbps - amount)
                }
            )
    tasks = [
        replace(t, rate_cap_gbps=max(0.0, t.rate_cap_gbps - used[("rate cap", t.job)]))
        if ("rate cap", t.job) in used and t.rate_cap_gbps is not None
        else t
        for t in network.tasks
    ]
    return replace(network, graph=graph, tasks=tasks)


def _snap(value: float | None) -> Rate:
    """A residual capacity as an exact fraction, float noise (1e-16) rounded away, so that
    ⌊B_v / r⌋ is not one short at a rate that uses B_v exactly."""
    return INF if value is None else Fraction(round(value, 9))


def _as_ps_of(
    g: Logical, network: Network, task: Task, hosts: list[str], capacity: dict | None = None
) -> Logical:
    """G' for one subtask: its servers, the residual B_v, its PS's own B_v."""
    cap = dict(capacity or g.capacity)
    for h in hosts:
        cap[h] = exact(network.ps_capacity(task, h))
    return replace(g, task=task, hosts=hosts, capacity=cap)


def _star(g: Logical, ps: str, n: int) -> Outcome:
    """A subtask left with no rate: each worker straight to its PS (no B_v spent)."""
    d = dict.fromkeys(g.nodes, 1) | {ps: max(n, 2)}
    tree = steiner_tree(g, ps, d, n, 1.0, guard=False)  # links left alone: it sends nothing
    if tree is None:
        raise SchemeInputError(f"{g.network.source}: no path from the workers to {ps}")
    return Outcome(g, tree, Fraction(0), Fraction(0), 1.0)


def plan_of(
    network: Network, subtasks: list[Subtask], scheme: str, status: Status, seed: int | None
) -> Plan:
    """One task per PS, model_share r_p / Σ r. PARING ignores links; the evaluator does not,
    so each shard in turn claims its line-23 rate or, if less, what the evaluator's resources
    (links, B_v, the PS, R) leave after the shards before it: the same greedy, on what the
    plan is scored by."""
    tps = [s.fine or task_plan(network, s.task, s.outcome.tree, 0.0) for s in subtasks]
    for tp in tps:
        tp.model_share = 1 / len(tps)  # sharded: R is the job's (controller/evaluator/evaluate.py)
    flows = {f"{tp.job}/{tp.task}": task_flows(network, tp) for tp in tps}
    demand, left = resources(network, {f"{tp.job}/{tp.task}": tp for tp in tps}, flows)
    rates = []
    for tp, sub in zip(tps, subtasks, strict=True):
        uses = demand[f"{tp.job}/{tp.task}"]
        room = min((max(left[e], 0.0) / k for e, k in uses.items() if k > 0), default=INF)
        rate = min(room, float(sub.outcome.rate))
        rate = 0.0 if rate == INF else rate  # nothing limits it: no rate to claim
        for e, k in uses.items():
            left[e] -= k * rate
        rates.append(rate)
    total = sum(rates)
    for tp, r in zip(tps, rates, strict=True):
        tp.rate_gbps = r
        tp.model_share = r / total if total > 0 else 1 / len(tps)
    plan = Plan(scheme, status, total, None, 0.0, seed, tps, topology=network.name)
    plan.link_loads = evaluate(network, plan).link_loads
    return plan


def describe(plan: Plan, network: Network, gradient_gb: float) -> None:
    """Placement, traffic volume Σ_p share_p · b · hops_p, time b / Σ r, the summary line."""
    result = evaluate(network, plan)
    hops = {(te.job, te.task): 0.0 for te in result.tasks}
    for tp in plan.tasks:
        hops[tp.key] = sum(
            ll.flows
            for ll in evaluate(
                network, Plan(plan.scheme, plan.status, 0.0, None, 0.0, None, [tp])
            ).link_loads
        )
    volume = sum(sharding.share(tp) * hops[tp.key] for tp in plan.tasks) * gradient_gb
    total = plan.objective
    seconds = gradient_gb * 8 / total if total > 0 else INF
    pss = [tp.ps for tp in plan.tasks]
    workers = sorted(plan.tasks[0].paths)
    plan.details.update(
        {
            "placement": {"pss": pss, "workers": workers},
            "subtask_rates_gbps": [tp.rate_gbps for tp in plan.tasks],
            "model_shares": [tp.model_share for tp in plan.tasks],
            "traffic_volume_gradients": volume / gradient_gb,
            "gradient_gb": gradient_gb,
            "traffic_volume_gb": volume,
            "communication_seconds": None if seconds == INF else seconds,
            "summary": (
                f"placement: PSs {', '.join(pss)}, workers {', '.join(workers)}; rates "
                f"{' + '.join(f'{tp.rate_gbps:.4g}' for tp in plan.tasks)} = {total:.4g} "
                f"Gbps (shares {', '.join(f'{tp.model_share:.3g}' for tp in plan.tasks)}), "
                f"traffic volume {volume:.4g} GB, communication time {seconds:.4g} s"
            ),
        }
    )


def shard_graphs(network: Network, tasks: list[Task], fan_in: int = 0) -> list[Logical]:
    """G' once per PS: every free server, each with task p's PS capacity (joint.py)."""
    g = convert(network, tasks[0], fan_in)
    return [_as_ps_of(g, network, task, g.hosts) for task in tasks]


def joint_plan(
    network: Network, tasks: list[Task], found, seed: int | None, fan_in: int = 0
) -> Plan | None:
    """The plan of joint.py's two trees at their rates (the evaluator may lower them); None
    when a tree has no physical realisation (`tree_of`)."""
    subtasks = []
    for task, g, (ps, parent), r in zip(
        tasks, shard_graphs(network, tasks, fan_in), found.trees, found.rates, strict=True
    ):
        tree = tree_of(g, ps, parent, found.workers)
        if tree is None:
            return None
        subtasks.append(Subtask(task, Outcome(g, tree, r, r, 1.0)))
    return plan_of(network, subtasks, "paring-opt", "feasible", seed)


def rate_bounds(
    network: Network,
    tasks: list[Task],
    deadline: float,
    threads: int,
    seed: int,
    report: Callable[[Rate | None, Rate], None] | None = None,
    fan_in: int = 0,
) -> tuple[Rate, bool]:
    """A proven bound on Σ_p r_p: every shard's tree is a one-PS tree of problem (1) on the
    full B_v, so r_p is at most that problem's optimal rate (exact.py: its first candidate not
    refuted, an upper bound even when time runs out); and Σ r_p ≤ R. Links only lower it.
    Also whether the deadline left some PS's rate unsettled (a candidate neither refuted nor
    reached). `report(None, bound)` hears the bound as the candidates of each PS fall."""
    g = convert(network, tasks[0], fan_in)
    n = len(tasks[0].workers)
    caps = [task.ps_aggregation_capacity_gbps for task in tasks]
    known: dict = {}  # tasks whose PS capacity is the same share one solve; the bound so far
    stopped = False

    def total() -> Rate:
        return min(sum((known.get(c, INF) for c in caps), Fraction(0)), g.rate_cap)

    def hear(_rate: Rate | None, bound: Rate, capacity) -> None:
        known[capacity] = bound
        if report:
            report(None, total())

    for task in tasks:
        capacity = task.ps_aggregation_capacity_gbps
        if capacity not in known:
            g_p = _as_ps_of(g, network, task, g.hosts)
            found = solve_exactly(
                g_p, n, deadline, threads, seed, report=functools.partial(hear, capacity=capacity)
            )
            known[capacity] = found.rate
            stopped = stopped or (found.parent is None and found.cp_status != "INFEASIBLE")
    return total(), stopped
