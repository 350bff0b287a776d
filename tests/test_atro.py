"""ATRO (`--scheme atro`): hand-solved pools, a brute force over every network of tiny pools,
and the chosen network as a topology file other commands accept.

The brute force shares no code with the solver: it enumerates every host attachment and every
set of switch-switch links within the port budgets, then every routing on that network (each
worker's flow and each aggregator's output takes a simple path through common switches that
ends at an aggregator, where it merges, or at the PS), keeps the routings that are loop free
within L layers, and takes the best real rate min(b / flows on the link, both directions).
"""

from __future__ import annotations

import itertools
import time
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.cli import main
from controller.evaluator.evaluate import evaluate
from controller.model.network import build_network, load_topology
from controller.model.patch_panel import chosen_topology
from controller.model.plan import Plan
from controller.model.topogen import InaOptions, pool
from controller.solvers import SchemeInputError, SolveOptions, solve
from controller.solvers.atro.instance import read
from controller.solvers.atro.relaxed import MERGED, relax
from controller.solvers.atro.search import probe

TOL = 1e-9


def _pool(
    switches: dict[str, tuple[bool, int]], workers: int, cap: dict | float = 1.0, **schemes
) -> dict:
    """switches: name → (INA, max_ports); every host-switch and switch-switch pair a candidate
    of capacity `cap` (or cap[(a, b)], 0 = no candidate)."""
    hosts = [{"name": "PS", "role": "ps"}] + [
        {"name": f"W{i}", "role": "worker"} for i in range(workers)
    ]
    names = list(switches)

    def c(a: str, b: str) -> float:
        return cap if isinstance(cap, float) else cap.get((a, b), cap.get((b, a), 1.0))

    pairs = [(h["name"], s) for h in hosts for s in names]
    pairs += list(itertools.combinations(names, 2))
    links = [{"a": a, "b": b, "capacity_gbps": c(a, b)} for a, b in pairs if c(a, b) > 0]
    return {
        "hosts": hosts,
        "switches": [
            {"name": s, "ina": ina, "max_ports": ports} for s, (ina, ports) in switches.items()
        ],
        "links": links,
        "jobs": [
            {
                "name": "j",
                "tasks": [{"name": "t", "ps": "PS", "workers": [f"W{i}" for i in range(workers)]}],
            }
        ],
        "schemes": {"atro": schemes} if schemes else {},
    }


def _atro(doc: dict, **params) -> Plan:
    return solve(build_network(doc), "atro", SolveOptions(time_limit=30, params=params))


# --- hand-solved pools --------------------------------------------------------------------
def test_one_aggregator_merges_everything():
    # A 4-port INA switch takes the 3 workers and the PS and merges: one flow on every link.
    plan = _atro(_pool({"A": (True, 4)}, 3, 10.0))
    assert plan.status == "optimal"
    assert plan.objective == pytest.approx(10.0) and plan.bound == pytest.approx(10.0)


def test_common_switch_carries_every_flow_to_the_ps():
    # Without INA the PS link carries all 3 flows: 12 / 3.
    plan = _atro(_pool({"C": (False, 4)}, 3, 12.0))
    assert plan.status == "optimal" and plan.objective == pytest.approx(4.0)


def test_ports_force_two_switches_and_the_layer_limit_counts_them():
    # 5 hosts need 5 ports; A (INA, 3 ports) and C (4 ports) only hold them linked to each
    # other (3 + 4 = 5 + 2). PS at C: A merges its 2 workers, C sends 2 + 1 flows to the PS;
    # PS at A: the C-A link carries C's 3 workers. Either way 1/3.
    doc = _pool({"A": (True, 3), "C": (False, 4)}, 4)
    plan = _atro(doc)
    assert plan.status == "optimal" and plan.objective == pytest.approx(1 / 3)
    assert {(c["a"], c["b"]) for c in plan.patch_panel} >= {("A", "C")} or {
        (c["a"], c["b"]) for c in plan.patch_panel
    } >= {("C", "A")}
    # L = 1: a flow crosses one switch only, so no single switch has the ports: refused.
    with pytest.raises(SchemeInputError, match="layers=1"):
        _atro(doc, layers=1)


