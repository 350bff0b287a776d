"""`ina show`'s picture: hosts coloured by the plan's roles, a pool's built links told from its
candidates, and switch labels kept (as text in an SVG) on a network too large for host labels."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from controller.model.network import build_network, load_topology
from controller.model.topogen import leaf_spine, pool
from controller.solvers import SolveOptions, solve
from controller.tools.draw import HOST_LABELS, host_roles, link_kinds

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "topologies" / "examples"


def test_hosts_take_the_roles_a_placing_plan_gives_them():
    network = load_topology(EXAMPLES / "paring-fig1.yaml")
    plan = solve(network, "paring")
    roles = host_roles(network, plan)
    (task,) = plan.tasks
    assert roles[task.ps] == "ps"
    assert {h for h, r in roles.items() if r == "worker"} == set(task.paths)
    # PARING placed workers on idle servers and left some the file lists as workers unused
    assert any(network.role(h) == "idle" for h in task.paths)
    assert any(network.role(h) == "worker" and roles[h] == "unused" for h in network.hosts)
    assert {h for h, r in roles.items() if r == "unused"} == (
        set(network.hosts) - set(task.paths) - {task.ps}
    )
    assert host_roles(network, None) == {h: network.role(h) for h in network.hosts}


def test_a_pool_plan_shows_which_candidates_it_built():
    network = build_network(pool(switches=3, max_ports=4, workers=4), "pool.yaml")
    plan = solve(network, "atro", SolveOptions(time_limit=20))
    kinds = link_kinds(network, plan)
    built = {tuple(sorted((c["a"], c["b"]))) for c in plan.patch_panel}
    assert {e for e, k in kinds.items() if k == "built"} == built
    assert {e for e, k in kinds.items() if k == "not built"} == set(kinds) - built != set()
    assert set(link_kinds(network, None).values()) == {"link"}


def test_a_large_svg_keeps_every_switch_label_as_text(tmp_path):
    doc = leaf_spine(seed=0)
    topology = tmp_path / "ls.yaml"
    topology.write_text(yaml.safe_dump(doc))
    assert len(doc["hosts"]) + len(doc["switches"]) > HOST_LABELS
    out = tmp_path / "ls.svg"
    subprocess.run(
        [sys.executable, "-m", "controller.cli", "show", str(topology), "--png", str(out)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=300,
    )
    texts = set(re.findall(r"<text[^>]*>([^<]+)</text>", out.read_text()))
    switches = {s["name"] for s in doc["switches"]}
    assert switches <= texts, sorted(switches - texts)[:5]
    assert not texts & {h["name"] for h in doc["hosts"]}  # host labels would overlap
