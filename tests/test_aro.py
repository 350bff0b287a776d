"""ARO (controller.solvers.aro): paper examples, pipelines, SJMT/MJMT optima, up-down, Alg. 1.

Every plan is checked by the independent evaluator: consistent, and it finds exactly the rates
the plan claims (ARO's rates are what its routes achieve, not the quantized level).
"""

from __future__ import annotations

import time

import pytest
import yaml
from conftest import EXAMPLES, leaf_spine_doc

from controller.cli import main
from controller.evaluator.evaluate import evaluate
from controller.model.network import Network, build_network, load_topology
from controller.model.plan import Plan
from controller.solvers import SchemeInputError, SolveOptions, solve
from controller.solvers.aro.accel import app_select
from controller.solvers.aro.qsr import Scale, quantize, rate_ceiling, resources, task_ceiling
from controller.solvers.aro.routes import greedy_flows
from controller.solvers.aro.search import Search, SolverSettings
from controller.solvers.aro.unfold import LINK_TYPES, build_task_graph, ina_switches

RANK = {"leaf": 0, "edge": 0, "tor": 0, "spine": 1, "aggregation": 1, "core": 2}
VARIANTS = ["aro", "aro-acc", "aro-sro", "aro-app", "aro-qsr", "aro-raw"]


def _solve(network: Network, scheme: str = "aro", **params) -> Plan:
    plan = solve(network, scheme, SolveOptions(time_limit=20, seed=0, params=params))
    _check(network, plan)
    return plan


def _check(network: Network, plan: Plan) -> None:
    """Consistent, exact rates, and up-down paths."""
    result = evaluate(network, plan)
    assert result.consistent, result.problems
    for tp, te in zip(plan.tasks, result.tasks, strict=True):
        assert te.rate_gbps == pytest.approx(tp.rate_gbps, rel=1e-6, abs=1e-9)
        for path in tp.paths.values():
            _assert_up_down(network, path)


def _assert_up_down(network: Network, path: list[str]) -> None:
    ranks = [RANK[network.spec(n).tier] for n in path[1:-1]]
    peak = ranks.index(max(ranks))
    assert ranks[: peak + 1] == sorted(ranks[: peak + 1]), path
    assert ranks[peak:] == sorted(ranks[peak:], reverse=True), path


@pytest.mark.parametrize("scheme", VARIANTS)
def test_fig1_rate_one_with_l1_l2_s1_ina(fig1, scheme):
    plan = _solve(fig1, scheme)
    assert plan.tasks[0].rate_gbps == pytest.approx(1.0)
    assert plan.status == "optimal" and plan.gap == 0.0


def test_fig1_example_file_and_no_ina():
    path = EXAMPLES / "aro-fig1.yaml"
    network = load_topology(path) if path.exists() else None
    if network is not None:
        assert _solve(network).tasks[0].rate_gbps == pytest.approx(1.0)
    plain = build_network(leaf_spine_doc(4, 2, [0, 2, 2, 1]))
    plan = _solve(plain)
    assert plan.tasks[0].rate_gbps == pytest.approx(0.2)
    assert plan.tasks[0].aggregation == []


def test_pipelines_separate_flows_that_a_flat_switch_merges():
    # S0's two ports from L1 and L2 land on different pipelines: no common aggregation.
    network = build_network(leaf_spine_doc(3, 1, [0, 1, 1], ina={"S0"}, pipelines=2))
    assert network.ingress_pipeline("L1", "S0") != network.ingress_pipeline("L2", "S0")
    plan = _solve(network)
    assert plan.tasks[0].rate_gbps == pytest.approx(0.5)
    assert sorted(a.fan_in for a in plan.tasks[0].aggregation) == [1, 1]

    flat = build_network(leaf_spine_doc(3, 1, [0, 1, 1], ina={"S0"}, pipelines=1))
    plan = _solve(flat)
    assert plan.tasks[0].rate_gbps == pytest.approx(1.0)
    assert [(a.switch, a.fan_in) for a in plan.tasks[0].aggregation] == [("S0", 2)]


