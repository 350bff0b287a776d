"""Topology model: the YAML schema, its validation, and the networkx graph every scheme reads.

A topology file names hosts (workers, PSs, idle servers), switches (INA-capable or not, with
their hardware pipelines and port→pipeline map, aggregation and DCN capacities, port budget for
reconfigurable pools), links (capacity per direction, port numbers), and the jobs whose tasks
are to be routed. `topologies/README.md` documents every field.

Validation happens in two layers: pydantic checks types and ranges field by field (strictly:
`true` or `"1e3"` is not a number, `.inf` and `.nan` are not capacities), then
`_check_semantics` checks what spans fields (unknown link ends, duplicate names, uncovered
ports, workers that cannot reach their PS through switches). Both raise `TopologyError`, whose
text names the file, the field path and the problem, so the CLI can print it as one paragraph
and exit with code 2. Items of the long lists are validated one by one so that a malformed
10 MB file reports its first problems and a count, instead of collecting millions of errors.
"""

from __future__ import annotations

import math
import reprlib
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

import networkx as nx
import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    FailFast,
    Field,
    ValidationError,
    model_validator,
)

from controller.model.inputs import InputError, parse_yaml, plain_error, read_text

Role = Literal["worker", "ps", "idle"]
Tier = Literal["leaf", "spine", "core", "aggregation", "edge", "tor", "other"]


# Ranges that keep every scheme's arithmetic meaningful (README "Limits").
MIN_CAPACITY_GBPS = 1e-3  # 1 Mbps: a positive capacity below it is a typo or a denormal
MAX_CAPACITY_GBPS = 1e6  # 1 Pbps
MAX_PORTS = 4096  # per switch; port maps are built port by port
MAX_PIPELINES = 64
MIN_BETA, MAX_BETA = 1e-6, 1e9
MAX_LISTED_PROBLEMS = 10


class TopologyError(InputError):
    """A topology file that cannot be used; the message is meant for the user as it is."""


def _capacity_in_range(value: float) -> float:
    if 0 < value < MIN_CAPACITY_GBPS:
        raise ValueError(f"a capacity is 0 (no capacity) or at least {MIN_CAPACITY_GBPS:g} Gbps")
    return value


def _bounded_map(value: Any) -> Any:
    # A dict is validated entry by entry with every error kept: bound its size first.
    if isinstance(value, dict) and len(value) > MAX_PORTS:
        raise ValueError(
            f"the map has {len(value)} entries; a switch has at most {MAX_PORTS} ports"
        )
    return value


# A bounded repr: a value may be a huge (aliased) structure, which `str` would walk whole.
_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxdict, _SHORT.maxstring = 2, 3, 3, 20


def _scalar(value: Any) -> Any:
    finite = not isinstance(value, float) or math.isfinite(value)
    if not isinstance(value, (bool, int, float, str)) or not finite:
        raise ValueError(
            f"a scheme parameter is a finite number, a boolean or a text, "
            f"as `ina solve --param` gives it (got {type(value).__name__} "
            f"{_SHORT.repr(value)})"
        )
    return value


Capacity = Annotated[float, Field(ge=0, le=MAX_CAPACITY_GBPS), AfterValidator(_capacity_in_range)]
Port = Annotated[int, Field(ge=1, le=MAX_PORTS)]


class _Strict(BaseModel):
    # strict: no `true` or "1e3" where a number belongs; allow_inf_nan: no .inf / .nan.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class HostSpec(_Strict):
    name: str = Field(min_length=1)
    role: Role = "idle"
    # Server-side aggregation capacity (PARING gives the PS one); None: not an aggregator.
    aggregation_capacity_gbps: Capacity | None = None


class SwitchSpec(_Strict):
    name: str = Field(min_length=1)
    tier: Tier = "other"
    ina: bool = False
    pipelines: int = Field(default=1, ge=1, le=MAX_PIPELINES)
    # Port count of the switch; defaults to the number of links attached to it.
    ports: Port | None = None
    # port → pipeline; defaults to contiguous blocks (see `default_pipeline_map`).
    pipeline_map: Annotated[
        dict[Port, Annotated[int, Field(ge=0)]] | None, BeforeValidator(_bounded_map)
    ] = None
    aggregation_capacity_gbps: Capacity | None = None
    ingress_capacity_gbps: Capacity | None = None
    egress_capacity_gbps: Capacity | None = None
    # Port budget of a reconfigurable (optical patch panel) pool member.
    max_ports: Port | None = None
    # Flows charged to aggregation capacity: the plan's (addressed) or every one (all, EINA).
    aggregates: Literal["addressed", "all"] = "addressed"

    @model_validator(mode="after")
    def _all_needs_ina(self) -> SwitchSpec:
        if self.aggregates == "all" and not self.ina:
            raise ValueError("`aggregates: all` needs `ina: true` (a plain switch merges nothing)")
        return self


