"""PARING with several PSs (Sec. IV-C.3) on Mininet with real packets (root): the hosts PARING
chose run the agents, each worker sends each PS its shard, each PS checks its own shard's sum."""

from __future__ import annotations

from conftest import EXAMPLES, MININET

from controller.mininet_runner import run
from controller.network import load_topology
from controller.solvers import SolveOptions, solve

pytestmark = MININET


def test_two_pss_each_sum_their_shard_exactly():
    network = load_topology(EXAMPLES / "paring-2ps.yaml")
    plan = solve(network, "paring", SolveOptions(seed=0))
    assert [round(tp.model_share, 3) for tp in plan.tasks] == [0.667, 0.333]
    result = run(network, plan, iterations=1, gradient_mb=0.1, timeout=240)
    assert result.exact
    assert sorted(it.ps for it in result.iterations) == sorted(tp.ps for tp in plan.tasks)
    for it in result.iterations:
        # each PS merges two flows per fragment: its tree's last aggregator's and one more
        assert it.ps_exact is True and round(it.ps_flows) == 2, (it.ps, it.ps_flows)
