"""The evaluator: flow merging, pipelines, capacities, consistency, and its two invariants."""

from __future__ import annotations

import copy
import json
from dataclasses import replace

import pytest
from conftest import leaf_spine_doc
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.evaluator.evaluate import evaluate, max_min_fair, task_flows
from controller.model.network import build_network
from controller.model.plan import (
    MAX_FAN_IN,
    AggregationPoint,
    Plan,
    PlanFormatError,
    TaskPlan,
    load_plan,
    parse_plan,
)


def _plan(paths, aggregation=(), rate=0.0, ps="PS") -> Plan:
    task = TaskPlan("job0", "t0", ps, rate, paths, list(aggregation))
    return Plan("test", "heuristic", rate, None, 0.0, 0, [task])


def _routing_only(network, workers):
    """The network with its task cut down to `workers` (tests that route a few of them)."""
    task = replace(network.tasks[0], workers=tuple(workers))
    return replace(network, tasks=[task])


def _fig1_ina_paths() -> dict[str, list[str]]:
    up = {"W1_0": "L1", "W1_1": "L1", "W2_0": "L2", "W2_1": "L2", "W3_0": "L3"}
    return {w: [w, leaf, "S1", "L0", "PS"] for w, leaf in up.items()}


def test_no_ina_fig1_shares_the_ps_link(fig1):
    result = evaluate(fig1, _plan(_fig1_ina_paths()))
    assert result.tasks[0].rate_gbps == 0.2
    assert result.tasks[0].flows_into_ps == 5
    assert result.consistent


def test_multi_hop_aggregation_fig1_reaches_rate_one(fig1):
    aggregation = [
        AggregationPoint("L1", 0, 2, "S1"),
        AggregationPoint("L2", 0, 2, "S1"),
        AggregationPoint("S1", 0, 3, "L0"),
    ]
    result = evaluate(fig1, _plan(_fig1_ina_paths(), aggregation, rate=1.0))
    assert result.consistent, result.problems
    assert result.tasks[0].rate_gbps == 1.0
    assert result.tasks[0].flows_into_ps == 1


def test_flows_on_different_pipelines_are_not_merged():
    # S0 has 2 pipelines over its 2 ports: L1 lands on pipeline 0, L2 on pipeline 1.
    doc = leaf_spine_doc(3, 1, [0, 1, 1], ina={"S0"}, pipelines=2)
    network = build_network(doc)
    assert network.ingress_pipeline("L1", "S0") != network.ingress_pipeline("L2", "S0")
    paths = {"W1_0": ["W1_0", "L1", "S0", "L0", "PS"], "W2_0": ["W2_0", "L2", "S0", "L0", "PS"]}
    both = [AggregationPoint("S0", 0, 1, "L0"), AggregationPoint("S0", 1, 1, "L0")]
    result = evaluate(network, _plan(paths, both))
    assert result.tasks[0].rate_gbps == 0.5  # two flows still share S0→L0

    doc = leaf_spine_doc(3, 1, [0, 1, 1], ina={"S0"}, pipelines=1)
    result = evaluate(build_network(doc), _plan(paths, [AggregationPoint("S0", 0, 2, "L0")]))
    assert result.tasks[0].rate_gbps == 1.0


def test_overclaimed_rate_is_inconsistent(fig1):
    result = evaluate(fig1, _plan(_fig1_ina_paths(), rate=0.5))
    assert not result.consistent
    assert any("claims 0.5" in p for p in result.problems)
    assert result.tasks[0].rate_gbps == 0.2


def test_aggregated_flow_may_not_split(fig1):
    paths = {"W1_0": ["W1_0", "L1", "S0", "L0", "PS"], "W1_1": ["W1_1", "L1", "S1", "L0", "PS"]}
    result = evaluate(fig1, _plan(paths, [AggregationPoint("L1", 0, 2, "S0")]))
    assert any("cannot split" in p for p in result.problems)


def test_wrong_fan_in_and_bad_path_are_reported(fig1):
    paths = {"W1_0": ["W1_0", "L1", "S1", "L0", "PS"], "W1_1": ["W1_1", "L2", "S1", "L0", "PS"]}
    result = evaluate(fig1, _plan(paths, [AggregationPoint("L1", 0, 2, "S1")]))
    assert any("absent from the topology" in p for p in result.problems)
    assert any("fan-in 2 but 1" in p for p in result.problems)


