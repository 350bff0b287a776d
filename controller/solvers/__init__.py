"""Scheme registry: `--scheme NAME` → the function that turns a Network into a Plan.

Schemes are imported lazily so that `ina --help` stays fast and a scheme with heavy
dependencies costs nothing until it is used.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from controller.network import Network
from controller.plan import Plan


@dataclass(frozen=True)
class SolveOptions:
    """What every scheme may be told; `params` carries scheme-specific settings."""

    time_limit: float | None = None
    seed: int | None = None
    warm_start: Plan | None = None
    params: dict[str, Any] = field(default_factory=dict)


Solver = Callable[[Network, SolveOptions], Plan]

# scheme name → "module:function"
_SCHEMES: dict[str, str] = {
    "shortest": "controller.solvers.shortest:solve",
    "grid": "controller.solvers.grid.rgria:solve",
    "grid-opt": "controller.solvers.grid.opt:solve",
    "atp": "controller.solvers.atp:solve_atp",
    "random": "controller.solvers.atp:solve_random",
    "switchml": "controller.solvers.atp:solve_switchml",
    "geryon": "controller.solvers.geryon:solve",
    "aro": "controller.solvers.aro.solver:solve_aro",
    "aro-acc": "controller.solvers.aro.solver:solve_acc",
    "aro-sro": "controller.solvers.aro.solver:solve_sro",
    "aro-app": "controller.solvers.aro.solver:solve_app",
    "aro-qsr": "controller.solvers.aro.solver:solve_qsr",
    "aro-raw": "controller.solvers.aro.solver:solve_raw",
    "aggtree": "controller.solvers.aggtree:solve",
    "rr": "controller.solvers.rr:solve",
    "deepsys": "controller.solvers.paring_baselines:solve_deepsys",
    "deepsys-atp": "controller.solvers.paring_baselines:solve_deepsys_atp",
    "deepsys-soar": "controller.solvers.paring_baselines:solve_deepsys_soar",
    "marina": "controller.solvers.paring_baselines:solve_marina",
    "panama": "controller.solvers.paring_baselines:solve_panama",
    "spar": "controller.solvers.spar:solve",
    "eina": "controller.solvers.eina.solver:solve_eina",
    "eina-iqcp": "controller.solvers.eina.solver:solve_iqcp",
    "paring": "controller.solvers.paring.solver:solve_paring",
    "paring-opt": "controller.solvers.paring.solver:solve_paring_opt",
    "atro": "controller.solvers.atro.solver:solve_atro",
    "eina-plus": "controller.solvers.eina_plus.solver:solve_plus",
    "eina-fast": "controller.solvers.eina_fast.solver:solve_fast",
}


def register(name: str, target: str) -> None:
    _SCHEMES[name] = target


def scheme_names() -> list[str]:
    return sorted(_SCHEMES)


class SchemeInputError(ValueError):
    """Input a scheme cannot use (unknown name, bad parameter, unroutable topology); the
    message names it and is shown as it is (the CLI exits 2)."""


class UnknownScheme(SchemeInputError):
    pass


def get_solver(name: str) -> Solver:
    if name not in _SCHEMES:
        raise UnknownScheme(f"unknown scheme {name!r}; choose one of: {', '.join(scheme_names())}")
    module, func = _SCHEMES[name].split(":")
    return getattr(importlib.import_module(module), func)


# Schemes whose models give each direction of a link its own capacity: on a link with
# `shared_capacity` they could claim rates the link cannot carry, so they refuse it.
PER_DIRECTION_ONLY = ("grid", "grid-opt", "eina", "eina-iqcp", "eina-plus", "eina-fast")


def _refuse_shared_capacity(network: Network, scheme: str) -> None:
    shared = sorted({tuple(sorted(e)) for e in network.graph.edges
                     if network.graph.edges[e].get("shared")})
    if scheme in PER_DIRECTION_ONLY and shared:
        (u, v), more = shared[0], len(shared) - 1
        raise SchemeInputError(
            f"{network.source}: scheme {scheme} gives each direction of a link its own "
            f"capacity, but the link {u}-{v}{f' (and {more} more)' if more else ''} has "
            f"`shared_capacity: true` (one capacity for both directions, e.g. a network "
            f"`ina solve --scheme atro --topology-out` wrote); use a scheme that shares it "
            f"(shortest, aro, atro) or give the link per-direction capacities "
            f"(`capacity_gbps`, `reverse_capacity_gbps`)")


def solve(network: Network, scheme: str, options: SolveOptions | None = None) -> Plan:
    options = options or SolveOptions()
    _refuse_shared_capacity(network, scheme)
    params = {**network.schemes.get(scheme, {}), **options.params}
    plan = get_solver(scheme)(network, SolveOptions(
        options.time_limit, options.seed, options.warm_start, params))
    if options.params:  # a re-plan (controller.daemon) solves again with the same settings
        plan.details.setdefault("params", dict(options.params))
    return plan
