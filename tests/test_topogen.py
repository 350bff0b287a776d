"""Topology generators: valid files, reproducible from the seed, the papers' placement rules."""

from __future__ import annotations

import argparse
from collections import Counter

import pytest
import yaml

from controller.model import topogen
from controller.model.network import Network, TopologyError, build_network, load_topology
from controller.model.topogen import InaOptions, Workload


def main(argv: list[str]) -> int:
    """`ina topo ...` as `controller.cli` wires it, without the other subcommands' plugins."""
    parser = argparse.ArgumentParser(prog="ina")
    topogen.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def _ina(net: Network) -> set[str]:
    return {s for s in net.switches if net.is_ina(s)}


def _access(net: Network, host: str) -> str:
    return next(iter(net.graph.successors(host)))


def _small_leaf_spine(**kw) -> dict:
    params = {
        "leaves": 6,
        "spines": 4,
        "hosts_per_leaf": 8,
        "capacity_gbps": 10.0,
        "ina": InaOptions(0.3, pipelines=2),
        "workload": Workload(workers_per_job=20),
        "seed": 1,
    }
    return topogen.leaf_spine(**{**params, **kw})


def test_leaf_spine_shape():
    net = build_network(_small_leaf_spine())
    assert (len(net.hosts), len(net.switches), net.graph.number_of_edges() // 2) == (48, 10, 72)
    assert Counter(net.role(h) for h in net.hosts) == {"ps": 1, "worker": 20, "idle": 27}
    assert {net.capacity(u, v) for u, v in net.graph.edges} == {10.0}
    assert all(net.pipelines(s) == 2 for s in _ina(net))


def test_same_seed_same_document_other_seed_differs():
    text = [yaml.safe_dump(_small_leaf_spine(seed=s)) for s in (5, 5, 6)]
    assert text[0] == text[1] != text[2]


def test_ina_fraction_is_respected_and_counts_the_ps_leaf():
    net = build_network(_small_leaf_spine())
    assert len(_ina(net)) == round(0.3 * 10)
    assert _access(net, net.tasks[0].ps) == "L0" and "L0" in _ina(net)


def test_ps_leaves_are_ina_even_beyond_the_fraction():
    doc = _small_leaf_spine(ina=InaOptions(0.0), workload=Workload(1, 3, 10))
    assert _ina(build_network(doc)) == {"L0", "L1", "L2"}
    doc = _small_leaf_spine(ina=InaOptions(0.0, ps_switch_ina=False))
    assert _ina(build_network(doc)) == set()


def test_explicit_ina_list_plus_ps_leaf():
    net = build_network(_small_leaf_spine(ina=InaOptions(["S1", "L3"])))
    assert _ina(net) == {"S1", "L3", "L0"}


def test_sjmt_tasks_share_workers_with_distinct_ps_under_leaf_i():
    net = build_network(
        _small_leaf_spine(workload=Workload(jobs=1, tasks_per_job=3, workers_per_job=12))
    )
    assert len({t.workers for t in net.tasks}) == 1
    assert [_access(net, t.ps) for t in net.tasks] == ["L0", "L1", "L2"]
    assert not {t.ps for t in net.tasks} & set(net.tasks[0].workers)


def test_mjmt_jobs_have_disjoint_workers():
    net = build_network(
        _small_leaf_spine(workload=Workload(jobs=3, tasks_per_job=2, workers_per_job=8))
    )
    by_job: dict[str, set[str]] = {}
    for task in net.tasks:
        by_job.setdefault(task.job, set()).update(task.workers)
    assert [len(w) for w in by_job.values()] == [8, 8, 8]
    assert len(set().union(*by_job.values())) == 24
    assert [_access(net, t.ps) for t in net.tasks] == ["L0", "L1", "L2", "L3", "L4", "L5"]


def test_grouped_and_interleaved_port_layouts():
    kw = {
        "leaves": 2,
        "spines": 8,
        "hosts_per_leaf": 8,
        "ina": InaOptions(["L1"], pipelines=4),
        "workload": Workload(workers_per_job=4),
    }
    grouped = build_network(topogen.leaf_spine(**kw))
    pipes = {n: grouped.ingress_pipeline(n, "L1") for n in grouped.graph.predecessors("L1")}
    assert [pipes[f"h1_{j}"] for j in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [pipes[f"S{s}"] for s in range(8)] == [2, 2, 2, 2, 3, 3, 3, 3]
    spread = build_network(topogen.leaf_spine(**kw, port_layout="interleaved"))
    pipes = {n: spread.ingress_pipeline(n, "L1") for n in spread.graph.predecessors("L1")}
    assert [pipes[f"h1_{j}"] for j in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert [pipes[f"S{s}"] for s in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]


def test_fat_tree_shape_and_placement():
    doc = topogen.fat_tree(
        k=4, ina=InaOptions(0.5, pipelines=2), workload=Workload(jobs=2, workers_per_job=6), seed=3
    )
    net = build_network(doc)
    tiers = Counter(net.spec(s).tier for s in net.switches)
    assert tiers == {"core": 4, "aggregation": 8, "edge": 8} and len(net.hosts) == 16
    assert all(net.graph.degree(s) // 2 == 4 for s in net.switches)
    assert len(_ina(net)) == 10
    assert [_access(net, t.ps) for t in net.tasks] == ["E0_0", "E0_1"]
    assert {"E0_0", "E0_1"} <= _ina(net)
    assert not set(net.tasks[0].workers) & set(net.tasks[1].workers)
    assert set(net.graph.successors("A1_1")) == {"E1_0", "E1_1", "C2", "C3"}


def test_fat_tree_hosts_per_edge_override():
    net = build_network(
        topogen.fat_tree(k=4, hosts_per_edge=12, workload=Workload(workers_per_job=90))
    )
    assert len(net.hosts) == 96 and len(net.tasks[0].workers) == 90


def test_edge_cluster():
    doc = topogen.edge(
        aggregators=8, ps=2, workers_per_aggregator=(2, 4), empty_aggregators=3, seed=4
    )
    net = build_network(doc)
    aggs = [s for s in net.switches if s != "DCN"]
    assert len(aggs) == 8 and all(net.is_ina(a) for a in aggs)
    workers = Counter(_access(net, w) for w in net.tasks[0].workers)
    assert sum(1 for a in aggs if workers[a] == 0) == 3
    assert all(2 <= workers[a] <= 4 for a in ("A0", "A1"))
    assert [_access(net, t.ps) for t in net.tasks] == ["A0", "A1"]
    assert net.tasks[0].workers == net.tasks[1].workers
    for agg in aggs:
        spec = net.spec(agg)
        assert 200 <= spec.aggregation_capacity_gbps <= 300
        assert net.capacity(agg, "DCN") == spec.ingress_capacity_gbps
        assert net.capacity("DCN", agg) == spec.egress_capacity_gbps


def test_pool_has_every_candidate_link_and_port_budgets():
    net = build_network(
        topogen.pool(switches=6, ina=InaOptions(0.5, pipelines=1), max_ports=4, workers=5, seed=2)
    )
    assert net.graph.number_of_edges() // 2 == 6 * 6 + 6 * 5 // 2
    assert {net.spec(s).max_ports for s in net.switches} == {4}
    assert len(_ina(net)) == 3
    assert not any(net.graph.has_edge("PS", f"W{i}") for i in range(5))


@pytest.mark.parametrize(
    "make, param",
    [
        (lambda: _small_leaf_spine(workload=Workload(workers_per_job=48)), "workers_per_job"),
        (lambda: _small_leaf_spine(ina=InaOptions(1.5)), "ina"),
        (lambda: _small_leaf_spine(ina=InaOptions(["X9"])), "ina"),
        (lambda: _small_leaf_spine(port_layout="random"), "port_layout"),
        (lambda: topogen.fat_tree(k=5), "k"),
        (lambda: topogen.edge(aggregators=3, ps=2, empty_aggregators=2), "empty_aggregators"),
    ],
)
def test_bad_parameters_name_the_parameter(make, param):
    with pytest.raises(TopologyError) as info:
        make()
    assert info.value.where == param


def test_cli_writes_a_loadable_file_and_is_reproducible(tmp_path, capsys):
    args = [
        "topo",
        "gen",
        "leaf-spine",
        "--leaves",
        "4",
        "--spines",
        "2",
        "--hosts-per-leaf",
        "4",
        "--workers",
        "6",
        "--pipelines",
        "2",
        "--tasks-per-job",
        "2",
        "--seed",
        "9",
    ]
    for name in ("a.yaml", "b.yaml"):
        assert main([*args, "-o", str(tmp_path / name)]) == 0
    assert (tmp_path / "a.yaml").read_text() == (tmp_path / "b.yaml").read_text()
    net = load_topology(tmp_path / "a.yaml")
    assert len(net.tasks) == 2 and len(net.tasks[0].workers) == 6
    assert "a.yaml: 16 hosts, 6 switches" in capsys.readouterr().out


@pytest.mark.parametrize(
    "kind, extra",
    [
        ("fat-tree", ["--k", "4", "--workers", "5"]),
        ("edge", ["--aggregators", "4", "--ps", "1", "--workers-per-aggregator", "1", "2"]),
        ("pool", ["--switches", "4", "--workers", "3", "--max-ports", "3"]),
    ],
)
def test_cli_other_kinds(tmp_path, kind, extra):
    out = tmp_path / f"{kind}.yaml"
    assert main(["topo", "gen", kind, *extra, "-o", str(out)]) == 0
    assert load_topology(out).tasks


def test_cli_bad_parameter_is_a_topology_error_and_writes_nothing(tmp_path):
    """`ina` turns TopologyError into a one-paragraph message and exit code 2."""
    with pytest.raises(TopologyError, match="workers_per_job"):
        main(
            [
                "topo",
                "gen",
                "fat-tree",
                "--k",
                "4",
                "--workers",
                "99",
                "-o",
                str(tmp_path / "x.yaml"),
            ]
        )
    assert not (tmp_path / "x.yaml").exists()
