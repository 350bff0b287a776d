"""Scheme registry: `--scheme NAME` → the function that turns a Network into a Plan.

The schemes, their parameters and defaults are defined once in `catalog`; `solve` checks a
scheme's parameters against it before the scheme runs. Schemes are imported lazily so that
`ina --help` stays fast and a scheme with heavy dependencies costs nothing until it is used.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from controller.model.network import Network
from controller.model.plan import Plan
from controller.solvers.catalog import SCHEMES, Scheme
from controller.solvers.params import SchemeParams


@dataclass(frozen=True)
class SolveOptions:
    """What every scheme may be told; `params` carries scheme-specific settings."""

    time_limit: float | None = None
    seed: int | None = None
    warm_start: Plan | None = None
    params: dict[str, Any] = field(default_factory=dict)

    def limit(self) -> float:
        """The time limit a scheme runs under: `solve` always sets one (None there: the
        scheme's default)."""
        if self.time_limit is None:
            raise ValueError("no time limit: call schemes through controller.solvers.solve")
        return self.time_limit


Solver = Callable[[Network, SolveOptions], Plan]


def scheme_names() -> list[str]:
    return sorted(SCHEMES)


class SchemeInputError(ValueError):
    """Input a scheme cannot use (unknown name, bad parameter, unroutable topology); the
    message names it and is shown as it is (the CLI exits 2)."""


class UnknownScheme(SchemeInputError):
    pass


def scheme(name: str) -> Scheme:
    if name not in SCHEMES:
        raise UnknownScheme(f"unknown scheme {name!r}; choose one of: {', '.join(scheme_names())}")
    return SCHEMES[name]


def get_solver(name: str) -> Solver:
    module, func = scheme(name).target.split(":")
    return getattr(importlib.import_module(module), func)


def check_params(name: str, params: Mapping[str, Any], section: str | None = None) -> None:
    """Every key a parameter of scheme `name`, every value of its type and range; `section`
    names where the values come from ("FILE, schemes.NAME"), else they are --param's."""

    def origin(key: str | None = None) -> str:
        if section is None:
            return "(from --param, or SolveOptions.params in Python)"
        return f"(from {section}{'' if key is None else '.' + key})"

    known = {p.name: p for p in scheme(name).params}
    unknown = sorted(set(params) - set(known))
    if unknown:
        reads = ", ".join(sorted(known)) or "no parameters"
        raise SchemeInputError(
            f"{name}: unknown parameter(s) {', '.join(unknown)} {origin()}; "
            f"it reads: {reads} (`ina schemes {name}` describes them)"
        )
    for key, value in params.items():
        if not known[key].accepts(value):
            raise SchemeInputError(
                f"{name}: parameter {key}={value!r} {origin(key)}: must be {known[key].wanted()}"
            )


def _check_sections(network: Network, name: str, given: Mapping[str, Any]) -> None:
    """The topology's `schemes:` sections (each against its own scheme) and --param."""
    for section, params in network.schemes.items():
        if section not in SCHEMES:
            raise SchemeInputError(
                f"{network.source}: schemes.{section}: there is no scheme {section!r}; "
                f"sections are named after schemes: {', '.join(scheme_names())}"
            )
        check_params(section, params, f"{network.source}, schemes.{section}")
    check_params(name, given)


# Schemes whose models give each direction of a link its own capacity: on a link with
# `shared_capacity` they could claim rates the link cannot carry, so they refuse it.
PER_DIRECTION_ONLY = ("grid", "grid-opt", "eina", "eina-iqcp", "eina-plus", "eina-fast")


def _refuse_shared_capacity(network: Network, scheme: str) -> None:
    shared = sorted(
        {tuple(sorted(e)) for e in network.graph.edges if network.graph.edges[e].get("shared")}
    )
    if scheme in PER_DIRECTION_ONLY and shared:
        (u, v), more = shared[0], len(shared) - 1
        raise SchemeInputError(
            f"{network.source}: scheme {scheme} gives each direction of a link its own "
            f"capacity, but the link {u}-{v}{f' (and {more} more)' if more else ''} has "
            f"`shared_capacity: true` (one capacity for both directions, e.g. a network "
            f"`ina solve --scheme atro --topology-out` wrote); use a scheme that shares it "
            f"(shortest, aro, atro) or give the link per-direction capacities "
            f"(`capacity_gbps`, `reverse_capacity_gbps`)"
        )


def _refuse_unbuildable_pool(network: Network, scheme: str) -> None:
    """A scheme that routes on the topology as it is would take every candidate link of a
    reconfigurable pool as built, and claim rates no buildable network carries."""
    if SCHEMES[scheme].builds_network:
        return
    over = [
        (s, len(network.graph[s]), ports)
        for s in network.switches
        if (ports := network.switch_spec(s).max_ports) is not None and len(network.graph[s]) > ports
    ]
    if over:
        s, links, ports = over[0]
        more = f" (and {len(over) - 1} more switches)" if len(over) > 1 else ""
        builders = ", ".join(n for n, e in SCHEMES.items() if e.builds_network)
        raise SchemeInputError(
            f"{network.source} is a reconfigurable pool: {s} has {links} candidate links for "
            f"its {ports} ports (max_ports){more}, so not every link can be built, and "
            f"{scheme} routes on the topology as it is; use a scheme that chooses the links "
            f"({builders}), or solve on the network it built (`ina solve POOL --scheme atro "
            f"--topology-out FILE.yaml`)"
        )


def solve(network: Network, scheme: str, options: SolveOptions | None = None) -> Plan:
    options = options or SolveOptions()
    _check_sections(network, scheme, options.params)
    _refuse_shared_capacity(network, scheme)
    _refuse_unbuildable_pool(network, scheme)
    params = {**network.schemes.get(scheme, {}), **options.params}
    limit = options.time_limit if options.time_limit is not None else SCHEMES[scheme].time_limit
    plan = get_solver(scheme)(
        network, SolveOptions(limit, options.seed, options.warm_start, params)
    )
    if any(p.name == "max_fan_in" for p in SCHEMES[scheme].params):  # what the plan respects
        plan.details["max_fan_in"] = SchemeParams(scheme, params)["max_fan_in"]
    if options.params:  # a re-plan (controller.service.daemon) solves again with the same settings
        plan.details.setdefault("params", dict(options.params))
    return plan
