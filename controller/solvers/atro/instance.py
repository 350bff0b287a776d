"""ATRO's inputs (Sec. III-A) read off a pool topology: N_w, N_ps, N_cs, N_agg, η_u,
P with b_u^v, L.

A pool file (`ina topo gen pool`, topologies/README.md) lists switches with a port budget
`max_ports` (η_u) and *candidate* links: the pairs P of Eq. (4) the optical patch panel may
connect. Every candidate is a choice here, never a built cable. Hosts outside every task take
no part (they have no flow to send), host-host candidates are not in P (Eq. 4).

b_u^v of (14) is the smaller of a candidate's two directions' capacities: (14) is stated for
(u, v) and (v, u) with the same left side, so the tighter one binds. Anything ATRO cannot read
is refused with the file and field named (the CLI prints one paragraph and exits 2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from controller.model.network import Network, Task, TopologyError
from controller.solvers import SchemeInputError
from controller.solvers.params import SchemeParams

DEFAULT_LAYERS = 5  # L, the paper's evaluation setting (Sec. IV-A)

Pair = tuple[str, str]  # (host, switch) or (switch, switch) in `Instance.switches` order


@dataclass(frozen=True)
class Instance:
    tasks: list[Task]  # one AllReduce task each; several share the pool (beyond the paper)
    switches: list[str]  # N_s = N_cs ∪ N_agg, topology order (symmetry breaking follows it)
    common: list[str]  # N_cs, topology order
    aggregators: list[str]  # N_agg, topology order
    ports: dict[str, int]  # η_u of every switch (hosts have one port, (8))
    links: dict[Pair, float]  # P (undirected) → b_u^v, Gbps
    agg_capacity: dict[str, float]  # aggregation capacity where the topology sets one
    layers: int  # L of (18)-(20)
    max_fan_in: int | None  # flows one aggregator may merge (data plane); None: unlimited
    # Only in the aggregated relaxation (`relaxed`): parallel links a pair may get, and the
    # node standing for every common switch (no layer of its own).
    multiplicity: dict[Pair, int] = field(default_factory=dict)
    merged: str | None = None
    # Beyond the paper, as the evaluator charges them: a PS that aggregates (tasks sharing
    # one capacity → Gbps) and a task's rate cap R.
    ps_limits: dict[tuple[int, ...], float] = field(default_factory=dict)
    rate_caps: dict[int, float] = field(default_factory=dict)

    def hosts(self) -> list[str]:
        """Every worker and PS of the tasks, each once: N_n."""
        return list(dict.fromkeys(h for t in self.tasks for h in (*t.workers, t.ps)))

    def senders(self) -> set[str]:
        """N_w of all tasks."""
        return {w for t in self.tasks for w in t.workers}


def read(network: Network, params: dict[str, Any]) -> Instance:
    src = network.source
    given = SchemeParams("atro", params)
    tasks = network.tasks
    jobs = {t.job for t in tasks}
    if len(jobs) > 1 and (len(jobs) != len(tasks) or len({t.beta for t in tasks}) > 1):
        raise SchemeInputError(
            f"atro: several jobs need one task each and the same beta (max-min of the tasks' "
            f"rates, then their sum); {src} has {len(tasks)} tasks in {len(jobs)} jobs"
        )
    switches = network.switches
    ports: dict[str, int] = {}
    aggs, common, agg_capacity = [], [], {}
    for i, s in enumerate(switches):
        spec = network.switch_spec(s)
        budget = spec.max_ports if spec.max_ports is not None else spec.ports
        if budget is None:
            raise TopologyError(
                src,
                f"switches[{i}] ({s}).max_ports",
                "ATRO needs every pool switch's port budget η_u (max_ports)",
            )
        ports[s] = budget
        if network.is_ina(s) and spec.aggregation_capacity_gbps != 0:
            if spec.pipelines != 1:
                raise TopologyError(
                    src,
                    f"switches[{i}] ({s}).pipelines",
                    "ATRO's aggregator merges every flow entering it (9)-(10), "
                    "so its INA switches need one pipeline",
                )
            aggs.append(s)
            if spec.aggregation_capacity_gbps is not None:
                agg_capacity[s] = spec.aggregation_capacity_gbps
        else:
            common.append(s)
    hosts = {h for t in tasks for h in (*t.workers, t.ps)}
    index = {s: k for k, s in enumerate(switches)}
    links: dict[Pair, float] = {}
    g = network.graph
    for u, v in g.edges:
        host_pair = u in hosts and v in index
        if not (host_pair or (u in index and v in index and index[u] < index[v])):
            continue  # the reverse direction of a pair, or a host outside the task
        pair = (u, v)
        b = min(network.capacity(u, v), network.capacity(v, u))
        if b > 0:
            links[pair] = b
    layers = given["layers"] or min(DEFAULT_LAYERS, len(switches))
    if layers > len(switches):
        raise SchemeInputError(
            f"atro: parameter layers={layers} (from --param or the "
            f"topology's schemes.atro): must be at most the pool's "
            f"{len(switches)} switches"
        )
    fan_in = given["max_fan_in"]
    return Instance(
        tasks,
        switches,
        common,
        aggs,
        ports,
        links,
        agg_capacity,
        layers,
        fan_in or None,
        ps_limits=_ps_limits(network),
        rate_caps={i: t.rate_cap_gbps for i, t in enumerate(tasks) if t.rate_cap_gbps is not None},
    )


def _ps_limits(network: Network) -> dict[tuple[int, ...], float]:
    """The PS capacities: a host's own serves every task it is PS of, a task's only it."""
    limits: dict[tuple[int, ...], float] = {}
    shared: dict[str, list[int]] = {}
    for i, t in enumerate(network.tasks):
        limit = network.ps_capacity(t, t.ps)
        if limit is None:
            continue
        if network.spec(t.ps).aggregation_capacity_gbps is not None:
            shared.setdefault(t.ps, []).append(i)
        else:
            limits[(i,)] = limit
    for ps, group in shared.items():
        own = network.spec(ps).aggregation_capacity_gbps
        assert own is not None  # grouped above for having one
        limits[tuple(group)] = own
    return limits
