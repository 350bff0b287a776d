"""The plan → P4Runtime entities compiler, checked entry by entry on ARO Fig. 1."""

from __future__ import annotations

import ipaddress

import numpy as np
import pytest
from conftest import EXAMPLES, leaf_spine_doc
from finsy import P4Schema
from finsy.proto import p4r
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.compiler.program import CompileError, Numbering, compile_plan
from controller.evaluator.evaluate import evaluate
from controller.model.network import build_network, load_topology
from controller.model.plan import AggregationPoint, Plan, TaskPlan
from dataplane.entities import Entities
from dataplane.frame import DATA, MAX_FAN_IN, OFF_ELEMS, Endpoint, InaHeader, K, build_frame
from dataplane.pipeline import Pipeline
from dataplane.schema import P4INFO_PATH, Schema, load_p4info


def _fig1_plan(aggregation=True) -> Plan:
    leaf = {"W0": "L1", "W1": "L1", "W2": "L2", "W3": "L2", "W4": "L3"}
    paths = {w: [w, leaf[w], "S1", "L0", "PS"] for w in leaf}
    points = (
        [
            AggregationPoint("L1", 0, 2, "S1"),
            AggregationPoint("L2", 0, 2, "S1"),
            AggregationPoint("S1", 0, 3, "L0"),
        ]
        if aggregation
        else []
    )
    task = TaskPlan("job0", "t0", "PS", 1.0 if aggregation else 0.2, paths, points)
    return Plan("hand", "heuristic", 1.0, None, 0.0, 0, [task])


def _entries(program, table):
    return [e for e in program.table_entries if e.table_id == table]


def test_fig1_aggregation_entries_chain_to_the_ps():
    network = load_topology(EXAMPLES / "aro-fig1.yaml")
    programs, workers = compile_plan(network, _fig1_plan())
    l1 = _entries(programs["L1"], "ina_aggregate")
    assert len(l1) == 2
    assert sorted(e.action.args["member"] for e in l1) == [1, 2]
    assert {e.action.args["full"] for e in l1} == {3}
    s1 = _entries(programs["S1"], "ina_aggregate")
    assert len(s1) == 3 and {e.action.args["full"] for e in s1} == {7}
    # L1's merged flow is what S1 merges; S1's merged flow is the one L0 forwards to the PS.
    l1_out = l1[0].action.args["out_flow"]
    assert l1_out in {e.match["flow_id"] for e in s1}
    s1_out = s1[0].action.args["out_flow"]
    assert [e.match["flow_id"] for e in _entries(programs["L0"], "ina_forward")] == [s1_out]
    assert _entries(programs["L0"], "job_slots") == []
    assert len(_entries(programs["L1"], "job_slots")) == 1
    by_worker = {w.worker: w for w in workers}
    assert by_worker["W0"].next_node != by_worker["W4"].next_node  # L1 vs S1
    assert len({w.flow_id for w in workers}) == 5


def test_each_point_names_its_members_down_a_group_of_their_own():
    """A point's name group has one replica per member, through the port its flow arrives on
    (W4's crosses L3, which routes the NACK by `named_host`'s address), instance its member
    bit; a sum (L1's and L2's at S1) is named through the first of its workers, whose copy
    makes the leaf send its sum again. Result groups keep their ids."""
    network = load_topology(EXAMPLES / "aro-fig1.yaml")
    programs, _ = compile_plan(network, _fig1_plan())
    s1 = programs["S1"]
    [result, named] = s1.multicast_groups
    assert result.multicast_group_id == 1 and named.multicast_group_id == 2
    bits = {
        e.match["flow_id"]: e.action.args["member"].bit_length() - 1
        for e in _entries(s1, "ina_aggregate")
    }
    l1_sum = _entries(programs["L1"], "ina_aggregate")[0].action.args["out_flow"]
    l2_sum = _entries(programs["L2"], "ina_aggregate")[0].action.args["out_flow"]
    port = {leaf: network.graph.edges["S1", leaf]["out_port"] for leaf in ("L1", "L2", "L3")}
    assert sorted(named.replicas) == sorted(
        [(port["L3"], bits[5]), (port["L1"], bits[l1_sum]), (port["L2"], bits[l2_sum])]
    )
    assert {e.action.args["name_group"] for e in _entries(s1, "ina_aggregate")} == {2}
    ips = Numbering(network).host_ip
    hosts = {e.match["rid"]: e.action.args["addr"] for e in _entries(s1, "named_host")}
    assert {e.match["group"] for e in _entries(s1, "named_host")} == {2}
    assert hosts == {
        bits[5]: int(ipaddress.ip_address(ips["W4"])),
        bits[l1_sum]: int(ipaddress.ip_address(ips["W0"])),
        bits[l2_sum]: int(ipaddress.ip_address(ips["W2"])),
    }
    l1_named = programs["L1"].multicast_groups[-1]
    assert sorted(instance for _, instance in l1_named.replicas) == [0, 1]


