"""ARO variants of Table II as schemes: build graphs, search, generate routes, return a Plan.

The plan's rates are the quantized model's rates raised by progressive filling on the chosen
routes (the evaluator's own `max_min_fair`), so they are exactly what the routes achieve and
never less than the model promised. `bound` is the quantized model's proven bound in Gbps
(never below the objective), so `gap` 0 means the quantized model was solved to optimality.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from controller.evaluate import Resource as EvalResource
from controller.evaluate import max_min_fair, task_flows
from controller.network import Network
from controller.plan import Plan, TaskPlan
from controller.solvers import SolveOptions
from controller.solvers.aro import accel
from controller.solvers.aro.qsr import Scale, bbar, quantize, resources
from controller.solvers.aro.routes import generate, greedy_flows, replay
from controller.solvers.aro.search import Result, Search, SolverSettings
from controller.solvers.aro.unfold import Edge, TaskGraph, build_task_graph, ina_switches
from controller.solvers.common import weighted_objective

DEFAULT_LEVELS = 100  # N of QSR (paper default)
RAW_LEVELS = 10_000  # ARO-RAW: unquantized rates approximated at 0.01 % of b̄
DEFAULT_TIME_LIMIT = 120.0
SOLO_SHARE = 0.5  # of a stage's time: the tasks' own optima (per-task caps)
JOINT_SHARE = 0.25  # of what is left then: joining the tasks' routes at their caps
ROUTE_RESERVE = 2.0  # seconds (at most 5 % of the limit) kept for Algorithm 1 and the plan


@dataclass(frozen=True)
class Variant:
    sro: bool
    app: bool
    raw: bool = False


VARIANTS = {
    "aro": Variant(sro=False, app=False),
    "aro-qsr": Variant(sro=False, app=False),
    "aro-acc": Variant(sro=True, app=True),
    "aro-sro": Variant(sro=True, app=False),
    "aro-app": Variant(sro=False, app=True),
    "aro-raw": Variant(sro=False, app=False, raw=True),
}


class AroInputError(ValueError):
    """The topology cannot be routed by ARO (e.g. a worker without a shortest path)."""


def solve_aro(network: Network, options: SolveOptions) -> Plan:
    return run(network, options, "aro")


def solve_acc(network: Network, options: SolveOptions) -> Plan:
    return run(network, options, "aro-acc")


def solve_sro(network: Network, options: SolveOptions) -> Plan:
    return run(network, options, "aro-sro")


def solve_app(network: Network, options: SolveOptions) -> Plan:
    return run(network, options, "aro-app")


def solve_qsr(network: Network, options: SolveOptions) -> Plan:
    return run(network, options, "aro-qsr")


def solve_raw(network: Network, options: SolveOptions) -> Plan:
    return run(network, options, "aro-raw")


def run(network: Network, options: SolveOptions, scheme: str) -> Plan:
    started = time.perf_counter()
    variant, params = VARIANTS[scheme], options.params
    levels = int(params.get("quantization", RAW_LEVELS if variant.raw else DEFAULT_LEVELS))
    bidirectional = bool(params.get("bidirectional", False))
    limit = options.time_limit if options.time_limit is not None else DEFAULT_TIME_LIMIT
    search_limit = limit - min(ROUTE_RESERVE, 0.05 * limit)
    settings = SolverSettings(
        deadline=started + search_limit,
        num_workers=int(params.get("num_workers", 2)),
        seed=options.seed or 0,
        mu=float(params.get("mu", 0.001)),
    )
    ina = ina_switches(network)
    keep = {i: set(ina) for i in range(len(network.tasks))}
    details: dict = {"quantization": levels, "bidirectional": bidirectional, "stages": []}
    if variant.app:
        keep = accel.app_select(network, float(params.get("alpha", 0.6)), ina)
        details["app_aggregators"] = {network.tasks[i].name: sorted(s) for i, s in keep.items()}

    dropped: dict[int, set[Edge]] = {}
    stage1: Result | None = None
    if variant.sro:
        graphs = _graphs(network, keep, excluded=accel.sro_excluded(network))
        if any(tg.unreachable for tg in graphs):
            details["stages"].append("sro stage 1 skipped: workers need INA-agnostic switches")
        else:
            first = SolverSettings(started + search_limit / 2, settings.num_workers, settings.seed,
                                   settings.mu)
            stage1 = _search(network, graphs, levels, bidirectional, first, [], options,
                             refine=False)[-1]
            # INPs idle in the stage-1 plan and in every task's own stage-1 routes.
            dropped = accel.idle_inp_links(graphs, {**stage1.solo_flows, **stage1.flows})
            details["stages"].append(_stage_summary("sro stage 1", stage1, started))

    graphs = _graphs(network, keep, dropped=dropped)
    missing = [w for tg in graphs for w in tg.unreachable]
    if missing:
        raise AroInputError(f"workers without a shortest path to their PS: {missing}")
    extra = [f for f in (stage1.flows, stage1.solo_flows) if f] if stage1 is not None else []
    results = _search(network, graphs, levels, bidirectional, settings, extra, options,
                      floor=stage1.levels if stage1 is not None else None)
    details["stages"].append(_stage_summary("final", results[-1], started))
    # The routes' exact (filled) rates can rank the bisection's solution above the refined one.
    plans = [_plan(network, scheme, graphs, r, bidirectional, settings, dict(details), options,
                   started) for r in results]
    best = max(plans, key=lambda p: p.objective)
    best.status = plans[-1].status
    best.bound = None if results[-1].bound is None else max(results[-1].bound, best.objective)
    return best


def _graphs(
    network: Network, keep: dict[int, set[str]], excluded: set[str] | None = None,
    dropped: dict[int, set[Edge]] | None = None,
) -> list[TaskGraph]:
    return [
        build_task_graph(network, i, t, keep[i], excluded or (), (dropped or {}).get(i, ()))
        for i, t in enumerate(network.tasks)
    ]


def _search(
    network: Network, graphs: list[TaskGraph], levels: int, bidirectional: bool,
    settings: SolverSettings, extra: list, options: SolveOptions,
    floor: dict[int, int] | None = None, refine: bool = True,
) -> list[Result]:
    """The bisection's result, then (several tasks) the refined one with the better bound.

    Several tasks first get their own optima alone (the per-task caps, an upper bound); when
    their routes can be joined at those rates the result is optimal without any joint search.
    SRO stage 1 skips the refinement: it only has to show which INPs are used and give the
    rates' lower bound, and the final stage needs the time.
    """
    res = resources(network, graphs, bidirectional)
    scale = Scale(levels, bbar(graphs, network))
    quantize(res, scale)
    jobs = {i: (t.job, t.beta) for i, t in enumerate(network.tasks)}
    search = Search(graphs, res, scale, jobs, settings)
    incumbents = [greedy_flows(graphs), *extra, *_warm(graphs, options)]
    if len(graphs) == 1:
        results = [search.bisect(incumbents)]
    else:
        union = search.solo_optima(incumbents, SOLO_SHARE * settings.left())
        done = search.at_caps(union, JOINT_SHARE * settings.left())
        if done is not None:
            results = [done]
        else:
            first = search.bisect([*incumbents, union])
            settled = first.bound is not None and first.bound <= first.objective
            results = [first] if settled or not refine else [first, search.refine(first, floor)]
        results[-1].solo_flows = union
    results[-1].log[:0] = [
        f"b̄={scale.bbar:g} N={levels} cands={len(search.candidates())}", *search.log]
    return results


def _warm(graphs: list[TaskGraph], options: SolveOptions) -> list[dict[tuple[int, Edge], int]]:
    """Flows of a previous plan for the same tasks, if all its paths fit the graphs."""
    if options.warm_start is None:
        return []
    flows: dict[tuple[int, Edge], int] = {}
    for tg in graphs:
        try:
            tp = options.warm_start.task(tg.task.job, tg.task.name)
        except KeyError:
            return []
        replayed = replay(tg, tp.paths)
        if replayed is None:
            return []
        flows.update({(tg.index, e): n for e, n in replayed.items()})
    return [flows]


def _stage_summary(name: str, result: Result, started: float) -> dict:
    return {
        "stage": name, "objective_gbps": result.objective, "bound_gbps": result.bound,
        "proven": result.proven, "at_seconds": round(time.perf_counter() - started, 3),
        "log": result.log,
    }


def _plan(
    network: Network, scheme: str, graphs: list[TaskGraph], result: Result, bidirectional: bool,
    settings: SolverSettings, details: dict, options: SolveOptions, started: float,
) -> Plan:
    scale = Scale(details["quantization"], bbar(graphs, network))
    tasks = []
    for tg in graphs:
        flows = {e: n for (i, e), n in result.flows.items() if i == tg.index}
        paths, points = generate(tg, flows)
        rate = scale.gbps(result.levels[tg.index])
        tasks.append(TaskPlan(tg.task.job, tg.task.name, tg.task.ps, rate, paths, points))
    # A bound equal to the objective is a proof even when CP-SAT ran out of time.
    proven = result.proven or (result.bound is not None and result.bound <= result.objective)
    status = "optimal" if proven else "timeout"
    plan = Plan(scheme, status, 0.0, None, 0.0, options.seed, tasks, topology=network.name,
                details=details)
    _fill_rates(network, plan, bidirectional)
    plan.objective = weighted_objective(network, plan, settings.mu)
    details["model_objective_gbps"] = result.objective
    details["model_bound_gbps"] = result.bound
    details["model_levels"] = {network.tasks[i].name: lv for i, lv in result.levels.items()}
    plan.bound = None if result.bound is None else max(result.bound, plan.objective)
    plan.solve_seconds = time.perf_counter() - started
    return plan


def _fill_rates(network: Network, plan: Plan, bidirectional: bool) -> None:
    """Raise the model's rates by progressive filling on the routes (evaluator's semantics).

    With `bidirectional` each link also carries the reversed multicast of its reverse
    direction, which the evaluator does not model, so it will find at least these rates.
    """
    demand: dict[str, dict[EvalResource, int]] = {}
    capacity: dict[EvalResource, float] = {}
    for tp in plan.tasks:
        uses: dict[EvalResource, int] = {}
        tf = task_flows(network, tp)
        for (u, v), n in tf.link_flows.items():
            directions = [(u, v), (v, u)] if bidirectional else [(u, v)]
            for a, b in directions:
                uses[("link", a, b)] = uses.get(("link", a, b), 0) + n
                capacity[("link", a, b)] = network.capacity(a, b)
        for (sw, _pipe), n in tf.aggregator_inflows.items():
            limit = network.spec(sw).aggregation_capacity_gbps
            if limit is not None:
                uses[("aggregator", sw)] = uses.get(("aggregator", sw), 0) + n
                capacity[("aggregator", sw)] = limit
        demand[f"{tp.job}/{tp.task}"] = uses
    claimed = {f"{tp.job}/{tp.task}": tp.rate_gbps for tp in plan.tasks}
    rates = max_min_fair(demand, capacity, start=claimed)
    for tp in plan.tasks:
        tp.rate_gbps = rates[f"{tp.job}/{tp.task}"]
