"""The scheme `grid-opt`: GRID's problem (1) solved exactly, per task, warm-started by R-GRIA.

What `optimal` and `bound` refer to (README, "What `optimal` ... guarantee"): GRID's problem
(1) for each task on its own (the paper: the PSs' partitions are independent) with its rate
model: one aggregation node per worker (a candidate INA switch or the PS), a common rate
λ ≤ T, Σ_n r_n^s ≤ C_s, B_α shared by the raw flows into the PS and one merged flow per used
switch, at most `max_fan_in` workers per switch (0: none), and with `links=true` (default)
one capacity row per directed link, every flow on the
one shortest route drawn with the seed (worker→node, node→PS; the plan then uses exactly those
routes). Routes are not chosen: (1) has none. Per task, `details.model_value_gbps` is the
plan's λ in that problem and `details.model_bound_gbps` the proven bound on it.

The plan is re-scored by the evaluator like every scheme's (`objective` = what its routes
carry, capped at T). With link rows, one task and one pipeline per switch the routes carry
exactly λ; otherwise the network may carry less (the model left links or other tasks out) or
more (it may route around the fixed routes better). So `bound` is the weighted objective of
the per-task bounds (raised to `objective` where the routes beat the model) and `status` is
`optimal` only when every task's λ is proven and the routes carry it; `timeout` when CP-SAT
ran out of time before proving λ (the gap says how far), else `feasible`.

Warm start: R-GRIA's best of `draws` draws scored in the model CP-SAT solves; with `links`
from both LP variants (the one with link rows matches the model), `details.warm_start_lp`
says which drew it and `details.warm_start_gbps` its λ; CP-SAT only improves on it.

Parameters: those of `grid` (`links`, `candidates`, `draws` for the warm start,
`max_rate_gbps`) and `num_workers`, CP-SAT's threads (default 1: our machines are shared and
a single thread is deterministic); the time limit defaults to 60 s, shared by the tasks.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import replace
from fractions import Fraction

from controller.model.network import Network
from controller.model.plan import Plan
from controller.solvers import SolveOptions, progress
from controller.solvers.baselines.inatree import PathCache, rng_for
from controller.solvers.common import weighted_objective
from controller.solvers.grid import exact, lp
from controller.solvers.grid.model import PS, GridTask, build
from controller.solvers.grid.rgria import VARIANTS, best_model_draw, rate_plan
from controller.solvers.grid.routes import fixed_routes, least_loaded_routes, merges
from controller.solvers.params import SchemeParams

WARM_SHARE = 0.25  # of a task's time for R-GRIA's LP (GLOP took 24 s of 60 at 300 workers)


def solve(network: Network, options: SolveOptions) -> Plan:
    started = time.perf_counter()
    # GRID's model, so a topology's `schemes.grid` (T, links, candidates) applies here too.
    given = {**network.schemes.get("grid", {}), **options.params}
    params = SchemeParams("grid-opt", given)
    links, draws, workers = params["links"], params["draws"], params["num_workers"]
    limit = options.limit()
    paths, rng = PathCache(network), rng_for(options.seed)
    # Routes only where the model charges them; without link rows the plan routes least-loaded.
    insts = {t.key: build(network, t, params, paths, rng if links else None) for t in network.tasks}
    outcomes, warm, warm_lp = {}, {}, {}
    seconds = {"instance": time.perf_counter() - started, "lp": 0.0, "cp_sat": 0.0}
    for i, (key, inst) in enumerate(insts.items()):
        began = time.perf_counter()
        _reporter(key, len(insts))(None, inst.big_t)  # λ ≤ T before any probe
        share = (started + limit - began) / (len(insts) - i)
        # at most a quarter of the task's time: the warm start only saves probes
        hint, warm[key], warm_lp[key] = _warm_start(
            network, inst, links, draws, rng, WARM_SHARE * share
        )
        seconds["lp"] += time.perf_counter() - began
        share = (started + limit - time.perf_counter()) / (len(insts) - i)
        outcomes[key] = exact.solve(
            inst,
            links,
            hint,
            time.perf_counter() + share,
            workers,
            options.seed or 0,
            _reporter(key, len(insts)),
        )
        seconds["cp_sat"] += sum(p[2] for p in outcomes[key].probes)
    began = time.perf_counter()
    plan = _best_routing(network, insts, outcomes, options, links, paths)
    seconds["plan"] = time.perf_counter() - began
    bound = weighted_objective(
        network, _with_rates(plan, {k: _up(o.bound) for k, o in outcomes.items()})
    )
    plan.bound = max(bound, plan.objective)
    proven = all(o.proven for o in outcomes.values())
    plan.status = (
        ("optimal" if plan.objective >= bound * (1 - 1e-9) else "feasible") if proven else "timeout"
    )
    label = {k: "/".join(k) for k in insts}
    plan.details.update(
        {
            "links_in_model": links,
            "model_value_gbps": {label[k]: float(o.value) for k, o in outcomes.items()},
            "model_bound_gbps": {label[k]: _up(o.bound) for k, o in outcomes.items()},
            "model_status": {
                label[k]: "optimal" if o.proven else "bound" for k, o in outcomes.items()
            },
            "warm_start_gbps": {label[k]: None if v is None else float(v) for k, v in warm.items()},
            "warm_start_lp": {label[k]: v for k, v in warm_lp.items()},
            "probes": {label[k]: o.probes for k, o in outcomes.items()},
            "seconds": seconds,  # instance (routes), R-GRIA warm start, CP-SAT probes, plan
            "max_rate_gbps": {label[k]: float(inst.big_t) for k, inst in insts.items()},
            "assignment": {
                label[k]: {n: ("PS" if s == PS else s) for n, s in sorted(o.assign.items())}
                for k, o in outcomes.items()
            },
            "merged_at": {tp.job + "/" + tp.task: merges(network, tp) for tp in plan.tasks},
        }
    )
    plan.solve_seconds = time.perf_counter() - started
    progress.report(plan.objective, plan.bound, "rate")
    return plan


def _warm_start(
    network: Network, inst: GridTask, links: bool, draws: int, rng: random.Random, seconds: float
) -> tuple[dict[str, str], Fraction | None, str | None]:
    """R-GRIA's best draw, scored in the model CP-SAT is given (with or without link rows):
    the draws of the paper's LP (no link rows, quick) and, when the model has link rows, of
    the LP with them too (GLOP took 13 s of a 100-worker fat-tree's time; it gets what the
    first left): its draws respect the links the model charges (GRID Fig. 1: 3 Gbps where
    the paper's LP's draws reach 1.5). The assignment, its value, and which LP drew it; every
    worker at the PS (value None) when no LP finished in time."""
    deadline = time.perf_counter() + seconds
    best: tuple[dict[str, str], Fraction | None, str | None] = (
        dict.fromkeys(inst.task.workers, PS),
        None,
        None,
    )
    for lp_links in (False, True) if links else (False,):
        left = deadline - time.perf_counter()
        if left <= 0:
            break
        try:
            relaxed = lp.solve(network, inst, lp_links, left)
        except lp.GridInfeasible:  # GLOP out of time
            continue
        assign, score = best_model_draw(inst, relaxed, links, draws, rng)
        if best[1] is None or score > best[1]:
            best = (assign, score, VARIANTS[lp_links])
    return best


def _best_routing(
    network: Network, insts, outcomes, options: SolveOptions, links: bool, paths: PathCache
) -> Plan:
    """The model's own routes, or least-loaded ones if the evaluator finds those carry more."""
    best = None
    for routing in ("fixed", "least-loaded") if links else ("least-loaded",):
        rng = rng_for(options.seed)
        tasks = [
            fixed_routes(network, insts[t.key], outcomes[t.key].assign)
            if routing == "fixed"
            else least_loaded_routes(network, t, outcomes[t.key].assign, rng, paths)
            for t in network.tasks
        ]
        plan = Plan(
            "grid-opt",
            "feasible",
            0.0,
            None,
            0.0,
            options.seed,
            tasks,
            topology=network.name,
            details={"routing": routing},
        )
        rate_plan(network, plan, insts)
        if best is None or plan.objective > best.objective + 1e-9:
            best = plan
    assert best is not None  # the loop runs at least once
    return best


def _reporter(key: tuple[str, str], tasks: int):
    """Progress (`ina solve --progress`): the task's λ in (1) and the bound proven on it;
    the plan's rate, which the evaluator scores on the routes, comes last."""
    what = "model rate" if tasks == 1 else f"model rate of {'/'.join(key)}"
    return lambda best, bound: progress.report(
        None if best is None else float(best), _up(bound), what
    )


def _up(value: Fraction) -> float:
    """The float at or above an exact bound, so rounding never makes a bound claim less."""
    near = float(value)
    return near if near >= value else math.nextafter(near, math.inf)


def _with_rates(plan: Plan, rates: dict) -> Plan:
    """A copy of the plan's task list carrying `rates`, for weighing the per-task bounds."""
    return replace(plan, tasks=[replace(tp, rate_gbps=rates[tp.key]) for tp in plan.tasks])
