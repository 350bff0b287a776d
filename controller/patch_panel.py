"""The network a topology-choosing scheme (ATRO) built, as an ordinary topology file.

`ina solve POOL.yaml --scheme atro --topology-out FILE.yaml` writes it: the plan's patch-panel
connections become links with explicit ports and `shared_capacity: true` (ATRO's (14): both
directions' traffic shares a link), the switches they touch keep their specs with `ports` set
to the pool budget η_u (`max_ports`, which only means something in a pool, is dropped), and the
hosts and jobs of the planned tasks are kept. Every other command reads the file as any other
topology, and the plan evaluates on it to the rate the scheme claimed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from controller.network import Network, dump_topology, load_topology
from controller.plan import Plan


def chosen_topology(network: Network, plan: Plan) -> dict[str, Any]:
    """The topology document of `plan.patch_panel` on the pool `network`."""
    assert plan.patch_panel is not None
    planned = {tp.key for tp in plan.tasks}
    tasks = [t for t in network.tasks if t.key in planned]
    hosts = {h for t in tasks for h in (*t.workers, t.ps)}
    switches = {c["a"] for c in plan.patch_panel} | {
        c["b"] for c in plan.patch_panel if c["b"] not in hosts}
    host_specs = [network.spec(h).model_dump(exclude_defaults=True)
                  for h in network.hosts if h in hosts]
    switch_specs = []
    for s in network.switches:
        if s in switches:
            spec = network.spec(s)
            doc = spec.model_dump(exclude_defaults=True, exclude={"max_ports"})
            doc["ports"] = spec.max_ports or spec.ports
            switch_specs.append(doc)
    links = []
    for c in plan.patch_panel:
        link = {"a": c["a"], "b": c["b"], "capacity_gbps": c["capacity_gbps"],
                "a_port": c["a_port"], "shared_capacity": True}
        if c["b_port"] is not None:
            link["b_port"] = c["b_port"]
        links.append(link)
    jobs: dict[str, dict[str, Any]] = {}
    for t in tasks:
        job = jobs.setdefault(t.job, {"name": t.job, "beta": t.beta, "tasks": []})
        job["tasks"].append({"name": t.name, "ps": t.ps, "workers": list(t.workers)})
    return {
        "name": f"{network.name}-{plan.scheme}",
        "description": f"the network {plan.scheme} built from the pool {network.source} "
                       f"({len(links)} links of the patch panel)",
        "hosts": host_specs, "switches": switch_specs, "links": links,
        "jobs": list(jobs.values()), "schemes": dict(network.schemes),
    }


def write(network: Network, plan: Plan, path: str | Path) -> None:
    """Validate and write the chosen topology (`dump_topology` loads it before writing)."""
    dump_topology(chosen_topology(network, plan), path)


def built(network: Network, plan: Plan, directory: str | Path) -> Network:
    """The chosen network as a file in `directory`, loaded: what `ina mininet` emulates (its
    controller process reads the topology from that file)."""
    path = Path(directory) / f"{network.name}-{plan.scheme}.yaml"
    write(network, plan, path)
    return load_topology(path)
