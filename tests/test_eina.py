"""EINA (`eina`, `eina-iqcp`): each reading of the garbled constraints on a case solved by hand,
the paper's Fig. 1, and a brute-force reference over all trees on tiny instances.

The reference at the bottom shares no code with the model: it enumerates every parent map,
keeps the ones that are trees rooted at the PS's aggregator (depth ≤ d̂), and rates each with
exact fractions as the smallest capacity / flow count it meets.
"""

from __future__ import annotations

import itertools
import json
import random
from fractions import Fraction

import pytest
import yaml
from conftest import EXAMPLES

from controller.cli import main
from controller.evaluator.evaluate import evaluate
from controller.model import topogen
from controller.model.network import Network, TopologyError, build_network, load_topology
from controller.model.plan import AggregationPoint, Plan, TaskPlan
from controller.solvers import SolveOptions, solve
from controller.solvers.eina.instance import read
from controller.solvers.eina.model import build


def edge_doc(
    aggs: dict[str, tuple[float, float, float, int]], ps_at: list[str], host_cap: float = 100.0
) -> dict:
    """Aggregators name → (c, b^I, b^E, workers); PS p at aggregator ps_at[p]; one DCN switch."""
    hosts, links, switches = [], [], [{"name": "DCN", "tier": "core"}]
    workers = []
    for name, (c, b_in, b_out, n) in aggs.items():
        switches.append(
            {
                "name": name,
                "tier": "tor",
                "ina": True,
                "aggregation_capacity_gbps": c,
                "ingress_capacity_gbps": b_in,
                "egress_capacity_gbps": b_out,
            }
        )
        links.append({"a": name, "b": "DCN", "capacity_gbps": b_in, "reverse_capacity_gbps": b_out})
        for k in range(n):
            workers.append(f"w{name}_{k}")
            hosts.append({"name": workers[-1], "role": "worker"})
            links.append({"a": workers[-1], "b": name, "capacity_gbps": host_cap})
    for p, at in enumerate(ps_at):
        hosts.append({"name": f"ps{p}", "role": "ps"})
        links.append({"a": f"ps{p}", "b": at, "capacity_gbps": host_cap})
    tasks = [{"name": f"t{p}", "ps": f"ps{p}", "workers": workers} for p in range(len(ps_at))]
    return {
        "name": "edge-test",
        "hosts": hosts,
        "switches": switches,
        "links": links,
        "jobs": [{"name": "job0", "tasks": tasks}],
    }


def run(doc: dict, scheme: str = "eina", **params):
    network = build_network(doc)
    plan = solve(network, scheme, SolveOptions(seed=0, params=params))
    if plan.tasks:
        result = evaluate(network, plan)
        assert result.consistent, result.problems
        for te, tp in zip(result.tasks, plan.tasks, strict=True):
            assert te.rate_gbps >= tp.rate_gbps * (1 - 1e-6)
    return plan


# ------------------------------------------------------------------ the paper's Fig. 1


def test_fig1_eina_is_half_optimal_and_the_evaluator_agrees(tmp_path):
    topo, out = str(EXAMPLES / "eina-fig1.yaml"), tmp_path / "p.json"
    assert main(["solve", topo, "--scheme", "eina", "--json", str(out)]) == 0
    assert main(["evaluate", topo, str(out)]) == 0
    network = load_topology(topo)
    plan = solve(network, "eina", SolveOptions(seed=0))
    assert plan.status == "optimal"
    assert plan.objective == pytest.approx(0.5) and plan.bound == pytest.approx(0.5)
    assert evaluate(network, plan).tasks[0].rate_gbps == pytest.approx(0.5)
    # By hand: 0.5 needs A1 and A2 to meet at the relay A3, which feeds A0 (A0 merges W0's
    # flow and one more: 2 x 0.5 = its 1 Gbps; a star would put 3 flows on A0).
    assert plan.details["trees"] == [{"A1": "A3", "A2": "A3", "A3": "A0"}]


def test_fig1_iqcp_integral_rates_prove_nothing_below_one_gbps():
    """IQCP's grid is 1 Gbps: on 1 Gbps capacities its model can only say r = 0; the trees it
    returns are re-rated (whatever it picked) and the bound is the real one (0.5: A1 merges its
    two workers on 1 Gbps whatever the tree), so it is `feasible`, never a false `optimal`."""
    plan = solve(load_topology(EXAMPLES / "eina-fig1.yaml"), "eina-iqcp", SolveOptions(seed=0))
    assert plan.details["model_objective_gbps"] == 0
    assert plan.status == "feasible"
    assert plan.objective < 0.5 - 1e-6 and plan.bound == pytest.approx(0.5)


