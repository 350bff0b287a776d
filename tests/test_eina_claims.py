"""What the EINA schemes print holds on the evaluator's terms, on the inputs that sit at the edge
of EINA's model: a PS that aggregates (its host's or its task's capacity), aggregators that
cannot aggregate (capacity 0), and DCN fields (b^I, b^E) that would disagree with the links.

Every plan a scheme returns is scored by `controller.evaluator.evaluate` (the one judge): it must be
consistent, carry at least the rate it claims and merge nowhere without capacity. `optimal`
and `bound` are checked against the brute force over EINA's trees in `test_eina.py`, which
shares no code with the solvers; a PS capacity enters it as a thinner PS link (in an EINA
tree exactly one flow per task reaches the PS, so the two limits are the same row).
"""

from __future__ import annotations

import copy
from fractions import Fraction

import pytest
import yaml
from conftest import EXAMPLES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ortools.sat.python import cp_model
from test_eina import edge_doc, reference

from controller.cli import main
from controller.evaluator.evaluate import evaluate
from controller.model.network import Network, TopologyError, build_network
from controller.model.plan import Plan
from controller.solvers import SchemeInputError, SolveOptions, solve
from controller.solvers.eina import model as eina_model
from controller.solvers.eina.instance import read
from controller.solvers.eina_plus import model as plus_model

SCHEMES = ("eina", "eina-iqcp", "eina-fast", "eina-plus")
# Schemes whose every worker's flow is merged at its own aggregator (constraint (10)).
TREE_SCHEMES = ("eina", "eina-iqcp", "eina-fast")
TOL = 1e-6
PROPERTY = settings(
    max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)

# a capacity in Gbps: 0 (none) or 0.01 .. 3
capacities = st.integers(0, 300).map(lambda k: k / 100)


def scored(network: Network, plan: Plan) -> float:
    """Check the plan on the evaluator's terms; return what the evaluator says it carries."""
    result = evaluate(network, plan)
    assert result.consistent, result.problems
    for te, tp in zip(result.tasks, plan.tasks, strict=True):
        assert te.rate_gbps >= tp.rate_gbps * (1 - TOL) - 1e-9, (te, tp.rate_gbps)
    zero = {s for s in network.switches if network.spec(s).aggregation_capacity_gbps == 0}
    assert not [pt for tp in plan.tasks for pt in tp.aggregation if pt.switch in zero]
    return sum(te.rate_gbps for te in result.tasks)


def solved(network: Network, scheme: str) -> Plan:
    return solve(network, scheme, SolveOptions(seed=0, time_limit=5))


def against_reference(plan: Plan, scheme: str, ref: float) -> None:
    """A plan is a routing of the problem the reference solves exactly (eina-plus's include
    EINA's trees, so its plan and bound are never below the tree optimum)."""
    assert plan.bound >= ref - TOL, (scheme, plan.bound, ref)
    if scheme in TREE_SCHEMES:
        assert plan.objective <= ref + TOL, (scheme, plan.objective, ref)
        if plan.status == "optimal":
            assert plan.objective == pytest.approx(ref, abs=TOL)
    elif plan.status == "optimal":
        assert plan.objective >= ref - TOL


@st.composite
def edge_docs(draw, zero_weight: int = 0) -> dict:
    """2-3 aggregators, 1-2 PSs at A0 / A1, 0-2 workers per aggregator (at least one)."""
    caps = st.sampled_from([0.0] * zero_weight + [0.3, 0.5, 0.8, 1.0, 2.0])
    dcn = st.sampled_from([0.3, 0.5, 1.0, 2.0])
    n = draw(st.integers(2, 3))
    counts = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n).filter(any))
    aggs = {f"A{i}": (draw(caps), draw(dcn), draw(dcn), counts[i]) for i in range(n)}
    ps = draw(st.integers(1, 2))
    return edge_doc(aggs, ["A0", "A1"][:ps], host_cap=draw(st.sampled_from([1.5, 100.0])))


# ------------------------------------------------------------------ a PS that aggregates


@PROPERTY
@given(edge_docs(), st.lists(capacities, min_size=2, max_size=2), st.sampled_from(["host", "task"]))
def test_a_ps_aggregation_capacity_is_charged_by_every_scheme(doc, ps_caps, where):
    """The evaluator charges every flow entering a PS to its aggregation capacity (its host's
    `aggregation_capacity_gbps`, else its task's `ps_aggregation_capacity_gbps`)."""
    tasks = doc["jobs"][0]["tasks"]
    hosts = {h["name"]: h for h in doc["hosts"]}
    ref_doc = copy.deepcopy(doc)
    for task, cap in zip(tasks, ps_caps, strict=False):  # two caps drawn, one or two tasks
        if where == "host":
            hosts[task["ps"]]["aggregation_capacity_gbps"] = cap
        else:
            task["ps_aggregation_capacity_gbps"] = cap
        link = next(ln for ln in ref_doc["links"] if ln["a"] == task["ps"])
        link["capacity_gbps"] = min(link["capacity_gbps"], cap)
    network = build_network(doc)
    ref = float(reference(ref_doc))
    for scheme in SCHEMES:
        plan = solved(network, scheme)
        scored(network, plan)
        against_reference(plan, scheme, ref)


