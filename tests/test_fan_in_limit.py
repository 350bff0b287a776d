"""Every scheme plans within the data plane's fan-in limit (`max_fan_in`) by default.

The limit is set small (2-4) so that it binds on instances that solve in seconds; the
evaluator is the judge (consistent, no point merging more flows than the limit, nothing beyond
the data plane), and the compiler must accept the plan.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.cli import main
from controller.compiler.program import compile_plan
from controller.evaluator.evaluate import evaluate
from controller.model import topogen
from controller.model.network import build_network
from controller.model.plan import MAX_FAN_IN
from controller.solvers import SchemeInputError, SolveOptions, solve

ARO = ["aro", "aro-acc", "aro-sro", "aro-app", "aro-qsr", "aro-raw"]
BASELINES = [
    "shortest",
    "atp",
    "random",
    "switchml",
    "geryon",
    "aggtree",
    "rr",
    "deepsys",
    "deepsys-atp",
    "deepsys-soar",
    "marina",
    "panama",
    "spar",
]
EINA = ["eina", "eina-iqcp", "eina-plus", "eina-fast"]
# Every scheme, these and the rest, on its own kind of network: test_fan_in_every_scheme.py.


def _clos(
    kind: str, size: int, workers: int, ina: float, seed: int, aggregation_gbps: float | None = None
):
    work = topogen.Workload(workers_per_job=workers)
    opts = topogen.InaOptions(ina=ina, pipelines=2, aggregation_capacity_gbps=aggregation_gbps)
    if kind == "leaf-spine":
        doc = topogen.leaf_spine(
            leaves=size + 1,
            spines=size,
            hosts_per_leaf=6,
            workload=work,
            ina=opts,
            capacity_gbps=10.0,
            seed=seed,
        )
    else:
        doc = topogen.fat_tree(
            k=4, hosts_per_edge=2 * size, workload=work, ina=opts, capacity_gbps=10.0, seed=seed
        )
    return build_network(doc)


def _within(network, plan, limit: int) -> None:
    result = evaluate(network, plan)
    assert result.consistent, result.problems
    assert not result.beyond_data_plane
    over = [(a.switch, a.pipeline, a.fan_in) for a in result.aggregator_loads if a.fan_in > limit]
    assert not over, over
    compile_plan(network, plan)
    assert plan.details["max_fan_in"] == limit


@pytest.mark.parametrize("scheme", ARO + BASELINES)
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["leaf-spine", "fat-tree"]),
    size=st.integers(2, 3),
    workers=st.integers(6, 12),
    ina=st.sampled_from([0.5, 1.0]),
    limit=st.integers(2, 3),
    seed=st.integers(0, 50),
)
def test_clos_plans_stay_within_the_limit(scheme, kind, size, workers, ina, limit, seed):
    network = _clos(kind, size, workers, ina, seed)
    try:
        plan = solve(
            network, scheme, SolveOptions(seed=seed, time_limit=4, params={"max_fan_in": limit})
        )
    except SchemeInputError as exc:  # only RR's routes that return to a switch may need it
        assert scheme == "rr" and "returns to it" in str(exc), exc
        return
    _within(network, plan, limit)


def test_rr_refuses_a_limit_its_returning_route_cannot_keep():
    network = _clos("leaf-spine", 2, 10, 1.0, 20)
    with pytest.raises(SchemeInputError, match="a path that returns to it"):
        solve(network, "rr", SolveOptions(seed=20, params={"max_fan_in": 2}))


@settings(max_examples=6, deadline=None)
@given(size=st.integers(2, 3), seed=st.integers(0, 50), limit=st.integers(2, 3))
def test_partial_atp_stays_within_the_limit(size, seed, limit):
    """Raw remainders of a partial point are more flows at the points after it."""
    network = _clos("fat-tree", size, 12, 1.0, seed, aggregation_gbps=25.0)
    plan = solve(
        network,
        "atp",
        SolveOptions(seed=seed, params={"max_fan_in": limit, "partial": True, "levels": "all"}),
    )
    _within(network, plan, limit)


@pytest.mark.parametrize("scheme", EINA)
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    aggregators=st.integers(4, 7),
    ps=st.integers(1, 2),
    limit=st.integers(2, 3),
    seed=st.integers(0, 50),
)
def test_edge_plans_stay_within_the_limit(scheme, aggregators, ps, limit, seed):
    network = build_network(
        topogen.edge(
            aggregators=aggregators, ps=ps, workers_per_aggregator=(1, limit - 1), seed=seed
        )
    )
    plan = solve(
        network, scheme, SolveOptions(seed=seed, time_limit=4, params={"max_fan_in": limit})
    )
    _within(network, plan, limit)


@pytest.mark.parametrize("scheme", EINA)
def test_a_roomy_root_adopts_at_most_the_limit(scheme):
    """A PS's aggregator with room for every rack (the star) may still merge only L flows."""
    doc = topogen.edge(aggregators=6, ps=1, workers_per_aggregator=(1, 1), seed=1)
    for sw in doc["switches"]:
        if sw["name"] == "A0":
            sw["aggregation_capacity_gbps"] = sw["egress_capacity_gbps"] = 10_000.0
    next(ln for ln in doc["links"] if ln["a"] == "A0")["reverse_capacity_gbps"] = 10_000.0
    network = build_network(doc)
    for limit in (2, 3):
        plan = solve(
            network, scheme, SolveOptions(seed=0, time_limit=4, params={"max_fan_in": limit})
        )
        _within(network, plan, limit)