@pytest.mark.parametrize(("depth", "expected"), [(2, 1 / 3), (3, 0.5), (4, 0.5)])
def test_fig1_depth_limit(depth, expected):
    """d* = 2 (d̂ = 1): every worker aggregator sends straight to A0, which then merges W0 and
    A1's and A2's flows: 3r ≤ 1. d* = 3 allows A1, A2 → A3 → A0: 0.5."""
    doc = load_topology(EXAMPLES / "eina-fig1.yaml")
    plan = solve(doc, "eina", SolveOptions(seed=0, params={"depth_limit": depth}))
    assert plan.objective == pytest.approx(expected, abs=1e-6)
    assert plan.status == "optimal"


def test_depth_limit_one_leaves_other_racks_unreachable():
    plan = solve(
        load_topology(EXAMPLES / "eina-fig1.yaml"), "eina", SolveOptions(params={"depth_limit": 1})
    )
    assert plan.status == "infeasible" and not plan.tasks


# ------------------------------------------------------------------ each reading, by hand


def test_reading_2_root_sends_to_its_ps_worker_racks_send_once():
    """(2) without the root: A0 holds the PS and a worker; A1's worker must reach A0, A0 sends
    nothing. A0 merges 2 flows on c = 1: 0.5."""
    plan = run(edge_doc({"A0": (1, 10, 10, 1), "A1": (10, 10, 10, 1)}, ["A0"]))
    assert plan.details["trees"] == [{"A1": "A0"}]
    assert plan.objective == pytest.approx(0.5) and plan.status == "optimal"


def test_reading_9_a_relay_that_receives_forwards():
    """Without "receive ⇒ forward" A1 could satisfy (2) by sending into the idle relay A2 and
    its worker would run at the PS link's 100 Gbps; with it, A1's flow reaches A0 through A0's
    0.1 Gbps egress."""
    plan = run(
        edge_doc({"A0": (10, 10, 0.1, 0), "A1": (10, 10, 10, 1), "A2": (10, 10, 10, 0)}, ["A0"])
    )
    assert plan.objective == pytest.approx(0.1) and plan.status == "optimal"


def test_reading_8_a_relay_sends_only_what_it_received():
    network = build_network(
        edge_doc({"A0": (10, 10, 10, 0), "A1": (10, 10, 10, 1), "A2": (10, 10, 10, 0)}, ["A0"])
    )
    from ortools.sat.python import cp_model

    m = build(read(network, {}), Fraction(1, 100))
    m.model.add(m.x[0, "A2", "A0"] == 1)
    m.model.add(m.x[0, "A1", "A2"] == 0)
    assert cp_model.CpSolver().solve(m.model) == cp_model.INFEASIBLE


def test_reading_10_local_workers_count_once_children_count_too():
    """(10) as (Σ x + a_j)·r: A1's two workers on c = 1 give 0.5 (the printed form counts a_j
    once per other aggregator, 2·2·r ≤ 1: 0.25)."""
    plan = run(
        edge_doc({"A0": (10, 10, 10, 0), "A1": (1, 10, 10, 2), "A2": (10, 10, 10, 0)}, ["A0"])
    )
    assert plan.objective == pytest.approx(0.5) and plan.status == "optimal"


def test_reading_10_children_merged_at_a_relay():
    """A1-A3 (one worker each, c = 1) and the relay A4 (c = 2.4); A0's egress is 1 Gbps. A star
    gives 1/3 (3 flows into A0), chains 0.5 (c = 1 with 2 flows), A1-A3 → A4 → A0 gives
    2.4 / 3 = 0.8 because A4's three children count against c_A4 (uncounted: 1.0)."""
    plan = run(
        edge_doc(
            {
                "A0": (10, 10, 1, 0),
                "A1": (1, 1, 10, 1),
                "A2": (1, 1, 10, 1),
                "A3": (1, 1, 10, 1),
                "A4": (2.4, 10, 10, 0),
            },
            ["A0"],
        )
    )
    assert plan.objective == pytest.approx(0.8) and plan.status == "optimal"
    assert plan.details["trees"] == [{"A1": "A4", "A2": "A4", "A3": "A4", "A4": "A0"}]