def test_fig1_with_a_ps_aggregating_0_1_gbps_is_0_1_optimal():
    """By hand: every EINA tree brings one merged flow to the PS, so r ≤ 0.1."""
    doc = yaml.safe_load((EXAMPLES / "eina-fig1.yaml").read_text())
    doc["hosts"][0]["aggregation_capacity_gbps"] = 0.1
    network = build_network(doc)
    for scheme in ("eina", "eina-fast", "eina-plus"):
        plan = solved(network, scheme)
        assert scored(network, plan) == pytest.approx(0.1)
        assert plan.objective == pytest.approx(0.1)
        assert plan.status == "optimal" and plan.bound == pytest.approx(0.1), scheme


def test_two_tasks_on_one_ps_are_refused():
    """EINA's P has one task (one model shard) per PS; two tasks sharing a PS would share its
    link, which the model charges per PS."""
    doc = edge_doc({"A0": (10, 10, 10, 1), "A1": (10, 10, 10, 2)}, ["A0"])
    task = doc["jobs"][0]["tasks"][0]
    doc["jobs"][0]["tasks"].append({**task, "name": "t1"})
    network = build_network(doc)
    for scheme in SCHEMES:
        with pytest.raises(TopologyError, match="ps0"):
            solved(network, scheme)


# ------------------------------------------------------------------ no aggregation capacity


def _zero_fig1(aggregates: str) -> dict:
    doc = yaml.safe_load((EXAMPLES / "eina-fig1.yaml").read_text())
    for sw in doc["switches"]:
        if sw.get("ina"):
            sw["aggregation_capacity_gbps"] = 0
            sw["aggregates"] = aggregates
    return doc


@pytest.mark.parametrize("scheme", TREE_SCHEMES)
def test_tree_schemes_refuse_a_network_that_cannot_merge(scheme, tmp_path, capsys):
    """EINA merges every worker's flow at its own aggregator: with nothing able to merge it has
    no plan, and says so in one paragraph (exit 2) instead of an `optimal 0` it cannot route."""
    network = build_network(_zero_fig1("all"))
    with pytest.raises(SchemeInputError, match=r"A0.*aggregation_capacity_gbps.*0"):
        solved(network, scheme)
    topo = tmp_path / "zero.yaml"
    topo.write_text(yaml.safe_dump(_zero_fig1("all")))
    assert main(["solve", str(topo), "--scheme", scheme]) == 2
    out = capsys.readouterr().out
    assert "Traceback" not in out and "aggregation_capacity_gbps" in out and "eina-plus" in out


@pytest.mark.parametrize(("aggregates", "rate"), [("all", 0.0), ("addressed", 0.2)])
def test_eina_plus_routes_a_network_that_cannot_merge_without_merging(aggregates, rate):
    """eina-plus passes flows through unmerged: no merge point, and its true rate. `all`
    charges every entering flow to c_j = 0, so 0; `addressed` lets them cross free: the four
    remote workers' flows share A0's 0.8 Gbps egress, 0.2 each, and no routing avoids it."""
    network = build_network(_zero_fig1(aggregates))
    plan = solved(network, "eina-plus")
    assert scored(network, plan) == pytest.approx(rate)
    assert plan.objective == pytest.approx(rate)
    assert not [pt for tp in plan.tasks for pt in tp.aggregation]
    assert plan.status == "optimal" and plan.bound == pytest.approx(rate)


@PROPERTY
@given(edge_docs(zero_weight=3), st.sampled_from(["all", "addressed"]))
def test_no_scheme_merges_where_nothing_can_be_merged(doc, aggregates):
    """Aggregators of capacity 0 (often): a tree scheme refuses exactly when EINA would have
    to merge at one (it holds workers or a PS); otherwise, and always for eina-plus, the plan
    merges nowhere without capacity and the evaluator carries what it claims."""
    for sw in doc["switches"]:
        if sw.get("ina"):
            sw["aggregates"] = aggregates
    network = build_network(doc)
    ref = float(reference(doc))
    homes = {ln["a"]: ln["b"] for ln in doc["links"] if ln["b"] != "DCN"}
    zero = {s["name"] for s in doc["switches"] if s.get("aggregation_capacity_gbps") == 0}
    must_merge = {homes[h["name"]] for h in doc["hosts"]}
    for scheme in SCHEMES:
        if scheme in TREE_SCHEMES and zero & must_merge:
            with pytest.raises(SchemeInputError, match="aggregation_capacity_gbps"):
                solved(network, scheme)
            continue
        plan = solved(network, scheme)
        scored(network, plan)
        against_reference(plan, scheme, ref)


