"""GRID and the baselines: the papers' stated values on their examples, and plan properties.

Every value is the evaluator's, never a scheme's own claim.
"""

from __future__ import annotations

import itertools

import pytest
from conftest import EXAMPLES, leaf_spine_doc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.evaluate import evaluate
from controller.network import Network, build_network, load_topology
from controller.solvers import SolveOptions, solve
from controller.solvers.inatree import rng_for
from controller.solvers.paring_baselines import _next_hops, _soar

BASELINES = ["grid", "atp", "random", "switchml", "geryon", "aggtree", "rr", "deepsys",
             "deepsys-atp", "deepsys-soar", "marina", "panama", "spar"]


def grid_fig1_doc(flat: bool = False) -> dict:
    """GRID Fig. 1: 3 Gbps links, 9 Gbps PS ingress and switch capacity, W1-W4 on S1.

    GRID's switches aggregate only fragments addressed to them (node id); under the plan
    semantics a switch merges every flow of the task entering an aggregation pipeline, so this
    version puts W4's port, and each switch's fabric ports, on a second pipeline. `flat` keeps
    one pipeline per switch.
    """
    hosts = [{"name": "PS", "role": "ps"}] + [
        {"name": f"W{i}", "role": "worker"} for i in range(1, 9)]
    links = [{"a": f"W{i}", "b": "S1", "capacity_gbps": 3.0, "b_port": i} for i in range(1, 5)]
    links += [
        {"a": "S1", "b": "S2", "capacity_gbps": 3.0, "a_port": 5, "b_port": 3},
        {"a": "S1", "b": "S3", "capacity_gbps": 3.0, "a_port": 6, "b_port": 3},
        {"a": "W5", "b": "S2", "capacity_gbps": 3.0, "b_port": 1},
        {"a": "W6", "b": "S2", "capacity_gbps": 3.0, "b_port": 2},
        {"a": "S2", "b": "S3", "capacity_gbps": 3.0, "a_port": 4, "b_port": 4},
        {"a": "W7", "b": "S3", "capacity_gbps": 3.0, "b_port": 1},
        {"a": "W8", "b": "S3", "capacity_gbps": 3.0, "b_port": 2},
        {"a": "S3", "b": "PS", "capacity_gbps": 9.0, "a_port": 5},
    ]
    maps = {"S1": {1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 1}, "S2": {1: 0, 2: 0, 3: 0, 4: 1},
            "S3": {1: 0, 2: 0, 3: 1, 4: 1, 5: 1}}
    switches = [
        {"name": s, "ina": True, "aggregation_capacity_gbps": 9.0,
         **({} if flat else {"pipelines": 2, "pipeline_map": m})}
        for s, m in maps.items()
    ]
    return {"name": "grid-fig1", "hosts": hosts, "switches": switches, "links": links,
            "jobs": [{"name": "job0", "tasks": [
                {"name": "t0", "ps": "PS", "workers": [f"W{i}" for i in range(1, 9)]}]}]}


def rate(network: Network, scheme: str, seed: int = 0, **params) -> float:
    plan = solve(network, scheme, SolveOptions(seed=seed, params=params))
    result = evaluate(network, plan)
    assert result.consistent, result.problems
    return min(t.rate_gbps for t in result.tasks)


# ------------------------------------------------------------------ the papers' examples


def test_grid_fig1_grid_geryon():
    """GRID Fig. 1: Geryon 1 Gbps, GRID 3 Gbps."""
    network = build_network(grid_fig1_doc())
    assert rate(network, "geryon") == pytest.approx(1.0)
    assert rate(network, "grid") == pytest.approx(3.0)
    plan = solve(network, "grid", SolveOptions(seed=0))
    assert plan.details["lp_value_gbps"]["job0/t0"] == pytest.approx(3.0)


def test_grid_fig1_atp_without_overflow():
    """ATP's 2.43 Gbps needs fragment overflow; whole flows give S1's 9 Gbps / 4 = 2.25."""
    network = build_network(grid_fig1_doc(flat=True))
    assert rate(network, "atp") == pytest.approx(2.25)
    assert rate(network, "geryon") == pytest.approx(1.0)


