"""Topology generators: leaf-spine, fat-tree, EINA edge clusters and ATRO reconfigurable pools.

Each generator returns a topology document (the dict `dump_topology` writes), so benchmarks can
build networks in memory and users can write the same networks to files with
`ina topo gen KIND ... -o FILE.yaml`. Everything random (which switches support INA, where the
workers sit, edge capacities) comes from one `random.Random(seed)`: the same seed gives the
same file. `topologies/README.md` documents the conventions, in particular the port numbering
that decides which pipeline each link enters, because aggregation results depend on it.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from controller.model.network import TopologyError, dump_topology

Document = dict[str, Any]
PortLayout = Literal["grouped", "interleaved"]
PORT_LAYOUTS: tuple[str, ...] = get_args(PortLayout)


@dataclass(frozen=True)
class Workload:
    """Jobs to place, as in ARO Sec. V: tasks of a job share its workers (SJMT) but each has
    its own PS; different jobs get disjoint workers (MJMT)."""

    jobs: int = 1
    tasks_per_job: int = 1
    workers_per_job: int = 8


@dataclass(frozen=True)
class InaOptions:
    """Which switches aggregate and how: a fraction of all switches drawn at random, or an
    explicit list of names; the access switch of every PS is added unless `ps_switch_ina` is
    off (ARO: "the PS's leaf always supports INA")."""

    ina: float | Sequence[str] = 0.2
    pipelines: int = 4
    aggregation_capacity_gbps: float | None = None
    ps_switch_ina: bool = True


@dataclass
class _Fabric:
    """Switches in order with their neighbours below and above; hosts hang off access switches."""

    tiers: dict[str, str] = field(default_factory=dict)
    down: dict[str, list[str]] = field(default_factory=dict)
    up: dict[str, list[str]] = field(default_factory=dict)

    def add(self, name: str, tier: str) -> None:
        self.tiers[name] = tier
        self.down[name] = []
        self.up[name] = []

    def connect(self, lower: str, upper: str) -> None:
        self.down[upper].append(lower)
        self.up[lower].append(upper)


def _fail(kind: str, param: str, problem: str) -> TopologyError:
    return TopologyError(f"{kind} generator", param, problem)


def port_order(down: list[str], up: list[str], layout: PortLayout) -> list[str]:
    """A switch's neighbours in port order (port 1 first).

    "grouped": down-links take ports 1..D, up-links D+1..D+U. "interleaved": both are spread
    evenly over the port range, so every contiguous pipeline block holds about D/P down-links
    and U/P up-links (exactly when P divides D and U).
    """
    if layout == "grouped":
        return down + up
    keyed = [((i + 0.5) / len(down), 0, n) for i, n in enumerate(down)]
    keyed += [((j + 0.5) / len(up), 1, n) for j, n in enumerate(up)]
    return [n for *_, n in sorted(keyed)]


def _choose_ina(
    kind: str,
    switches: list[str],
    ina: float | Sequence[str],
    forced: list[str],
    rng: random.Random,
) -> set[str]:
    """Forced switches count towards a fraction; the rest are drawn from the others."""
    if isinstance(ina, str):
        raise _fail(kind, "ina", "give a fraction or a list of switch names, not a string")
    if isinstance(ina, Sequence):
        unknown = sorted(set(ina) - set(switches))
        if unknown:
            raise _fail(kind, "ina", f"unknown switch(es) {unknown}")
        return set(ina) | set(forced)
    if not 0 <= ina <= 1:
        raise _fail(kind, "ina", f"the INA fraction must be within 0..1, got {ina}")
    target = round(ina * len(switches))
    others = [s for s in switches if s not in forced]
    return set(forced) | set(rng.sample(others, max(0, target - len(set(forced)))))


def _place(
    kind: str, servers: dict[str, list[str]], work: Workload, rng: random.Random
) -> tuple[dict[str, str], list[Document], list[str]]:
    """Roles and jobs: the PS of global task i sits under access switch i (mod their number);
    workers are drawn uniformly at random from the remaining servers, exclusively per job."""
    for param in ("jobs", "tasks_per_job", "workers_per_job"):
        if getattr(work, param) < 1:
            raise _fail(kind, param, "must be at least 1")
    roles: dict[str, str] = {h: "idle" for group in servers.values() for h in group}
    access_switches = list(servers)
    ps_hosts, ps_access = [], []
    for i in range(work.jobs * work.tasks_per_job):
        access = access_switches[i % len(access_switches)]
        free = [h for h in servers[access] if roles[h] == "idle"]
        if not free:
            raise _fail(
                kind, "tasks_per_job", f"no free server under {access} for the PS of task {i}"
            )
        roles[free[0]] = "ps"
        ps_hosts.append(free[0])
        ps_access.append(access)
    candidates = [h for h, role in roles.items() if role == "idle"]
    wanted = work.jobs * work.workers_per_job
    if wanted > len(candidates):
        raise _fail(
            kind,
            "workers_per_job",
            f"{wanted} workers do not fit on the "
            f"{len(candidates)} servers left after placing the PSs",
        )
    position = {h: i for i, h in enumerate(candidates)}
    chosen = rng.sample(candidates, wanted)
    jobs = []
    for j in range(work.jobs):
        group = sorted(
            chosen[j * work.workers_per_job : (j + 1) * work.workers_per_job],
            key=position.__getitem__,
        )
        for h in group:
            roles[h] = "worker"
        tasks = [
            {"name": f"t{t}", "ps": ps_hosts[j * work.tasks_per_job + t], "workers": list(group)}
            for t in range(work.tasks_per_job)
        ]
        jobs.append({"name": f"job{j}", "tasks": tasks})
    return roles, jobs, ps_access


def _document(
    fabric: _Fabric,
    servers: dict[str, list[str]],
    roles: dict[str, str],
    ina: set[str],
    opts: InaOptions,
    capacity_gbps: float,
    layout: PortLayout,
) -> Document:
    """Hosts, switches and links with explicit switch ports, in the order of `port_order`."""
    ports: dict[str, dict[str, int]] = {}
    for sw in fabric.tiers:
        order = port_order(servers.get(sw, []) + fabric.down[sw], fabric.up[sw], layout)
        ports[sw] = {n: p for p, n in enumerate(order, start=1)}
    hosts = [{"name": h, "role": roles[h]} for group in servers.values() for h in group]
    switches = []
    for sw, tier in fabric.tiers.items():
        spec: Document = {"name": sw, "tier": tier}
        if sw in ina:
            spec.update(ina=True, pipelines=opts.pipelines)
            if opts.aggregation_capacity_gbps is not None:
                spec["aggregation_capacity_gbps"] = opts.aggregation_capacity_gbps
            if len(ports[sw]) < opts.pipelines:
                spec["ports"] = opts.pipelines
        switches.append(spec)
    links = [
        {"a": h, "b": sw, "capacity_gbps": capacity_gbps, "b_port": ports[sw][h]}
        for sw, group in servers.items()
        for h in group
    ]
    for lower in fabric.tiers:
        links += [
            {
                "a": lower,
                "b": upper,
                "capacity_gbps": capacity_gbps,
                "a_port": ports[lower][upper],
                "b_port": ports[upper][lower],
            }
            for upper in fabric.up[lower]
        ]
    return {"hosts": hosts, "switches": switches, "links": links}


def _check_common(kind: str, capacity_gbps: float, opts: InaOptions, layout: PortLayout) -> None:
    if capacity_gbps <= 0:
        raise _fail(kind, "capacity_gbps", f"must be positive, got {capacity_gbps}")
    if opts.pipelines < 1:
        raise _fail(kind, "pipelines", "must be at least 1")
    if layout not in PORT_LAYOUTS:
        raise _fail(kind, "port_layout", f"choose one of {', '.join(PORT_LAYOUTS)}")


def _finish(
    kind: str,
    fabric: _Fabric,
    servers: dict[str, list[str]],
    work: Workload,
    opts: InaOptions,
    capacity_gbps: float,
    layout: PortLayout,
    rng: random.Random,
    header: Document,
) -> Document:
    roles, jobs, ps_access = _place(kind, servers, work, rng)
    forced = list(dict.fromkeys(ps_access)) if opts.ps_switch_ina else []
    ina = _choose_ina(kind, list(fabric.tiers), opts.ina, forced, rng)
    doc = _document(fabric, servers, roles, ina, opts, capacity_gbps, layout)
    return {**header, **doc, "jobs": jobs}


def _describe(kind: str, **params: Any) -> str:
    """The generator's parameters, so a file says how to make it again."""
    flat: dict[str, Any] = {}
    for key, value in params.items():
        is_instance = is_dataclass(value) and not isinstance(value, type)
        flat.update(asdict(value) if is_instance else {key: value})
    return f"{kind} generated by `ina topo gen` with " + ", ".join(
        f"{k}={v}" for k, v in flat.items()
    )


