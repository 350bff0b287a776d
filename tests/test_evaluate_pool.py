"""The evaluator and the compiler on a reconfigurable pool: a plan is judged on the network its
patch panel builds (ATRO Sec. III-B), never on the pool's candidate links.

Rules a plan's `patch_panel` must follow, from ATRO's constraints: every connection is a
candidate link of the pool (Eq. 4: never host-host), each pair at most once (6), a switch has
at most η_u = `max_ports` connections (7) and a host one (7)-(8), a connection carries the
candidate's capacity b_u^v, shared by both directions (14), and ports lie within the budget,
each used once. The paths run on built links only. The hypothesis test checks the evaluator
against `_acceptable`, an independent statement of these rules.
"""

from __future__ import annotations

import copy
import functools
import itertools
import json
from collections import Counter

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from controller.cli import main
from controller.compiler.program import CompileError, compile_plan
from controller.evaluator.evaluate import evaluate
from controller.model.network import build_network, dump_topology
from controller.model.patch_panel import chosen_topology
from controller.model.plan import Plan, PlanFormatError, TaskPlan, parse_plan
from controller.model.topogen import InaOptions, pool
from controller.solvers import SchemeInputError, SolveOptions, solve


def _doc(switches: int = 3, max_ports: int = 4, workers: int = 4, drop=()) -> dict:
    """A pool with S0 INA; `drop`: candidate pairs to leave out."""
    doc = pool(
        switches=switches,
        ina=InaOptions(["S0"], pipelines=1),
        max_ports=max_ports,
        workers=workers,
        capacity_gbps=10.0,
    )
    doc["links"] = [lk for lk in doc["links"] if {lk["a"], lk["b"]} not in map(set, drop)]
    return doc


@functools.cache
def _solved(switches: int = 3, max_ports: int = 4, workers: int = 4, drop=()) -> str:
    """ATRO's plan on `_doc(...)`, as JSON (each test mutates its own copy). One CP-SAT thread:
    the pool has several optimal networks, and the tests below edit one of them."""
    network = build_network(_doc(switches, max_ports, workers, drop))
    plan = solve(network, "atro", SolveOptions(time_limit=20, seed=0, params={"num_workers": 1}))
    assert plan.status == "optimal"
    return plan.to_json()


def _base() -> tuple[dict, Plan]:
    """On 3 switches of 4 ports, 4 workers at 10 Gbps: S0 merges the 4 flows, W2 and W3 reach
    it through S2 (S0-S2 carries 2 flows): 5 Gbps."""
    return _doc(), parse_plan(json.loads(_solved()))


def _panel(plan: Plan) -> dict[frozenset, dict]:
    return {frozenset((c["a"], c["b"])): c for c in plan.patch_panel}


def _problems(doc: dict, plan: Plan) -> list[str]:
    result = evaluate(build_network(doc), plan)
    assert result.consistent == (not result.problems)
    return result.problems


def test_atro_plan_is_consistent_on_its_pool():
    doc, plan = _base()
    assert {frozenset(("S0", "S2"))} < set(_panel(plan))
    result = evaluate(build_network(doc), plan)
    assert result.consistent, result.problems
    assert result.tasks[0].rate_gbps == pytest.approx(5.0) == plan.tasks[0].rate_gbps


# --- hand-made bad plans, one rule each ----------------------------------------------------
def test_a_path_over_a_link_the_panel_does_not_build_is_inconsistent():
    doc, plan = _base()
    plan.patch_panel = [c for c in plan.patch_panel if {c["a"], c["b"]} != {"S0", "S2"}]
    problems = _problems(doc, plan)
    assert any("S2->S0" in p and "patch panel" in p for p in problems), problems


def test_a_path_over_an_unbuilt_candidate_is_inconsistent_even_if_the_pool_has_it():
    # W3 detours through S1: a candidate of the pool, but the panel builds no S1 link.
    doc, plan = _base()
    plan.tasks[0].paths["W3"] = ["W3", "S2", "S1", "S0", "PS"]
    problems = _problems(doc, plan)
    assert any("S2->S1" in p and "S1->S0" in p for p in problems), problems


