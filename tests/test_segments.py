"""Partial aggregation compiled segment by segment (`controller.compiler.segments`): checked by
walking packets through the compiled tables with an interpreter written here (the switch semantics
of p4src/README.md, steps 1, 4.2 and 4.3), against hand-computed counts and the evaluator's
fractional link loads."""

from __future__ import annotations

from collections import Counter, deque
from itertools import pairwise

import pytest
from conftest import EXAMPLES, partial_doc, partial_plan

from controller.compiler.program import compile_plan
from controller.compiler.segments import boundaries
from controller.evaluator.evaluate import evaluate
from controller.model.network import Network, build_network, load_topology
from controller.solvers import SolveOptions, solve


class Walk:
    """One fragment at position `x` (a fraction of the gradient) through the compiled plan."""

    def __init__(self, network: Network, plan, x: float):
        programs, assignments = compile_plan(network, plan)
        self.ps_packets: list[tuple[int, int]] = []  # (flow id, count) reaching the PS
        self.completed: Counter[str] = Counter()  # aggregations completed per switch
        self.links: Counter[tuple[str, str]] = Counter()  # packets per directed link
        tables = {s: self._tables(p) for s, p in programs.items()}
        neighbor = {(u, d["out_port"]): v for u, v, d in network.graph.edges(data=True)}
        slots: dict[tuple[str, int, int], list[int]] = {}
        queue = deque()
        for a in assignments:
            flow = next((s.flow_id for s in a.segments if s.start <= x < s.end), a.flow_id)
            (first,) = network.graph.successors(a.worker)
            queue.append((a.worker, first, a.job_id, a.task_id, flow, 1))
        while queue:
            u, v, job, task, flow, count = queue.popleft()
            self.links[(u, v)] += 1
            if not network.is_switch(v):
                assert v in {tp.ps for tp in plan.tasks}, f"flow {flow} reached host {v}"
                self.ps_packets.append((flow, count))
                continue
            pipelines, aggregate, forward = tables[v]
            pipe = pipelines.get(network.graph.edges[u, v]["in_port"], 0)
            rule = aggregate.get((job, task, pipe, flow))
            if rule is not None:
                slot = slots.setdefault((v, pipe, rule["tag"]), [0, 0])
                assert not slot[0] & rule["member"], f"{v}: flow {flow} merged twice"
                slot[0] |= rule["member"]
                slot[1] += count
                if slot[0] != rule["full"]:
                    continue
                del slots[(v, pipe, rule["tag"])]
                self.completed[v] += 1
                flow, count = rule["out_flow"], slot[1]
            queue.append((v, neighbor[(v, forward[(job, task, flow)])], job, task, flow, count))
        assert not slots, f"partial sums left waiting: {slots}"

    @staticmethod
    def _tables(program):
        pipelines, aggregate, forward = {}, {}, {}
        for e in program.table_entries:
            match, args = dict(e.match), dict(e.action.args)
            if e.table_id == "port_pipeline":
                pipelines[match["ingress_port"]] = args["pipe"]
            elif e.table_id == "ina_aggregate":
                aggregate[(match["job"], match["task"], match["pipe"], match["flow_id"])] = args
            elif e.table_id == "ina_forward":
                forward[(match["job"], match["task"], match["flow_id"])] = args["port"]
        return pipelines, aggregate, forward


def test_the_hand_written_plan_cuts_at_its_shares():
    assert boundaries(partial_plan().tasks[0]) == [0.0, 0.5, 0.75, 1.0]


@pytest.mark.parametrize(
    ("x", "ps_counts", "completed"),
    [
        (0.25, [3], {"S1": 1, "S2": 1}),  # S1 merges W1 + W2, S2 that sum + W3
        (0.6, [3], {"S2": 1}),  # S1 passes W1 and W2 raw, S2 merges all three
        (0.9, [1, 1, 1], {}),  # nobody merges: three raw flows into the PS
    ],
)
def test_each_fragment_meets_the_points_its_share_gives(x, ps_counts, completed):
    network = build_network(partial_doc())
    walk = Walk(network, partial_plan(), x)
    assert sorted(c for _, c in walk.ps_packets) == ps_counts
    assert dict(walk.completed) == completed
    assert walk.links[("S1", "S2")] == (1 if x < 0.5 else 2)


def test_a_coarse_plan_publishes_no_segments():
    network = build_network(partial_doc())
    plan = partial_plan()
    plan.tasks[0].aggregation = [
        type(a)(a.switch, a.pipeline, 2, a.next_hop) for a in plan.tasks[0].aggregation
    ]
    _, assignments = compile_plan(network, plan)
    assert all(a.segments == () for a in assignments)
    assert len({a.flow_id for a in assignments}) == 3