def test_routing_picks_the_spine_pipeline_that_aggregates():
    # Two spines; only S1 is INA. Four workers under L1 and L2 must all go through S1.
    network = build_network(leaf_spine_doc(3, 2, [0, 2, 2], ina={"S1", "L1", "L2"}))
    plan = _solve(network)
    assert plan.tasks[0].rate_gbps == pytest.approx(1.0)
    assert all(p[2] == "S1" for p in plan.tasks[0].paths.values())


def _two_task_doc(jobs: list[dict], ina: set[str] = frozenset(), leaves: int = 2) -> dict:
    """Leaf-spine with one spine; hosts given per job as (workers under L1, PS under L0)."""
    hosts, links, seen = [], [], set()
    for job in jobs:
        for task in job["tasks"]:
            for name, leaf, role in [(task["ps"], "L0", "ps")] + [
                (w, "L1", "worker") for w in task["workers"]
            ]:
                if name not in seen:
                    seen.add(name)
                    hosts.append({"name": name, "role": role})
                    links.append(
                        {
                            "a": name,
                            "b": task.get("leaf_of", {}).get(name, leaf),
                            "capacity_gbps": 1,
                        }
                    )
    switches = [{"name": "S0", "tier": "spine", "ina": "S0" in ina}]
    for i in range(leaves):
        switches.append({"name": f"L{i}", "tier": "leaf", "ina": f"L{i}" in ina})
        links.append({"a": f"L{i}", "b": "S0", "capacity_gbps": 1})
    for job in jobs:
        for task in job["tasks"]:
            task.pop("leaf_of", None)
    return {"name": "two-task", "hosts": hosts, "switches": switches, "links": links, "jobs": jobs}


def test_sjmt_sum_of_rates():
    # One job, two tasks (PS P0, P1) over the same two workers under L1.
    def doc(ina):
        tasks = [{"name": f"t{k}", "ps": f"P{k}", "workers": ["A", "B"]} for k in range(2)]
        return _two_task_doc([{"name": "job", "tasks": tasks}], ina)

    # Without INA, L1→S0 carries 2 flows of each task: 2·r0 + 2·r1 ≤ 1.
    plan = _solve(build_network(doc(set())))
    assert plan.objective == pytest.approx(0.5)
    # With L1 aggregating, each task sends one flow up: r0 + r1 ≤ 1 (also each worker link).
    plan = _solve(build_network(doc({"L1"})))
    assert plan.objective == pytest.approx(1.0)
    assert plan.bound >= 1.0 and plan.gap <= 0.025  # the grid's loss: 2 levels of 0.01


def test_mjmt_weighted_max_min():
    # Two jobs, two workers each under L1, no INA: 2·rA + 2·rB ≤ 1 on L1→S0.
    jobs = [
        {"name": "A", "beta": 2.0, "tasks": [{"name": "t", "ps": "PA", "workers": ["a1", "a2"]}]},
        {"name": "B", "beta": 1.0, "tasks": [{"name": "t", "ps": "PB", "workers": ["b1", "b2"]}]},
    ]
    plan = _solve(build_network(_two_task_doc(jobs)))
    rates = {tp.job: tp.rate_gbps for tp in plan.tasks}
    # Optimum: 2·rA = rB = 1/3; quantized to 1/100 of b̄ = 1 Gbps.
    assert 2 * rates["A"] == pytest.approx(1 / 3, abs=0.011)
    assert rates["B"] == pytest.approx(1 / 3, abs=0.011)
    assert 2 * rates["A"] + 2 * rates["B"] == pytest.approx(1.0)
    assert plan.bound >= 1 / 3 + 0.001 * 2 / 3 and plan.gap <= 0.035


