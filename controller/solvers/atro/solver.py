"""The scheme `atro`: choose the network and the routing, return a Plan that carries both.

`status` and `bound` are about the real problem (real rates, the paper's model (2)-(21) plus
the data-plane fan-in limit unless `max_fan_in=0`). One task: `optimal` when the bisection
closed, else `feasible` (or `timeout` without any network) with the last rate not refuted as
bound. A pool that no network can serve at any rate is an input error naming what to change.

Several tasks (the paper's future work, Sec. V), as ARO's MJMT: first the largest common rate
of all tasks (max-min, a bisection as for one task, exact), then each task in turn raised alone
with the others kept (greedy, for the sum). The objective is ARO's (Eq. 2 for one job, Eq. 3
for several, `common.weighted_objective`); its bound takes the max-min bisection's bound for
the min term and, for the sum, each task's own optimum on the pool alone (the other tasks only
take ports and capacity) except for one task, which the max-min bound caps (`_bound`).

`formulation` (measured in README.md and BENCHMARKS.md): `aggregated` (default) asks the
relaxation with every common switch merged (`relaxed`) before each probe and keeps its
refutations, then solves the exact model with interchangeable workers counted per switch
(`model.worker_classes`); `classes` skips the relaxation; `workers` is the paper's model, one
x per worker and switch. All three are exact: the same optimum and valid bounds.
"""

from __future__ import annotations

import time
from fractions import Fraction

from controller.evaluator.evaluate import evaluate
from controller.model.network import Network
from controller.model.plan import Plan, TaskPlan
from controller.solvers import SchemeInputError, SolveOptions
from controller.solvers.atro import routes, search
from controller.solvers.atro.instance import Instance, read
from controller.solvers.common import weighted_objective
from controller.solvers.params import SchemeParams

SOLO_SHARE = 0.3  # of the time, for the tasks' own optima (several tasks)
MAXMIN_SHARE = 0.5  # of what is left then, for the common rate
MU = 0.001  # ARO's μ of Eq. (3), `common.weighted_objective`'s default


def solve_atro(network: Network, options: SolveOptions) -> Plan:
    started = time.perf_counter()
    inst = read(network, options.params)
    params = SchemeParams("atro", options.params)
    settings = {
        "workers": params["num_workers"],
        "seed": options.seed or 0,
        "symmetry": params["symmetry"],
        "formulation": params["formulation"],
    }
    limit = options.limit()
    deadline = started + limit
    details: dict = {
        "layers": inst.layers,
        "max_fan_in": inst.max_fan_in,
        "symmetry": settings["symmetry"],
        "formulation": settings["formulation"],
    }
    every = list(range(len(inst.tasks)))
    solo: dict[int, Fraction] = {}
    if len(every) > 1:
        end = started + SOLO_SHARE * limit
        for i in every:
            share = (end - time.perf_counter()) / (len(every) - i)
            alone = search.maximise(inst, [i], time.perf_counter() + share, **settings)
            solo[i] = alone.bound
            details.setdefault("solo", {})[f"{inst.tasks[i].job}/{inst.tasks[i].name}"] = {
                "rate_gbps": float(alone.rate),
                "bound_gbps": float(alone.bound),
            }
        maxmin_end = time.perf_counter() + MAXMIN_SHARE * (deadline - time.perf_counter())
    else:
        maxmin_end = deadline
    out = search.maximise(inst, every, maxmin_end, **settings, top=min(solo.values(), default=None))
    if out.solution is None and not out.finished and maxmin_end < deadline:
        # No network yet: the rest of the time too, below the bound proven so far.
        more = search.maximise(inst, every, deadline, **settings, top=out.bound)
        out = search.Outcome(
            more.solution, more.rate, min(out.bound, more.bound), more.finished, out.log + more.log
        )
    details["probes"] = out.log
    if out.solution is None:
        if out.finished:
            raise SchemeInputError(_why_infeasible(inst, network))
        return Plan(
            "atro",
            "timeout",
            0.0,
            _bound(network, inst, out.bound, solo),
            time.perf_counter() - started,
            options.seed,
            [],
            topology=network.name,
            details=details,
        )
    rates = dict.fromkeys(every, out.rate)
    sol, finished = out.solution, out.finished
    if len(every) > 1:
        sol, finished = _raise_each(inst, rates, sol, solo, deadline, settings, details, finished)
    plan = _plan(network, inst, sol, rates, details, options)
    _fill_rates(network, plan)
    plan.bound = max(_bound(network, inst, out.bound, solo), plan.objective)
    proven = plan.objective >= plan.bound * (1 - 1e-9)
    plan.status = "optimal" if proven else ("feasible" if finished else "timeout")
    plan.solve_seconds = time.perf_counter() - started
    return plan


