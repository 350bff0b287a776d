"""GRID (`grid`, `grid-opt`) on inputs at the edges of its model: a maximum sending rate T
anywhere in its accepted range, and a worker cabled straight to the PS's server; and every
scheme on such a host-host link (a valid topology: the link crosses no third host).

Every plan is judged by the evaluator (`controller.evaluator.evaluate`): consistent, carrying at
least the rate it claims, never above T.
"""

from __future__ import annotations

import pytest
from conftest import EXAMPLES
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from controller.evaluator.evaluate import evaluate
from controller.model.inputs import InputError
from controller.model.network import build_network, load_topology
from controller.solvers import SchemeInputError, SolveOptions, scheme_names, solve

GRID = ("grid", "grid-opt")


def judged(network, plan):
    result = evaluate(network, plan)
    assert result.consistent, result.problems
    for tp, te in zip(plan.tasks, result.tasks, strict=True):
        assert te.rate_gbps >= tp.rate_gbps * (1 - 1e-9) - 1e-15
    if plan.bound is not None:
        assert plan.bound >= plan.objective * (1 - 1e-9)
    return result


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(exponent=st.floats(-9, 9), scheme=st.sampled_from(GRID))
@example(exponent=-9.0, scheme="grid")
@example(exponent=0.3, scheme="grid")  # T = 2: the LP at T alone drew 1.8 Gbps at best
@example(exponent=0.375, scheme="grid")  # T = 2.37: it drew 2.25
def test_any_maximum_sending_rate_gives_a_plan_capped_at_it(exponent, scheme):
    """T from 1e-9 (the smallest accepted) to 1e9 Gbps: GRID Fig. 1 reaches min(T, 3).
    `grid-opt` proves it; `grid`'s two draws of seed 0 at T = B_α reach 3, and a lower T
    never gives less than them capped at T (the next test)."""
    t = 10.0**exponent
    network = load_topology(EXAMPLES / "grid-fig1.yaml")
    plan = solve(
        network,
        scheme,
        SolveOptions(seed=0, time_limit=10, params={"max_rate_gbps": t, "draws": 2}),
    )
    judged(network, plan)
    assert plan.objective == pytest.approx(min(t, 3.0), rel=1e-6)


@pytest.mark.parametrize("t", [1.6, 2.0, 2.37, 2.9])
def test_a_lower_t_never_gives_less_than_the_plan_at_b_alpha_capped_at_it(t):
    """Below B_α (9 Gbps), `grid` draws from the LP at B_α too, as a run at T = B_α does,
    number for number: whatever the seed, its plan carries at least that run's rate capped
    at T. (The LP at T alone drew less than min(T, 3) from just above 1.5 to 2.92 Gbps.)"""
    network = load_topology(EXAMPLES / "grid-fig1.yaml")
    for seed in range(8):
        at_b_alpha = solve(network, "grid", SolveOptions(seed=seed, params={"draws": 2}))
        plan = solve(
            network, "grid", SolveOptions(seed=seed, params={"max_rate_gbps": t, "draws": 2})
        )
        judged(network, plan)
        assert plan.objective >= min(t, at_b_alpha.objective) * (1 - 1e-9), seed


@pytest.mark.parametrize("t", [1e-9, 1e9])
@pytest.mark.parametrize("links", [True, False])
def test_the_extremes_of_t_on_each_lp_variant(t, links):
    network = load_topology(EXAMPLES / "grid-fig1.yaml")
    plan = solve(
        network,
        "grid",
        SolveOptions(seed=0, params={"max_rate_gbps": t, "links": links, "draws": 2}),
    )
    judged(network, plan)
    assert 0 < plan.objective <= t


def host_link_doc() -> dict:
    """W1 is cabled straight to the PS; W2, W3 and the PS hang off the INA switch S."""
    return {
        "hosts": [
            {"name": "PS", "role": "ps"},
            *({"name": f"W{i}", "role": "worker"} for i in range(1, 4)),
        ],
        "switches": [{"name": "S", "ina": True, "aggregation_capacity_gbps": 20}],
        "links": [
            {"a": "W1", "b": "PS", "capacity_gbps": 10},
            {"a": "W2", "b": "S", "capacity_gbps": 10},
            {"a": "W3", "b": "S", "capacity_gbps": 10},
            {"a": "PS", "b": "S", "capacity_gbps": 10},
        ],
        "jobs": [
            {"name": "j", "tasks": [{"name": "t", "ps": "PS", "workers": ["W1", "W2", "W3"]}]}
        ],
    }


@pytest.mark.parametrize("scheme", GRID)
def test_a_worker_cabled_to_the_ps(scheme):
    """W1 can reach no switch without crossing the PS, so only the PS aggregates it; S
    merges W2 and W3 (2 x 10 of its 20 Gbps) into one flow: every link carries one flow of
    10 Gbps."""
    network = build_network(host_link_doc())
    plan = solve(network, scheme, SolveOptions(seed=0, time_limit=10))
    judged(network, plan)
    assert plan.tasks[0].paths["W1"] == ["W1", "PS"]
    assert plan.objective == pytest.approx(10)


@pytest.mark.parametrize("scheme", [s for s in scheme_names() if s not in GRID])
def test_every_scheme_takes_a_host_host_link(scheme):
    """Each scheme answers a plan the evaluator confirms, or refuses the topology as one
    that is not its kind (one paragraph: SchemeInputError, TopologyError); it never crashes."""
    doc = host_link_doc()
    if scheme.startswith("paring"):
        doc["jobs"][0]["tasks"][0]["placement"] = "free"
    network = build_network(doc)
    try:
        plan = solve(network, scheme, SolveOptions(seed=0, time_limit=10))
    except (SchemeInputError, InputError):
        return
    judged(network, plan)


def test_an_lp_stopped_by_the_time_limit_is_one_paragraph_naming_the_limit(tmp_path, capsys):
    """GLOP stopped by --time-limit (status NOT_SOLVED) is no "no solution": the LP always has
    one (every rate 0). The user hears that the limit was too short, exit 2, no traceback."""
    from controller.cli import main
    from controller.model import topogen
    from controller.model.network import dump_topology

    path = tmp_path / "edge.yaml"
    dump_topology(topogen.edge(aggregators=12, ps=1, seed=0), path)
    code = main(["solve", str(path), "--scheme", "grid", "--time-limit", "0.01"])
    captured = capsys.readouterr()
    err = captured.out + captured.err
    assert code == 2, err
    assert "time limit" in err and "0.01" in err and "no solution" not in err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 3