@pytest.mark.parametrize("scheme", ["eina", "eina-iqcp", "eina-fast"])
def test_edge_rack_over_the_limit_is_refused(scheme):
    """EINA merges every local worker at its edge aggregator: a rack over the limit cannot be
    planned under its model, and the scheme says so instead of planning beyond the limit."""
    network = build_network(topogen.edge(aggregators=3, ps=1, workers_per_aggregator=(3, 3)))
    with pytest.raises(SchemeInputError, match="max_fan_in"):
        solve(network, scheme, SolveOptions(time_limit=4, params={"max_fan_in": 2}))


@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 50))
def test_eina_plus_passes_a_full_rack_by(seed):
    """EINA+ may send workers past their rack unmerged: racks over the limit still plan."""
    network = build_network(
        topogen.edge(aggregators=3, ps=1, workers_per_aggregator=(3, 4), seed=seed)
    )
    plan = solve(
        network, "eina-plus", SolveOptions(seed=seed, time_limit=4, params={"max_fan_in": 2})
    )
    _within(network, plan, 2)


def test_unlimited_is_recorded_and_said(tmp_path, capsys):
    topo = tmp_path / "t.yaml"
    main(
        [
            "topo",
            "gen",
            "leaf-spine",
            "--leaves",
            "3",
            "--spines",
            "2",
            "--hosts-per-leaf",
            "3",
            "--workers",
            "4",
            "-o",
            str(topo),
        ]
    )
    capsys.readouterr()
    assert (
        main(
            [
                "solve",
                str(topo),
                "--scheme",
                "atp",
                "--param",
                "max_fan_in=0",
                "--json",
                str(tmp_path / "p.json"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert (
        f"fan-in: unlimited (the paper's model); the data plane merges at most {MAX_FAN_IN}"
    ) in out


def test_readme_example_evaluates_clean(tmp_path):
    """The README's 24x24 leaf-spine with 200 workers under `aro`: `ina evaluate` exits 0."""
    topo, plan = tmp_path / "ls.yaml", tmp_path / "plan.json"
    assert (
        main(
            [
                "topo",
                "gen",
                "leaf-spine",
                "--leaves",
                "24",
                "--spines",
                "24",
                "--workers",
                "200",
                "-o",
                str(topo),
            ]
        )
        == 0
    )
    assert (
        main(["solve", str(topo), "--scheme", "aro", "--time-limit", "20", "--json", str(plan)])
        == 0
    )
    assert main(["evaluate", str(topo), str(plan)]) == 0