class LinkSpec(_Strict):
    a: str
    b: str
    capacity_gbps: Capacity
    # Capacity b→a when it differs from a→b.
    reverse_capacity_gbps: Capacity | None = None
    a_port: Port | None = None
    b_port: Port | None = None
    # capacity_gbps bounds both directions' traffic together (ATRO's (14)).
    shared_capacity: bool = False

    @model_validator(mode="after")
    def _shared_is_one_capacity(self) -> LinkSpec:
        if self.shared_capacity and self.reverse_capacity_gbps is not None:
            raise ValueError(
                "a link with `shared_capacity: true` has one capacity for both "
                "directions; drop `reverse_capacity_gbps`"
            )
        return self


class TaskSpec(_Strict):
    name: str = Field(min_length=1)
    ps: str
    workers: Annotated[list[str], FailFast()] = Field(min_length=1)
    # `free`: a placing scheme (PARING) may put the PS and len(workers) workers on any free
    # server (role idle, or listed by this task); the listed hosts are the input placement of
    # schemes that only route. `fixed`: the listed hosts, as before.
    placement: Literal["fixed", "free"] = "fixed"
    # PARING's R: the most a worker sends; the evaluator caps the task's rate at it.
    rate_cap_gbps: Capacity | None = None
    # PARING's B_v of the server acting as this task's PS, unless that host sets its own
    # `aggregation_capacity_gbps`; the evaluator charges the flows entering the PS to it.
    ps_aggregation_capacity_gbps: Capacity | None = None


class JobSpec(_Strict):
    name: str = Field(min_length=1)
    beta: float = Field(default=1.0, ge=MIN_BETA, le=MAX_BETA)
    tasks: Annotated[list[TaskSpec], FailFast()] = Field(min_length=1)


class TopologySpec(_Strict):
    name: str = "topology"
    description: str = ""
    hosts: list[HostSpec] = Field(min_length=1)
    switches: list[SwitchSpec] = Field(min_length=1)
    links: list[LinkSpec] = Field(min_length=1)
    jobs: list[JobSpec] = Field(default_factory=list)
    # Free-form parameters per scheme, e.g. {"aro": {"quantization": 100}}.
    # Values are scalars, as `ina solve --param KEY=VALUE` gives them.
    schemes: dict[str, dict[str, Annotated[Any, AfterValidator(_scalar)]]] = Field(
        default_factory=dict
    )

    @model_validator(mode="after")
    def _names_unique(self) -> TopologySpec:
        seen: dict[str, str] = {}
        for kind, names in (
            ("hosts", [h.name for h in self.hosts]),
            ("switches", [s.name for s in self.switches]),
        ):
            for i, name in enumerate(names):
                if name in seen:
                    raise ValueError(
                        f"duplicate node name {name!r} ({kind}[{i}] repeats {seen[name]})"
                    )
                seen[name] = f"{kind}[{i}]"
        return self


