"""Quantized sending rates (QSR, Sec. III-C), the exact rate candidates, and the resources of (10).

Grid: rates are integers r[i] in {0..N}; a capacity b becomes floor(b·N/b̄) and level r means
r·b̄/N Gbps. The paper's b̄ is Eq. (11), the largest link (`bbar`, used by ARO-QSR); with one
1000 Gbps link among 1 Gbps ones that makes every thin link 0 levels, so the other variants
take b̄ = the highest rate any task could send at all (`rate_ceiling`).

A grid is exact for the rates it tests: a fixed level L is feasible in the quantized model iff
the rate L·b̄/N is feasible in the real one (Σ L·y ≤ floor(b·N/b̄) ⇔ Σ L·y ≤ b·N/b̄, the left
side being an integer). What a grid loses is the rates between its points; `exact_rates`
lists the only common rates at which real feasibility can change (capacity / flow count).

Each resource is a physical directed link (10) or, when the topology sets one, a switch's
aggregation capacity, with the unfolded edges whose flows use it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from controller.model.network import Network
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

    def level(self, gbps: float) -> int:
        """The grid level just below a real rate (the floor quantization of a solution)."""
        return max(0, self.cap(gbps))

    def describe(self) -> str:
        return f"N={self.levels} levels of {self.gbps(1):g} Gbps (b̄={self.bbar:g})"


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


def rate_ceiling(graphs: list[TaskGraph], network: Network) -> float:
    """The highest rate any task could send: each worker emits one flow on one of its links
    (5), and at least one flow enters the PS on one of its links, so r[i] is at most both."""
    return max(task_ceiling(tg, network) for tg in graphs)


def task_ceiling(tg: TaskGraph, network: Network) -> float:
    """An upper bound on r[i] valid for every routing (see `rate_ceiling`); a PS that
    aggregates receives at least one flow, and a task's rate cap R caps r[i] itself."""
    ps_in = max(
        (network.capacity(*ab) for (u, v), ab in tg.physical.items() if v == tg.ps), default=0.0
    )
    workers = [max(network.capacity(*tg.physical[(w, v)]) for v in tg.succ[w]) for w in tg.workers]
    caps = [network.ps_capacity(tg.task, tg.task.ps), tg.task.rate_cap_gbps]
    return min([ps_in, *workers, *(c for c in caps if c is not None)])


def exact_rates(res: list[Resource], most_load: dict[int, int]) -> list[float]:
    """Every common rate at which real feasibility can change: capacity / flow count.

    At a common rate t a resource admits floor(cap/t) flows, which is constant between two
    consecutive values of cap/k; so "all tasks at t" is as feasible as at the smallest listed
    value ≥ t. Near-equal values (floating point) are merged.
    """
    most: dict[float, int] = {}  # resources of equal capacity share their values
    for r in res:
        if r.capacity_gbps > 0:
            most[r.capacity_gbps] = max(most.get(r.capacity_gbps, 0), most_load[id(r)])
    values = sorted({cap / k for cap, m in most.items() for k in range(1, m + 1)})
    out: list[float] = []
    for v in values:
        if not out or v > out[-1] * (1 + 1e-9):
            out.append(v)
    return out


def admits(capacity_gbps: float, rate: float) -> int:
    """Flows a capacity admits at a common rate: floor(cap/rate), tolerant to rounding."""
    return math.floor(capacity_gbps / rate * (1 + 1e-9) + 1e-12)


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
                key = network.link_key(u, v)  # a shared link: both directions, one capacity
                res = links.setdefault(key, Resource(("link", *key), network.capacity(u, v), {}))
                res.terms.setdefault(tg.index, []).append(edge)
            inp = edge[1]
            # merged flows; at `aggregates: all` also those crossing its copy (`unfold`)
            charged = inp[0] == "inp" or (
                edge in tg.bypass and network.switch_spec(inp[1]).aggregates == "all"
            )
            limit = network.spec(inp[1]).aggregation_capacity_gbps if charged else None
            if limit is not None:
                res = aggs.setdefault(inp[1], Resource(("aggregator", inp[1]), limit, {}))
                res.terms.setdefault(tg.index, []).append(edge)
            if b == tg.task.ps:  # every flow entering a PS that aggregates costs its capacity
                _charge_ps(network, tg, edge, aggs)
    return list(links.values()) + list(aggs.values())


def _charge_ps(network: Network, tg: TaskGraph, edge: Edge, aggs: dict) -> None:
    """A PS's aggregation capacity, as the evaluator charges it: the host's own is one
    resource for every task it serves, a task's `ps_aggregation_capacity_gbps` its own."""
    ps = tg.task.ps
    limit = network.ps_capacity(tg.task, ps)
    if limit is None:
        return
    own = network.spec(ps).aggregation_capacity_gbps is not None
    key = ps if own else (ps, tg.index)
    res = aggs.setdefault(key, Resource(("aggregator", ps), limit, {}))
    res.terms.setdefault(tg.index, []).append(edge)


def quantize(res: list[Resource], scale: Scale) -> None:
    for r in res:
        r.cap = scale.cap(r.capacity_gbps)