def test_layers_forbid_a_flow_coming_back_through_a_switch():
    # A (INA) has one port, so it hangs off C with the PS and the 3 workers. Merging at A
    # would need C → A → C → PS, but C sends to the PS, so l_C = 1 (19), and to A, so
    # l_C ≥ l_A + 1 (20): impossible. The workers' 3 flows go straight to the PS: 1/3,
    # though the 3 Gbps C-A link would carry 3 + 1 flows at 3/4.
    doc = _pool({"A": (True, 1), "C": (False, 5)}, 3, {("A", "C"): 3.0})
    plan = _atro(doc)
    assert plan.status == "optimal" and plan.objective == pytest.approx(1 / 3)
    assert not plan.tasks[0].aggregation


def test_rate_levels_between_capacity_over_flow_counts_are_real():
    # One common switch, 2 workers, PS link of 5 Gbps: 5/2, not an integer.
    plan = _atro(_pool({"C": (False, 3)}, 2, 5.0))
    assert plan.objective == pytest.approx(2.5) and plan.status == "optimal"


def test_fan_in_limit_is_a_constraint_and_zero_lifts_it():
    # 3 workers into one INA switch: fan-in 3. With max_fan_in=2 one worker goes to the
    # common switch ... but then 2 flows share a link to the PS or to A: 1/2.
    doc = _pool({"A": (True, 4), "C": (False, 4)}, 3)
    assert _atro(doc).objective == pytest.approx(1.0)
    limited = _atro(doc, max_fan_in=2)
    assert limited.objective == pytest.approx(0.5) and limited.status == "optimal"


def test_unknown_parameter_is_refused():
    with pytest.raises(SchemeInputError, match="unknown parameter"):
        _atro(_pool({"A": (True, 4)}, 3), layer=2)


# --- brute force ---------------------------------------------------------------------------
def _reference(doc: dict, layers: int) -> float:
    """The best real rate over every network and routing of a tiny pool (module docstring)."""
    ports = {s["name"]: s["max_ports"] for s in doc["switches"]}
    ina = {s["name"] for s in doc["switches"] if s["ina"]}
    switches = list(ports)
    cap = {frozenset((link["a"], link["b"])): link["capacity_gbps"] for link in doc["links"]}
    workers = doc["jobs"][0]["tasks"][0]["workers"]
    hosts = ["PS", *workers]
    pairs = list(itertools.combinations(switches, 2))
    best = 0.0
    for attach in itertools.product(switches, repeat=len(hosts)):
        home = dict(zip(hosts, attach, strict=True))
        if any(frozenset((h, s)) not in cap for h, s in home.items()):
            continue
        for chosen in itertools.product((0, 1), repeat=len(pairs)):
            built = [
                frozenset(p)
                for p, on in zip(pairs, chosen, strict=True)
                if on and frozenset(p) in cap
            ]
            degree = {s: sum(s in e for e in built) + attach.count(s) for s in switches}
            if any(degree[s] > ports[s] for s in switches):
                continue
            best = max(best, _best_routing(home, built, ina, switches, cap, workers, layers))
    return best


