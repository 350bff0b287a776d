"""`eina-plus` (bypass) and `eina-fast` (greedy trees at scale) against cases solved by hand and
against the brute force over EINA's trees in `test_eina.py` (an independent reference).
"""

from __future__ import annotations

import json
import random

import pytest
from conftest import EXAMPLES
from test_eina import edge_doc, random_doc, reference

from controller.cli import main
from controller.evaluator.evaluate import evaluate
from controller.model import topogen
from controller.model.network import build_network
from controller.solvers import SolveOptions, solve


def scored(doc: dict, scheme: str, aggregates: str | None = None, **params):
    """Solve and score: the evaluator must agree with the plan's claim."""
    if aggregates:
        for sw in doc["switches"]:
            if sw.get("ina"):
                sw["aggregates"] = aggregates
    network = build_network(doc)
    plan = solve(network, scheme, SolveOptions(seed=0, time_limit=10, params=params))
    result = evaluate(network, plan)
    assert result.consistent, result.problems
    total = sum(te.rate_gbps for te in result.tasks)
    assert total >= plan.objective * (1 - 1e-6)
    return plan, total


# ------------------------------------------------------------------ eina-plus, by hand


def weak_rack() -> dict:
    """PS at A0 (c 10); A1 holds two workers but merges only 1 Gbps; DCN links 10 Gbps."""
    return edge_doc({"A0": (10, 10, 10, 0), "A1": (1, 10, 10, 2)}, ["A0"])


def test_bypass_beats_eina_where_free_pass_through_is_free():
    """By hand. EINA merges both workers at A1: 2r ≤ 1, r = 0.5. EINA+ on `addressed` sends
    them through A1 unmerged (A1 is not charged), A0 merges the two: 2r ≤ 10, r = 5. No
    routing does better: A1's two flows leave it merged (2r ≤ 1), one merged (r ≤ 1), or both
    unmerged through its 10 Gbps DCN ingress (2r ≤ 10)."""
    eina, _ = scored(weak_rack(), "eina", "addressed")
    plus, total = scored(weak_rack(), "eina-plus", "addressed")
    assert eina.objective == pytest.approx(0.5)
    assert total == pytest.approx(5.0) and plus.objective == pytest.approx(5.0)
    assert plus.status == "optimal" and plus.bound == pytest.approx(5.0)
    a1 = [p for tp in plus.tasks for p in tp.aggregation if p.switch == "A1"]
    assert not a1  # nothing merged at A1: both workers bypass it


def test_bypass_gains_nothing_on_einas_own_terms():
    """Same rack with `aggregates: all`: a flow crossing A1 is charged 1 Gbps of A1 anyway, so
    2r ≤ 1 whatever the routing (the tree-free bound), and EINA+ equals EINA, proven."""
    plus, total = scored(weak_rack(), "eina-plus", "all")
    assert total == pytest.approx(0.5) and plus.status == "optimal"
    assert plus.bound == pytest.approx(0.5)


def test_root_passes_a_merged_flow_to_the_ps_unmerged():
    """By hand. π[p] = A0 merges 1 Gbps only; A1 merges its 3 workers (3r ≤ 10). EINA merges
    A1's flow again at A0: r ≤ 1. EINA+ lets A0 pass it to the PS untouched: the PS link
    (3 Gbps, one flow) binds, r = 3."""
    doc = edge_doc({"A0": (1, 10, 10, 0), "A1": (10, 10, 10, 3)}, ["A0"], host_cap=100)
    next(ln for ln in doc["links"] if ln["a"] == "ps0")["capacity_gbps"] = 3
    eina, _ = scored(json.loads(json.dumps(doc)), "eina", "addressed")
    plus, total = scored(doc, "eina-plus", "addressed")
    assert eina.objective == pytest.approx(1.0)
    assert total == pytest.approx(3.0) and plus.status == "optimal"


def test_eina_plus_equals_eina_where_a_link_binds():
    """By hand: the PS link (1 Gbps) carries at least one flow of rate r, so r ≤ 1 for any
    routing; EINA reaches it, and so does EINA+ (proven by Σ r^U)."""
    doc = edge_doc({"A0": (10, 10, 10, 0), "A1": (10, 10, 10, 2)}, ["A0"], host_cap=100)
    next(ln for ln in doc["links"] if ln["a"] == "ps0")["capacity_gbps"] = 1
    plus, total = scored(doc, "eina-plus", "addressed")
    assert total == pytest.approx(1.0) and plus.status == "optimal"


@pytest.mark.parametrize("seed", range(6))
def test_eina_plus_never_below_eina_grid_atp_same_seed(seed):
    """The dominance goal on small random clusters, both scoring terms: EINA+ keeps the best of
    its model, EINA's trees and the baselines' plans; measured by the evaluator."""
    aggregates = ("addressed", "all")[seed % 2]
    doc = topogen.edge(
        aggregators=4,
        ps=1 + seed % 3,
        workers_per_aggregator=(1, 4),
        aggregation_gbps=(5.0, 30.0),
        seed=seed,
    )
    network = build_network(doc)
    for sw in doc["switches"]:
        if sw.get("ina"):
            sw["aggregates"] = aggregates
    network = build_network(doc)
    totals = {}
    for scheme in ("eina", "grid", "atp", "eina-plus"):
        plan = solve(network, scheme, SolveOptions(seed=seed, time_limit=8))
        result = evaluate(network, plan)
        assert result.consistent, result.problems
        totals[scheme] = sum(te.rate_gbps for te in result.tasks)
    assert totals["eina-plus"] >= max(totals.values()) * (1 - 1e-6), totals