def test_aro_fig1_values(fig1):
    """ARO Fig. 1a: 1/5 without INA; Fig. 3a: ATP with every leaf INA gets 1/2."""
    assert rate(fig1, "deepsys") == pytest.approx(0.2)
    assert rate(fig1, "geryon") == pytest.approx(0.2)
    all_leaves = build_network(leaf_spine_doc(4, 2, [0, 2, 2, 1], ina={"L0", "L1", "L2", "L3"}))
    assert rate(all_leaves, "atp") == pytest.approx(0.5)


@pytest.mark.parametrize("name", ["grid-fig1", "aro-fig1", "eina-fig1", "paring-fig1"])
def test_example_files_solve(name):
    """The papers' example files, when present, route consistently under every baseline."""
    path = EXAMPLES / f"{name}.yaml"
    if not path.exists():
        pytest.skip(f"{path.name} not written yet")
    network = load_topology(path)
    for scheme in BASELINES:
        rate(network, scheme)


def test_soar_is_exact_on_its_tree(fig1):
    """SOAR's DP matches brute force over every switch subset of the same size."""
    task = fig1.tasks[0]
    nxt = _next_hops(fig1, task, rng_for(3))

    def traffic(chosen: set[str]) -> int:
        links = set()
        for w in task.workers:
            flow, v = w, w
            while v != task.ps:
                u, v = v, nxt[v]
                links.add((flow, u, v))
                if v in chosen:
                    flow = v
        return len(links)

    ina = [s for s in fig1.switches if fig1.is_ina(s)]
    for k in range(len(ina) + 1):
        best = min(traffic(set(c)) for j in range(k + 1) for c in itertools.combinations(ina, j))
        assert traffic(_soar(fig1, task, nxt, k)) == best


# ------------------------------------------------------------------ properties

@st.composite
def leaf_spines(draw, spine_only: bool = False):
    leaves = draw(st.integers(2, 4))
    spines = draw(st.integers(1, 3))
    workers = draw(st.lists(st.integers(0, 3), min_size=leaves, max_size=leaves))
    if sum(workers) == 0:
        workers[-1] = 1
    names = [f"S{i}" for i in range(spines)] + ([] if spine_only else
                                                [f"L{i}" for i in range(leaves)])
    ina = draw(st.sets(st.sampled_from(names)))
    doc = leaf_spine_doc(leaves, spines, workers, ina=ina,
                         pipelines=draw(st.sampled_from([1, 2])),
                         capacity=draw(st.sampled_from([1.0, 10.0])))
    for sw in doc["switches"]:
        if sw["ina"]:
            sw["aggregation_capacity_gbps"] = draw(st.sampled_from([None, 2.0, 40.0]))
    return build_network(doc)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(network=leaf_spines(), seed=st.integers(0, 3))
def test_every_baseline_is_consistent_and_seeded(network, seed):
    for scheme in BASELINES:
        first = solve(network, scheme, SolveOptions(seed=seed))
        result = evaluate(network, first)
        assert result.consistent, (scheme, result.problems)
        again = solve(network, scheme, SolveOptions(seed=seed))
        assert [(t.paths, t.aggregation, t.rate_gbps) for t in first.tasks] == \
               [(t.paths, t.aggregation, t.rate_gbps) for t in again.tasks], scheme


@settings(max_examples=40, deadline=None)
@given(network=leaf_spines(spine_only=True), seed=st.integers(0, 3))
def test_grid_single_aggregation_per_worker(network, seed):
    """R-GRIA gives each worker one node; its gradient is merged there and nowhere else.

    (A worker drawn for the PS may still be merged once on a spine when every spine pipeline it
    could cross aggregates: the plan semantics leave it no unmerged path.)
    """
    plan = solve(network, "grid", SolveOptions(seed=seed))
    task = network.tasks[0]
    assignment = plan.details["assignment"]["job0/t0"]
    assert sorted(assignment) == sorted(task.workers)
    for worker, merged in plan.details["merged_at"]["job0/t0"].items():
        assert len(merged) <= 1
        if assignment[worker] != "PS":
            assert merged == [assignment[worker]]
    assert plan.details["lp_value_gbps"]["job0/t0"] >= 0
