"""ARO variants of Table II as schemes: build graphs, search, generate routes, return a Plan.

The plan's rates are the model's rates raised by progressive filling on the chosen routes (the
evaluator's own `max_min_fair`), so they are exactly what the routes achieve and never less
than the model promised. `bound` holds for the real problem: ARO's model (4)-(10) with real
rates, over all shortest paths and every INA switch, within the fan-in limit `max_fan_in`
(`unfold`). `optimal` means the plan reaches it.

ARO-QSR keeps the paper's grid (Eq. 11, b̄ = the largest link); every other variant searches a
single common rate over the exact rates where feasibility changes and puts its grid under the
highest rate a task could send (`qsr.rate_ceiling`). SRO and APP solve a smaller model whose
bound says nothing about the full one, so those variants bound the full problem separately
(each task's own optimum on the full graphs, `_full_bound`) with a share of the time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from controller.evaluator.evaluate import Resource as EvalResource
from controller.evaluator.evaluate import max_min_fair, task_flows
from controller.evaluator.evaluate import resources as evaluator_resources
from controller.model.network import Network
from controller.model.plan import Plan, Status, TaskPlan
from controller.solvers import SchemeInputError, SolveOptions
from controller.solvers.aro import accel
from controller.solvers.aro.qsr import Scale, bbar, quantize, rate_ceiling, resources, task_ceiling
from controller.solvers.aro.routes import generate, greedy_flows, replay
from controller.solvers.aro.search import REL, Result, Search, SolverSettings
from controller.solvers.aro.unfold import Edge, TaskGraph, build_task_graph, ina_switches
from controller.solvers.common import weighted_objective
from controller.solvers.params import SchemeParams

SOLO_SHARE = 0.5  # of a stage's time: the tasks' own optima (per-task caps)
JOINT_SHARE = 0.25  # of what is left then: joining the tasks' routes at their caps
BOUND_SHARE = 0.1  # of the search time, for SRO/APP's bound on the full problem
ROUTE_RESERVE = 2.0  # seconds (at most 5 % of the limit) kept for Algorithm 1 and the plan


@dataclass(frozen=True)
class Variant:
    sro: bool
    app: bool
    raw: bool = False
    qsr: bool = False  # the paper's grid for every rate (Eq. 11), not the exact rates


VARIANTS = {
    "aro": Variant(sro=False, app=False),
    "aro-qsr": Variant(sro=False, app=False, qsr=True),
    "aro-acc": Variant(sro=True, app=True),
    "aro-sro": Variant(sro=True, app=False),
    "aro-app": Variant(sro=False, app=True),
    "aro-raw": Variant(sro=False, app=False, raw=True),
}


class AroInputError(SchemeInputError):
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
    variant, params = VARIANTS[scheme], SchemeParams(scheme, options.params)
    levels, bidirectional = params["quantization"], params["bidirectional"]
    fan_in = params["max_fan_in"]
    limit = options.limit()
    search_limit = limit - min(ROUTE_RESERVE, 0.05 * limit)
    bound_deadline = started + search_limit
    ina = ina_switches(network)
    separate_bound = variant.sro or variant.app
    if separate_bound:
        search_limit *= 1 - BOUND_SHARE
    settings = SolverSettings(
        deadline=started + search_limit,
        num_workers=params["num_workers"],
        seed=options.seed or 0,
        mu=params["mu"],
    )
    full = {i: set(ina) for i in range(len(network.tasks))}
    keep = full
    details: dict = {"quantization": levels, "bidirectional": bidirectional, "stages": []}
    if variant.app:
        alpha = params["alpha"]
        keep = accel.app_select(network, alpha, ina)
        details["app_aggregators"] = {network.tasks[i].name: sorted(s) for i, s in keep.items()}

    dropped: dict[int, set[Edge]] = {}
    stage1: Result | None = None
    if variant.sro:
        graphs = _graphs(network, keep, fan_in, excluded=accel.sro_excluded(network))
        if any(tg.unreachable for tg in graphs):
            details["stages"].append("sro stage 1 skipped: workers need INA-agnostic switches")
        else:
            first = settings.until(started + search_limit / 2)
            stage1 = _search(
                network,
                graphs,
                levels,
                variant,
                bidirectional,
                first,
                [],
                options,
                details,
                refine=False,
            )[-1]
            # INPs idle in the stage-1 plan and in every task's own stage-1 routes.
            dropped = accel.idle_inp_links(graphs, {**stage1.solo_flows, **stage1.flows})
            details["stages"].append(_stage_summary("sro stage 1", stage1, started))

    graphs = _graphs(network, keep, fan_in, dropped=dropped)
    missing = [w for tg in graphs for w in tg.unreachable]
    if missing:
        raise AroInputError(f"workers without a shortest path to their PS: {missing}")
    extra = [f for f in (stage1.flows, stage1.solo_flows) if f] if stage1 is not None else []
    results = _search(
        network,
        graphs,
        levels,
        variant,
        bidirectional,
        settings,
        extra,
        options,
        details,
        floor=stage1.rates if stage1 is not None else None,
    )
    details["stages"].append(_stage_summary("final", results[-1], started))
    # The routes' exact (filled) rates can rank the bisection's solution above the refined one.
    plans = [
        _plan(network, scheme, graphs, r, bidirectional, settings, dict(details), options, started)
        for r in results
    ]
    best = max(plans, key=lambda p: p.objective)
    bounds = [r.bound for r in results if r.bound is not None]
    bound = min(bounds) if bounds else None
    if separate_bound and _restricted(network, graphs, full, fan_in):
        # The smaller model's bound says nothing about the full problem.
        rest = SolverSettings(bound_deadline, settings.num_workers, settings.seed, settings.mu)
        bound = _full_bound(
            network, best, levels, variant, bidirectional, rest, best.details, fan_in
        )
    best.bound = None if bound is None else max(bound, best.objective)
    best.status = _status(best, results[-1].finished)
    best.solve_seconds = time.perf_counter() - started
    return best


def _status(plan: Plan, finished: bool) -> Status:
    """`optimal` only when the real problem's bound is reached."""
    if plan.bound is not None and plan.objective >= plan.bound * (1 - REL) - 1e-12:
        return "optimal"
    return "feasible" if finished else "timeout"