def _best_routing(home, built, ina, switches, cap, workers, layers) -> float:
    nbrs = {s: [t for t in switches if frozenset((s, t)) in built] for s in switches}

    def routes(start: str, merged_here: bool) -> list[tuple[str, ...]]:
        """Switch sequences from `start`: through common switches, ending at an aggregator
        (merge) or with the PS ('PS' appended). A flow made at an aggregator must leave it."""
        out = []

        def walk(path: tuple[str, ...]) -> None:
            here = path[-1]
            if len(path) > 1 and here in ina:
                out.append(path)
                return
            if home["PS"] == here:
                out.append((*path, "PS"))
            for t in nbrs[here]:
                if t not in path:
                    walk((*path, t))

        if start in ina and not merged_here:
            return [(start,)]  # a worker at an aggregator merges at once
        walk((start,))
        return out

    aggs = [a for a in switches if a in ina]
    worker_routes = [routes(home[w], False) for w in workers]
    agg_routes = [[*routes(a, True), None] for a in aggs]
    best = 0.0
    for wr in itertools.product(*worker_routes):
        for ar in itertools.product(*agg_routes):
            rate = _rate(wr, dict(zip(aggs, ar, strict=True)), cap, home, workers, layers)
            best = max(best, rate)
    return best


def _rate(wr, ar, cap, home, workers, layers) -> float:
    """The rate of one routing: 0 if an aggregator that receives does not send (10) or no
    layering (18)-(20) exists, else min over links of b / flows (both directions, (14))."""
    active, todo = set(), [r[-1] for r in wr if r[-1] != "PS"]
    while todo:  # aggregators fed by workers, then by aggregators
        a = todo.pop()
        if a in active:
            continue
        active.add(a)
        if ar[a] is None:
            return 0.0
        if ar[a][-1] != "PS":
            todo.append(ar[a][-1])
    flows = [*wr, *(ar[a] for a in active)]
    edges = {(u, v) for r in flows for u, v in itertools.pairwise(r) if v != "PS"}
    to_ps = {r[-2] for r in flows if r[-1] == "PS"}
    if any(u in to_ps for u, _v in edges):
        return 0.0  # (19)-(20): layer 1 sends to no switch
    level: dict[str, int] = {}

    def lay(u: str, seen: frozenset) -> int:
        if u in seen:
            return layers + 1  # a cycle: no layering
        if u not in level:
            level[u] = 1 + max((lay(v, seen | {u}) for x, v in edges if x == u), default=0)
        return level[u]

    if any(lay(u, frozenset()) > layers for u, _v in edges):
        return 0.0
    load = {frozenset((w, home[w])): 1 for w in workers}
    for r in flows:
        for u, v in itertools.pairwise(r):
            key = frozenset(("PS", u)) if v == "PS" else frozenset((u, v))
            load[key] = load.get(key, 0) + 1
    return min(cap[e] / n for e, n in load.items())


@st.composite
def tiny_pools(draw, common: int = 0):
    """Pools of 2-3 switches (the last `common` of them without INA) and 2-4 workers."""
    n = draw(st.integers(max(2, common), 3))
    switches = {
        f"S{i}": (draw(st.booleans()) and i < n - common, draw(st.integers(2, 5))) for i in range(n)
    }
    workers = draw(st.integers(2, 4))
    names = list(switches)
    hosts = ["PS"] + [f"W{i}" for i in range(workers)]
    cap = {(h, s): draw(st.sampled_from([0.0, 1.0, 2.0, 5.0])) for h in hosts for s in names}
    # Switch pairs are all candidates (the file must connect every worker to its PS).
    cap.update(
        {p: draw(st.sampled_from([1.0, 2.0, 5.0])) for p in itertools.combinations(names, 2)}
    )
    for h in hosts:  # every host keeps a candidate
        if all(cap[(h, s)] == 0 for s in names):
            cap[(h, names[0])] = 1.0
    if draw(st.booleans()):  # interchangeable workers, which the default model counts
        cap.update({(h, s): cap[("W0", s)] for h in hosts[2:] for s in names})
    return _pool(switches, workers, cap), draw(st.integers(1, n))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_pools(), st.sampled_from(["aggregated", "workers"]))