def test_reading_11_idle_relays_are_not_charged():
    """(11) charges what an aggregator sends: the idle relay A2 with b^I = 0.1 does not limit
    (the printed form would: Σ_p r_p ≤ 0.1). A1's worker alone: A0's c = 1 → 1.0."""
    plan = run(
        edge_doc({"A0": (1, 10, 10, 0), "A1": (10, 10, 10, 1), "A2": (10, 0.1, 10, 0)}, ["A0"])
    )
    assert plan.objective == pytest.approx(1.0) and plan.status == "optimal"


def test_reading_11_a_ps_rack_sending_for_another_ps_is_charged():
    """Two PSs at A0 and A1, one worker each. A0 sends only for PS 1: r1 ≤ b^I_A0 = 0.3 (the
    printed form exempts PS aggregators). A0 merges 2 flows for PS 0 and 1 for PS 1:
    2 r0 + r1 ≤ 10, so Σ r = 5 + r1/2 is 5.15 at r1 = 0.3."""
    plan = run(edge_doc({"A0": (10, 0.3, 10, 1), "A1": (10, 10, 10, 1)}, ["A0", "A1"]))
    assert plan.objective == pytest.approx(5.15)
    assert plan.tasks[1].rate_gbps == pytest.approx(0.3)
    assert plan.bound >= 5.15 - 1e-9


def test_reading_12_egress_is_what_the_receiver_gets():
    plan = run(edge_doc({"A0": (10, 10, 0.4, 0), "A1": (10, 10, 10, 1)}, ["A0"]))
    assert plan.objective == pytest.approx(0.4) and plan.status == "optimal"


# ------------------------------------------------------------------ parameters and input


def test_r_max_caps_the_rate_and_r_min_above_everything_is_infeasible():
    doc = edge_doc({"A0": (10, 10, 10, 0), "A1": (10, 10, 10, 1)}, ["A0"])
    assert run(doc, r_max=2.5).objective == pytest.approx(2.5)
    assert run(doc, r_min=20).status == "infeasible"


@pytest.mark.parametrize(
    "param",
    [
        "step=0",
        "step=-1",
        "r_max=-1",
        "depth_limit=0",
        "depth_limit=1.5",
        "r_min=0.005",
        "step=0.0000001",
    ],
)
def test_bad_parameters_exit_2_naming_them(param, capsys):
    topo = str(EXAMPLES / "eina-fig1.yaml")
    assert main(["solve", topo, "--scheme", "eina", "--param", param]) == 2
    assert param.split("=")[0] in capsys.readouterr().out


def test_not_an_edge_topology_is_refused():
    from conftest import leaf_spine_doc

    network = build_network(leaf_spine_doc(2, 1, [1, 1], ina={"L0", "L1", "S0"}))
    with pytest.raises(TopologyError, match="DCN"):
        solve(network, "eina")


# ------------------------------------------------------------------ brute-force reference


def parse(doc: dict) -> dict:
    """The edge document's numbers, read straight from the dict (exact fractions)."""
    sw = {s["name"]: s for s in doc["switches"] if s.get("ina")}
    home = {ln["a"]: ln["b"] for ln in doc["links"] if ln["b"] in sw}
    cap = {(ln["a"], ln["b"]): Fraction(str(ln["capacity_gbps"])) for ln in doc["links"]}
    tasks = doc["jobs"][0]["tasks"]
    workers = tasks[0]["workers"]

    def field(a: str, key: str) -> Fraction:
        return Fraction(str(sw[a][key]))

    return {
        "aggs": list(sw),
        "home": home,
        "workers": workers,
        "ps": [t["ps"] for t in tasks],
        "local": {a: sum(home[w] == a for w in workers) for a in sw},
        "c": {a: field(a, "aggregation_capacity_gbps") for a in sw},
        "b_in": {a: field(a, "ingress_capacity_gbps") for a in sw},
        "b_out": {a: field(a, "egress_capacity_gbps") for a in sw},
        "host": min(cap[(w, home[w])] for w in workers),
        "ps_link": [cap[(t["ps"], home[t["ps"]])] for t in tasks],
    }