def test_bidirectional_reserves_the_reverse_multicast():
    # Job A: worker under L1, PS under L0; job B the other way round. The multicast of B
    # uses L1→S0 against A's upload.
    jobs = [
        {"name": "A", "tasks": [{"name": "t", "ps": "PA", "workers": ["a"]}]},
        {
            "name": "B",
            "tasks": [
                {"name": "t", "ps": "PB", "workers": ["b"], "leaf_of": {"PB": "L1", "b": "L0"}}
            ],
        },
    ]
    network = build_network(_two_task_doc(jobs))
    plain = _solve(network)
    assert [tp.rate_gbps for tp in plain.tasks] == pytest.approx([1.0, 1.0])
    both = solve(network, "aro", SolveOptions(time_limit=20, params={"bidirectional": True}))
    assert [tp.rate_gbps for tp in both.tasks] == pytest.approx([0.5, 0.5])
    result = evaluate(network, both)
    assert result.consistent  # the evaluator ignores the multicast, so it finds at least this
    assert all(
        te.rate_gbps >= tp.rate_gbps for tp, te in zip(both.tasks, result.tasks, strict=True)
    )


def _fat_tree_doc(k: int, ina: set[str], workers: list[str]) -> dict:
    half = k // 2
    switches = [
        {
            "name": f"C{c}",
            "tier": "core",
            "ina": f"C{c}" in ina,
            "pipelines": 2 if f"C{c}" in ina else 1,
        }
        for c in range(half * half)
    ]
    hosts, links = [], []
    for p in range(k):
        for j in range(half):
            for name, tier in ((f"A{p}{j}", "aggregation"), (f"E{p}{j}", "edge")):
                switches.append(
                    {
                        "name": name,
                        "tier": tier,
                        "ina": name in ina,
                        "pipelines": 2 if name in ina else 1,
                    }
                )
        for j in range(half):
            for m in range(half):
                links.append({"a": f"E{p}{j}", "b": f"A{p}{m}", "capacity_gbps": 1})
                links.append({"a": f"A{p}{j}", "b": f"C{j * half + m}", "capacity_gbps": 1})
            for h in range(half):
                name = f"H{p}{j}{h}"
                hosts.append(
                    {
                        "name": name,
                        "role": "ps" if name == "H000" else "worker" if name in workers else "idle",
                    }
                )
                links.append({"a": name, "b": f"E{p}{j}", "capacity_gbps": 1})
    tasks = [{"name": "t", "ps": "H000", "workers": workers}]
    return {
        "name": "fat-tree",
        "hosts": hosts,
        "switches": switches,
        "links": links,
        "jobs": [{"name": "job", "tasks": tasks}],
    }


def test_fat_tree_unfolding_and_up_down():
    workers = ["H001", "H010", "H011", "H100", "H101", "H210", "H300", "H311"]
    ina = {"E00", "A10", "C0", "C3", "E10", "A00"}
    network = build_network(_fat_tree_doc(4, ina, workers))
    tg = build_task_graph(network, 0, network.tasks[0], ina_switches(network))
    assert {(u[0], v[0]) for u, v in tg.edges} <= LINK_TYPES
    # the PS's edge switch is an `out` node; H001 (same edge) attaches to it directly
    assert tg.succ[("w", "H001", "", -1)][0][1:3] == ("E00", "out")
    plan = _solve(network)
    # a lower bound by hand: E00's two pipelines each can receive one merged flow
    assert plan.tasks[0].rate_gbps >= 0.5
    for scheme in ("aro-acc", "aro-raw"):
        _solve(network, scheme)


def test_leaves_are_in_for_one_task_and_out_for_another():
    jobs = [
        {"name": "A", "tasks": [{"name": "t", "ps": "PA", "workers": ["a"]}]},
        {
            "name": "B",
            "tasks": [
                {"name": "t", "ps": "PB", "workers": ["b"], "leaf_of": {"PB": "L1", "b": "L0"}}
            ],
        },
    ]
    network = build_network(_two_task_doc(jobs, ina={"L0", "L1"}))
    sides = [
        {
            n[1]: n[2]
            for n in build_task_graph(network, i, t, {"L0", "L1"}).order()
            if n[1] in ("L0", "L1")
        }
        for i, t in enumerate(network.tasks)
    ]
    assert sides == [{"L1": "in", "L0": "out"}, {"L0": "in", "L1": "out"}]