def test_aggregator_capacity_limits_rate():
    doc = leaf_spine_doc(2, 1, [0, 2], ina={"L1"}, capacity=10.0)
    doc["switches"][2]["aggregation_capacity_gbps"] = 4.0  # L1
    network = build_network(doc)
    paths = {w: [w, "L1", "S0", "L0", "PS"] for w in ("W1_0", "W1_1")}
    result = evaluate(network, _plan(paths, [AggregationPoint("L1", 0, 2, "S0")]))
    assert result.tasks[0].rate_gbps == 2.0  # two inflows share 4 Gbps of processing


def test_max_min_fair_two_tasks():
    demand = {"a": {("link", "x"): 1}, "b": {("link", "x"): 1, ("link", "y"): 2}}
    rates = max_min_fair(demand, {("link", "x"): 3.0, ("link", "y"): 1.0})
    assert rates == {"a": 2.5, "b": 0.5}


@st.composite
def random_plans(draw):
    """A random leaf-spine with a random valid up-down plan and random aggregation points."""
    leaves = draw(st.integers(2, 4))
    spines = draw(st.integers(1, 3))
    per_leaf = [draw(st.integers(0, 3)) for _ in range(leaves)]
    if sum(per_leaf) == 0:
        per_leaf[-1] = 1
    names = [f"S{s}" for s in range(spines)] + [f"L{i}" for i in range(leaves)]
    ina = set(draw(st.lists(st.sampled_from(names), unique=True)))
    pipelines = draw(st.integers(1, 2))
    capacities = draw(st.sampled_from([1.0, 2.5, 10.0]))
    network = build_network(
        leaf_spine_doc(leaves, spines, per_leaf, ina=ina, pipelines=pipelines, capacity=capacities)
    )
    spine_of_leaf = {f"L{i}": f"S{draw(st.integers(0, spines - 1))}" for i in range(leaves)}
    paths = {}
    for task in network.tasks:
        for w in task.workers:
            leaf = next(iter(network.graph.successors(w)))
            paths[w] = (
                [w, leaf, "PS"] if leaf == "L0" else [w, leaf, spine_of_leaf[leaf], "L0", "PS"]
            )
    points = []
    for sw in sorted(ina):
        for pipe in range(network.pipelines(sw)):
            if draw(st.booleans()):
                points.append((sw, pipe))
    plan = _plan(paths)
    # Fan-ins are whatever the paths produce; declare them so the plan is consistent.
    plan.tasks[0].aggregation = [AggregationPoint(sw, pipe, 1, "?") for sw, pipe in points]
    flows = task_flows(network, plan.tasks[0])
    leaves = {
        (hop.v, hop.leaving[2]): trace[k + 1].v
        for trace in flows.traces.values()
        for k, hop in enumerate(trace)
        if isinstance(hop.leaving, tuple) and hop.leaving[1] == hop.v
    }
    plan.tasks[0].aggregation = [
        AggregationPoint(sw, pipe, flows.aggregator_inflows[(sw, pipe)], leaves[(sw, pipe)])
        for sw, pipe in points
        if (sw, pipe) in flows.aggregator_inflows
    ]
    return network, plan


@settings(max_examples=60, deadline=None)
@given(random_plans())
def test_evaluated_rates_never_violate_a_capacity(case):
    network, plan = case
    result = evaluate(network, plan, gradient_mb=1.0)
    assert result.consistent, result.problems
    for load in result.link_loads:
        assert load.load_gbps <= load.capacity_gbps * (1 + 1e-9)
    assert result.tasks[0].rate_gbps > 0


@settings(max_examples=60, deadline=None)
@given(random_plans())
def test_aggregation_never_increases_traffic(case):
    network, plan = case
    with_ina = evaluate(network, plan, gradient_mb=1.0)
    plan.tasks[0].aggregation = []
    without = evaluate(network, plan, gradient_mb=1.0)
    assert with_ina.tasks[0].volume_mb <= without.tasks[0].volume_mb
    assert with_ina.tasks[0].volume_mb <= with_ina.tasks[0].volume_without_ina_mb
    assert with_ina.tasks[0].rate_gbps >= without.tasks[0].rate_gbps - 1e-12


def test_point_with_worker_list_lets_other_flows_cross_unmerged(fig1):
    # S1 merges only the L1 flow; the L2 flow crosses S1 untouched: two flows reach the PS.
    paths = {"W1_0": ["W1_0", "L1", "S1", "L0", "PS"], "W2_0": ["W2_0", "L2", "S1", "L0", "PS"]}
    point = AggregationPoint("S1", 0, 1, "L0", workers=("W1_0",))
    result = evaluate(_routing_only(fig1, paths), _plan(paths, [point]))
    assert result.consistent, result.problems
    assert result.tasks[0].flows_into_ps == 2
    assert Plan.from_dict(_plan(paths, [point]).to_dict()).tasks[0].aggregation == [point]