def leaf_spine(
    *,
    leaves: int = 24,
    spines: int = 24,
    hosts_per_leaf: int = 24,
    capacity_gbps: float = 100.0,
    ina: InaOptions = InaOptions(),
    workload: Workload = Workload(workers_per_job=200),
    port_layout: PortLayout = "grouped",
    seed: int = 0,
) -> Document:
    """ARO's evaluation cluster by default: 24 leaves x 24 spines x 24 hosts, 100 Gbps links,
    20 % INA switches with 4 pipelines, one task of 200 workers, PS under leaf i for task i."""
    kind = "leaf-spine"
    for param, value in (
        ("leaves", leaves),
        ("spines", spines),
        ("hosts_per_leaf", hosts_per_leaf),
    ):
        if value < 1:
            raise _fail(kind, param, "must be at least 1")
    _check_common(kind, capacity_gbps, ina, port_layout)
    fabric = _Fabric()
    for leaf in range(leaves):
        fabric.add(f"L{leaf}", "leaf")
    for s in range(spines):
        fabric.add(f"S{s}", "spine")
    for leaf in range(leaves):
        for s in range(spines):
            fabric.connect(f"L{leaf}", f"S{s}")
    servers = {
        f"L{leaf}": [f"h{leaf}_{j}" for j in range(hosts_per_leaf)] for leaf in range(leaves)
    }
    header = {
        "name": f"leaf-spine-{leaves}x{spines}",
        "description": _describe(
            kind,
            leaves=leaves,
            spines=spines,
            hosts_per_leaf=hosts_per_leaf,
            capacity_gbps=capacity_gbps,
            ina=ina,
            workload=workload,
            port_layout=port_layout,
            seed=seed,
        ),
    }
    return _finish(
        kind,
        fabric,
        servers,
        workload,
        ina,
        capacity_gbps,
        port_layout,
        random.Random(seed),
        header,
    )


