"""Partial (fine-grained) aggregation: a point merges the fragments in [0, share) and forwards
the rest raw. Expected numbers are worked out by hand in each test."""

from __future__ import annotations

import pytest
from conftest import EXAMPLES

from controller.evaluator.evaluate import evaluate
from controller.model.network import build_network, load_topology
from controller.model.plan import AggregationPoint, Plan, PlanFormatError, TaskPlan, parse_plan
from controller.solvers import SolveOptions, solve


def star(link: float = 10, cap: float = 3) -> dict:
    """Two workers under S (aggregates `cap` Gbps), S to the PS over one `link` Gbps link."""
    return {
        "hosts": [
            {"name": "W1", "role": "worker"},
            {"name": "W2", "role": "worker"},
            {"name": "PS", "role": "ps"},
        ],
        "switches": [{"name": "S", "ina": True, "aggregation_capacity_gbps": cap}],
        "links": [
            {"a": "W1", "b": "S", "capacity_gbps": 100},
            {"a": "W2", "b": "S", "capacity_gbps": 100},
            {"a": "S", "b": "PS", "capacity_gbps": link},
        ],
        "jobs": [{"name": "j", "tasks": [{"name": "t", "ps": "PS", "workers": ["W1", "W2"]}]}],
    }


def plan_with(share: float) -> Plan:
    tp = TaskPlan(
        "j",
        "t",
        "PS",
        0.0,
        {"W1": ["W1", "S", "PS"], "W2": ["W2", "S", "PS"]},
        [AggregationPoint("S", 0, 2, "PS", None, share)],
    )
    return Plan("hand", "heuristic", 0.0, None, 0.0, None, [tp])


def test_half_share_counts_fractional_flows():
    network = build_network(star(link=3, cap=3))
    result = evaluate(network, plan_with(0.5))
    # S -> PS carries the merged half (0.5 flow) and both raw halves (2 x 0.5): 1.5 flows;
    # S merges 2 x 0.5 = 1 flow's worth. Rate = min(3 / 1.5, 3 / 1) = 2.
    (ps_link,) = [ll for ll in result.link_loads if ll.dst == "PS"]
    assert ps_link.flows == pytest.approx(1.5)
    assert result.tasks[0].rate_gbps == pytest.approx(2.0)
    assert result.consistent
    assert not result.beyond_data_plane  # the compiler deploys it (controller.compiler.segments)


def test_whole_share_is_the_old_behaviour():
    network = build_network(star(link=3, cap=3))
    result = evaluate(network, plan_with(1.0))
    assert result.tasks[0].rate_gbps == pytest.approx(1.5)  # S merges 2 flows: 3 / 2
    assert not result.beyond_data_plane
    assert "share" not in plan_with(1.0).to_dict()["tasks"][0]["aggregation"][0]


def test_share_round_trips_and_is_range_checked():
    data = plan_with(0.25).to_dict()
    assert parse_plan(data).tasks[0].aggregation[0].share == 0.25
    data["tasks"][0]["aggregation"][0]["share"] = 1.5
    with pytest.raises(PlanFormatError, match="share"):
        parse_plan(data)


def test_atp_best_effort_gives_grids_2_43_on_its_fig1():
    network = load_topology(EXAMPLES / "grid-fig1.yaml")
    coarse = solve(network, "atp", SolveOptions(seed=0))
    assert coarse.tasks[0].rate_gbps == pytest.approx(2.25)
    fine = solve(network, "atp", SolveOptions(seed=0, params={"partial": True}))
    result = evaluate(network, fine)
    assert result.consistent, result.problems
    # S1 merges 12/13 of the fragments of W1-W4 (4 x 12/13 x r = 9 Gbps) and forwards 1/13
    # raw: L1 carries 12/13 + 4/13 = 16/13 flows x r = 3 Gbps, so r = 39/16 = 2.4375.
    assert fine.tasks[0].rate_gbps == pytest.approx(39 / 16, rel=1e-6)
    assert result.tasks[0].rate_gbps == pytest.approx(39 / 16, rel=1e-6)
    s1 = next(a for a in fine.tasks[0].aggregation if a.switch == "S1")
    assert s1.share == pytest.approx(12 / 13, rel=1e-6)