def test_matches_brute_force_over_every_network(case, formulation):
    doc, layers = case
    want = _reference(doc, layers)
    try:
        plan = _atro(doc, layers=layers, max_fan_in=0, formulation=formulation)
    except SchemeInputError:
        assert want == 0.0
        return
    assert plan.status == "optimal"
    assert plan.bound >= want - TOL  # never a bound below the reference
    assert plan.objective == pytest.approx(want)
    # The chosen network carries what the plan claims, on the evaluator's terms.
    _check_on_chosen(doc, plan)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_pools(common=2))
def test_merged_relaxation_accepts_every_rate_some_network_reaches(case):
    # The aggregated relaxation (common switches merged) may only refute rates no network
    # reaches: at the brute force's best rate it must still find a solution.
    _relaxation_accepts(*case)


def _relaxation_accepts(doc: dict, layers: int) -> None:
    want = _reference(doc, layers)
    merged = relax(read(build_network(doc), {"layers": layers, "max_fan_in": 0}))
    assert merged is not None and merged.switches[-1] == MERGED
    if want == 0.0:
        return
    rate = Fraction(want).limit_denominator(1000)
    assert float(rate) == pytest.approx(want)
    verdict, _ = probe(
        merged, {0: rate}, time.perf_counter() + 30, 1, 0, "none", formulation="classes"
    )
    assert verdict == "feasible"


# --- the chosen network as a topology file ------------------------------------------------
def test_topology_out_is_a_topology_every_command_accepts(tmp_path, capsys):
    doc = pool(switches=6, ina=InaOptions(["S0", "S1"], pipelines=1), max_ports=6, workers=12)
    src = tmp_path / "pool.yaml"
    from controller.model.network import dump_topology

    dump_topology(doc, src)
    out, plan_file = tmp_path / "chosen.yaml", tmp_path / "plan.json"
    assert (
        main(
            [
                "solve",
                str(src),
                "--scheme",
                "atro",
                "--json",
                str(plan_file),
                "--topology-out",
                str(out),
            ]
        )
        == 0
    )
    plan = Plan.load(plan_file)
    assert plan.status == "optimal" and plan.patch_panel
    chosen = load_topology(out)
    # Sec. III-D: only links that carry flows, every switch within its port budget.
    assert len(chosen.graph.edges) == 2 * len(plan.patch_panel)
    assert all(chosen.graph.edges[e]["shared"] for e in chosen.graph.edges)
    for s in chosen.switches:
        assert chosen.graph.out_degree(s) <= 6
    assert main(["evaluate", str(out), str(plan_file)]) == 0
    assert evaluate(chosen, plan).tasks[0].rate_gbps == pytest.approx(plan.objective)
    assert main(["solve", str(out), "--scheme", "aro"]) == 0


def test_topology_out_needs_a_topology_choosing_scheme(tmp_path, capsys):
    doc = pool(switches=2, ina=InaOptions(["S0"], pipelines=1), max_ports=4, workers=2)
    src = tmp_path / "pool.yaml"
    from controller.model.network import dump_topology

    dump_topology(doc, src)
    assert (
        main(
            ["solve", str(src), "--scheme", "shortest", "--topology-out", str(tmp_path / "t.yaml")]
        )
        == 2
    )
    assert "chooses no network" in capsys.readouterr().out


def test_shared_capacity_is_one_resource_for_both_directions():
    doc = {
        "hosts": [
            {"name": "a", "role": "worker"},
            {"name": "b", "role": "worker"},
            {"name": "PA", "role": "ps"},
            {"name": "PB", "role": "ps"},
        ],
        "switches": [{"name": "S"}, {"name": "T"}],
        "links": [
            {"a": "a", "b": "S", "capacity_gbps": 10.0},
            {"a": "PB", "b": "S", "capacity_gbps": 10.0},
            {"a": "b", "b": "T", "capacity_gbps": 10.0},
            {"a": "PA", "b": "T", "capacity_gbps": 10.0},
            {"a": "S", "b": "T", "capacity_gbps": 10.0, "shared_capacity": True},
        ],
        "jobs": [
            {"name": "A", "tasks": [{"name": "t", "ps": "PA", "workers": ["a"]}]},
            {"name": "B", "tasks": [{"name": "t", "ps": "PB", "workers": ["b"]}]},
        ],
    }
    network = build_network(doc)
    plan = solve(network, "shortest", SolveOptions())
    assert [t.rate_gbps for t in evaluate(network, plan).tasks] == pytest.approx([5.0, 5.0])
    aro = solve(network, "aro", SolveOptions(time_limit=10))
    assert [t.rate_gbps for t in aro.tasks] == pytest.approx([5.0, 5.0])
    doc["links"][-1]["reverse_capacity_gbps"] = 5.0
    with pytest.raises(Exception, match="shared_capacity"):
        build_network(doc)