def test_a_connection_that_is_no_candidate_is_inconsistent():
    doc = _doc(drop=[("S1", "S2")])
    plan = parse_plan(json.loads(_solved()))
    plan.patch_panel.append({"a": "S1", "a_port": 1, "b": "S2", "b_port": 4, "capacity_gbps": 10.0})
    problems = _problems(doc, plan)
    assert any("S1-S2" in p and "candidate" in p for p in problems), problems


def test_a_connection_to_an_unknown_node_is_inconsistent():
    doc, plan = _base()
    plan.patch_panel.append({"a": "S1", "a_port": 1, "b": "S9", "b_port": 1, "capacity_gbps": 10.0})
    problems = _problems(doc, plan)
    assert any("S9" in p for p in problems), problems


def test_more_connections_than_max_ports_is_inconsistent():
    # S0 uses its 4 ports; a fifth connection (to S1, on port 5) breaks its budget (7).
    doc, plan = _base()
    assert sum("S0" in (c["a"], c["b"]) for c in plan.patch_panel) == 4
    plan.patch_panel.append({"a": "S0", "a_port": 5, "b": "S1", "b_port": 1, "capacity_gbps": 10.0})
    problems = _problems(doc, plan)
    assert any("S0" in p and "5 links" in p and "max_ports 4" in p for p in problems), problems


def test_a_port_beyond_the_budget_is_inconsistent():
    doc, plan = _base()
    link = _panel(plan)[frozenset(("S0", "PS"))]
    link["a_port"] = 7
    problems = _problems(doc, plan)
    assert any("port 7 of S0" in p for p in problems), problems


def test_a_host_host_link_is_inconsistent():
    # W0 and W1 each already have their switch; a link between them is not in P (Eq. 4).
    doc, plan = _base()
    plan.patch_panel.append(
        {"a": "W0", "a_port": 1, "b": "W1", "b_port": None, "capacity_gbps": 10.0}
    )
    problems = _problems(doc, plan)
    assert any("W0-W1" in p and "host" in p for p in problems), problems


def test_a_host_with_two_links_is_inconsistent():
    doc, plan = _base()
    plan.patch_panel.append(
        {"a": "S1", "a_port": 1, "b": "W0", "b_port": None, "capacity_gbps": 10.0}
    )
    problems = _problems(doc, plan)
    assert any("W0" in p and "2 links" in p for p in problems), problems


def test_a_link_to_a_host_outside_the_tasks_is_inconsistent():
    doc, plan = _base()
    doc["hosts"].append({"name": "idle", "role": "idle"})
    doc["links"].append({"a": "idle", "b": "S1", "capacity_gbps": 10.0})
    plan.patch_panel.append(
        {"a": "S1", "a_port": 1, "b": "idle", "b_port": None, "capacity_gbps": 10.0}
    )
    problems = _problems(doc, plan)
    assert any("S1-idle" in p and "task" in p for p in problems), problems


def test_a_capacity_other_than_the_candidates_is_inconsistent():
    doc, plan = _base()
    _panel(plan)[frozenset(("S0", "S2"))]["capacity_gbps"] = 20.0
    plan.tasks[0].rate_gbps = 10.0
    problems = _problems(doc, plan)
    assert any("S0-S2" in p and "20" in p and "10" in p for p in problems), problems


def test_ports_must_name_switch_ends():
    doc, plan = _base()
    _panel(plan)[frozenset(("S0", "S2"))]["b_port"] = None
    _panel(plan)[frozenset(("S0", "PS"))]["b_port"] = 3
    problems = _problems(doc, plan)
    assert any("S0-S2" in p and "b_port" in p for p in problems), problems
    assert any("S0-PS" in p and "b_port" in p for p in problems), problems


def test_the_switch_end_comes_first():
    doc, plan = _base()
    link = _panel(plan)[frozenset(("S0", "W0"))]
    link["a"], link["b"] = "W0", "S0"
    problems = _problems(doc, plan)
    assert any("W0-S0" in p and "switch" in p for p in problems), problems