def test_results_reach_every_worker_once():
    network = load_topology(EXAMPLES / "aro-fig1.yaml")
    programs, _ = compile_plan(network, _fig1_plan(aggregation=False))
    s1_group = programs["S1"].multicast_groups
    assert len(s1_group) == 1 and len(s1_group[0].replicas) == 3  # L1, L2, L3
    assert len(programs["L1"].multicast_groups[0].replicas) == 2
    assert programs["S0"].multicast_groups == []


def test_port_pipeline_and_clone_sessions_cover_every_port():
    network = load_topology(EXAMPLES / "aro-fig1.yaml")
    programs, _ = compile_plan(network, _fig1_plan())
    s1 = programs["S1"]
    assert len(_entries(s1, "port_pipeline")) == 4
    assert sorted(c.session_id for c in s1.clone_sessions) == [1, 2, 3, 4]
    assert len(_entries(s1, "ipv4_lpm")) == 6  # a /32 route per host


def test_inconsistent_plan_is_refused():
    network = load_topology(EXAMPLES / "aro-fig1.yaml")
    plan = _fig1_plan()
    plan.tasks[0].aggregation[0] = AggregationPoint("L1", 0, 5, "S1")
    with pytest.raises(CompileError, match="fan-in 5"):
        compile_plan(network, plan)


def test_flow_ids_are_unique_across_tasks():
    network = load_topology(EXAMPLES / "aro-fig1.yaml")
    first = _fig1_plan()
    second = TaskPlan("job0", "t1", "PS", 1.0, dict(first.tasks[0].paths), [])
    plan = Plan("hand", "heuristic", 1.0, None, 0.0, 0, [first.tasks[0], second])
    network.tasks.append(type(network.tasks[0])("job0", "t1", "PS", network.tasks[0].workers))
    _, workers = compile_plan(network, plan)
    ids = [w.flow_id for w in workers] + list({w.result_flow_id for w in workers})
    assert len(ids) == len(set(ids)) == 12


def test_next_plan_version_installs_beside_the_current_one():
    from controller.southbound.p4runtime import diff_programs

    network = load_topology(EXAMPLES / "aro-fig1.yaml")
    v1, workers1 = compile_plan(network, _fig1_plan(), version=1)
    v2, workers2 = compile_plan(network, _fig1_plan(), version=2)
    assert not {w.flow_id for w in workers1} & {w.flow_id for w in workers2}
    assert {w.version for w in workers2} == {2}
    inserts, modifies, deletes = diff_programs(v1["S1"], v2["S1"])
    # New flows, aggregation entries, slot regions and groups are inserted beside the old
    # ones; only the result group, keyed by job and task alone, is modified in place.
    assert {e.table_id for e in modifies} == {"result_multicast"}
    assert any(getattr(e, "table_id", "") == "ina_aggregate" for e in inserts)
    assert len(deletes) == len(inserts)  # the old version's own entries go at retirement
    tags1 = {e.action.args["tag"] for e in _entries(v1["S1"], "ina_aggregate")}
    tags2 = {e.action.args["tag"] for e in _entries(v2["S1"], "ina_aggregate")}
    assert not tags1 & tags2