# --- several tasks (beyond the paper: max-min, then each task raised) ----------------------
def _tasks_pool(
    switches: dict[str, tuple[bool, int]],
    tasks: list[tuple[str, list[str]]],
    cap: dict,
    one_job: bool,
) -> dict:
    """Tasks (PS, workers) on one pool; every host-switch and switch-switch pair a candidate
    of capacity cap.get(pair, 1)."""
    hosts = list(dict.fromkeys(h for ps, ws in tasks for h in (ps, *ws)))
    role = {h: "ps" if any(h == ps for ps, _ in tasks) else "worker" for h in hosts}
    pairs = [(h, s) for h in hosts for s in switches] + list(itertools.combinations(switches, 2))
    specs = [{"name": f"t{k}", "ps": ps, "workers": ws} for k, (ps, ws) in enumerate(tasks)]
    jobs = (
        [{"name": "j", "tasks": specs}]
        if one_job
        else [{"name": f"j{k}", "tasks": [spec]} for k, spec in enumerate(specs)]
    )
    return {
        "hosts": [{"name": h, "role": role[h]} for h in hosts],
        "switches": [{"name": s, "ina": ina, "max_ports": p} for s, (ina, p) in switches.items()],
        "links": [{"a": a, "b": b, "capacity_gbps": cap.get((a, b), 1.0)} for a, b in pairs],
        "jobs": jobs,
    }


def _check_on_chosen(doc: dict, plan: Plan) -> None:
    built = build_network(chosen_topology(build_network(doc), plan))
    result = evaluate(built, plan)
    assert result.consistent, result.problems
    # On the pool itself the plan runs on the links its patch panel builds: the same loads.
    assert evaluate(build_network(doc), plan).link_loads == result.link_loads
    for tp, te in zip(plan.tasks, result.tasks, strict=True):
        assert te.rate_gbps == pytest.approx(tp.rate_gbps)


def test_two_jobs_on_separate_aggregators_both_reach_full_rate():
    # Each job's 2 workers and PS fill a 4-port INA switch of its own: both at 1 Gbps.
    doc = _tasks_pool(
        {"A": (True, 4), "B": (True, 4)},
        [("P0", ["W0", "W1"]), ("P1", ["W2", "W3"])],
        {},
        one_job=False,
    )
    plan = _atro(doc)
    assert [tp.rate_gbps for tp in plan.tasks] == pytest.approx([1.0, 1.0])
    assert plan.objective == pytest.approx(1.0 + 0.001 * 2)  # Eq. (3), β = 1
    assert plan.status == "optimal"
    _check_on_chosen(doc, plan)


def test_a_worker_of_two_jobs_splits_its_link():
    # W0 works for both jobs: its one link carries a flow of each, r0 + r1 ≤ 1. Max-min gives
    # 1/2 each and neither can rise; the optimum of Eq. (3) is 0.5 + 0.001·1.
    doc = _tasks_pool({"C": (False, 3)}, [("P0", ["W0"]), ("P1", ["W0"])], {}, one_job=False)
    plan = _atro(doc)
    assert [tp.rate_gbps for tp in plan.tasks] == pytest.approx([0.5, 0.5])
    assert plan.objective == pytest.approx(0.501)
    assert plan.bound >= 0.501 - TOL  # never below the optimum
    _check_on_chosen(doc, plan)