def trees(data: dict, root: str, d_hat: int):
    """Every parent map that is a tree into `root`: worker racks send, relays forward exactly
    when they receive, no cycle, no aggregator deeper than d̂."""
    aggs, local = data["aggs"], data["local"]
    others = [a for a in aggs if a != root]
    for choice in itertools.product(*[[None, *[b for b in aggs if b != a]] for a in others]):
        parent = {a: c for a, c in zip(others, choice, strict=True) if c is not None}
        kids = {a: sum(1 for c in parent.values() if c == a) for a in aggs}
        ok = True
        for a in others:
            if local[a] > 0 and a not in parent:
                ok = False
            if local[a] == 0 and (kids[a] > 0) != (a in parent):
                ok = False
            depth, node = 0, a
            while ok and node in parent:
                node, depth = parent[node], depth + 1
                if depth > len(aggs):
                    ok = False
            if ok and a in parent and (node != root or depth > d_hat):
                ok = False
        if ok:
            yield parent


def rows(data: dict, parents: list[dict]) -> list[tuple[list[int], Fraction]]:
    """Each capacity as (flow count per PS, capacity): Σ_p count_p · r_p ≤ capacity."""
    out = []
    for a in data["aggs"]:
        kids = [sum(1 for c in t.values() if c == a) for t in parents]
        out.append(([k + data["local"][a] for k in kids], data["c"][a]))
        out.append(([int(a in t) for t in parents], data["b_in"][a]))
        out.append((kids, data["b_out"][a]))
    out.append(([1] * len(parents), data["host"]))
    for p, cap in enumerate(data["ps_link"]):
        out.append(([int(q == p) for q in range(len(parents))], cap))
    return out


def best_sum(constraints: list[tuple[list[int], Fraction]], n: int) -> Fraction:
    """max Σ r over r ≥ 0 and the rows, for n ∈ {1, 2}, by enumerating vertices exactly."""
    lines = constraints + [([-int(q == p) for q in range(n)], Fraction(0)) for p in range(n)]

    def feasible(r: list[Fraction]) -> bool:
        return all(sum(a * x for a, x in zip(row, r, strict=True)) <= cap for row, cap in lines)

    points = []
    if n == 1:
        points = [[cap / row[0]] for row, cap in lines if row[0] > 0] + [[Fraction(0)]]
    else:
        for (a, c), (b, d) in itertools.combinations(lines, 2):
            det = a[0] * b[1] - a[1] * b[0]
            if det:
                points.append([(c * b[1] - a[1] * d) / det, (a[0] * d - c * b[0]) / det])
    return max(sum(r) for r in points if feasible(r))


def reference(doc: dict, depth_limit: int | None = None) -> Fraction:
    """The real optimum by enumerating every tree per PS and solving each rate LP exactly."""
    data = parse(doc)
    d_hat = min(depth_limit or len(data["aggs"]), len(data["aggs"])) - 1
    per_ps = [list(trees(data, data["home"][ps], d_hat)) for ps in data["ps"]]
    return max(
        (best_sum(rows(data, list(combo)), len(per_ps)) for combo in itertools.product(*per_ps)),
        default=Fraction(-1),
    )


def random_doc(rng: random.Random, ps: int = 1) -> dict:
    n = rng.randint(2, 4 if ps == 1 else 3)
    aggs = {}
    for i in range(n):
        aggs[f"A{i}"] = (
            *(rng.choice([0.3, 0.5, 0.8, 1, 1.2, 2]) for _ in range(3)),
            rng.randint(0, 3) if i else rng.randint(0, 1),
        )
    if all(v[3] == 0 for v in aggs.values()):
        aggs["A1"] = (*aggs["A1"][:3], 1)
    return edge_doc(aggs, ["A0", "A1"][:ps], host_cap=rng.choice([1.5, 100]))


@pytest.mark.parametrize("seed", range(40))
def test_never_below_the_brute_force_optimum(seed):
    rng = random.Random(seed)
    doc = random_doc(rng)
    depth = rng.choice([None, 2, 3])
    params = {} if depth is None else {"depth_limit": depth}
    ref = reference(doc, depth)
    for scheme in ("eina", "eina-iqcp"):
        plan = run(doc, scheme, **params)
        assert plan.objective <= float(ref) + 1e-6  # a plan is a tree: never above it
        assert plan.bound >= float(ref) - 1e-9, (scheme, plan.bound, ref)
        if plan.status == "optimal":
            assert plan.objective == pytest.approx(float(ref), abs=1e-6)
    assert run(doc, "eina", **params).objective == pytest.approx(float(ref), abs=1e-6)


# ------------------------------------------------------------------ `aggregates: all` scoring