def test_without_links_drops_both_directions():
    network = load_topology(EXAMPLES / "aro-fig1.yaml")
    view = network.without_links({("L1", "S1")})
    assert not view.graph.has_edge("L1", "S1") and not view.graph.has_edge("S1", "L1")
    assert network.graph.has_edge("L1", "S1")


def test_every_host_port_is_bound_to_exactly_its_hosts_jobs():
    """Two jobs and an idle host on a leaf-spine (p4src/README.md step 2b): each port facing
    a host gets `host_port`, and `host_job` for each job the host is a worker or PS of, read
    here from the topology document itself; ports between switches get neither."""
    from conftest import leaf_spine_doc

    from controller.model.network import build_network
    from controller.solvers import solve

    doc = leaf_spine_doc(3, 2, [0, 2, 2], ina={"L1", "L2", "S0"})
    doc["hosts"] += [{"name": "PS2", "role": "ps"}, {"name": "IDLE", "role": "idle"}]
    doc["links"] += [
        {"a": "PS2", "b": "L2", "capacity_gbps": 1.0},
        {"a": "IDLE", "b": "L1", "capacity_gbps": 1.0},
    ]
    doc["jobs"] = [
        {"name": "a", "tasks": [{"name": "t0", "ps": "PS", "workers": ["W1_0", "W1_1", "W2_0"]}]},
        {"name": "b", "tasks": [{"name": "t0", "ps": "PS2", "workers": ["W2_1"]}]},
    ]
    network = build_network(doc)
    programs, _ = compile_plan(network, solve(network, "shortest"))
    jobs_of: dict[str, set[int]] = {}
    for job_id, job in enumerate(doc["jobs"], start=1):
        for task in job["tasks"]:
            for host in (task["ps"], *task["workers"]):
                jobs_of.setdefault(host, set()).add(job_id)
    hosts = {h["name"] for h in doc["hosts"]}
    for switch, program in programs.items():
        expected_ports, expected_jobs = set(), set()
        for link in doc["links"]:
            for host, other in ((link["a"], link["b"]), (link["b"], link["a"])):
                if host in hosts and other == switch:
                    port = network.graph.edges[host, switch]["in_port"]
                    expected_ports.add(port)
                    expected_jobs |= {(port, j) for j in jobs_of.get(host, ())}
        assert {
            e.match["ingress_port"] for e in _entries(program, "host_port")
        } == expected_ports, switch
        assert {
            (e.match["ingress_port"], e.match["job"]) for e in _entries(program, "host_job")
        } == expected_jobs, switch
    l1_ports = {network.graph.edges[h, "L1"]["in_port"]: h for h in ("W1_0", "W1_1", "IDLE")}
    bound = {e.match["ingress_port"] for e in _entries(programs["L1"], "host_job")}
    assert {l1_ports[p] for p in bound} == {"W1_0", "W1_1"}, "an idle host is bound to no job"


def _one_leaf_merging(workers: int):
    """`workers` workers under leaf L1, all merged there (one aggregation point)."""
    network = build_network(leaf_spine_doc(2, 1, [0, workers], ina={"L1"}, capacity=100))
    paths = {w: [w, "L1", "S0", "L0", "PS"] for w in network.tasks[0].workers}
    task = TaskPlan("job0", "t0", "PS", 1.0, paths, [AggregationPoint("L1", 0, workers, "S0")])
    return network, Plan("hand", "heuristic", 1.0, None, 0.0, 0, [task])


