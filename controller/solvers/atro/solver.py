"""The scheme `atro`: choose the network and the routing, return a Plan that carries both.

`status` and `bound` are about the real problem (real r, the paper's model (2)-(21) plus the
data-plane fan-in limit unless `max_fan_in=0`): `optimal` when the bisection closed, else
`feasible` (or `timeout` without any network) with the last rate not refuted as bound. A pool
that no network can serve at any rate is an input error naming what to change.
"""

from __future__ import annotations

import time

from controller.network import Network
from controller.plan import Plan, TaskPlan
from controller.solvers import SchemeInputError, SolveOptions
from controller.solvers.atro import routes, search
from controller.solvers.atro.instance import PARAMS, Instance, read
from controller.solvers.params import SchemeParams

DEFAULT_TIME_LIMIT = 60.0
SYMMETRY = ("none", "switches", "all")  # measured in the package docstring


def solve_atro(network: Network, options: SolveOptions) -> Plan:
    started = time.perf_counter()
    inst = read(network, options.params)
    checked = SchemeParams("atro", options.params, PARAMS)
    workers = checked.integer("num_workers", 2, minimum=1, maximum=64)
    symmetry = checked.choice("symmetry", "none", SYMMETRY)
    limit = options.time_limit if options.time_limit is not None else DEFAULT_TIME_LIMIT
    out = search.maximise(inst, started + limit, workers=workers, seed=options.seed or 0,
                          symmetry=symmetry)
    details = {"layers": inst.layers, "max_fan_in": inst.max_fan_in, "symmetry": symmetry,
               "candidate_rates": len(search.candidates(inst)), "probes": out.log}
    if out.solution is None:
        if out.finished:
            raise SchemeInputError(_why_infeasible(inst, network))
        return Plan("atro", "timeout", 0.0, out.bound, time.perf_counter() - started,
                    options.seed, [], topology=network.name, details=details)
    paths, points = routes.paths(inst, out.solution)
    task = inst.task
    plan = Plan("atro", "optimal" if out.finished else "feasible", out.rate, out.bound, 0.0,
                options.seed, [TaskPlan(task.job, task.name, task.ps, out.rate, paths, points)],
                topology=network.name, details=details,
                patch_panel=routes.patch_panel(inst, out.solution))
    details["switches_used"] = sorted({c["a"] for c in plan.patch_panel}
                                      | {c["b"] for c in plan.patch_panel if c["b_port"]})
    plan.solve_seconds = time.perf_counter() - started
    return plan


def _why_infeasible(inst: Instance, network: Network) -> str:
    return (f"atro: no network of the pool {network.source} connects all {len(inst.workers)} "
            f"workers to the PS at any rate; check the switches' max_ports (Σ η_u = "
            f"{sum(inst.ports.values())} for {len(inst.hosts())} hosts), the candidate links, "
            f"the layer limit (layers={inst.layers}, --param layers=N up to "
            f"{len(inst.switches)}) and the fan-in limit (max_fan_in={inst.max_fan_in or 0}, "
            f"0 = unlimited)")