def test_one_job_sums_its_tasks_and_raises_the_faster_one():
    # Eq. (2): t1's hosts have 2 Gbps links, so after the common 1 Gbps it rises to 2; the
    # tasks' own optima (1 and 2) bound the sum, so 3 is proven optimal.
    doc = _tasks_pool(
        {"C": (False, 4)},
        [("P0", ["W0"]), ("P1", ["W1"])],
        {("W1", "C"): 2.0, ("P1", "C"): 2.0},
        one_job=True,
    )
    plan = _atro(doc)
    assert [tp.rate_gbps for tp in plan.tasks] == pytest.approx([1.0, 2.0])
    assert plan.status == "optimal" and plan.objective == pytest.approx(3.0)
    _check_on_chosen(doc, plan)


def test_several_jobs_with_several_tasks_are_refused():
    doc = _tasks_pool({"C": (False, 6)}, [("P0", ["W0"]), ("P1", ["W1"])], {}, one_job=True)
    doc["jobs"].append({"name": "k", "tasks": [{"name": "t", "ps": "P0", "workers": ["W1"]}]})
    with pytest.raises(SchemeInputError, match="several jobs need one task each"):
        _atro(doc)


@st.composite
def small_job_pools(draw):
    """2-3 jobs of 1-3 workers each on 3-4 switches, capacities 1 or 2 Gbps."""
    n = draw(st.integers(3, 4))
    switches = {f"S{i}": (draw(st.booleans()), draw(st.integers(3, 6))) for i in range(n)}
    tasks, k = [], 0
    for j in range(draw(st.integers(2, 3))):
        size = draw(st.integers(1, 3))
        tasks.append((f"P{j}", [f"W{k + i}" for i in range(size)]))
        k += size
    hosts = [h for ps, ws in tasks for h in (ps, *ws)]
    pairs = [(h, s) for h in hosts for s in switches] + list(itertools.combinations(switches, 2))
    cap = {p: draw(st.sampled_from([1.0, 2.0])) for p in pairs}
    return _tasks_pool(switches, tasks, cap, one_job=False)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_job_pools())
def test_aggregated_and_paper_models_agree_on_several_jobs(doc):
    # The paper's per-worker model (formulation=workers) is the reference: each model's bound
    # is at least what the other reached, and two proven optima coincide.
    plans = {}
    for formulation in ("aggregated", "workers"):
        try:
            plans[formulation] = _atro(doc, formulation=formulation, num_workers=1)
        except SchemeInputError:
            plans[formulation] = None
    agg, ref = plans["aggregated"], plans["workers"]
    assert (agg is None) == (ref is None)
    if agg is None:
        return
    assert agg.bound >= ref.objective - TOL and ref.bound >= agg.objective - TOL
    if agg.status == ref.status == "optimal":
        assert agg.objective == pytest.approx(ref.objective)
    _check_on_chosen(doc, agg)


@pytest.mark.parametrize("scheme", ["grid", "eina", "eina-fast"])
def test_schemes_with_per_direction_capacities_refuse_a_chosen_network(tmp_path, capsys, scheme):
    # ATRO's network has shared links; GRID's and EINA's models would count each direction
    # apart, so `ina solve` names the link and exits 2 instead of over-claiming.
    doc = pool(switches=2, ina=InaOptions(["S0"], pipelines=1), max_ports=4, workers=2)
    network = build_network(doc)
    chosen = tmp_path / "chosen.yaml"
    from controller.model.network import dump_topology

    dump_topology(chosen_topology(network, _atro(doc)), chosen)
    assert main(["solve", str(chosen), "--scheme", scheme]) == 2
    out = capsys.readouterr().out
    assert "shared_capacity" in out and f"scheme {scheme}" in out