def test_aggregated_flow_must_be_merged_whole(fig1):
    paths = {w: [w, "L1", "S1", "L0", "PS"] for w in ("W1_0", "W1_1")}
    points = [
        AggregationPoint("L1", 0, 2, "S1"),
        AggregationPoint("S1", 0, 1, "L0", workers=("W1_0",)),
    ]
    result = evaluate(fig1, _plan(paths, points))
    assert any("merges and workers it does not" in p for p in result.problems)


def test_aggregation_on_a_plain_switch_is_inconsistent(fig1):
    paths = {w: [w, "L1", "S0", "L0", "PS"] for w in ("W1_0", "W1_1")}
    result = evaluate(fig1, _plan(paths, [AggregationPoint("S0", 0, 2, "L0")]))
    assert any("not INA-capable" in p for p in result.problems)


# --- hostile and careless plan files ----------------------------------------------------------


def _fig1_plan_doc() -> dict:
    """A consistent plan for `fig1` (rate 1), as its JSON document."""
    aggregation = [
        AggregationPoint("L1", 0, 2, "S1"),
        AggregationPoint("L2", 0, 2, "S1"),
        AggregationPoint("S1", 0, 3, "L0"),
    ]
    return _plan(_fig1_ina_paths(), aggregation, rate=1.0).to_dict()


def _task(doc: dict) -> dict:
    return doc["tasks"][0]


def test_the_fig1_plan_document_is_consistent(fig1):
    assert evaluate(fig1, parse_plan(_fig1_plan_doc())).consistent


UNREADABLE = {
    # name: (change to the plan document, words of the error)
    "negative rate": (
        lambda d: _task(d).update(rate_gbps=-1.0),
        ["tasks[0].rate_gbps", "greater than or equal to 0"],
    ),
    "NaN rate": (lambda d: _task(d).update(rate_gbps=float("nan")), ["NaN is not a JSON number"]),
    "float pipeline": (
        lambda d: _task(d)["aggregation"][0].update(pipeline=0.7),
        ["tasks[0].aggregation[0].pipeline", "valid integer"],
    ),
    "float fan_in": (
        lambda d: _task(d)["aggregation"][0].update(fan_in=2.9),
        ["tasks[0].aggregation[0].fan_in", "valid integer"],
    ),
    "string fan_in": (
        lambda d: _task(d)["aggregation"][0].update(fan_in="2"),
        ["tasks[0].aggregation[0].fan_in", "valid integer"],
    ),
    "duplicated task": (
        lambda d: d["tasks"].append(copy.deepcopy(_task(d))),
        ["tasks[1] (job0/t0)", "planned twice"],
    ),
    "duplicated aggregation point": (
        lambda d: _task(d)["aggregation"].append(dict(_task(d)["aggregation"][0])),
        ["tasks[0] (job0/t0).aggregation[3]", "L1 pipeline 0 is listed twice"],
    ),
    "empty tasks": (lambda d: d.update(tasks=[]), ["tasks", "at least 1 item"]),
    "a path node that is a list": (
        lambda d: _task(d)["paths"]["W1_0"].insert(1, ["L1"]),
        ["tasks[0].paths.W1_0[1]", "valid string"],
    ),
    "a path node that is an object": (
        lambda d: _task(d)["paths"]["W1_0"].insert(1, {"a": 1}),
        ["tasks[0].paths.W1_0[1]", "valid string"],
    ),
    "unknown field": (
        lambda d: _task(d)["aggregation"][0].update(fanin=2),
        ["tasks[0].aggregation[0].fanin", "unknown field"],
    ),
}


@pytest.mark.parametrize("name", sorted(UNREADABLE))
def test_malformed_plans_are_rejected_naming_the_field(tmp_path, name):
    change, words = UNREADABLE[name]
    doc = _fig1_plan_doc()
    change(doc)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(PlanFormatError) as info:
        load_plan(path)
    message = str(info.value)
    assert str(path) in message
    for word in words:
        assert word in message, message


UNREADABLE_TEXT = {
    "latin-1": ('{"scheme": "café"}'.encode("latin-1"), ["not UTF-8", "0xe9"]),
    "UTF-16": (json.dumps({"scheme": "x"}).encode("utf-16"), ["not UTF-8", "UTF-16"]),
    "nested 100 000 deep": (b"[" * 100_000 + b"]" * 100_000, ["nested too deeply"]),
    "repeated key": (b'{"scheme": "a", "scheme": "b"}', ["'scheme' appears twice"]),
    "NaN literal": (b'{"objective": NaN}', ["NaN is not a JSON number"]),
}