def _restricted(
    network: Network, graphs: list[TaskGraph], full: dict[int, set[str]], fan_in: int
) -> bool:
    """Whether SRO/APP left out a route or an aggregator of the full model."""
    whole = _graphs(network, full, fan_in)
    return any(set(a.edges) != set(b.edges) for a, b in zip(graphs, whole, strict=True))


def _full_bound(
    network: Network,
    plan: Plan,
    levels: int,
    variant: Variant,
    bidirectional: bool,
    settings: SolverSettings,
    details: dict,
    fan_in: int,
) -> float:
    """A bound on the full problem: each task's own optimum on the full graphs caps its rate.

    The plan's routes (replayed on the full graphs) and the greedy ones start each task's
    search; a task whose search runs out of time keeps its unrefuted rate as its cap.
    """
    graphs = _graphs(
        network, {i: set(ina_switches(network)) for i in range(len(network.tasks))}, fan_in
    )
    search = _new_search(network, graphs, levels, variant, bidirectional, settings)
    replayed: dict[tuple[int, Edge], int] = {}
    for tg, tp in zip(graphs, plan.tasks, strict=True):
        flows = replay(tg, tp.paths)
        replayed.update({(tg.index, e): n for e, n in (flows or {}).items()})
    started = time.perf_counter()
    search.solo_optima([greedy_flows(graphs), replayed], max(0.0, settings.left()))
    bound = search.upper(None)
    details["full_bound"] = {
        "bound_gbps": bound,
        "seconds": time.perf_counter() - started,
        "log": search.log,
    }
    return bound


def _new_search(
    network: Network,
    graphs: list[TaskGraph],
    levels: int,
    variant: Variant,
    bidirectional: bool,
    settings: SolverSettings,
) -> Search:
    res = resources(network, graphs, bidirectional)
    top = bbar(graphs, network) if variant.qsr else rate_ceiling(graphs, network)
    # A ceiling of 0 (a PS that aggregates nothing) leaves every rate 0: any grid serves.
    scale = Scale(levels, top or 1.0)
    quantize(res, scale)
    jobs = {i: (t.job, t.beta) for i, t in enumerate(network.tasks)}
    ceiling = {tg.index: task_ceiling(tg, network) for tg in graphs}
    return Search(graphs, res, scale, jobs, settings, ceiling, grid_only=variant.qsr)


def _graphs(
    network: Network,
    keep: dict[int, set[str]],
    fan_in: int,
    excluded: set[str] | None = None,
    dropped: dict[int, set[Edge]] | None = None,
) -> list[TaskGraph]:
    return [
        build_task_graph(network, i, t, keep[i], excluded or (), (dropped or {}).get(i, ()), fan_in)
        for i, t in enumerate(network.tasks)
    ]