def fat_tree(
    *,
    k: int = 4,
    hosts_per_edge: int | None = None,
    capacity_gbps: float = 100.0,
    ina: InaOptions = InaOptions(),
    workload: Workload = Workload(),
    port_layout: PortLayout = "grouped",
    seed: int = 0,
) -> Document:
    """A k-ary fat-tree: (k/2)^2 cores C<i>, k pods of k/2 aggregation A<pod>_<j> and k/2 edge
    E<pod>_<j> switches, hosts_per_edge (default k/2) servers per edge switch. Aggregation
    switch j of every pod connects to cores j*k/2 .. j*k/2 + k/2 - 1. PS of task i under the
    i-th edge switch."""
    kind = "fat-tree"
    if k < 2 or k % 2:
        raise _fail(kind, "k", f"k must be an even number >= 2, got {k}")
    per_edge = k // 2 if hosts_per_edge is None else hosts_per_edge
    if per_edge < 1:
        raise _fail(kind, "hosts_per_edge", "must be at least 1")
    _check_common(kind, capacity_gbps, ina, port_layout)
    half = k // 2
    fabric = _Fabric()
    for c in range(half * half):
        fabric.add(f"C{c}", "core")
    for pod in range(k):
        for j in range(half):
            fabric.add(f"A{pod}_{j}", "aggregation")
            for c in range(j * half, (j + 1) * half):
                fabric.connect(f"A{pod}_{j}", f"C{c}")
        for e in range(half):
            fabric.add(f"E{pod}_{e}", "edge")
            for j in range(half):
                fabric.connect(f"E{pod}_{e}", f"A{pod}_{j}")
    servers = {
        f"E{pod}_{e}": [f"h{pod}_{e}_{j}" for j in range(per_edge)]
        for pod in range(k)
        for e in range(half)
    }
    header = {
        "name": f"fat-tree-k{k}",
        "description": _describe(
            kind,
            k=k,
            hosts_per_edge=per_edge,
            capacity_gbps=capacity_gbps,
            ina=ina,
            workload=workload,
            port_layout=port_layout,
            seed=seed,
        ),
    }
    return _finish(
        kind,
        fabric,
        servers,
        workload,
        ina,
        capacity_gbps,
        port_layout,
        random.Random(seed),
        header,
    )


