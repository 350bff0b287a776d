"""The network a topology-choosing scheme (ATRO) built, as an ordinary topology file.

`ina solve POOL.yaml --scheme atro --topology-out FILE.yaml` writes it: the plan's patch-panel
connections become links with explicit ports and `shared_capacity: true` (ATRO's (14): both
directions' traffic shares a link), the switches they touch keep their specs with `ports` set
to the pool budget η_u (`max_ports`, which only means something in a pool, is dropped), and the
hosts and jobs of the planned tasks are kept. Every other command reads the file as any other
topology, and the plan evaluates on it to the rate the scheme claimed.

`judged` is that network as the evaluator and the compiler see it, from the topology the plan
was made for (the pool, or the chosen file itself): a plan with a patch panel is valid only on
the network the panel builds, and only if the pool can build it (ATRO's constraints on x):
every connection a candidate link of the topology, never between two hosts (Eq. 4), a pair at
most once (6), at most η_u (`max_ports`, else `ports`) connections at a switch (7) and one at a
host (7)-(8), only hosts of the topology's tasks (N_n), the candidate's capacity b_u^v shared by
both directions (14), ports within η_u and each used once. A plan without a patch panel runs on
the topology as it is: on a pool (a switch with `max_ports`) that builds every candidate, which
only a pool whose candidates fit the port budgets can.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from controller.model.network import (
    Network,
    SwitchSpec,
    default_pipeline_map,
    dump_topology,
    load_topology,
)
from controller.model.plan import Plan, panel_problems

BUILT = "the network the plan's patch panel builds"  # what the paths are replayed on


def chosen_topology(network: Network, plan: Plan) -> dict[str, Any]:
    """The topology document of `plan.patch_panel` on the pool `network`."""
    assert plan.patch_panel is not None
    planned = {tp.key for tp in plan.tasks}
    tasks = [t for t in network.tasks if t.key in planned]
    hosts = {h for t in tasks for h in (*t.workers, t.ps)}
    switches = {c["a"] for c in plan.patch_panel} | {
        c["b"] for c in plan.patch_panel if c["b"] not in hosts
    }
    host_specs = [
        network.spec(h).model_dump(exclude_defaults=True) for h in network.hosts if h in hosts
    ]
    switch_specs = []
    for s in network.switches:
        if s in switches:
            spec = network.switch_spec(s)
            doc = spec.model_dump(exclude_defaults=True, exclude={"max_ports"})
            doc["ports"] = spec.max_ports or spec.ports
            switch_specs.append(doc)
    links = []
    for c in plan.patch_panel:
        link = {
            "a": c["a"],
            "b": c["b"],
            "capacity_gbps": c["capacity_gbps"],
            "a_port": c["a_port"],
            "shared_capacity": True,
        }
        if c["b_port"] is not None:
            link["b_port"] = c["b_port"]
        links.append(link)
    jobs: dict[str, dict[str, Any]] = {}
    for t in tasks:
        job = jobs.setdefault(t.job, {"name": t.job, "beta": t.beta, "tasks": []})
        job["tasks"].append({"name": t.name, "ps": t.ps, "workers": list(t.workers)})
    return {
        "name": chosen_name(network.name, plan.scheme),
        "description": f"the network {plan.scheme} built from the pool {network.source} "
        f"({len(links)} links of the patch panel)",
        "hosts": host_specs,
        "switches": switch_specs,
        "links": links,
        "jobs": list(jobs.values()),
        "schemes": dict(network.schemes),
    }


def chosen_name(pool: str, scheme: str) -> str:
    """The name of the network `scheme` chose from the pool named `pool`."""
    return f"{pool}-{scheme}"


def write(network: Network, plan: Plan, path: str | Path) -> None:
    """Validate and write the chosen topology (`dump_topology` loads it before writing)."""
    dump_topology(chosen_topology(network, plan), path)


def built(network: Network, plan: Plan, directory: str | Path) -> Network:
    """The chosen network as a file in `directory`, loaded: what `ina mininet` emulates (its
    controller process reads the topology from that file)."""
    path = Path(directory) / f"{chosen_name(network.name, plan.scheme)}.yaml"
    write(network, plan, path)
    return load_topology(path)


def judged(network: Network, plan: Plan) -> tuple[Network, list[str]]:
    """The network `plan` runs on, and why it cannot be built (module docstring). With
    problems, the network holds the connections that have none, so that the replay of the
    paths still names the links they lack."""
    if plan.patch_panel is None:
        return network, _every_candidate_problems(network)
    problems, kept = _connection_problems(network, plan.patch_panel)
    return _built(network, kept), problems


def _budget(spec: SwitchSpec) -> int | None:
    """η_u as ATRO reads it (`solvers.atro.instance`)."""
    return spec.max_ports if spec.max_ports is not None else spec.ports


def _connection_problems(
    network: Network, panel: list[dict[str, Any]]
) -> tuple[list[str], list[dict[str, Any]]]:
    g = network.graph
    task_hosts = {h for t in network.tasks for h in (t.ps, *t.workers, *t.free_hosts)}
    problems = [f"patch panel: {p}" for _j, p in panel_problems(panel)]
    malformed = {j for j, _p in panel_problems(panel)}
    kept, degree = [], dict.fromkeys(g.nodes, 0)
    for j, c in enumerate(panel):
        a, b = c["a"], c["b"]
        if j in malformed:
            continue
        link = f"patch panel connection {a}-{b}"
        unknown = [n for n in (a, b) if n not in g]
        if unknown:
            problems.append(f"{link}: {', '.join(unknown)} is no node of the topology")
            continue
        degree[a] += 1
        degree[b] += 1
        wrong = _connection_problem(network, c, task_hosts)
        if wrong:
            problems.append(f"{link}: {wrong}")
        else:
            kept.append(c)
    for node, n in degree.items():
        if network.is_switch(node):
            spec = network.switch_spec(node)
            budget = _budget(spec)
            if budget is not None and n > budget:
                name = "max_ports" if spec.max_ports is not None else "ports"
                problems.append(
                    f"patch panel: {node} has {n} links, over its {name} {budget} (ATRO (7))"
                )
        elif n > 1:
            problems.append(
                f"patch panel: host {node} has {n} links; a host has one port (ATRO (8))"
            )
    return problems, kept


def _connection_problem(network: Network, c: dict[str, Any], task_hosts: set[str]) -> str:
    """What is wrong with one connection on this topology ('' if nothing)."""
    a, b = c["a"], c["b"]
    if not network.is_switch(a):
        if network.is_switch(b):
            return f"`a` is the switch end, `b` the host ({b} is the switch)"
        return "it links two hosts; hosts connect to switches only (ATRO Eq. 4)"
    if not network.graph.has_edge(a, b):
        return "it is not a candidate link of the topology"
    if not network.is_switch(b) and task_hosts and b not in task_hosts:
        return f"{b} is no worker or PS of the topology's tasks (ATRO Eq. 4)"
    capacity = min(network.capacity(a, b), network.capacity(b, a))
    if capacity <= 0:
        return "the candidate link has no capacity"
    if not math.isclose(c["capacity_gbps"], capacity, rel_tol=1e-9):
        return (
            f"it records {c['capacity_gbps']:g} Gbps, the candidate link has "
            f"{capacity:g} Gbps (the smaller of its directions, ATRO (14))"
        )
    if network.is_switch(b) and c["b_port"] is None:
        return f"b_port is missing: {b} is a switch"
    if not network.is_switch(b) and c["b_port"] is not None:
        return f"b_port must be null: {b} is a host, with one port"
    for node, port in ((a, c["a_port"]), (b, c["b_port"])):
        if port is None:
            continue
        spec = network.switch_spec(node)
        budget = _budget(spec)
        if budget is not None and port > budget:
            return f"port {port} of {node} is beyond its {budget} ports"
        if spec.pipeline_map is not None and port not in spec.pipeline_map:
            return f"port {port} of {node} has no pipeline in its pipeline_map"
    return ""


def _built(network: Network, panel: list[dict[str, Any]]) -> Network:
    """The topology's nodes with the panel's links only: the candidate's capacity, shared by
    both directions (14), the panel's ports and each switch's pipelines over its η_u ports
    (as `chosen_topology` writes them)."""
    graph = network.graph.copy()
    graph.remove_edges_from(list(graph.edges))
    graph.graph["links"] = BUILT
    used: dict[str, list[int]] = {s: [] for s in network.switches}
    for c in panel:
        a, b, pa, pb = c["a"], c["b"], c["a_port"], c["b_port"]
        capacity = min(network.capacity(a, b), network.capacity(b, a))
        graph.add_edge(a, b, capacity_gbps=capacity, out_port=pa, in_port=pb, shared=True)
        graph.add_edge(b, a, capacity_gbps=capacity, out_port=pb, in_port=pa, shared=True)
        used[a].append(pa)
        if pb is not None:
            used[b].append(pb)
    for s, ports in used.items():
        spec = network.switch_spec(s)
        count = _budget(spec) or max(ports, default=1)
        graph.nodes[s]["pipeline_map"] = (
            dict(spec.pipeline_map)
            if spec.pipeline_map
            else default_pipeline_map(count, spec.pipelines)
        )
    return replace(network, graph=graph)


def _every_candidate_problems(network: Network) -> list[str]:
    """A plan without a patch panel on a pool builds every candidate: fine only where the
    budgets hold them all. One line for the whole pool."""
    if not any(network.switch_spec(s).max_ports is not None for s in network.switches):
        return []
    g = network.graph
    budgets = {s: network.switch_spec(s).max_ports for s in network.switches}
    over = [
        f"{s} {g.out_degree(s)} links for its {n} ports"
        for s, n in budgets.items()
        if n is not None and g.out_degree(s) > n
    ]
    over += [
        f"host {h} {g.out_degree(h)} links for its one port"
        for h in network.hosts
        if g.out_degree(h) > 1
    ]
    if not over:
        return []
    more = f" (and {len(over) - 3} more)" if len(over) > 3 else ""
    return [
        (
            f"the topology is a pool of candidate links (switches with max_ports): a plan "
            f"without a patch_panel builds every candidate, which would give "
            f"{', '.join(over[:3])}{more}; on a pool, let a topology-choosing scheme choose "
            f"the links (`ina solve --scheme atro`), or route on the network it chose "
            f"(`--topology-out`)"
        )
    ]
