"""EINA's closed loop on Mininet with real packets (root): edge aggregators as INA switches that
merge every flow entering them, the DCN as a plain switch, and with two PSs the model sharded
over them (each worker sends each PS its shard; each PS checks its own shard's sum)."""

from __future__ import annotations

import pytest
from conftest import EXAMPLES, MININET

from controller.emulation.mininet_runner import run
from controller.model.network import load_topology
from controller.solvers import SolveOptions, solve

pytestmark = MININET


def _run(example: str):
    network = load_topology(EXAMPLES / f"{example}.yaml")
    plan = solve(network, "eina", SolveOptions(seed=0, params={"num_workers": 1}))
    return plan, run(network, plan, iterations=2, gradient_mb=0.1, timeout=120)


def test_two_ps_shards_each_sum_exactly():
    plan, result = _run("eina-2ps")
    shares = {tp.ps: tp.model_share for tp in plan.tasks}
    assert sorted(shares) == ["PS0", "PS1"] and all(s > 0 for s in shares.values()), shares
    assert result.exact
    assert [(it.iteration, it.ps) for it in result.iterations] == [
        (1, "PS0"),
        (1, "PS1"),
        (2, "PS0"),
        (2, "PS1"),
    ]
    for it in result.iterations:
        assert it.ps_exact is True, f"PS {it.ps}'s own shard check, iteration {it.iteration}"
        assert it.model_share == shares[it.ps]
        # each PS's aggregator merges all four workers' shards: one flow per fragment into it
        # (the PS's own count of distinct flows; the link also carries recovery traffic)
        assert it.ps_flows == 1


def test_fig1_one_merged_flow_reaches_the_ps():
    plan, result = _run("eina-fig1")
    assert plan.tasks[0].rate_gbps == pytest.approx(0.5)
    assert result.exact
    assert all(it.ps_exact is True and it.ps_flows == 1 for it in result.iterations)