def default_pipeline_map(ports: int, pipelines: int) -> dict[int, int]:
    """Contiguous port blocks, as on Tofino: ports 1..n split into `pipelines` equal runs.

    Port p (1-based) goes to pipeline floor((p-1) * P / n), so with 32 ports and 4 pipelines,
    ports 1-8 are pipeline 0, 9-16 pipeline 1, and so on.
    """
    return {p: (p - 1) * pipelines // ports for p in range(1, ports + 1)}


@dataclass(frozen=True)
class Task:
    """One aggregation task: workers sending the same gradient shard to one PS."""

    job: str
    name: str
    ps: str
    workers: tuple[str, ...]
    beta: float = 1.0
    placement: Literal["fixed", "free"] = "fixed"
    rate_cap_gbps: float | None = None
    ps_aggregation_capacity_gbps: float | None = None
    # Servers a `free` task may be placed on (empty for `fixed`): role idle or its own hosts.
    free_hosts: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return (self.job, self.name)


@dataclass
class Network:
    """A validated topology: the directed graph plus the tasks to route.

    Graph nodes carry `kind` ("host" / "switch") and the spec fields; each directed edge
    (u, v) carries `capacity_gbps`, `out_port` (port at u, None for hosts) and `in_port`
    (port at v). A link therefore appears as two directed edges.
    """

    name: str
    graph: nx.DiGraph
    tasks: list[Task]
    source: str = "<memory>"
    schemes: dict[str, dict[str, Any]] = field(default_factory=dict)
    jobs_beta: dict[str, float] = field(default_factory=dict)

    @property
    def switches(self) -> list[str]:
        return [n for n, d in self.graph.nodes(data=True) if d["kind"] == "switch"]

    @property
    def hosts(self) -> list[str]:
        return [n for n, d in self.graph.nodes(data=True) if d["kind"] == "host"]

    def is_switch(self, node: str) -> bool:
        return self.graph.nodes[node]["kind"] == "switch"

    def is_ina(self, node: str) -> bool:
        data = self.graph.nodes[node]
        return data["kind"] == "switch" and data["spec"].ina

    def pipelines(self, switch: str) -> int:
        return self.graph.nodes[switch]["spec"].pipelines

    def pipeline_map(self, switch: str) -> dict[int, int]:
        return self.graph.nodes[switch]["pipeline_map"]

    def ingress_pipeline(self, prev: str, switch: str) -> int:
        """Pipeline of `switch` that receives traffic arriving from neighbour `prev`."""
        port = self.graph.edges[prev, switch]["in_port"]
        return self.pipeline_map(switch)[port]

    def capacity(self, u: str, v: str) -> float:
        return self.graph.edges[u, v]["capacity_gbps"]

    def link_key(self, u: str, v: str) -> tuple[str, str]:
        """The capacity the traffic u→v uses: its own direction's, or, on a link with
        `shared_capacity`, the one both directions share (keyed by the sorted ends)."""
        if self.graph.edges[u, v].get("shared"):
            a, b = sorted((u, v))
            return (a, b)
        return (u, v)

    def role(self, host: str) -> Role:
        return self.graph.nodes[host]["spec"].role

    def spec(self, node: str) -> HostSpec | SwitchSpec:
        return self.graph.nodes[node]["spec"]

    def switch_spec(self, switch: str) -> SwitchSpec:
        """`spec` of a node the caller knows is a switch (a host there is a bug)."""
        spec = self.graph.nodes[switch]["spec"]
        if not isinstance(spec, SwitchSpec):
            raise TypeError(f"{switch!r} is a host, not a switch")
        return spec

    def ps_capacity(self, task: Task, ps: str) -> float | None:
        """What `ps` can aggregate as `task`'s PS: its own capacity, else the task's."""
        own = self.spec(ps).aggregation_capacity_gbps if ps in self.graph else None
        return own if own is not None else task.ps_aggregation_capacity_gbps

    def without_links(self, links: set[tuple[str, str]]) -> Network:
        """The same network with the given links (both directions) removed: what the
        controller plans on once it has learnt that they are down."""
        graph = self.graph.copy()
        for u, v in links:
            for a, b in ((u, v), (v, u)):
                if graph.has_edge(a, b):
                    graph.remove_edge(a, b)
        return replace(self, graph=graph)


def hosts_do_not_forward(graph: nx.DiGraph, source: str) -> nx.DiGraph:
    """`graph` without the edges that leave a host other than `source`: a path from `source`
    in it never passes through a host (hosts are endpoints; they do not forward)."""
    return nx.subgraph_view(
        graph, filter_edge=lambda u, _v: u == source or graph.nodes[u]["kind"] == "switch"
    )


def hosts_do_not_forward_to(graph: nx.DiGraph, target: str) -> nx.DiGraph:
    """`graph` without the edges that enter a host other than `target`: a path to `target` in
    it never passes through a host (for searches toward one target from every node)."""
    return nx.subgraph_view(
        graph, filter_edge=lambda _u, v: v == target or graph.nodes[v]["kind"] == "switch"
    )


def load_topology(path: str | Path) -> Network:
    """Read, validate and build a topology file; raises `TopologyError` on any problem."""
    source = str(path)
    data = parse_yaml(read_text(path, TopologyError), source, TopologyError)
    return build_network(data, source)


# The long lists, validated item by item (see the module docstring).
_ITEMS: dict[str, type[BaseModel]] = {
    "hosts": HostSpec,
    "switches": SwitchSpec,
    "links": LinkSpec,
    "jobs": JobSpec,
}


def build_network(data: Any, source: str = "<memory>") -> Network:
    """Validate a parsed topology document and build its `Network`."""
    if not isinstance(data, dict):
        raise TopologyError(
            source, "", "the document must be a mapping with hosts, switches, links"
        )
    problems: list[tuple[str, str]] = []
    count = 0
    checked = dict(data)
    for name, model in _ITEMS.items():
        items = data.get(name)
        if not isinstance(items, list):
            continue
        valid = []
        for i, item in enumerate(items):
            try:
                valid.append(model.model_validate(item))
            except ValidationError as exc:
                count += exc.error_count()
                room = MAX_LISTED_PROBLEMS - len(problems)
                problems += [_problem(err, (name, i), data) for err in exc.errors()[:room]]
        if len(valid) == len(items):
            checked[name] = valid  # model instances are not validated again below
        else:
            checked.pop(name)  # its problems are reported; do not also call it missing
    try:
        spec = TopologySpec.model_validate(checked)
    except ValidationError as exc:
        errors = [e for e in exc.errors() if not (e["type"] == "missing" and e["loc"][0] in data)]
        count += len(errors)
        problems += [_problem(e, (), data) for e in errors[: MAX_LISTED_PROBLEMS - len(problems)]]
    if problems:
        (where, first), rest = problems[0], problems[1:]
        text = "; ".join([first, *(f"{w}: {p}" for w, p in rest)])
        if count > len(problems):
            text += f" (and {count - len(problems)} more problems)"
        raise TopologyError(source, where, text)
    return _check_semantics(spec, source)


def _problem(err: Any, prefix: tuple, data: Any) -> tuple[str, str]:
    return _field_path(prefix + tuple(err["loc"]), data), _plain(err)


def _field_path(loc: tuple, data: Any) -> str:
    """Turn pydantic's location into `links[3].capacity_gbps (link W0-L1)`-style text."""
    parts: list[str] = []
    node = data
    label = ""
    for item in loc:
        if isinstance(item, int):
            parts[-1] = f"{parts[-1]}[{item}]" if parts else f"[{item}]"
        else:
            parts.append(str(item))
        if isinstance(node, (dict, list)):
            try:
                node = node[item]
            except (KeyError, IndexError, TypeError):
                node = None
            if isinstance(node, dict):
                if "name" in node:
                    label = f" ({node['name']})"
                elif "a" in node and "b" in node:
                    label = f" (link {node['a']}-{node['b']})"
    return ".".join(parts) + label


def _plain(err: dict) -> str:
    if err["type"] == "extra_forbidden":
        return "unknown field (check the spelling against topologies/README.md)"
    return plain_error(err)


def _check_semantics(spec: TopologySpec, source: str) -> Network:
    graph = nx.DiGraph()
    for host in spec.hosts:
        graph.add_node(host.name, kind="host", spec=host)
    for sw in spec.switches:
        graph.add_node(sw.name, kind="switch", spec=sw)

    next_port: dict[str, int] = {sw.name: 1 for sw in spec.switches}
    used_ports: dict[str, dict[int, str]] = {sw.name: {} for sw in spec.switches}
    host_links: dict[str, int] = {h.name: 0 for h in spec.hosts}
    for i, link in enumerate(spec.links):
        where = f"links[{i}] (link {link.a}-{link.b})"
        for end in ("a", "b"):
            name = getattr(link, end)
            if name not in graph:
                raise TopologyError(source, f"{where}.{end}", f"unknown node {name!r}")
        if link.a == link.b:
            raise TopologyError(source, where, "a link cannot connect a node to itself")
        if graph.has_edge(link.a, link.b):
            raise TopologyError(source, where, "duplicate link between these two nodes")
        ports: dict[str, int | None] = {}
        for end, port_field in (("a", link.a_port), ("b", link.b_port)):
            name = getattr(link, end)
            if name in host_links:
                host_links[name] += 1
                ports[end] = None
                continue
            port = port_field
            if port is None:
                while next_port[name] in used_ports[name]:
                    next_port[name] += 1
                port = next_port[name]
            if port in used_ports[name]:
                raise TopologyError(
                    source,
                    f"{where}.{end}_port",
                    f"port {port} of {name} is already used by the link to "
                    f"{used_ports[name][port]}",
                )
            used_ports[name][port] = link.b if end == "a" else link.a
            ports[end] = port
        forward = link.capacity_gbps
        reverse = link.reverse_capacity_gbps if link.reverse_capacity_gbps is not None else forward
        shared = link.shared_capacity
        graph.add_edge(
            link.a,
            link.b,
            capacity_gbps=forward,
            out_port=ports["a"],
            in_port=ports["b"],
            shared=shared,
        )
        graph.add_edge(
            link.b,
            link.a,
            capacity_gbps=reverse,
            out_port=ports["b"],
            in_port=ports["a"],
            shared=shared,
        )

    for name, count in host_links.items():
        if count == 0:
            raise TopologyError(source, f"hosts ({name})", f"host {name!r} has no link")

    for i, sw in enumerate(spec.switches):
        graph.nodes[sw.name]["pipeline_map"] = _pipeline_map(sw, used_ports[sw.name], i, source)
        _check_dcn_fields(sw, graph, f"switches[{i}] ({sw.name})", source)

    tasks = _tasks(spec, graph, source)
    return Network(
        name=spec.name,
        graph=graph,
        tasks=tasks,
        source=source,
        schemes=dict(spec.schemes),
        jobs_beta={job.name: job.beta for job in spec.jobs},
    )


def _check_dcn_fields(sw: SwitchSpec, graph: nx.DiGraph, where: str, source: str) -> None:
    """`ingress_capacity_gbps` / `egress_capacity_gbps` (EINA's b^I / b^E, "the link capacity
    of the corresponding ingress / egress of the DCN") restate the switch's links to and from
    other switches, which the evaluator charges: a field the links do not give is refused, so
    that every scheme and the evaluator read the same capacity."""
    for name, value, edges, way in (
        ("ingress_capacity_gbps", sw.ingress_capacity_gbps, graph.out_edges(sw.name), "to"),
        ("egress_capacity_gbps", sw.egress_capacity_gbps, graph.in_edges(sw.name), "from"),
    ):
        links = [
            (u, v) for u, v in edges if graph.nodes[v if u == sw.name else u]["kind"] == "switch"
        ]
        caps = [graph.edges[e]["capacity_gbps"] for e in links]
        if value is None or math.isclose(value, math.fsum(caps), rel_tol=1e-9, abs_tol=1e-12):
            continue
        given = ", ".join(f"{u}->{v} {c:g}" for (u, v), c in zip(links, caps, strict=True))
        raise TopologyError(
            source,
            f"{where}.{name}",
            f"{value:g} Gbps, but the links {way} other switches give "
            f"{math.fsum(caps):g} Gbps ({given or 'it has none'}); the field restates them (the "
            "evaluator charges the links), so make it their sum or leave it out",
        )


def _pipeline_map(sw: SwitchSpec, used: dict[int, str], index: int, source: str) -> dict[int, int]:
    where = f"switches[{index}] ({sw.name})"
    port_count = sw.ports if sw.ports is not None else max(used, default=0) or 1
    too_high = [p for p in used if p > port_count]
    if too_high:
        raise TopologyError(
            source,
            f"{where}.ports",
            f"the switch has {port_count} ports but links use port {max(too_high)}",
        )
    if sw.pipelines > port_count:
        raise TopologyError(
            source,
            f"{where}.pipelines",
            f"{sw.pipelines} pipelines cannot share {port_count} ports",
        )
    if sw.pipeline_map is None:
        return default_pipeline_map(port_count, sw.pipelines)
    bad = {p: pipe for p, pipe in sw.pipeline_map.items() if not 0 <= pipe < sw.pipelines}
    if bad:
        port, pipe = next(iter(bad.items()))
        raise TopologyError(
            source,
            f"{where}.pipeline_map.{port}",
            f"pipeline {pipe} does not exist (the switch has pipelines 0..{sw.pipelines - 1})",
        )
    uncovered = sorted(p for p in used if p not in sw.pipeline_map)
    if uncovered:
        raise TopologyError(
            source,
            f"{where}.pipeline_map",
            f"the map does not cover port(s) {uncovered} used by links "
            f"(to {', '.join(used[p] for p in uncovered)})",
        )
    return dict(sw.pipeline_map)


def _tasks(spec: TopologySpec, graph: nx.DiGraph, source: str) -> list[Task]:
    tasks: list[Task] = []
    seen: set[tuple[str, str]] = set()
    feeders: dict[str, set[str]] = {}
    for j, job in enumerate(spec.jobs):
        for t, task in enumerate(job.tasks):
            where = f"jobs[{j}].tasks[{t}] ({job.name}/{task.name})"
            if (job.name, task.name) in seen:
                raise TopologyError(source, where, "duplicate task name in this job")
            seen.add((job.name, task.name))
            _check_host(graph, task.ps, "ps", f"{where}.ps", source)
            if len(set(task.workers)) != len(task.workers):
                raise TopologyError(source, f"{where}.workers", "a worker is listed twice")
            if task.ps not in feeders:
                feeders[task.ps] = _can_send_to(graph, task.ps)
            for w, worker in enumerate(task.workers):
                _check_host(graph, worker, "worker", f"{where}.workers[{w}]", source)
                if worker not in feeders[task.ps]:
                    raise TopologyError(
                        source, f"{where}.workers[{w}]", _why_unreachable(graph, worker, task.ps)
                    )
            tasks.append(
                Task(
                    job.name,
                    task.name,
                    task.ps,
                    tuple(task.workers),
                    job.beta,
                    task.placement,
                    task.rate_cap_gbps,
                    task.ps_aggregation_capacity_gbps,
                )
            )
    return [_with_free_hosts(spec, graph, t, source) for t in tasks]


def _with_free_hosts(spec: TopologySpec, graph: nx.DiGraph, task: Task, source: str) -> Task:
    """A `free` task's servers: idle hosts and its job's own, none another job lists. A job of
    several free tasks is one training task with as many PSs (PARING Sec. IV-C.3)."""
    if task.placement == "fixed":
        return task
    j = next(i for i, job in enumerate(spec.jobs) if job.name == task.job)
    where = f"jobs[{j}] ({task.job}).tasks.placement"
    siblings = spec.jobs[j].tasks
    if any(t.placement != "free" for t in siblings):
        raise TopologyError(
            source,
            where,
            "a job with several tasks is placed as a whole: "
            "every task `placement: free` (one PS each, PARING Sec. IV-C.3) "
            "or none",
        )
    if len({len(t.workers) for t in siblings}) > 1:
        raise TopologyError(
            source,
            where,
            "the tasks of a `placement: free` job share its "
            "workers (each PS holds a shard of the model): list as many "
            "workers in every task",
        )
    others = {
        h
        for job in spec.jobs
        for t in job.tasks
        if job.name != task.job
        for h in (t.ps, *t.workers)
    }
    own = {h for t in siblings for h in (t.ps, *t.workers)}
    free = tuple(
        h.name for h in spec.hosts if (h.role == "idle" or h.name in own) and h.name not in others
    )
    return replace(task, free_hosts=free)


def _can_send_to(graph: nx.DiGraph, ps: str) -> set[str]:
    """Nodes with a usable path to `ps`: links of positive capacity, switches in between
    (hosts never forward). One backward search per PS, however many workers it has."""
    reached = {ps}
    frontier = deque([ps])
    while frontier:
        node = frontier.popleft()
        for prev in graph.predecessors(node):
            if prev in reached or graph.edges[prev, node]["capacity_gbps"] <= 0:
                continue
            reached.add(prev)
            if graph.nodes[prev]["kind"] == "switch":
                frontier.append(prev)
    return reached


def _why_unreachable(graph: nx.DiGraph, worker: str, ps: str) -> str:
    """Why `_can_send_to` left the worker out (searched again only for the message)."""
    if not nx.has_path(graph, worker, ps):
        return f"worker {worker!r} has no path to its PS {ps!r}"
    hosts = {n for n, d in graph.nodes(data=True) if d["kind"] == "host"} - {worker, ps}
    if not nx.has_path(graph.subgraph(graph.nodes - hosts), worker, ps):
        return (
            f"every path from worker {worker!r} to its PS {ps!r} passes through another "
            f"host; hosts do not forward, connect the worker to a switch"
        )
    return f"every path from worker {worker!r} to its PS {ps!r} crosses a link of capacity 0"


def _check_host(graph: nx.DiGraph, name: str, role: str, where: str, source: str) -> None:
    if name not in graph:
        raise TopologyError(source, where, f"unknown node {name!r}")
    data = graph.nodes[name]
    if data["kind"] != "host":
        raise TopologyError(source, where, f"{name!r} is a switch, not a {role} host")
    if data["spec"].role != role:
        raise TopologyError(
            source, where, f"host {name!r} has role {data['spec'].role!r}, expected {role!r}"
        )


def dump_topology(spec: dict[str, Any], path: str | Path) -> None:
    """Write a topology document (as produced by the generators) to YAML, validating it first."""
    build_network(spec, str(path))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(yaml.safe_dump(spec, sort_keys=False, default_flow_style=None))