def _raise_each(
    inst: Instance,
    rates: dict[int, Fraction],
    sol,
    solo: dict[int, Fraction],
    deadline: float,
    settings: dict,
    details: dict,
    finished: bool,
):
    """The sum part: each task in turn at the highest rate that fits with the others kept."""
    for k, j in enumerate(rates):
        share = (deadline - time.perf_counter()) / (len(rates) - k)
        others = {i: r for i, r in rates.items() if i != j}
        up = search.maximise(
            inst,
            [j],
            time.perf_counter() + share,
            **settings,
            fixed=others,
            above=rates[j],
            hint=sol,
            top=solo[j],
        )
        details.setdefault("raised", []).append(
            {
                "task": f"{inst.tasks[j].job}/{inst.tasks[j].name}",
                "rate_gbps": float(up.rate),
                "probes": up.log,
            }
        )
        finished = finished and up.finished
        if up.solution is not None:
            rates[j], sol = up.rate, up.solution
    return sol, finished


def _plan(
    network: Network,
    inst: Instance,
    sol,
    rates: dict[int, Fraction],
    details: dict,
    options: SolveOptions,
) -> Plan:
    tasks = []
    for i, t in enumerate(inst.tasks):
        paths, points = routes.paths(inst, sol, i)
        tasks.append(TaskPlan(t.job, t.name, t.ps, float(rates[i]), paths, points))
    panel = routes.patch_panel(inst, sol)
    plan = Plan(
        "atro",
        "feasible",
        0.0,
        None,
        0.0,
        options.seed,
        tasks,
        topology=network.name,
        details=details,
        patch_panel=panel,
    )
    plan.objective = weighted_objective(network, plan, MU)
    details["switches_used"] = sorted(
        {c["a"] for c in panel} | {c["b"] for c in panel if c["b_port"]}
    )
    return plan


def _fill_rates(network: Network, plan: Plan) -> None:
    """Each task at what its routes carry (max-min fair filling on the network the patch
    panel builds, the evaluator's): raising one task with the others fixed tries only
    capacity / flow count, and misses rates set by what the others leave, (2 - 0.5) / 2."""
    result = evaluate(network, plan)
    if not result.consistent:
        return
    for tp, te in zip(plan.tasks, result.tasks, strict=True):
        tp.rate_gbps = max(tp.rate_gbps, te.rate_gbps)
    plan.objective = weighted_objective(network, plan, MU)


def _bound(network: Network, inst: Instance, maxmin: Fraction, solo: dict[int, Fraction]) -> float:
    """Eq. (1)-(3)'s bound: `maxmin` bounds the slowest task's rate (one task: its rate),
    `solo` each task's own rate. The sum takes both: some task runs at most `maxmin`, the
    others at most their own optima, so Σ r ≤ maxmin + Σ solo − min solo."""
    if len(inst.tasks) == 1:
        return float(maxmin)
    total = min(maxmin, min(solo.values())) + sum(solo.values()) - min(solo.values())
    if len({t.job for t in inst.tasks}) == 1:
        return float(total)  # Eq. (2)
    beta = inst.tasks[0].beta  # one task per job, one beta (`instance.read`)
    return float(beta * maxmin + MU * beta * total)  # Eq. (3)


def _why_infeasible(inst: Instance, network: Network) -> str:
    zero = [inst.tasks[i].name for i in range(len(inst.tasks)) if search.ceiling(inst, i) == 0]
    if zero:
        return (
            f"atro: in {network.source}, task(s) {', '.join(zero)} can send nothing: a "
            f"zero rate cap, PS aggregation capacity or link leaves every rate 0, and "
            f"ATRO builds a network only for a positive rate"
        )
    return (
        f"atro: no network of the pool {network.source} connects all "
        f"{len(inst.senders())} workers to their PS at any rate; check the switches' "
        f"max_ports (Σ η_u = {sum(inst.ports.values())} for {len(inst.hosts())} hosts), the "
        f"candidate links, the layer limit (layers={inst.layers}, --param layers=N up to "
        f"{len(inst.switches)}) and the fan-in limit (max_fan_in={inst.max_fan_in or 0}, "
        f"0 = unlimited)"
    )