def test_a_relay_without_capacity_is_never_used():
    """A3 (no worker, c = 0) is fig. 1's relay: without it the best tree is the star, 1/3."""
    doc = yaml.safe_load((EXAMPLES / "eina-fig1.yaml").read_text())
    doc["switches"][4]["aggregation_capacity_gbps"] = 0
    network = build_network(doc)
    for scheme in SCHEMES:
        plan = solved(network, scheme)
        assert scored(network, plan) == pytest.approx(1 / 3), scheme
        assert "A3" not in {n for tp in plan.tasks for path in tp.paths.values() for n in path}


def test_a_relay_without_capacity_adopts_nothing_even_at_rate_0():
    """The PS aggregates nothing, so r = 0 and (10) alone would let A2 (c = 0) relay A1's
    flow at no cost: both models forbid it, so no plan names A2 a merge point."""
    doc = edge_doc(
        {"A0": (1.0, 1.0, 1.0, 0), "A1": (1.0, 1.0, 1.0, 1), "A2": (0.0, 1.0, 1.0, 0)}, ["A0"]
    )
    next(h for h in doc["hosts"] if h["name"] == "ps0")["aggregation_capacity_gbps"] = 0
    inst = read(build_network(doc), {})
    step = Fraction(1, 100)
    tree = eina_model.build(inst, step)
    tree.model.add(tree.x[0, "A1", "A2"] == 1)
    assert cp_model.CpSolver().solve(tree.model) == cp_model.INFEASIBLE
    for merges_all in (True, False):
        plus = plus_model.build(
            inst, step, dict.fromkeys(inst.aggregators, merges_all), inst.ps_cap
        )
        plus.model.add(plus.vars["m", 0, "A2"] == 1)
        assert cp_model.CpSolver().solve(plus.model) == cp_model.INFEASIBLE


# ------------------------------------------------------------------ DCN fields and links


def _fig1_with(field: str, value: float) -> dict:
    doc = yaml.safe_load((EXAMPLES / "eina-fig1.yaml").read_text())
    doc["switches"][1][field] = value  # A0
    return doc


@pytest.mark.parametrize(
    ("field", "value", "links"),
    [("egress_capacity_gbps", 0, "0.8"), ("ingress_capacity_gbps", 2, "1")],
)
def test_a_dcn_field_that_disagrees_with_the_links_is_refused(
    field, value, links, tmp_path, capsys
):
    topo = tmp_path / "fig1.yaml"
    topo.write_text(yaml.safe_dump(_fig1_with(field, value)))
    with pytest.raises(TopologyError) as err:
        build_network(_fig1_with(field, value), str(topo))
    text = str(err.value)
    assert str(topo) in text and f"(A0).{field}" in text and links in text and "DCN" in text
    assert main(["solve", str(topo), "--scheme", "eina"]) == 2
    out = capsys.readouterr().out
    assert "Traceback" not in out and field in out


def test_dcn_fields_sum_the_links_to_every_other_switch():
    """A switch's b^I is all it may send to other switches: with two uplinks, their sum."""
    from conftest import leaf_spine_doc

    doc = leaf_spine_doc(2, 2, [1, 1], ina={"L1"})
    leaf = next(s for s in doc["switches"] if s["name"] == "L1")
    leaf["ingress_capacity_gbps"] = leaf["egress_capacity_gbps"] = 2.0  # 2 x 1 Gbps
    build_network(doc)
    leaf["egress_capacity_gbps"] = 1.0
    with pytest.raises(TopologyError, match=r"L1\)\.egress_capacity_gbps.*2"):
        build_network(doc)


@PROPERTY
@given(capacities, capacities, st.sampled_from(["ingress", "egress"]))
def test_dcn_fields_are_accepted_only_as_the_links_give_them(field, link, which):
    """Accepted iff the field equals the link; an accepted file is one every EINA scheme and
    the evaluator read alike."""
    doc = edge_doc(
        {"A0": (1.0, 1.0, 1.0, 1), "A1": (1.0, 1.0, 1.0, 2), "A2": (1.0, 1.0, 1.0, 0)},
        ["A0"],
        host_cap=10,
    )
    link = max(link, 0.01)  # a worker must reach its PS over links of positive capacity
    a1 = next(ln for ln in doc["links"] if ln["a"] == "A1")
    a1["capacity_gbps" if which == "ingress" else "reverse_capacity_gbps"] = link
    doc["switches"][2][f"{which}_capacity_gbps"] = field
    if field != link:
        with pytest.raises(TopologyError, match=f"{which}_capacity_gbps"):
            build_network(doc)
        return
    network = build_network(doc)
    ref = float(reference(doc))
    for scheme in SCHEMES:
        plan = solved(network, scheme)
        scored(network, plan)
        against_reference(plan, scheme, ref)