def _fig1(aggregates: str) -> Network:
    doc = yaml.safe_load((EXAMPLES / "eina-fig1.yaml").read_text())
    for sw in doc["switches"]:
        if sw.get("ina"):
            sw["aggregates"] = aggregates
    return build_network(doc)


def _atp_routes() -> Plan:
    """A1 and A2 merge their workers and send to A0, which merges nothing (ATP, one level)."""
    paths = {
        "W0": ["W0", "A0", "PS"],
        **{w: [w, "A1", "DCN", "A0", "PS"] for w in ("W1", "W2")},
        **{w: [w, "A2", "DCN", "A0", "PS"] for w in ("W3", "W4")},
    }
    points = [AggregationPoint("A1", 0, 2, "DCN"), AggregationPoint("A2", 0, 2, "DCN")]
    return Plan(
        "hand", "heuristic", 0.0, None, 0.0, 0, [TaskPlan("job0", "t0", "PS", 0.0, paths, points)]
    )


def test_all_charges_every_entering_flow_addressed_only_the_merged_ones():
    """By hand: with `all`, A0 is charged W0's flow and the two results: 3r ≤ 1 → 1/3; with
    `addressed` they cross A0 free and A0's 0.8 Gbps egress carries two flows → 0.4."""
    assert evaluate(_fig1("all"), _atp_routes()).tasks[0].rate_gbps == pytest.approx(1 / 3)
    assert evaluate(_fig1("addressed"), _atp_routes()).tasks[0].rate_gbps == pytest.approx(0.4)
    loads = evaluate(_fig1("all"), _atp_routes())
    assert loads.consistent


def test_the_example_and_the_edge_generator_use_einas_semantics():
    net = load_topology(EXAMPLES / "eina-fig1.yaml")
    assert {net.spec(a).aggregates for a in ("A0", "A1", "A2", "A3")} == {"all"}
    assert net.spec("DCN").aggregates == "addressed"
    gen = build_network(topogen.edge(aggregators=4, ps=1, workers_per_aggregator=(1, 2)))
    assert {gen.spec(s).aggregates for s in gen.switches if gen.is_ina(s)} == {"all"}


def test_aggregates_all_on_a_plain_switch_is_refused(tmp_path, capsys):
    doc = yaml.safe_load((EXAMPLES / "eina-fig1.yaml").read_text())
    doc["switches"][0]["aggregates"] = "all"  # the DCN, not INA
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["solve", str(path), "--scheme", "eina"]) == 2
    out = capsys.readouterr().out
    assert "aggregates" in out and "DCN" in out


@pytest.mark.parametrize("seed", range(25))
def test_two_ps_never_below_the_brute_force_optimum(seed):
    """Two PSs: every pair of trees, each pair's rate LP solved exactly by its vertices."""
    rng = random.Random(1000 + seed)
    doc = random_doc(rng, ps=2)
    ref = reference(doc)
    for scheme in ("eina", "eina-iqcp"):
        plan = run(doc, scheme)
        assert plan.objective <= float(ref) + 1e-6
        assert plan.bound >= float(ref) - 1e-9, (scheme, plan.bound, ref)
        if plan.status == "optimal":
            assert plan.objective == pytest.approx(float(ref), abs=1e-6)
    assert run(doc, "eina").objective >= float(ref) - 0.02 - 1e-6  # within |P| steps


# ------------------------------------------------------------------ model sharding


def test_shards_follow_the_rates_and_finish_together():
    """Two PSs at 4.85 and 0.3 Gbps (the (11) case above): shares 4.85/5.15 and 0.3/5.15, so a
    1000 MB gradient takes 8 Gb / 5.15 Gbps on both shards."""
    doc = edge_doc({"A0": (10, 0.3, 10, 1), "A1": (10, 10, 10, 1)}, ["A0", "A1"])
    plan = run(doc)
    assert [tp.model_share for tp in plan.tasks] == pytest.approx([4.85 / 5.15, 0.3 / 5.15])
    result = evaluate(build_network(doc), plan, gradient_mb=1000)
    assert result.consistent
    assert result.job_communication_seconds["job0"] == pytest.approx(8 / 5.15)
    for te in result.tasks:
        assert te.communication_seconds == pytest.approx(8 / 5.15)
    plan.tasks[1].model_share = None  # unsharded: each PS takes the whole 8 Gb
    result = evaluate(build_network(doc), plan, gradient_mb=1000)
    assert not result.consistent and "some of its tasks but not all" in result.problems[0]
    plan.tasks[0].model_share = None
    result = evaluate(build_network(doc), plan, gradient_mb=1000)
    assert result.consistent
    assert result.job_communication_seconds["job0"] == pytest.approx(8 / 0.3)