def test_both_directions_share_a_built_link():
    # Two tasks cross S0-S1 in opposite directions at 10 Gbps each. On the pool each direction
    # has 10 Gbps; the built link has 10 Gbps for both (14): 5 each.
    doc = {
        "hosts": [
            {"name": n, "role": r}
            for n, r in (("W0", "worker"), ("P0", "ps"), ("W1", "worker"), ("P1", "ps"))
        ],
        "switches": [{"name": "S0", "max_ports": 3}, {"name": "S1", "max_ports": 3}],
        "links": [
            {"a": h, "b": s, "capacity_gbps": 10.0}
            for h in ("W0", "P0", "W1", "P1")
            for s in ("S0", "S1")
        ]
        + [{"a": "S0", "b": "S1", "capacity_gbps": 10.0}],
        "jobs": [
            {"name": "a", "tasks": [{"name": "t", "ps": "P0", "workers": ["W0"]}]},
            {"name": "b", "tasks": [{"name": "t", "ps": "P1", "workers": ["W1"]}]},
        ],
    }
    panel = [
        {"a": "S0", "a_port": 1, "b": "W0", "b_port": None, "capacity_gbps": 10.0},
        {"a": "S0", "a_port": 2, "b": "P1", "b_port": None, "capacity_gbps": 10.0},
        {"a": "S1", "a_port": 1, "b": "W1", "b_port": None, "capacity_gbps": 10.0},
        {"a": "S1", "a_port": 2, "b": "P0", "b_port": None, "capacity_gbps": 10.0},
        {"a": "S0", "a_port": 3, "b": "S1", "b_port": 3, "capacity_gbps": 10.0},
    ]
    tasks = [
        TaskPlan("a", "t", "P0", 10.0, {"W0": ["W0", "S0", "S1", "P0"]}),
        TaskPlan("b", "t", "P1", 10.0, {"W1": ["W1", "S1", "S0", "P1"]}),
    ]
    plan = Plan("atro", "optimal", 10.0, 10.0, 0.0, 0, tasks, patch_panel=panel)
    result = evaluate(build_network(doc), plan)
    assert [te.rate_gbps for te in result.tasks] == pytest.approx([5.0, 5.0])
    assert any("S0->S1" in p and "over its capacity" in p for p in result.problems)
    for tp in tasks:
        tp.rate_gbps = 5.0
    assert evaluate(build_network(doc), plan).consistent


# --- the plan file: what is malformed without any topology ---------------------------------
@pytest.mark.parametrize(
    "change, message",
    [
        (lambda p: p.append(dict(p[0])), "listed twice"),
        (lambda p: p.append({**p[0], "b": "S0", "b_port": 9, "a_port": 8}), "itself"),
        (lambda p: p.append({**p[0], "b": "W3"}), "port"),
    ],
)
def test_malformed_patch_panels_are_format_errors(change, message):
    data = json.loads(_solved())
    change(data["patch_panel"])
    with pytest.raises(PlanFormatError, match=message):
        parse_plan(data)


# --- the command line ----------------------------------------------------------------------
def test_cli_exit_codes(tmp_path, capsys):
    doc, plan = _base()
    topo = tmp_path / "pool.yaml"
    dump_topology(doc, topo)
    good, bad, broken = tmp_path / "good.json", tmp_path / "bad.json", tmp_path / "broken.json"
    plan.save(good)
    assert main(["evaluate", str(topo), str(good)]) == 0
    plan.patch_panel.append(
        {"a": "S1", "a_port": 1, "b": "W0", "b_port": None, "capacity_gbps": 10.0}
    )
    plan.save(bad)
    capsys.readouterr()
    assert main(["evaluate", str(topo), str(bad)]) == 1
    assert "W0" in capsys.readouterr().out
    data = json.loads(good.read_text())
    data["patch_panel"].append(dict(data["patch_panel"][0]))
    broken.write_text(json.dumps(data))
    assert main(["evaluate", str(topo), str(broken)]) == 2
    assert "listed twice" in capsys.readouterr().out