@pytest.mark.parametrize("seed", range(12))
def test_eina_plus_bound_never_below_the_tree_optimum(seed):
    """EINA's trees are EINA+ routings: its bound can never be below the brute-force tree
    optimum (no depth limit), on either scoring terms."""
    rng = random.Random(seed)
    doc = random_doc(rng, ps=1 + seed % 2)
    ref = reference(doc)
    plan, total = scored(doc, "eina-plus", ("addressed", "all")[seed % 2])
    assert plan.bound >= float(ref) - 1e-9
    assert total >= float(ref) - 1e-6  # never below EINA's optimum either


# ------------------------------------------------------------------ eina-fast


@pytest.mark.parametrize("seed", range(30))
def test_eina_fast_never_claims_beyond_the_brute_force(seed):
    """eina-fast's bound is never below the exact optimum over all trees, its plan never
    above it, and `optimal` only where it reaches it."""
    rng = random.Random(seed)
    ps = 1 + seed % 2
    doc = random_doc(rng, ps=ps)
    depth = rng.choice([None, 2, 3])
    params = {} if depth is None else {"depth_limit": depth}
    ref = reference(doc, depth)
    if ref < 0:  # no tree within d*: nothing to compare
        return
    plan, _ = scored(doc, "eina-fast", **params)
    if not plan.tasks:
        assert plan.status == "heuristic"
        return
    assert plan.objective <= float(ref) + 1e-6
    assert plan.bound >= float(ref) - 1e-9
    if plan.status == "optimal":
        assert plan.objective == pytest.approx(float(ref), abs=1e-6)


def test_eina_fast_needs_a_relay_by_hand():
    """By hand. At r = 1 (the workers' 1 Gbps links) A0's 1 Gbps egress takes one child, and
    A1, A2 (one worker each, c = 1) have no room left for a child: only the empty A3 as a
    relay for both, sending one flow to A0, reaches r = 1."""
    doc = edge_doc(
        {"A0": (10, 10, 1, 0), "A1": (1, 10, 10, 1), "A2": (1, 10, 10, 1), "A3": (10, 10, 10, 0)},
        ["A0"],
        host_cap=1,
    )
    plan, total = scored(doc, "eina-fast")
    assert total == pytest.approx(1.0) and plan.status == "optimal"
    assert plan.details["trees"][0] == {"A1": "A3", "A2": "A3", "A3": "A0"}


def test_eina_fast_on_a_large_cluster_reports_a_proven_gap():
    network = build_network(
        topogen.edge(
            aggregators=120,
            ps=8,
            empty_aggregators=24,
            aggregation_gbps=(200.0, 400.0),
            ingress_gbps=(200.0, 400.0),
            egress_gbps=(200.0, 400.0),
            seed=1,
        )
    )
    plan = solve(network, "eina-fast", SolveOptions(seed=0, time_limit=30))
    result = evaluate(network, plan)
    assert result.consistent, result.problems
    assert plan.status in ("optimal", "feasible") and plan.bound >= plan.objective > 0
    assert sum(te.rate_gbps for te in result.tasks) >= plan.objective * (1 - 1e-6)


# ------------------------------------------------------------------ ina bench eina


def test_bench_eina_new_figures_and_scoring_terms(tmp_path):
    out = tmp_path / "bench"
    assert (
        main(
            [
                "bench",
                "eina",
                "--figure",
                "2d",
                "--values",
                "5-10,20-30",
                "--seeds",
                "1",
                "--aggregators",
                "4",
                "--schemes",
                "eina,eina-fast,atp",
                "--time-limit",
                "5",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    data = json.loads((out / "fig2d" / "eina.json").read_text())
    assert {r["x"] for r in data["summary"]} == {"5-10", "20-30"}
    assert all(r["consistent"] for r in data["instances"])
    assert (out / "fig2d" / "eina.png").stat().st_size > 0
    assert (
        main(
            [
                "bench",
                "eina",
                "--ps",
                "1",
                "--seeds",
                "1",
                "--aggregators",
                "4",
                "--aggregates",
                "addressed",
                "--schemes",
                "eina,eina-plus",
                "--time-limit",
                "4",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    data = json.loads((out / "fig2a-addressed" / "eina.json").read_text())
    by = {r["scheme"]: r for r in data["instances"]}
    assert by["eina-plus"]["throughput_gbps"] >= by["eina"]["throughput_gbps"] - 1e-6
    assert {r["aggregates"] for r in data["instances"]} == {"addressed"}


def test_eina_plus_unknown_candidate_exits_2_naming_it(capsys):
    code = main(
        [
            "solve",
            str(EXAMPLES / "eina-fig1.yaml"),
            "--scheme",
            "eina-plus",
            "--param",
            "candidates=grid,nope",
        ]
    )
    printed = capsys.readouterr()
    assert code == 2
    assert "candidates" in printed.out + printed.err and "nope" in printed.out + printed.err
