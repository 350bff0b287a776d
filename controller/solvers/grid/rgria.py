"""The scheme `grid`: R-GRIA (Alg. 1) on both LP variants, the evaluator keeping the best draw.

Our numbers are our own, not those of the GRID authors' public routing code, which gives the
same LP value as ours on every instance tried but (1) rounds by x̃_n^s where Alg. 1 line 6
draws by r̃_n^s, and (2) reports the rates R-GRIA claims (lines 8-12: λ = λ̃, Theorem 7) without
re-scoring them, although a draw may overload a switch or the PS; ours are what the evaluator
finds the drawn routes carry (capped at T). The package docstring has the model and our readings.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import replace
from fractions import Fraction

from controller.evaluator.evaluate import evaluate
from controller.model.network import Network
from controller.model.plan import Plan
from controller.solvers import SolveOptions
from controller.solvers.baselines.inatree import PathCache, rng_for
from controller.solvers.common import weighted_objective
from controller.solvers.grid import lp
from controller.solvers.grid.model import PS, GridTask, build, value
from controller.solvers.grid.routes import least_loaded_routes, merges
from controller.solvers.params import SchemeParams

VARIANTS = {True: "with link rows", False: "without link rows"}


def solve(network: Network, options: SolveOptions) -> Plan:
    started = time.perf_counter()
    params = SchemeParams("grid", options.params)
    draws = params["draws"]
    variants = [True, False] if params["links"] is None else [params["links"]]
    paths = PathCache(network)
    best: Plan | None = None
    outcome = {}
    for links in variants:  # each from the seed afresh: exactly the single-variant run
        plan = run_variant(
            network, params, links, draws, rng_for(options.seed), paths, options.time_limit
        )
        plan.seed = options.seed
        outcome[VARIANTS[links]] = plan.objective
        if best is None or plan.objective > best.objective + 1e-9:
            best = plan
    assert best is not None
    best.details["variants"] = outcome
    best.solve_seconds = time.perf_counter() - started
    return best


def run_variant(
    network: Network,
    params: SchemeParams,
    links: bool,
    draws: int,
    rng: random.Random,
    paths: PathCache,
    time_limit: float | None,
) -> Plan:
    """Alg. 1 on one LP variant, `draws` times; the draw the evaluator scores best.

    Where T is below B_α, Alg. 1 also runs on the LP at T = B_α (the paper's T), its rates
    capped at T, and the better plan is kept. An assignment's value at T is min(T, its value
    at B_α) (model.py), but an LP whose optimum λ̃ is T has slack, which its least-traffic
    optimum (lp.py) packs up to capacity, and the draws overload what it packed (GRID Fig. 1
    at T = 2: S1 at 9 of its 9 Gbps, part of it W5's; seeds 0-29, 16 draws: 1.8 Gbps at best
    from the LP at T, 2 from that at B_α). With T below every task's B_α, the draws at B_α
    are, number for number, those of a run at T = B_α: a lower T never gives less than that
    run's plan capped at T."""
    insts = {t.key: build(network, t, params, paths, rng if links else None) for t in network.tasks}
    relaxed = {k: lp.solve(network, inst, links, time_limit) for k, inst in insts.items()}
    at_b_ps = {
        k: lp.solve(network, replace(inst, big_t=inst.b_ps), links, time_limit)
        for k, inst in insts.items()
        if inst.big_t < inst.b_ps
    }
    routed = rng.getstate()  # after the routes: where a run at T = B_α starts its draws
    best, chosen = best_draw(network, insts, relaxed, draws, rng, paths)
    best.details["drawn_from"] = "LP at T"
    if at_b_ps:
        rng.setstate(routed)
        plan, assignment = best_draw(network, insts, relaxed | at_b_ps, draws, rng, paths)
        if plan.objective > best.objective + 1e-9:
            best, chosen = plan, assignment
            best.details["drawn_from"] = "LP at T = B_α, rates capped at T"
    best.details.update(
        {
            "variant": VARIANTS[links],
            "lp_value_gbps": {"/".join(k): r.value for k, r in relaxed.items()},
            "lp_status": {"/".join(k): r.status for k, r in relaxed.items()},
            # The chosen assignment scored in GRID's own problem (1) (no link rows), for comparing
            # R-GRIA with `grid-opt`'s optimum of the same problem.
            "model_value_gbps": {
                "/".join(k): float(value(insts[k], chosen[k], False)) for k in insts
            },
            "draws": draws,
            "links_in_lp": links,
            "candidates": params["candidates"],
            "max_rate_gbps": {"/".join(k): float(inst.big_t) for k, inst in insts.items()},
            "merged_at": {tp.job + "/" + tp.task: merges(network, tp) for tp in best.tasks},
        }
    )
    return best


