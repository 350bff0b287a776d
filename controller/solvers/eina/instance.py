"""EINA's inputs (Sec. III-A) read off a Network: A, A_W, π[k], a_j, c_j, b_j^I, b_j^E,
r^L, r^U, d*.

r^U also holds what reaches the PS: one merged flow per task, which its link from π[p] and the
PS's own aggregation capacity (the host's, else the task's) both limit.

EINA's cluster is edge aggregators (INA switches, one per rack or SmartNIC) joined by one
non-blocking DCN switch; every host hangs off exactly one aggregator. Anything else is refused
with a TopologyError naming the field, so the CLI prints one paragraph and exits 2.

Capacities are kept as exact fractions (parsed from the numbers' decimal text) so that the
quantized model and the real-problem bound in `bound.py` are computed without rounding error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from typing import Any

from controller.model.network import Network, Task, TopologyError
from controller.model.plan import MAX_FAN_IN
from controller.solvers import SchemeInputError
from controller.solvers.params import SchemeParams


def exact(value: float | str) -> Fraction:
    """The number as written (0.8 is 4/5, not 0.8000000000000000444)."""
    return Fraction(str(value))


@dataclass(frozen=True)
class Instance:
    aggregators: list[str]  # A, in topology order
    fabric: str  # the DCN switch
    ps: list[str]  # P: one PS per task
    tasks: list[tuple[str, str]]  # (job, task) per PS, same order
    workers: list[tuple[str, ...]]  # W, per PS's task
    home: dict[str, str]  # π[k] for every worker and PS
    local: list[dict[str, int]]  # a_j per PS: workers of p's task at aggregator j
    c: dict[str, Fraction]  # aggregation capacity c_j
    b_in: dict[str, Fraction]  # DCN ingress b_j^I (aggregator -> fabric)
    b_out: dict[str, Fraction]  # DCN egress b_j^E (fabric -> aggregator)
    r_low: Fraction  # r_p^L (1)
    r_high: list[Fraction]  # r_p^U (1), per PS
    host_cap: dict[str, Fraction]  # a worker's own link: it carries one flow per PS, Σ_p r_p
    depth_limit: int  # d*
    ps_cap: list[Fraction]  # per PS: its link from π[p] and its own aggregation capacity
    # L: the most flows of one task an aggregator merges (the data plane's limit; 0: none)
    fan_in: int = 0

    @property
    def d_hat(self) -> int:
        """d̂ = min(d*, |A|) − 1: the deepest an aggregator may sit below π[p] (4)."""
        return min(self.depth_limit, len(self.aggregators)) - 1

    @cached_property
    def tasks_of(self) -> dict[str, list[int]]:
        """Per worker, the PSs whose task it is in (a set lookup: 1,000 racks have 7,500)."""
        out: dict[str, list[int]] = {w: [] for w in self.host_cap}
        for p, ws in enumerate(self.workers):
            for w in ws:
                out.setdefault(w, []).append(p)
        return out

    def workers_at(self, p: int, j: str) -> list[str]:
        return [w for w in self.workers[p] if self.home[w] == j]


def read(network: Network, given: Mapping[str, Any]) -> Instance:
    """The paper's symbols; `given` holds the family's shared parameters (r_min, r_max,
    depth_limit), defined alike for every EINA scheme."""
    params = SchemeParams("eina", given)
    src = network.source
    aggs = [s for s in network.switches if network.is_ina(s)]
    plain = [s for s in network.switches if not network.is_ina(s)]
    if not aggs or len(plain) != 1:
        raise TopologyError(
            src,
            "switches",
            "EINA needs INA edge aggregators joined by exactly "
            f"one plain DCN switch (as `ina topo gen edge` writes); found "
            f"{len(aggs)} INA switch(es) and {len(plain)} plain one(s)",
        )
    if len({t.job for t in network.tasks}) != 1:
        raise TopologyError(
            src,
            "jobs",
            "EINA routes one training job (its tasks are the model's shards, one per PS)",
        )
    fabric = plain[0]
    g = network.graph
    for a in aggs:
        if not (g.has_edge(a, fabric) and g.has_edge(fabric, a)):
            raise TopologyError(
                src, f"switches ({a})", f"aggregator {a!r} has no link to {fabric!r}"
            )
        if network.pipelines(a) != 1:
            raise TopologyError(
                src,
                f"switches ({a}).pipelines",
                "EINA merges every flow entering an aggregator, so it needs one "
                "pipeline per aggregator",
            )
    home: dict[str, str] = {}
    for h in network.hosts:
        ends = list(g.successors(h))
        if len(ends) != 1 or ends[0] not in aggs:
            raise TopologyError(
                src,
                f"hosts ({h})",
                f"in EINA every host links to exactly one aggregator; {h!r} links to {ends}",
            )
        home[h] = ends[0]

    c, b_in, b_out = {}, {}, {}
    for a in aggs:
        spec = network.switch_spec(a)
        if spec.aggregation_capacity_gbps is None:
            raise TopologyError(
                src,
                f"switches ({a}).aggregation_capacity_gbps",
                "EINA needs every aggregator's aggregation capacity c_j",
            )
        c[a] = exact(spec.aggregation_capacity_gbps)
        # b^I / b^E are the link's (a switch field, when set, sums the switch's links to
        # other switches, checked at load; the tighter of the two is the fabric link's).
        b_in[a] = _tighter(network.capacity(a, fabric), spec.ingress_capacity_gbps)
        b_out[a] = _tighter(network.capacity(fabric, a), spec.egress_capacity_gbps)

    tasks = network.tasks
    ps = [t.ps for t in tasks]
    shared = sorted({h for h in ps if ps.count(h) > 1})
    if shared:
        raise TopologyError(
            src,
            "jobs",
            "EINA gives every task (model shard) its own PS, whose "
            f"link it charges to that task alone; {', '.join(shared)} is the PS "
            "of several tasks",
        )
    local = [dict.fromkeys(aggs, 0) for _ in tasks]
    for p, t in enumerate(tasks):
        for w in t.workers:
            local[p][home[w]] += 1
    host_cap = {
        w: exact(network.capacity(w, home[w]))
        for w in dict.fromkeys(w for t in tasks for w in t.workers)
    }
    r_low = exact(params["r_min"])
    r_max = None if params["r_max"] is None else exact(params["r_max"])
    ps_cap = [ps_limit(network, t, home[t.ps]) for t in tasks]
    r_high = [cap if r_max is None else min(r_max, cap) for cap in ps_cap]
    capped = [t for t in tasks if t.rate_cap_gbps is not None]
    if capped and len(tasks) > 1:
        raise SchemeInputError(
            f"{src}: task {capped[0].name} has a rate cap (rate_cap_gbps), which bounds the "
            f"sum of a sharded job's rates; EINA's model of several PSs has no such bound: "
            f"drop the cap or use a scheme that reads it (paring, shortest, atp)"
        )
    r_high = [
        high if t.rate_cap_gbps is None else min(high, exact(t.rate_cap_gbps))
        for t, high in zip(tasks, r_high, strict=True)
    ]  # R caps the one task's rate
    depth = params["depth_limit"] or len(aggs)
    return Instance(
        aggs,
        fabric,
        ps,
        [t.key for t in tasks],
        [t.workers for t in tasks],
        home,
        local,
        c,
        b_in,
        b_out,
        r_low,
        r_high,
        host_cap,
        depth,
        ps_cap,
        params["max_fan_in"],
    )


def ps_limit(network: Network, task: Task, root: str) -> Fraction:
    """What one flow of `task` reaching its PS may carry: the root's link to the PS and what
    the PS aggregates (`Network.ps_capacity`), which the evaluator charges for every flow
    entering the PS; in an EINA tree that is the one flow π[p] merges."""
    cap = network.ps_capacity(task, task.ps)
    return _tighter(network.capacity(root, task.ps), cap)


def refuse_unmergeable(inst: Instance, network: Network, scheme: str) -> None:
    """EINA merges every worker's flow at its own aggregator and every tree at π[p]
    (constraint (10)): where such an aggregator cannot aggregate, EINA has no plan (with
    rate 0 it would still name it a merge point), so the input is refused."""
    must = {inst.home[h] for ws in inst.workers for h in ws} | {inst.home[h] for h in inst.ps}
    zero = [a for a in inst.aggregators if a in must and inst.c[a] == 0]
    if zero:
        names = ", ".join(zero[:5]) + (f" and {len(zero) - 5} more" if len(zero) > 5 else "")
        one = len(zero) == 1
        raise SchemeInputError(
            f"{network.source}: {scheme} merges every worker's flow at its own aggregator and "
            f"each PS's tree at the PS's aggregator (EINA's constraint (10)), but "
            f"{'switch' if one else 'switches'} {names} {'holds' if one else 'hold'} workers or "
            f"a PS and {'has' if one else 'have'} aggregation_capacity_gbps 0, so no EINA tree "
            "exists. Give them aggregation capacity, or use eina-plus, which may pass flows "
            "through an aggregator unmerged"
        )


def refuse_over_fan_in(inst: Instance, network: Network, scheme: str) -> None:
    """EINA merges every local worker at its own aggregator (constraint (10)), so a rack with
    more workers of a task than an aggregation point may merge (`max_fan_in`) has no EINA
    tree; nor has a PS whose aggregator's own workers fill it while other racks must join."""
    if not inst.fan_in:
        return
    for p, (job, task) in enumerate(inst.tasks):
        root = inst.home[inst.ps[p]]
        racks = [j for j in inst.aggregators if inst.local[p][j]]
        full = [j for j in racks if inst.local[p][j] > inst.fan_in]
        why = (
            f"aggregator {full[0]} holds {inst.local[p][full[0]]} of its workers"
            if full
            else f"the PS's aggregator {root} holds {inst.local[p][root]} of its workers and "
            f"must also merge the other racks' flows"
            if inst.local[p][root] >= inst.fan_in and set(racks) - {root}
            else ""
        )
        if why:
            raise SchemeInputError(
                f"{network.source}: {scheme} merges every worker's flow at its own aggregator "
                f"(EINA's constraint (10)), but for task {job}/{task} {why}, more than the "
                f"{inst.fan_in} flows an aggregation point may merge (max_fan_in; the data plane "
                f"merges at most {MAX_FAN_IN}). Use eina-plus, which may pass workers' flows "
                "through an aggregator unmerged, or max_fan_in=0 for the paper's unlimited model"
            )


def _tighter(link: float, field: float | None) -> Fraction:
    return exact(link) if field is None else min(exact(link), exact(field))