# --- plans without a patch panel on a pool ---------------------------------------------------
def test_a_plan_without_patch_panel_builds_every_candidate():
    # A plan routed on the pool as if every candidate were cabled (`shortest` on the same
    # network without port budgets; `solve` refuses it on the pool): S0 would need 7 ports for
    # its 4, every host 3 links. The evaluator says so in one line.
    doc = _doc()
    network = build_network(doc)
    unbudgeted = copy.deepcopy(doc)
    for switch in unbudgeted["switches"]:
        switch.pop("max_ports")
    plan = solve(build_network(unbudgeted), "shortest", SolveOptions())
    result = evaluate(network, plan)
    assert not result.consistent
    pool_lines = [p for p in result.problems if "patch_panel" in p]
    assert len(pool_lines) == 1 and "max_ports" in pool_lines[0], result.problems


def test_a_pool_whose_candidates_fit_their_budgets_is_a_network():
    doc = _doc(switches=1, max_ports=5, workers=4)
    network = build_network(doc)
    result = evaluate(network, solve(network, "shortest", SolveOptions()))
    assert result.consistent, result.problems


def test_the_chosen_topology_judges_the_plan_the_same(tmp_path):
    # `ina solve --topology-out`: the chosen network is a topology without max_ports; the plan
    # with its patch panel evaluates there as on the pool.
    doc, plan = _base()
    chosen = build_network(chosen_topology(build_network(doc), plan))
    on_chosen, on_pool = evaluate(chosen, plan), evaluate(build_network(doc), plan)
    assert on_chosen.consistent and on_pool.consistent
    assert on_chosen.link_loads == on_pool.link_loads


# --- the compiler ----------------------------------------------------------------------------
def test_the_compiler_installs_the_panel_ports_and_refuses_a_bad_panel():
    doc, plan = _base()
    network = build_network(doc)
    link = _panel(plan)[frozenset(("S0", "S2"))]
    programs, _ = compile_plan(network, plan)
    ports = {
        e.action.args["port"] for e in programs["S2"].table_entries if e.table_id == "ina_forward"
    }
    assert ports == {link["b_port"]}  # S2 forwards to S0 on the panel's port
    chosen = build_network(chosen_topology(network, plan))
    same, _ = compile_plan(chosen, plan)
    for switch, program in same.items():
        assert program.table_entries == programs[switch].table_entries
    plan.patch_panel.append(
        {"a": "S1", "a_port": 1, "b": "W0", "b_port": None, "capacity_gbps": 10.0}
    )
    with pytest.raises(CompileError, match="W0"):
        compile_plan(network, plan)


# --- hypothesis: mutated panels, judged against an independent statement of the rules -----
DROP = (("S1", "S3"), ("W4", "S2"))


def _acceptable(doc: dict, plan: Plan) -> bool:
    """ATRO's network rules, written from the paper without the evaluator's code."""
    candidates = {frozenset((lk["a"], lk["b"])): lk["capacity_gbps"] for lk in doc["links"]}
    budget = {s["name"]: s["max_ports"] for s in doc["switches"]}
    hosts = {h["name"] for h in doc["hosts"]}
    panel = plan.patch_panel
    pairs = [frozenset((c["a"], c["b"])) for c in panel]
    if len(set(pairs)) < len(pairs) or any(p not in candidates for p in pairs):
        return False  # (6), (4): host-host pairs and self-links are never candidates
    if any(
        c["a"] not in budget or c["capacity_gbps"] != candidates[p]
        for c, p in zip(panel, pairs, strict=True)
    ):
        return False
    if any((c["b_port"] is None) != (c["b"] in hosts) for c in panel):
        return False
    ends = [(c["a"], c["a_port"]) for c in panel]
    ends += [(c["b"], c["b_port"]) for c in panel if c["b"] not in hosts]
    if len(set(ends)) < len(ends) or any(port > budget[s] for s, port in ends):
        return False
    degree = Counter(n for p in pairs for n in p)
    if any(degree[s] > budget[s] for s in budget) or any(degree[h] > 1 for h in hosts):
        return False  # (7), (8)
    return all(
        frozenset(hop) in pairs
        for tp in plan.tasks
        for path in tp.paths.values()
        for hop in itertools.pairwise(path)
    )