def best_draw(
    network: Network,
    insts: dict[tuple[str, str], GridTask],
    relaxed: dict[tuple[str, str], lp.Relaxed],
    draws: int,
    rng: random.Random,
    paths: PathCache,
) -> tuple[Plan, dict[tuple[str, str], dict[str, str]]]:
    """Alg. 1 lines 5-12 `draws` times from the relaxed solutions, rates capped at each task's
    T: the plan the evaluator scores best, and its assignment."""
    best: Plan | None = None
    chosen: dict[tuple[str, str], dict[str, str]] = {}
    for draw in range(draws):
        assignment = {k: rounding(relaxed[k], rng, insts[k].fan_in) for k in insts}
        tasks = [
            least_loaded_routes(network, t, assignment[t.key], rng, paths) for t in network.tasks
        ]
        plan = Plan("grid", "heuristic", 0.0, None, 0.0, None, tasks, topology=network.name)
        rate_plan(network, plan, insts)
        plan.details = {
            "draw": draw,
            "assignment": {
                "/".join(k): {n: ("PS" if s == PS else s) for n, s in sorted(a.items())}
                for k, a in assignment.items()
            },
        }
        if best is None or plan.objective > best.objective + 1e-9:
            best, chosen = plan, assignment
    assert best is not None
    return best, chosen


def rate_plan(network: Network, plan: Plan, insts: dict[tuple[str, str], GridTask]) -> None:
    """The evaluator's rates, capped at T: workers never send faster than GRID's maximum
    sending rate (with T = B_α, the default, the cap never binds: a task's flows into the PS
    share its ingress)."""
    result = evaluate(network, plan)
    for tp, te in zip(plan.tasks, result.tasks, strict=True):
        tp.rate_gbps = min(te.rate_gbps, float(insts[tp.key].big_t))
    plan.link_loads = result.link_loads
    plan.objective = weighted_objective(network, plan)


def rounding(relaxed: lp.Relaxed, rng: random.Random, fan_in: int = 0) -> dict[str, str]:
    """Alg. 1 lines 5-7: one aggregation node per worker, drawn proportionally to r̃_n^s.

    With the fan-in limit L (0: none), a switch that has L workers is full: each later worker
    draws among the nodes left, by the same r̃_n^s (the PS is never full). Where no switch
    fills, the draws are Alg. 1's, number for number (one random number per worker either
    way); the cap only redirects the overflow the rounding would add to a switch whose LP
    share Σ_n x̃_n^s is already at most L (lp.py)."""
    choice, taken = {}, Counter[str]()
    for n in sorted(relaxed.rates):
        nodes = [s for s in sorted(relaxed.rates[n]) if s == PS or not fan_in or taken[s] < fan_in]
        weights = [relaxed.rates[n][s] for s in nodes]
        choice[n] = rng.choices(nodes, weights)[0] if sum(weights) > 0 else PS
        taken[choice[n]] += 1
    return choice


def best_model_draw(
    inst: GridTask, relaxed: lp.Relaxed, links: bool, draws: int, rng: random.Random
) -> tuple[dict[str, str], Fraction]:
    """R-GRIA's draws scored in the model (1) itself, no routing: `grid-opt`'s warm start."""
    found = []
    for _ in range(draws):
        assign = rounding(relaxed, rng, inst.fan_in)
        found.append((value(inst, assign, links), assign))
    score, assign = max(found, key=lambda f: f[0])
    return assign, score