@pytest.mark.parametrize("name", sorted(UNREADABLE_TEXT))
def test_unreadable_plan_files_are_rejected(tmp_path, name):
    raw, words = UNREADABLE_TEXT[name]
    path = tmp_path / "plan.json"
    path.write_bytes(raw)
    with pytest.raises(PlanFormatError) as info:
        load_plan(path)
    for word in [str(path), *words]:
        assert word in str(info.value), str(info.value)


def test_a_rate_json_reads_as_infinity_is_rejected(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(_fig1_plan_doc()).replace('"rate_gbps": 1.0', '"rate_gbps": 1e400'))
    with pytest.raises(PlanFormatError, match=r"tasks\[0\]\.rate_gbps: .*finite number"):
        load_plan(path)


def _hairpin(d):  # W3_0 goes up to S0, back down to L3 and up again: a bounce
    _task(d)["paths"]["W3_0"] = ["W3_0", "L3", "S0", "L3", "S1", "L0", "PS"]


INCONSISTENT = {
    # name: (change to the plan document, words of one reported problem)
    "a worker left out": (lambda d: _task(d)["paths"].pop("W3_0"), "no path for worker(s) W3_0"),
    "ps set to a worker": (lambda d: _task(d).update(ps="W3_0"), "the task's PS is 'PS'"),
    "a path through a host": (
        lambda d: _task(d)["paths"].update(W3_0=["W3_0", "L3", "S1", "L0", "PS", "L0", "PS"]),
        "passes through host(s) PS",
    ),
    "a path that bounces": (_hairpin, "brings the same flow back to L3"),
    "a path that loops": (
        lambda d: _task(d)["paths"].update(
            W3_0=["W3_0", "L3", "S0", "L0", "S0", "L3", "S1", "L0", "PS"]
        ),
        "brings the same flow back",
    ),
    "next_hop contradicting the paths": (
        lambda d: _task(d)["aggregation"][0].update(next_hop="S0"),
        "declares next_hop S0 but the path of W1_0 leaves it toward S1",
    ),
    "next_hop naming a missing node": (
        lambda d: _task(d)["aggregation"][2].update(next_hop="L9"),
        "next_hop 'L9' is not a node of the topology",
    ),
    "point workers that are not the task's": (
        lambda d: _task(d)["aggregation"][0].update(workers=["W1_0", "W1_1", "ghost"]),
        "lists workers without a path in this task: ['ghost']",
    ),
    "a task the topology does not have": (
        lambda d: _task(d).update(task="t9"),
        "the topology has no such task",
    ),
}


@pytest.mark.parametrize("name", sorted(INCONSISTENT))
def test_inconsistent_plans_are_reported(fig1, name):
    change, words = INCONSISTENT[name]
    doc = _fig1_plan_doc()
    change(doc)
    result = evaluate(fig1, parse_plan(doc))
    assert not result.consistent
    assert any(words in p for p in result.problems), result.problems


def test_a_topology_task_the_plan_leaves_out_is_reported(fig1):
    doc = _fig1_plan_doc()
    doc["tasks"][0]["task"] = "t9"
    result = evaluate(fig1, parse_plan(doc))
    assert any("job0/t0: the plan does not route this task" in p for p in result.problems)


def test_fan_in_over_the_data_plane_limit_is_reported_as_not_deployable():
    network = build_network(leaf_spine_doc(2, 1, [0, MAX_FAN_IN + 1], ina={"L1"}, capacity=100))
    workers = network.tasks[0].workers
    paths = {w: [w, "L1", "S0", "L0", "PS"] for w in workers}
    plan = _plan(paths, [AggregationPoint("L1", 0, len(workers), "S0")], rate=1.0)
    result = evaluate(network, plan)
    # The routing holds as a model states it; the data plane cannot install it.
    assert result.consistent and len(result.beyond_data_plane) == 1
    assert (
        f"merges {MAX_FAN_IN + 1} flows; the data plane merges at most {MAX_FAN_IN}"
        in (result.beyond_data_plane[0])
    )
    # one worker fewer is within the data plane's reach
    plan.tasks[0].paths.pop(workers[-1])
    plan.tasks[0].aggregation = [AggregationPoint("L1", 0, MAX_FAN_IN, "S0")]
    within = evaluate(_routing_only(network, workers[:-1]), plan)
    assert within.consistent and not within.beyond_data_plane