def _search(
    network: Network,
    graphs: list[TaskGraph],
    levels: int,
    variant: Variant,
    bidirectional: bool,
    settings: SolverSettings,
    extra: list,
    options: SolveOptions,
    details: dict,
    floor: dict[int, float] | None = None,
    refine: bool = True,
) -> list[Result]:
    """The bisection's result, then (several tasks) the refined one with the better bound.

    Several tasks first get their own optima alone (the per-task caps, an upper bound); when
    their routes can be joined at those rates the result is optimal without any joint search.
    SRO stage 1 skips the refinement: it only has to show which INPs are used and give the
    rates' lower bound, and the final stage needs the time.
    """
    search = _new_search(network, graphs, levels, variant, bidirectional, settings)
    details["rate_grid"] = (
        f"quantized as in the paper (QSR, Eq. 11): every rate is a multiple of "
        f"{search.scale.gbps(1):g} Gbps ({search.scale.describe()}); status and bound refer "
        f"to the unquantized problem"
        if variant.qsr
        else f"exact common rates (capacity / flow count); several tasks' rates on a grid of "
        f"{search.scale.describe()}, its loss counted in the bound"
    )
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
            settled = first.bound is not None and first.bound <= first.objective * (1 + REL)
            results = [first] if settled or not refine else [first, search.refine(first, floor)]
        results[-1].solo_flows = union
    results[-1].log[:0] = [
        f"{search.scale.describe()} cands={len(search.candidates())}",
        *search.log,
    ]
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
        "stage": name,
        "objective_gbps": result.objective,
        "bound_gbps": result.bound,
        "finished": result.finished,
        "at_seconds": round(time.perf_counter() - started, 3),
        "log": result.log,
    }


def _plan(
    network: Network,
    scheme: str,
    graphs: list[TaskGraph],
    result: Result,
    bidirectional: bool,
    settings: SolverSettings,
    details: dict,
    options: SolveOptions,
    started: float,
) -> Plan:
    tasks = []
    for tg in graphs:
        flows = {e: n for (i, e), n in result.flows.items() if i == tg.index}
        paths, points = generate(tg, flows)
        tasks.append(
            TaskPlan(tg.task.job, tg.task.name, tg.task.ps, result.rates[tg.index], paths, points)
        )
    plan = Plan(
        scheme,
        "feasible",
        0.0,
        None,
        0.0,
        options.seed,
        tasks,
        topology=network.name,
        details=details,
    )
    _fill_rates(network, plan, bidirectional)
    plan.objective = weighted_objective(network, plan, settings.mu)
    details["model_objective_gbps"] = result.objective
    details["model_bound_gbps"] = result.bound
    details["model_rates_gbps"] = {network.tasks[i].name: v for i, v in result.rates.items()}
    plan.solve_seconds = time.perf_counter() - started
    return plan


def _fill_rates(network: Network, plan: Plan, bidirectional: bool) -> None:
    """Raise the model's rates by progressive filling on the routes, on the evaluator's own
    resources (links, aggregators, a PS's aggregation capacity, a task's rate cap).

    With `bidirectional` each link also carries the reversed multicast of its reverse
    direction, which the evaluator does not model, so it will find at least these rates.
    """
    plans = {f"{tp.job}/{tp.task}": tp for tp in plan.tasks}
    flows = {label: task_flows(network, tp) for label, tp in plans.items()}
    demand, capacity = evaluator_resources(network, plans, flows)
    if bidirectional:
        for label, tf in flows.items():
            for (u, v), n in tf.link_flows.items():
                key = ("link", *network.link_key(v, u))
                demand[label][key] = demand[label].get(key, 0) + n
                capacity[key] = network.capacity(v, u)
    claimed = {label: tp.rate_gbps for label, tp in plans.items()}
    rates = max_min_fair(
        demand, capacity, start=claimed if _fits(demand, capacity, claimed) else None
    )
    for label, tp in plans.items():
        tp.rate_gbps = rates[label]


def _fits(
    demand: dict[str, dict[EvalResource, float]],
    capacity: dict[EvalResource, float],
    rates: dict[str, float],
) -> bool:
    load: dict[EvalResource, float] = {}
    for label, uses in demand.items():
        for key, n in uses.items():
            load[key] = load.get(key, 0.0) + n * rates[label]
    return all(load[key] <= capacity[key] * (1 + 1e-9) + 1e-12 for key in load)