def edge(
    *,
    aggregators: int = 12,
    ps: int = 2,
    workers_per_aggregator: tuple[int, int] = (5, 10),
    empty_aggregators: int = 0,
    aggregation_gbps: tuple[float, float] = (200.0, 300.0),
    ingress_gbps: tuple[float, float] = (200.0, 300.0),
    egress_gbps: tuple[float, float] = (200.0, 300.0),
    host_capacity_gbps: float | None = None,
    seed: int = 0,
) -> Document:
    """EINA's cluster: edge aggregators A<i> (SmartNIC or INA ToR) joined by a non-blocking DCN
    switch. Each has random DCN ingress (A->DCN), egress (DCN->A) and aggregation capacities;
    PS p sits at A<p>; `empty_aggregators` random non-PS aggregators host no worker (relays);
    the others host a random number of workers in `workers_per_aggregator`. One job, one task
    per PS, every task with all workers (EINA shards the model over the PSs). A worker's link is
    never a bottleneck: it defaults to the largest capacity any range allows."""
    kind = "edge"
    if aggregators < 1:
        raise _fail(kind, "aggregators", "must be at least 1")
    if not 1 <= ps <= aggregators:
        raise _fail(kind, "ps", f"needs 1..{aggregators} PSs (one per aggregator), got {ps}")
    if not 0 <= empty_aggregators <= aggregators - ps:
        raise _fail(
            kind,
            "empty_aggregators",
            f"must be within 0..{aggregators - ps} (aggregators without a PS)",
        )
    ranges = {
        "workers_per_aggregator": workers_per_aggregator,
        "aggregation_gbps": aggregation_gbps,
        "ingress_gbps": ingress_gbps,
        "egress_gbps": egress_gbps,
    }
    for param, (lo, hi) in ranges.items():
        if not 0 <= lo <= hi:
            raise _fail(kind, param, f"needs 0 <= low <= high, got {lo} {hi}")
    host_cap = host_capacity_gbps
    if host_cap is None:
        host_cap = max(aggregation_gbps[1], ingress_gbps[1], egress_gbps[1])
    if host_cap <= 0:
        raise _fail(kind, "host_capacity_gbps", "must be positive")
    rng = random.Random(seed)
    empty = set(rng.sample(range(ps, aggregators), empty_aggregators))
    hosts = [{"name": f"ps{p}", "role": "ps"} for p in range(ps)]
    switches: list[Document] = [{"name": "DCN", "tier": "core"}]
    links: list[Document] = [
        {"a": f"ps{p}", "b": f"A{p}", "capacity_gbps": host_cap} for p in range(ps)
    ]
    dcn_links, workers = [], []
    for a in range(aggregators):
        agg, ing, egr = (
            round(rng.uniform(*r), 1) for r in (aggregation_gbps, ingress_gbps, egress_gbps)
        )
        switches.append(
            {
                "name": f"A{a}",
                "tier": "tor",
                "ina": True,
                "aggregates": "all",
                "aggregation_capacity_gbps": agg,
                "ingress_capacity_gbps": ing,
                "egress_capacity_gbps": egr,
            }
        )
        count = 0 if a in empty else rng.randint(*workers_per_aggregator)
        for j in range(count):
            workers.append(f"h{a}_{j}")
            hosts.append({"name": f"h{a}_{j}", "role": "worker"})
            links.append({"a": f"h{a}_{j}", "b": f"A{a}", "capacity_gbps": host_cap})
        dcn_links.append(
            {"a": f"A{a}", "b": "DCN", "capacity_gbps": ing, "reverse_capacity_gbps": egr}
        )
    if not workers:
        raise _fail(kind, "workers_per_aggregator", "no aggregator got a worker")
    tasks = [{"name": f"t{p}", "ps": f"ps{p}", "workers": list(workers)} for p in range(ps)]
    return {
        "name": f"edge-{aggregators}",
        "description": _describe(
            kind, aggregators=aggregators, ps=ps, empty_aggregators=empty_aggregators, seed=seed
        ),
        "hosts": hosts,
        "switches": switches,
        "links": links + dcn_links,
        "jobs": [{"name": "job0", "tasks": tasks}],
    }


