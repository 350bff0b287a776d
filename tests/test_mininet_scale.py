"""The closed loop at 40 workers on Mininet (root): only the plan's hosts built, the workers
served by shared agent processes (dataplane/multihost.py), every sum exact."""

from __future__ import annotations

import pytest
from conftest import MININET

from controller.emulation.mininet_runner import Emulation
from controller.model import topogen
from controller.model.network import dump_topology, load_topology
from controller.model.topogen import Workload
from controller.solvers import solve
from controller.tools.bench.scale import WIRE_MBPS, wire_scale

pytestmark = MININET
WORKERS = 40


@pytest.mark.parametrize("scheme", ["shortest", "aro"])
def test_forty_workers_share_eight_agent_processes_and_every_sum_is_exact(scheme, tmp_path):
    """A 4x4 leaf-spine with 16 servers per leaf, 40 of them workers: 24 idle servers are not
    built, and 8 processes serve the 40 workers (5 each)."""
    path = tmp_path / "ls.yaml"
    dump_topology(
        topogen.leaf_spine(
            leaves=4, spines=4, hosts_per_leaf=16, workload=Workload(workers_per_job=WORKERS)
        ),
        path,
    )
    network = load_topology(path)
    plans = {s: solve(network, s) for s in ("shortest", "aro")}
    plan = plans[scheme]
    # both paced as `ina bench scale` paces them: at the emulator's pace, not a collapse
    scale = wire_scale(plans, WIRE_MBPS["embedded"])
    with Emulation(network, plan, switches="plan", agent_processes=8, pace_mbps=scale) as emu:
        assert len(emu.net.hosts) == WORKERS + 1
        (it,) = emu.iterate(0.02, 1, timeout=120)
    assert it.exact and it.ps_exact
    assert set(it.worker_reports) == set(plan.tasks[0].paths)
    assert all(r["exact"] for r in it.worker_reports.values())
