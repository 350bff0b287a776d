"""Quantized sending rates (QSR, Sec. III-C) and the capacity resources of constraint (10).

Rates are integers r[i] in {0..N}; a capacity b becomes floor(b·N/b̄) with b̄ from Eq. (11),
and level r means r·b̄/N Gbps. Each resource is a physical directed link (10) or, when the
topology sets one, a switch's aggregation capacity, with the unfolded edges whose flows use it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from controller.network import Network
from controller.solvers.aro.unfold import Edge, TaskGraph


@dataclass(frozen=True)
class Scale:
    """Level r ↔ r·b̄/N Gbps."""

    levels: int  # N
    bbar: float  # b̄, Eq. (11)

    def cap(self, gbps: float) -> int:
        return math.floor(gbps * self.levels / self.bbar + 1e-9)

    def gbps(self, level: float) -> float:
        return level * self.bbar / self.levels


@dataclass
class Resource:
    """A capacity shared by the tasks' flows: Σ_i r[i]·Σ_{e∈terms_i} y[i]_e ≤ cap."""

    key: tuple[str, ...]
    capacity_gbps: float
    terms: dict[int, list[Edge]]  # task index → unfolded edges whose flows load it
    cap: int = 0  # quantized capacity, set by `quantize`


def bbar(graphs: list[TaskGraph], network: Network) -> float:
    """Eq. (11): the largest capacity among the non-virtual links of the unfolded graphs."""
    return max(network.capacity(*ab) for tg in graphs for ab in tg.physical.values())


def resources(
    network: Network, graphs: list[TaskGraph], bidirectional: bool = False
) -> list[Resource]:
    """Constraint (10) per physical link, plus aggregation capacity per INA switch.

    With `bidirectional` (footnote 3) the result multicast of each task runs the reversed
    routes at the same rate, so a link also carries the flows of its reverse direction.
    """
    links: dict[tuple[str, str], Resource] = {}
    aggs: dict[str, Resource] = {}
    for tg in graphs:
        for edge, (a, b) in tg.physical.items():
            directions = [(a, b), (b, a)] if bidirectional else [(a, b)]
            for u, v in directions:
                res = links.setdefault(
                    (u, v), Resource(("link", u, v), network.capacity(u, v), {}))
                res.terms.setdefault(tg.index, []).append(edge)
            inp = edge[1]
            limit = network.spec(inp[1]).aggregation_capacity_gbps if inp[0] == "inp" else None
            if limit is not None:
                res = aggs.setdefault(inp[1], Resource(("aggregator", inp[1]), limit, {}))
                res.terms.setdefault(tg.index, []).append(edge)
    return list(links.values()) + list(aggs.values())


def quantize(res: list[Resource], scale: Scale) -> None:
    for r in res:
        r.cap = scale.cap(r.capacity_gbps)