def pool(
    *,
    switches: int = 20,
    ina: InaOptions = InaOptions(pipelines=1),
    max_ports: int = 24,
    workers: int = 90,
    capacity_gbps: float = 100.0,
    seed: int = 0,
) -> Document:
    """ATRO's reconfigurable cluster: switches S<i> with a port budget `max_ports`, workers
    W<i> and one PS, and every candidate link ATRO may patch (Eq. 4: all switch pairs and all
    host-switch pairs, never host-host). A solver picks the subset to build; the file is only
    meaningful to schemes that choose links (see topologies/README.md)."""
    kind = "pool"
    if switches < 1:
        raise _fail(kind, "switches", "must be at least 1")
    if max_ports < 1:
        raise _fail(kind, "max_ports", "must be at least 1")
    if workers < 1:
        raise _fail(kind, "workers", "must be at least 1")
    _check_common(kind, capacity_gbps, ina, "grouped")
    names = [f"S{i}" for i in range(switches)]
    chosen = _choose_ina(kind, names, ina.ina, [], random.Random(seed))
    specs: list[Document] = []
    for name in names:
        spec: Document = {"name": name, "tier": "other", "max_ports": max_ports}
        if name in chosen:
            spec.update(ina=True, pipelines=ina.pipelines)
            if ina.aggregation_capacity_gbps is not None:
                spec["aggregation_capacity_gbps"] = ina.aggregation_capacity_gbps
        specs.append(spec)
    hosts = [{"name": "PS", "role": "ps"}] + [
        {"name": f"W{i}", "role": "worker"} for i in range(workers)
    ]
    links = [{"a": h["name"], "b": s, "capacity_gbps": capacity_gbps} for h in hosts for s in names]
    links += [
        {"a": names[i], "b": names[j], "capacity_gbps": capacity_gbps}
        for i in range(switches)
        for j in range(i + 1, switches)
    ]
    return {
        "name": f"pool-{switches}",
        "description": _describe(
            kind, switches=switches, max_ports=max_ports, workers=workers, seed=seed
        ),
        "hosts": hosts,
        "switches": specs,
        "links": links,
        "jobs": [
            {
                "name": "job0",
                "tasks": [{"name": "t0", "ps": "PS", "workers": [f"W{i}" for i in range(workers)]}],
            }
        ],
    }


# --- command line: `ina topo gen KIND ... -o FILE.yaml` -------------------------------------


def _ina_options(args: argparse.Namespace, default_pipelines: int) -> InaOptions:
    chosen: float | list[str] = args.ina_fraction
    if args.ina is not None:
        chosen = [s for s in args.ina.split(",") if s]
    pipelines = default_pipelines if args.pipelines is None else args.pipelines
    return InaOptions(
        chosen, pipelines, args.aggregation_capacity, not getattr(args, "no_ps_ina", False)
    )


def _workload(args: argparse.Namespace) -> Workload:
    return Workload(args.jobs, args.tasks_per_job, args.workers)


def _from_args(args: argparse.Namespace) -> Document:
    if args.kind == "leaf-spine":
        return leaf_spine(
            leaves=args.leaves,
            spines=args.spines,
            hosts_per_leaf=args.hosts_per_leaf,
            capacity_gbps=args.capacity,
            ina=_ina_options(args, 4),
            workload=_workload(args),
            port_layout=args.port_layout,
            seed=args.seed,
        )
    if args.kind == "fat-tree":
        return fat_tree(
            k=args.k,
            hosts_per_edge=args.hosts_per_edge,
            capacity_gbps=args.capacity,
            ina=_ina_options(args, 4),
            workload=_workload(args),
            port_layout=args.port_layout,
            seed=args.seed,
        )
    if args.kind == "edge":
        return edge(
            aggregators=args.aggregators,
            ps=args.ps,
            workers_per_aggregator=tuple(args.workers_per_aggregator),
            empty_aggregators=args.empty_aggregators,
            aggregation_gbps=tuple(args.aggregation_capacity),
            ingress_gbps=tuple(args.ingress),
            egress_gbps=tuple(args.egress),
            host_capacity_gbps=args.host_capacity,
            seed=args.seed,
        )
    return pool(
        switches=args.switches,
        ina=_ina_options(args, 1),
        max_ports=args.max_ports,
        workers=args.workers,
        capacity_gbps=args.capacity,
        seed=args.seed,
    )


def cmd_gen(args: argparse.Namespace) -> int:
    doc = _from_args(args)
    dump_topology(doc, args.output)
    print(
        f"{args.output}: {len(doc['hosts'])} hosts, {len(doc['switches'])} switches, "
        f"{len(doc['links'])} links"
    )
    return 0