def test_segments_of_one_point_keep_its_tag_and_get_their_own_flows():
    network = build_network(partial_doc())
    programs, assignments = compile_plan(network, partial_plan())
    s2 = [e for e in programs["S2"].table_entries if e.table_id == "ina_aggregate"]
    assert len({dict(e.action.args)["tag"] for e in s2}) == 1
    # [0, .5): S1's sum and W3 (fan-in 2); [.5, .75): W1, W2, W3 (fan-in 3)
    assert sorted(dict(e.action.args)["full"] for e in s2) == [3, 3, 7, 7, 7]
    for a in assignments:
        assert [(s.start, s.end) for s in a.segments] == [(0, 0.5), (0.5, 0.75), (0.75, 1)]
        assert len({s.flow_id for s in a.segments}) == 3


def _fine_plans():
    grid = load_topology(EXAMPLES / "grid-fig1.yaml")
    yield grid, solve(grid, "atp", SolveOptions(seed=0, params={"partial": True}))
    from controller.tools.bench.paring import fat_tree_doc

    fat = build_network(fat_tree_doc(15, 8, 5.0))
    yield fat, solve(fat, "paring", SolveOptions(seed=0, params={"fine": True}))
    for name in ("paring-fine", "paring-fine-2ps"):
        star = load_topology(EXAMPLES / f"{name}.yaml")
        yield star, solve(star, "paring", SolveOptions(seed=0, params={"fine": True}))


@pytest.mark.parametrize(
    "case",
    range(4),
    ids=["atp-grid-fig1", "paring-fine-fat-tree", "paring-fine-star", "paring-fine-2ps"],
)
def test_packets_through_the_tables_carry_what_the_evaluator_scored(case):
    """Per link, packets per fragment averaged over the segments (weighted by their width)
    equal the evaluator's fractional flows, and every fragment reaches the PS whole."""
    network, plan = list(_fine_plans())[case]
    assert any(a.share < 1 for tp in plan.tasks for a in tp.aggregation), (
        "the scheme made no partial point"
    )
    cuts = sorted({c for tp in plan.tasks for c in boundaries(tp)})  # every task's segments
    average: Counter[tuple[str, str]] = Counter()
    for lo, hi in pairwise(cuts):
        walk = Walk(network, plan, (lo + hi) / 2)
        assert sum(c for _, c in walk.ps_packets) == sum(len(tp.paths) for tp in plan.tasks)
        for link, n in walk.links.items():
            average[link] += n * (hi - lo)
    loads = {(ll.src, ll.dst): ll.flows for ll in evaluate(network, plan).link_loads if ll.flows}
    assert set(average) == set(loads)
    for link, flows in loads.items():
        assert average[link] == pytest.approx(flows, rel=1e-9), link


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("atp:partial", "--scheme atp:partial: 'partial' is not KEY=VALUE"),
        ("atp:nonsense=1", "atp: unknown parameter(s) nonsense"),
    ],
)
def test_ina_mininet_refuses_a_bad_scheme_spec_before_starting(spec, message, capsys):
    from controller.cli import main

    assert main(["mininet", str(EXAMPLES / "grid-fig1.yaml"), "--scheme", spec]) == 2
    said = capsys.readouterr()
    assert message in said.out + said.err


def test_a_replan_keeps_the_schemes_parameters(tmp_path):
    """Seen on Mininet: the link monitor took the idle S1 - S2 link for dead under load, and
    the re-plan solved plain `atp`, so the workers went coarse mid-run. The plan carries its
    parameters (`details.params`) and the re-plan uses them."""
    import asyncio

    from conftest import free_port

    from controller.service.daemon import Session, replan
    from controller.southbound.p4runtime import SwitchTarget

    network = load_topology(EXAMPLES / "grid-fig1.yaml")
    plan = solve(network, "atp", SolveOptions(seed=0, params={"partial": True}))
    assert plan.details["params"] == {"partial": True}
    targets = {
        s: SwitchTarget(s, f"127.0.0.1:{free_port()}", i + 1)
        for i, s in enumerate(network.switches)
    }
    session = Session(network, plan, targets, tmp_path / "state.json")
    session.drain_seconds = 0
    asyncio.run(replan(session, {("S1", "S2")}))
    assert session.version == 2
    assert any(a.share < 1 for a in session.plan.tasks[0].aggregation)
    assert session.plan.tasks[0].rate_gbps == pytest.approx(39 / 16, rel=1e-6)
