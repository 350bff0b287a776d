"""PARING on Mininet with real packets (root). Several PSs (Sec. IV-C.3): the hosts PARING chose
run the agents, each worker sends each PS its shard, each PS checks its own shard's sum. Fine
mode (Sec. V-C) on both targets: a switch merges a share of the fragments and forwards the rest
raw, and the PS receives, fragment by fragment, the flows the share gives."""

from __future__ import annotations

import shutil

import pytest
from conftest import EXAMPLES, MININET

from controller.emulation.mininet_runner import run
from controller.model.network import load_topology
from controller.solvers import SolveOptions, solve
from dataplane.bmv2 import HOW_TO_GET_BMV2
from dataplane.frame import K
from dataplane.p4build import HOW_TO_GET_P4C, compiler_path

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


BMV2 = [
    pytest.mark.skipif(shutil.which("simple_switch_grpc") is None, reason=HOW_TO_GET_BMV2),
    pytest.mark.skipif(compiler_path() is None, reason=HOW_TO_GET_P4C),
]


@pytest.mark.parametrize(
    ("target", "gradient_mb"), [("embedded", 0.1), pytest.param("bmv2", 0.1, marks=BMV2)]
)
def test_fine_mode_splits_the_fragments_at_the_share_and_stays_exact(target, gradient_mb):
    """paring-fine.yaml: S merges W1 and W2 on the fragments below s = 9/11 and forwards both
    raw above it; W3 crosses S raw throughout. The PS must see 2 flows per fragment below the
    cut (S's sum, W3) and 3 above (W1, W2, W3), the cut at the row the workers round s to."""
    network = load_topology(EXAMPLES / "paring-fine.yaml")
    plan = solve(network, "paring", SolveOptions(seed=0, params={"fine": True}))
    (point,) = plan.tasks[0].aggregation
    assert 0 < point.share < 1
    result = run(network, plan, iterations=2, gradient_mb=gradient_mb, timeout=240, target=target)
    assert result.exact and len(result.iterations) == 2
    rows = -(-int(gradient_mb * 2**20) // 4 // K)
    cut = round(9 / 11 * rows)
    expected = (2 * cut + 3 * (rows - cut)) / rows  # 2.18 (24/11 up to the rounding)
    for it in result.iterations:
        assert it.ps_exact is True
        assert it.ps_flows == pytest.approx(expected, abs=0.002), it.ps_flows


def test_fine_mode_with_two_pss_splits_one_shard_and_stays_exact():
    """paring-fine-2ps.yaml: shard 1 is paring-fine.yaml's split tree (2 flows per fragment
    below s = 9/11 at its PS, 3 above), shard 2 finds S spent (3 raw flows at its PS); both
    PSs at once, each checking its shard's sum."""
    network = load_topology(EXAMPLES / "paring-fine-2ps.yaml")
    plan = solve(network, "paring", SolveOptions(seed=0, params={"fine": True}))
    result = run(network, plan, iterations=1, gradient_mb=0.1, timeout=240)
    assert result.exact
    rows = -(-int(0.1 * plan.tasks[0].model_share * 2**20) // 4 // K)  # shard 1's rows
    cut = round(9 / 11 * rows)
    expected = {plan.tasks[0].ps: (2 * cut + 3 * (rows - cut)) / rows, plan.tasks[1].ps: 3}
    assert sorted(it.ps for it in result.iterations) == sorted(expected)
    for it in result.iterations:
        assert it.ps_exact is True
        assert it.ps_flows == pytest.approx(expected[it.ps], abs=0.003), (it.ps, it.ps_flows)