def test_shares_must_add_up_to_one():
    doc = edge_doc({"A0": (10, 0.3, 10, 1), "A1": (10, 10, 10, 1)}, ["A0", "A1"])
    plan = run(doc)
    plan.tasks[0].model_share = 0.9
    result = evaluate(build_network(doc), Plan.from_dict(json.loads(plan.to_json())))
    assert not result.consistent and "add up to" in result.problems[0]


# ------------------------------------------------------------------ ina bench eina


def test_bench_eina_writes_json_and_png(tmp_path):
    out = tmp_path / "bench"
    assert (
        main(
            [
                "bench",
                "eina",
                "--ps",
                "1,2",
                "--seeds",
                "2",
                "--aggregators",
                "4",
                "--schemes",
                "eina,rr",
                "--time-limit",
                "10",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    data = json.loads((out / "fig2a" / "eina.json").read_text())
    assert (out / "fig2a" / "eina.png").stat().st_size > 0
    rows = data["instances"]
    assert len(rows) == 2 * 2 * 2 and all(r["consistent"] for r in rows)
    by = {(r["ps"], r["seed"], r["scheme"]): r for r in rows}
    for (ps, seed, scheme), r in by.items():
        if scheme == "eina" and r["status"] == "optimal":
            # RR's routes are trees EINA's model contains: an optimum is never below them.
            assert r["throughput_gbps"] >= by[ps, seed, "rr"]["throughput_gbps"] - 1e-6


def test_parameters_come_from_the_topologys_schemes_eina_for_both_schemes():
    doc = edge_doc({"A0": (10, 10, 10, 0), "A1": (10, 10, 10, 1)}, ["A0"])
    doc["schemes"] = {"eina": {"r_max": 2.5}}
    assert run(doc, "eina").objective == pytest.approx(2.5)
    assert run(doc, "eina-iqcp").objective == pytest.approx(2.5)  # the LP re-rates to r^U
    assert run(doc, "eina", r_max=1.5).objective == pytest.approx(1.5)  # --param wins


def test_two_ps_optimum_proven_by_the_rack_bound():
    """By hand: A2's two workers send to both PSs, so A2 merges 2 (r0 + r1) ≤ 1 Gbps whatever
    the trees: Σ r ≤ 0.5, reached by A2 sending straight to A0 and to A1. The 0.01 grid alone
    would only bound it by 0.52; the rack bound makes it `optimal`."""
    plan = run(
        edge_doc({"A0": (10, 10, 10, 0), "A1": (10, 10, 10, 0), "A2": (1, 10, 10, 2)}, ["A0", "A1"])
    )
    assert plan.objective == pytest.approx(0.5)
    assert plan.status == "optimal" and plan.bound == pytest.approx(0.5)


def test_bench_eina_figure_3_compares_the_two_grids(tmp_path):
    out = tmp_path / "bench"
    assert (
        main(
            [
                "bench",
                "eina",
                "--figure",
                "3",
                "--ps",
                "2",
                "--seeds",
                "1",
                "--aggregators",
                "14",
                "--time-limit",
                "10",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    data = json.loads((out / "fig3" / "eina.json").read_text())
    assert {r["scheme"] for r in data["instances"]} == {"eina", "eina-iqcp"}
    assert all(r["consistent"] and r["paper"] is None for r in data["summary"])
    assert (out / "fig3" / "eina.png").stat().st_size > 0


def test_no_solution_in_time_falls_back_to_the_star():
    """When CP-SAT finds nothing in time (here: a 1 ms limit on 50 aggregators x 4 PSs, where
    presolve alone takes longer) the plan is the star (every worker rack straight to the PS's
    aggregator), re-rated, `timeout` (the limit cut the search), with the tree-free bound."""
    network = build_network(topogen.edge(aggregators=50, ps=4, empty_aggregators=10, seed=3))
    plan = solve(network, "eina", SolveOptions(time_limit=0.001, seed=0))
    assert plan.details["cp_sat_status"] == "UNKNOWN (star fallback)"
    assert plan.status == "timeout" and plan.bound >= plan.objective > 0
    result = evaluate(network, plan)
    assert result.consistent, result.problems
    for tp in plan.tasks:
        assert all(len(path) <= 5 for path in tp.paths.values())  # w, A_i, DCN, π[p], PS
