"""The emulated network is the part of the model a plan uses: every host on its paths and no
idle one, all switches or only the plan's, links between kept nodes with the model's ports."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.emulation.subset import plan_nodes
from controller.model import topogen
from controller.model.network import build_network
from controller.model.topogen import InaOptions, Workload
from controller.solvers import solve


def _network(leaves: int, spines: int, hosts: int, workers: int, seed: int):
    return build_network(
        topogen.leaf_spine(
            leaves=leaves,
            spines=spines,
            hosts_per_leaf=hosts,
            capacity_gbps=10.0,
            ina=InaOptions(0.3, pipelines=2),
            workload=Workload(workers_per_job=workers),
            seed=seed,
        )
    )


sizes = st.tuples(
    st.integers(2, 4), st.integers(1, 3), st.integers(2, 5), st.integers(0, 2**16)
).flatmap(lambda t: st.tuples(st.just(t), st.integers(1, t[0] * t[2] - 1)))


@settings(max_examples=15, deadline=None)
@given(sizes, st.sampled_from(["shortest", "aro"]), st.sampled_from(["all", "plan"]))
def test_the_plan_s_hosts_and_switches_are_built_and_no_idle_host(size, scheme, switches):
    (leaves, spines, hosts, seed), workers = size
    net = _network(leaves, spines, hosts, workers, seed)
    plan = solve(net, scheme)
    nodes = plan_nodes(net, plan, switches)
    # independent reference: the roles the topology file gives its hosts
    assert nodes & set(net.hosts) == {h for h in net.hosts if net.role(h) in ("worker", "ps")}
    on_paths = {n for tp in plan.tasks for path in tp.paths.values() for n in path}
    assert on_paths <= nodes
    expected = set(net.switches) if switches == "all" else on_paths & set(net.switches)
    assert nodes & set(net.switches) == expected


def test_an_unknown_switch_choice_is_refused():
    net = _network(2, 1, 2, 2, 0)
    with pytest.raises(ValueError, match="all, plan"):
        plan_nodes(net, solve(net, "shortest"), "some")


def test_the_mininet_topology_builds_only_the_kept_nodes_with_the_model_s_ports():
    pytest.importorskip("mininet.topo")
    from controller.emulation.mininet_nodes import InaTopo

    net = _network(3, 2, 4, 5, 3)
    plan = solve(net, "aro")
    nodes = plan_nodes(net, plan, "plan")
    topo = InaTopo(net, nodes=nodes)
    assert set(topo.mininet_name) == nodes
    assert len(topo.hosts()) == 6 and len(topo.switches()) == len(nodes) - 6
    kept = {(u, v) for u, v in net.graph.edges if {u, v} <= nodes}
    links = topo.links(withInfo=True)
    assert len(links) == len(kept) // 2
    for a, b, info in links:
        u, v = topo.model_name[a], topo.model_name[b]
        model = net.graph.edges[u, v]
        if model["out_port"] is not None:  # a host's end has no port number in the model
            assert info["port1"] == model["out_port"]
        assert info["port2"] == model["in_port"]