def _common(
    p: argparse.ArgumentParser, *, ina_default: float, workers_default: int, fabric: bool
) -> None:
    p.add_argument(
        "-o",
        "--output",
        required=True,
        type=Path,
        metavar="FILE.yaml",
        help="topology file to write",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--capacity", type=float, default=100.0, help="link capacity, Gbps")
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--ina-fraction",
        type=float,
        default=ina_default,
        help=f"fraction of switches that support INA (default {ina_default})",
    )
    group.add_argument("--ina", metavar="S1,S2,...", help="explicit INA switches")
    p.add_argument("--pipelines", type=int, help="pipelines per INA switch")
    p.add_argument(
        "--aggregation-capacity",
        type=float,
        metavar="GBPS",
        help="aggregation capacity of every INA switch (default: unlimited)",
    )
    p.add_argument(
        "--workers",
        "--workers-per-job",
        type=int,
        default=workers_default,
        dest="workers",
        help=f"workers per job (default {workers_default})",
    )
    if fabric:
        p.add_argument("--jobs", type=int, default=1, help="jobs with disjoint workers (MJMT)")
        p.add_argument(
            "--tasks-per-job",
            type=int,
            default=1,
            help="tasks per job, sharing its workers, one PS each (SJMT)",
        )
        p.add_argument(
            "--no-ps-ina", action="store_true", help="do not force INA on the PSs' access switches"
        )
        p.add_argument(
            "--port-layout",
            choices=PORT_LAYOUTS,
            default="grouped",
            help="port numbering, see topologies/README.md (default grouped)",
        )


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `topo gen leaf-spine|fat-tree|edge|pool` to the `ina` command line."""
    topo = subparsers.add_parser("topo", help="topology tools")
    actions = topo.add_subparsers(dest="topo_command", required=True, metavar="ACTION")
    gen = actions.add_parser("gen", help="generate a topology file")
    kinds = gen.add_subparsers(dest="kind", required=True, metavar="KIND")

    p = kinds.add_parser("leaf-spine", help="leaf-spine (ARO's setting by default)")
    p.add_argument("--leaves", type=int, default=24, help="leaf switches (default 24)")
    p.add_argument(
        "--spines",
        type=int,
        default=24,
        help="spine switches, each linked to every leaf (default 24)",
    )
    p.add_argument(
        "--hosts-per-leaf", type=int, default=24, help="servers under each leaf (default 24)"
    )
    _common(p, ina_default=0.2, workers_default=200, fabric=True)

    p = kinds.add_parser("fat-tree", help="k-ary fat-tree")
    p.add_argument(
        "--k",
        type=int,
        default=4,
        help="ports per switch: k pods of k/2 edge and k/2 aggregation switches, "
        "(k/2)^2 cores (default 4)",
    )
    p.add_argument("--hosts-per-edge", type=int, help="servers per edge switch (default k/2)")
    _common(p, ina_default=0.2, workers_default=8, fabric=True)

    p = kinds.add_parser("edge", help="EINA edge aggregators on a non-blocking DCN")
    p.add_argument(
        "-o",
        "--output",
        required=True,
        type=Path,
        metavar="FILE.yaml",
        help="topology file to write",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument(
        "--aggregators",
        type=int,
        default=12,
        help="edge aggregators A0, A1, ... on the DCN (default 12)",
    )
    p.add_argument("--ps", type=int, default=2, help="PSs, one per aggregator A0, A1, ...")
    p.add_argument(
        "--workers-per-aggregator",
        type=int,
        nargs=2,
        default=[5, 10],
        metavar=("LOW", "HIGH"),
        help="workers under each aggregator, drawn from LOW..HIGH (default 5 10)",
    )
    p.add_argument(
        "--empty-aggregators", type=int, default=0, help="aggregators without workers (relays)"
    )
    for flag, what in (
        ("--aggregation-capacity", "aggregation"),
        ("--ingress", "DCN ingress"),
        ("--egress", "DCN egress"),
    ):
        p.add_argument(
            flag,
            type=float,
            nargs=2,
            default=[200.0, 300.0],
            metavar=("LOW", "HIGH"),
            help=f"{what} capacity range, Gbps",
        )
    p.add_argument("--host-capacity", type=float, help="worker link capacity, Gbps")

    p = kinds.add_parser("pool", help="ATRO reconfigurable pool with candidate links")
    p.add_argument("--switches", type=int, default=20, help="switches in the pool (default 20)")
    p.add_argument(
        "--max-ports",
        type=int,
        default=24,
        help="ports per switch the patch panel may use (default 24)",
    )
    _common(p, ina_default=0.2, workers_default=90, fabric=False)

    for parser in kinds.choices.values():
        parser.set_defaults(func=cmd_gen)