def test_app_keeps_a_share_of_the_spine_aggregators():
    ina = {"S0", "S1", "S2", "S3", "L1", "L2", "L0"}
    network = build_network(leaf_spine_doc(3, 4, [0, 3, 2], ina=ina, pipelines=1))
    kept = app_select(network, 0.5, ina_switches(network))[0]
    assert len(kept & {"S0", "S1", "S2", "S3"}) == 2
    assert {"L0", "L1", "L2"} <= kept
    _solve(network, "aro-app", alpha=0.5)


def test_warm_start_reproduces_the_plan(fig1):
    first = _solve(fig1)
    again = solve(fig1, "aro", SolveOptions(time_limit=20, warm_start=first))
    _check(fig1, again)
    assert again.tasks[0].rate_gbps == pytest.approx(first.tasks[0].rate_gbps)


def test_qsr_and_raw_report_the_exact_rate_of_the_routes():
    # No INA, three workers under L1: their flows share L0→PS, so the rate is 1/3 exactly
    # even though QSR's level is 33/100.
    network = build_network(leaf_spine_doc(2, 2, [0, 3]))
    for scheme in ("aro", "aro-raw"):
        plan = _solve(network, scheme)
        assert plan.tasks[0].rate_gbps == pytest.approx(1 / 3)


def _search(network: Network, excluded: set[str] = frozenset()) -> Search:
    """The model of `network` (no INA pruning) as the default `aro` sets it up."""
    graphs = [
        build_task_graph(network, i, t, ina_switches(network), excluded)
        for i, t in enumerate(network.tasks)
    ]
    res = resources(network, graphs)
    scale = Scale(100, rate_ceiling(graphs, network))
    quantize(res, scale)
    jobs = {i: (t.job, t.beta) for i, t in enumerate(network.tasks)}
    ceiling = {tg.index: task_ceiling(tg, network) for tg in graphs}
    return Search(graphs, res, scale, jobs, SolverSettings(time.perf_counter() + 20), ceiling)


def test_per_task_caps_bound_a_mjmt_optimum_they_do_not_reach():
    # Two jobs, two workers each under L1, no INA: 2·rA + 2·rB ≤ 1 on L1→S0. Alone each job
    # reaches 1/2 (its PS link carries two flows); together the optimum is 1/4 each.
    jobs = [
        {"name": n, "tasks": [{"name": "t", "ps": f"P{n}", "workers": [f"{n}1", f"{n}2"]}]}
        for n in "AB"
    ]
    network = build_network(_two_task_doc(jobs))
    search = _search(network)
    union = search.solo_optima([greedy_flows(search.graphs)], share=10)
    assert search.solo == search.solo_reached == {0: 0.5, 1: 0.5}
    assert search.at_caps(union, budget=5) is None  # 2·0.5 + 2·0.5 > 1 on L1→S0
    optimum = 0.25 + 0.001 * 0.5
    assert search.upper({0: 0.25, 1: 0.25}) >= optimum
    plan = _solve(network)
    assert plan.objective == pytest.approx(optimum)
    assert plan.bound >= optimum and plan.gap <= 0.005  # μ·(Σ caps − Σ rates) open


def test_independent_tasks_are_optimal_at_their_own_optima():
    # Job A uploads L1→L0, job B L0→L1: no shared link, so each reaches its rate alone.
    jobs = [
        {"name": "A", "tasks": [{"name": "t", "ps": "PA", "workers": ["a1", "a2"]}]},
        {
            "name": "B",
            "tasks": [
                {"name": "t", "ps": "PB", "workers": ["b"], "leaf_of": {"PB": "L1", "b": "L0"}}
            ],
        },
    ]
    network = build_network(_two_task_doc(jobs))
    plan = _solve(network)
    assert [tp.rate_gbps for tp in plan.tasks] == pytest.approx([0.5, 1.0])
    assert plan.status == "optimal" and plan.gap == 0.0
    assert "joint at the solo caps: optimal" in plan.details["stages"][-1]["log"]