def _free_port(panel: list[dict], node: str) -> int:
    used = {c["a_port"] for c in panel if c["a"] == node}
    used |= {c["b_port"] for c in panel if c["b"] == node}
    return min(set(range(1, len(used) + 2)) - used)


def _connection(panel: list[dict], a: str, b: str, hosts: set[str]) -> dict:
    return {
        "a": a,
        "a_port": 1 if a in hosts else _free_port(panel, a),
        "b": b,
        "b_port": None if b in hosts else _free_port(panel, b),
        "capacity_gbps": 10.0,
    }


@st.composite
def mutations(draw):
    """1-3 changes of the panel: add a link (any two nodes: candidates, host-host, pairs the
    pool lacks), drop one, rewire one end, repeat one, fill a switch to or past its budget."""
    return draw(
        st.lists(
            st.tuples(
                st.sampled_from(["add", "drop", "rewire", "repeat", "fill"]),
                st.integers(0, 100),
                st.integers(0, 100),
                st.booleans(),
            ),
            min_size=1,
            max_size=3,
        )
    )


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations())
def test_mutated_panels_are_accepted_exactly_when_they_follow_the_rules(changes):
    doc = _doc(switches=4, max_ports=4, workers=5, drop=DROP)
    plan = parse_plan(json.loads(_solved(4, 4, 5, DROP)))
    hosts = {h["name"] for h in doc["hosts"]}
    nodes = sorted(hosts | {s["name"] for s in doc["switches"]})
    panel = plan.patch_panel
    for op, i, j, flag in changes:
        if op == "add":
            a, b = nodes[i % len(nodes)], nodes[j % len(nodes)]
            if a != b:
                a, b = (b, a) if a in hosts and b not in hosts else (a, b)
                panel.append(_connection(panel, a, b, hosts))
        elif op == "drop" and panel:
            panel.pop(i % len(panel))
        elif op == "rewire" and panel:
            old = panel.pop(i % len(panel))
            other = nodes[j % len(nodes)]
            a, b = (other, old["b"]) if flag else (old["a"], other)
            if a != b:
                panel.append(_connection(panel, a, b, hosts))
        elif op == "repeat" and panel:
            panel.append(dict(panel[i % len(panel)]))
        elif op == "fill":
            s = f"S{i % 4}"
            room = 4 + flag - sum(s in (c["a"], c["b"]) for c in panel)
            for t in [f"S{k}" for k in range(4) if f"S{k}" != s][: max(room, 0)]:
                if not any({c["a"], c["b"]} == {s, t} for c in panel):
                    panel.append(_connection(panel, s, t, hosts))
    result = evaluate(build_network(doc), plan)
    event("accepted" if result.consistent else "refused")
    assert result.consistent == _acceptable(doc, plan), (panel, result.problems)
    if result.consistent:
        assert result.tasks[0].rate_gbps == pytest.approx(plan.tasks[0].rate_gbps)


@st.composite
def small_pools(draw) -> dict:
    switches = draw(st.integers(1, 4))
    doc = pool(
        switches=switches,
        max_ports=draw(st.integers(2, 6)),
        workers=draw(st.integers(1, 5)),
        capacity_gbps=draw(st.sampled_from([1.0, 10.0])),
        ina=InaOptions([f"S{k}" for k in range(switches) if draw(st.booleans())], pipelines=1),
    )
    for link in doc["links"]:
        link["capacity_gbps"] = draw(st.sampled_from([1.0, 2.0, 5.0]))
    return doc


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_pools())
def test_every_atro_plan_passes_on_its_pool(doc):
    network = build_network(doc)
    try:
        plan = solve(network, "atro", SolveOptions(time_limit=10, seed=0))
    except SchemeInputError:
        return  # no network of this pool connects the task
    result = evaluate(network, plan)
    assert result.consistent, (plan.patch_panel, result.problems)
    for tp, te in zip(plan.tasks, result.tasks, strict=True):
        assert te.rate_gbps == pytest.approx(tp.rate_gbps)


def test_mutation_base_is_a_real_plan():
    plan = parse_plan(json.loads(_solved(4, 4, 5, DROP)))
    assert _acceptable(_doc(switches=4, max_ports=4, workers=5, drop=DROP), plan)