def test_one_point_merging_64_flows_compiles_to_entries_the_p4info_accepts():
    network, plan = _one_leaf_merging(64)
    assert evaluate(network, plan).beyond_data_plane == []
    programs, _ = compile_plan(network, plan)
    entries = _entries(programs["L1"], "ina_aggregate")
    assert sorted(e.action.args["member"] for e in entries) == [1 << i for i in range(64)]
    assert {e.action.args["full"] for e in entries} == {(1 << 64) - 1}
    schema = P4Schema(P4INFO_PATH)
    for entry in entries:
        entry.encode(schema)  # each value fits its P4Info width


def test_a_point_merging_more_than_the_data_plane_can_is_refused():
    network, plan = _one_leaf_merging(MAX_FAN_IN + 1)
    with pytest.raises(
        CompileError, match=f"fan-in {MAX_FAN_IN + 1} at L1 exceeds the data plane's {MAX_FAN_IN}"
    ):
        compile_plan(network, plan)


@settings(max_examples=12, deadline=None)
@given(workers=st.integers(1, 64), data=st.data())
def test_a_compiled_point_sums_its_flows_exactly_once_on_the_embedded_pipeline(workers, data):
    """Compiler → P4Runtime entities → the embedded target's pipeline: each worker's DATA,
    in any order and some sent twice, leaves L1 as one packet with numpy's wrapping sum."""
    network, plan = _one_leaf_merging(workers)
    programs, assignments = compile_plan(network, plan)
    pipeline = Pipeline()
    entities, finsy_schema = Entities(Schema(load_p4info()), pipeline), P4Schema(P4INFO_PATH)
    for entity in programs["L1"].entities():
        entities.write(p4r.Update(type=p4r.Update.INSERT, entity=entity.encode(finsy_schema)))
    graph = network.graph
    rng = np.random.default_rng(workers)
    elements = rng.integers(-(2**31), 2**31, size=(workers, K), dtype=np.int64).astype(np.int32)
    order = data.draw(st.permutations(range(workers)))
    again = data.draw(
        st.lists(st.sampled_from(order[:-1]), max_size=3) if workers > 1 else st.just([])
    )
    out = []
    for i in [*order[:-1], *again, order[-1]]:
        a = assignments[i]
        header = InaHeader(a.job_id, a.task_id, DATA, a.flow_id, a.next_node, frag_id=7)
        frame = build_frame(
            Endpoint(b"\2" * 6, b"\12\0\0\1"),
            Endpoint(b"\2" * 6, b"\12\0\0\2"),
            header,
            elements[i].astype(">i4").tobytes(),
        )
        out += pipeline.process(graph.edges[a.worker, "L1"]["in_port"], frame)
    [(port, frame)] = out
    assert port == graph.edges["L1", "S0"]["out_port"]
    assert InaHeader.unpack(frame).count == workers
    expected = elements.astype(np.int64).sum(axis=0).astype(np.int32)
    np.testing.assert_array_equal(np.frombuffer(frame, ">i4", K, OFF_ELEMS), expected)
    assert pipeline.counters["duplicates"][0] == len(again)


def test_results_go_only_down_branches_that_lead_to_a_worker():
    """Two workers under L1 reach L0 by two spines; their results come back by the first
    (S0): S1 leads to no worker's result, so L0 sends it none, where every copy it got was
    dropped at S1 (counted as unknown_job; 10 of L0's 17 copies of each result at 100
    workers on a 17x17 leaf-spine)."""
    network = build_network(leaf_spine_doc(2, 2, [0, 2]))
    paths = {"W1_0": ["W1_0", "L1", "S0", "L0", "PS"], "W1_1": ["W1_1", "L1", "S1", "L0", "PS"]}
    plan = Plan("hand", "heuristic", 1.0, None, 0.0, 0, [TaskPlan("job0", "t0", "PS", 1.0, paths)])
    programs, _ = compile_plan(network, plan)
    with_result = {s for s, p in programs.items() if _entries(p, "result_multicast")}
    assert with_result == {"L0", "S0", "L1"}
    to_s0 = network.graph.edges["L0", "S0"]["out_port"]
    (l0_group,) = programs["L0"].multicast_groups
    assert [port for port, _ in l0_group.replicas] == [to_s0]