def test_joining_reroutes_a_task_whose_own_routes_collide():
    # Two spines, one worker per job under L1, PSs under L0: alone each job reaches 1 via
    # either spine; routes forced through S0 collide, and the join moves one task to S1.
    doc = leaf_spine_doc(2, 2, [0, 2])
    doc["hosts"].append({"name": "PB", "role": "ps"})
    doc["links"].append({"a": "PB", "b": "L0", "capacity_gbps": 1.0})
    doc["jobs"] = [
        {"name": "A", "tasks": [{"name": "t", "ps": "PS", "workers": ["W1_0"]}]},
        {"name": "B", "tasks": [{"name": "t", "ps": "PB", "workers": ["W1_1"]}]},
    ]
    network = build_network(doc)
    narrow = _search(network, excluded={"S1"})
    collide = narrow.solo_optima([greedy_flows(narrow.graphs)], share=10)
    search = _search(network)
    search.solo_optima([greedy_flows(search.graphs)], share=10)
    assert search.solo == {0: 1.0, 1: 1.0}
    assert not search.fits(collide, search.solo)
    joined = search.at_caps(collide, budget=5)
    assert joined is not None and joined.finished and search.fits(joined.flows, search.solo)
    assert any(line.startswith("join B/t at 1: feasible") for line in search.log)


@pytest.mark.parametrize("value", [-7, 0, -1, 1.5, True, 10**12, "abc", float("nan")])
def test_bad_quantization_is_refused_by_name(fig1, value):
    with pytest.raises(SchemeInputError, match="quantization"):
        solve(fig1, "aro", SolveOptions(time_limit=5, params={"quantization": value}))


def test_bad_quantization_exits_2_from_the_command_line_and_the_topology(tmp_path, capsys):
    doc = leaf_spine_doc(4, 2, [0, 2, 2, 1], ina={"L1", "L2", "S1"})
    topo = tmp_path / "topo.yaml"
    topo.write_text(yaml.safe_dump(doc))
    assert main(["solve", str(topo), "--scheme", "aro", "--param", "quantization=-1"]) == 2
    assert "quantization" in capsys.readouterr().out
    doc["schemes"] = {"aro-qsr": {"quantization": -7}}
    topo.write_text(yaml.safe_dump(doc))
    assert main(["solve", str(topo), "--scheme", "aro-qsr"]) == 2
    assert "schemes.aro-qsr.quantization" in capsys.readouterr().out.replace("\n", "")


def test_thin_and_fat_links_keep_the_exact_rate():
    # 1 Gbps worker links, 400 Gbps elsewhere, three workers under one leaf and no INA: the
    # fat links carry three flows and never bind, each worker's own link does: rate 1. Eq. 11's
    # b̄ = 400 with N = 100 made every 1 Gbps link 0 levels wide.
    doc = leaf_spine_doc(2, 2, [0, 3], capacity=400.0)
    for link in doc["links"]:
        if link["a"].startswith("W"):
            link["capacity_gbps"] = 1.0
    network = build_network(doc)
    for scheme in ("aro", "aro-raw", "aro-acc"):
        plan = _solve(network, scheme)
        assert plan.tasks[0].rate_gbps == pytest.approx(1.0)
        assert plan.status == "optimal" and plan.bound == pytest.approx(1.0)
    qsr = _solve(network, "aro-qsr")  # b̄ = 400, N = 100: steps of 4 Gbps
    assert qsr.bound >= 1.0 and "quantized" in qsr.details["rate_grid"]


def test_sro_and_app_bound_the_full_problem_not_their_reduced_model():
    # The SJST default of the benchmark, seed 0: aro proves 33.3 Gbps; aro-acc's reduced model
    # (SRO + APP) tops out at 25 and used to call that optimal.
    from controller.tools.bench.aro import aro_leaf_spine

    network = build_network(aro_leaf_spine(0))
    full = _solve(network, "aro")
    assert full.status == "optimal" and full.objective == pytest.approx(100 / 3)
    acc = _solve(network, "aro-acc")
    assert acc.objective < full.objective - 1
    assert acc.status != "optimal" and acc.bound >= full.objective - 1e-6
    assert "full_bound" in acc.details
