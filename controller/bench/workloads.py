"""Random leaf-spine workloads of the ARO paper (Sec. IV-A), as topology documents.

Built here rather than in a topology generator so the benchmark fixes its own settings: hosts
are wired before spines on each leaf, so with the default contiguous port→pipeline map a leaf's
servers and its spine uplinks land on different pipelines, as on a Tofino front panel.
"""

from __future__ import annotations

import random
from typing import Any


def leaf_spine_workload(
    *, leaves: int = 24, spines: int = 24, servers: int = 24, capacity: float = 100.0,
    ina_fraction: float = 0.2, pipelines: int = 4, jobs: int = 1, tasks_per_job: int = 1,
    workers: int = 200, seed: int = 0,
) -> dict[str, Any]:
    """ARO's cluster: the PS of task i sits under leaf i, which is always INA (Sec. IV-A).

    A job's tasks share its workers (data parallelism); jobs get disjoint workers drawn
    uniformly at random from the servers that host no PS.
    """
    rng = random.Random(seed)
    leaf_names = [f"L{i}" for i in range(leaves)]
    spine_names = [f"S{i}" for i in range(spines)]
    n_tasks = jobs * tasks_per_job
    ps_leaves = set(leaf_names[:n_tasks])
    count = round(ina_fraction * (leaves + spines))
    others = [s for s in leaf_names + spine_names if s not in ps_leaves]
    ina = ps_leaves | set(rng.sample(others, max(0, count - len(ps_leaves))))

    hosts, links = [], []
    servers_of = {leaf: [f"H{leaf[1:]}_{k}" for k in range(servers)] for leaf in leaf_names}
    ps_hosts = [servers_of[leaf_names[i]][0] for i in range(n_tasks)]
    free = [h for leaf in leaf_names for h in servers_of[leaf] if h not in ps_hosts]
    chosen = rng.sample(free, jobs * workers)
    role = {h: "ps" for h in ps_hosts} | {h: "worker" for h in chosen}
    for leaf in leaf_names:
        for h in servers_of[leaf]:
            hosts.append({"name": h, "role": role.get(h, "idle")})
            links.append({"a": h, "b": leaf, "capacity_gbps": capacity})
    for leaf in leaf_names:
        for spine in spine_names:
            links.append({"a": leaf, "b": spine, "capacity_gbps": capacity})
    switches = [
        {"name": s, "tier": "leaf" if s.startswith("L") else "spine", "ina": s in ina,
         "pipelines": pipelines if s in ina else 1}
        for s in leaf_names + spine_names
    ]
    job_docs = []
    for j in range(jobs):
        members = sorted(chosen[j * workers:(j + 1) * workers])
        tasks = [
            {"name": f"t{k}", "ps": ps_hosts[j * tasks_per_job + k], "workers": members}
            for k in range(tasks_per_job)
        ]
        job_docs.append({"name": f"job{j}", "tasks": tasks})
    return {
        "name": f"leaf-spine-{leaves}x{spines}-seed{seed}",
        "hosts": hosts, "switches": switches, "links": links, "jobs": job_docs,
    }
