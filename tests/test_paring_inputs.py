"""PARING (`paring`, `paring-opt`) on inputs at the edges of its model: switches with several
pipelines, a rate cap R of 0, several PSs with no R, a worker cabled straight to a server.

Every plan is judged by the evaluator (`controller.evaluator.evaluate`): consistent, and carrying at
least the rate it claims; a `bound` must hold for a brute force that shares no code with the
scheme (`reference`: every placement and parent map, rated min(R, B_v / children)).
"""

from __future__ import annotations

import itertools
from fractions import Fraction
from pathlib import Path

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.evaluator.evaluate import evaluate
from controller.model.network import build_network, load_topology
from controller.solvers import SolveOptions, solve

SCHEMES = ("paring", "paring-opt")
OPTIONS = SolveOptions(seed=0, time_limit=10, params={"num_workers": 1})


def options(scheme: str) -> SolveOptions:
    return OPTIONS if scheme == "paring-opt" else SolveOptions(seed=0)


def judged(network, plan):
    """The evaluator's verdict must confirm the plan: consistent, every claimed rate carried,
    a bound no lower than the objective."""
    result = evaluate(network, plan)
    assert result.consistent, result.problems
    for tp, te in zip(plan.tasks, result.tasks, strict=True):
        assert te.rate_gbps >= tp.rate_gbps * (1 - 1e-9) - 1e-12
    if plan.bound is not None:
        assert plan.bound >= plan.objective * (1 - 1e-9)
    return result


def free_task(workers: list[str], ps: str = "PS", **fields) -> dict:
    return {
        "name": "j",
        "tasks": [{"name": "t", "ps": ps, "workers": workers, "placement": "free", **fields}],
    }


# ------------------------------------------------------------------ pipelines


def two_pipeline_doc() -> dict:
    """S has two pipelines: W1, W2 enter pipeline 0, W3 pipeline 1, so S sends T two flows;
    T merges them with W4's: three flows, not the two children of PARING's tree."""
    return {
        "hosts": [
            {"name": "PS", "role": "ps", "aggregation_capacity_gbps": 4},
            *({"name": f"W{i}", "role": "worker"} for i in range(1, 5)),
        ],
        "switches": [
            {"name": "S", "ina": True, "pipelines": 2, "ports": 4, "aggregation_capacity_gbps": 6},
            {"name": "T", "ina": True, "aggregation_capacity_gbps": 6},
        ],
        "links": [
            {"a": "W1", "b": "S", "capacity_gbps": 10, "b_port": 1},
            {"a": "W2", "b": "S", "capacity_gbps": 10, "b_port": 2},
            {"a": "W3", "b": "S", "capacity_gbps": 10, "b_port": 3},
            {"a": "S", "b": "T", "capacity_gbps": 10, "a_port": 4},
            {"a": "W4", "b": "T", "capacity_gbps": 10},
            {"a": "PS", "b": "T", "capacity_gbps": 10},
        ],
        "jobs": [
            free_task(["W1", "W2", "W3", "W4"], rate_cap_gbps=5, ps_aggregation_capacity_gbps=0)
        ],
    }


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_switch_aggregates_each_pipeline_apart(scheme):
    network = build_network(two_pipeline_doc())
    plan = solve(network, scheme, options(scheme))
    judged(network, plan)
    fan_in = {(a.switch, a.pipeline): a.fan_in for a in plan.tasks[0].aggregation}
    assert fan_in == {("S", 0): 2, ("S", 1): 1, ("T", 0): 3}
    assert plan.tasks[0].rate_gbps == pytest.approx(2.0)  # T: 3 flows in 6 Gbps


def fat_doc(draw, pipelines: bool) -> tuple[dict, int]:
    """A 3-tier tree of 6 switches (C; A0, A1; E0, E1 under A0, E2 under A1) and 5 servers;
    3 switches aggregate 1-4 Gbps, each over 1-3 pipelines with a drawn port map."""
    switches = ["C", "A0", "A1", "E0", "E1", "E2"]
    ina = draw(st.lists(st.sampled_from(switches), min_size=3, max_size=3, unique=True))
    hosts = {"h0": "E0", "h1": "E0", "h2": "E1", "h3": "E2", "h4": "E2"}
    links = [("A0", "C"), ("A1", "C"), ("E0", "A0"), ("E1", "A0"), ("E2", "A1"), *hosts.items()]
    specs = []
    for s in switches:
        spec: dict = {"name": s}
        if s in ina:
            spec.update(ina=True, aggregation_capacity_gbps=draw(st.integers(1, 4)))
            ports = sum(s in link for link in links)
            count = draw(st.integers(1, min(3, ports))) if pipelines else 1
            spec.update(
                pipelines=count,
                pipeline_map={p: draw(st.integers(0, count - 1)) for p in range(1, ports + 1)},
            )
        specs.append(spec)
    n = draw(st.sampled_from([2, 3]))
    doc = {
        "hosts": [
            {"name": h, "role": "ps" if h == "h0" else "worker" if h <= f"h{n}" else "idle"}
            for h in hosts
        ],
        "switches": specs,
        "links": [{"a": a, "b": b, "capacity_gbps": 100} for a, b in links],
        "jobs": [
            free_task(
                [f"h{i}" for i in range(1, n + 1)],
                ps="h0",
                rate_cap_gbps=draw(st.sampled_from([0.5, 1, 2, 3])),
                ps_aggregation_capacity_gbps=draw(st.integers(1, 4)),
            )
        ],
    }
    return doc, n


def reference_rate(doc: dict, n: int, fan_in: int = 0) -> Fraction:
    """The best rate of problem (1), pipelines ignored (a pipelined plan folds into such a
    tree: its points of one switch merged, no count grows), by enumeration; with `fan_in`
    L > 0, only trees whose switches have at most L children each."""
    graph = nx.Graph((link["a"], link["b"]) for link in doc["links"])
    hosts = [h["name"] for h in doc["hosts"]]
    cap = {
        s["name"]: Fraction(s["aggregation_capacity_gbps"]) for s in doc["switches"] if s.get("ina")
    }
    task = doc["jobs"][0]["tasks"][0]
    ps_cap, r_cap = Fraction(task["ps_aggregation_capacity_gbps"]), Fraction(task["rate_cap_gbps"])
    assert nx.is_connected(graph)
    best = Fraction(0)
    for ps in hosts:
        ups = [ps, *sorted(cap)]
        for workers in itertools.combinations([h for h in hosts if h != ps], n):
            for parents in itertools.product([None, *ups], repeat=len(cap)):
                parent = {
                    s: p for s, p in zip(sorted(cap), parents, strict=True) if p not in (None, s)
                }
                for w_parent in itertools.product(ups, repeat=n):
                    tree = {**parent, **dict(zip(workers, w_parent, strict=True))}
                    used = _used(tree, workers, ps)
                    if used is None:
                        continue
                    kids: dict[str, int] = {}
                    for child in used:
                        kids[tree[child]] = kids.get(tree[child], 0) + 1
                    if fan_in and any(k > fan_in for v, k in kids.items() if v in cap):
                        continue
                    best = max(
                        best,
                        min(
                            [r_cap] + [(ps_cap if v == ps else cap[v]) / k for v, k in kids.items()]
                        ),
                    )
    return best


def _used(parent: dict[str, str], workers, ps: str) -> set[str] | None:
    used: set[str] = set()
    for w in workers:
        v, seen = w, {w}
        while v != ps:
            used.add(v)
            v = parent.get(v)
            if v is None or v in seen:
                return None
            seen.add(v)
    return used


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_pipelined_plans_hold_their_rate_and_bound(data):
    doc, n = fat_doc(data.draw, pipelines=True)
    network = build_network(doc)
    judged(network, solve(network, "paring", SolveOptions(seed=0)))
    opt = solve(network, "paring-opt", OPTIONS)
    judged(network, opt)
    assert opt.bound == pytest.approx(float(reference_rate(doc, n)))


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.sampled_from([1, 2]))
def test_plans_within_a_fan_in_limit_hold_their_rate_and_bound(data, limit):
    """With `max_fan_in` L, no point merges more than L flows, in fine mode after its shares
    too, and `paring-opt`'s bound is the best rate of trees whose switches take at most L
    children (the brute force's)."""
    doc, n = fat_doc(data.draw, pipelines=data.draw(st.booleans()))
    network = build_network(doc)
    runs = [("paring", {}), ("paring", {"fine": True}), ("paring-opt", {"num_workers": 1})]
    for scheme, extra in runs:
        plan = solve(
            network,
            scheme,
            SolveOptions(seed=0, time_limit=10, params={"max_fan_in": limit, **extra}),
        )
        result = judged(network, plan)
        assert all(a.fan_in <= limit for a in result.aggregator_loads), (scheme, extra)
    assert plan.bound == pytest.approx(float(reference_rate(doc, n, limit)))


def crossing_doc() -> dict:
    """Alg. 3 hangs A1 (two feet, h1 under E0 and h4 under E2) from the PS h0 through the
    relay C; h1's shortest way up to A1 crosses C, which must then not merge it there."""
    switches = {"C": 4, "A0": None, "A1": 4, "E0": None, "E1": 2}
    links = [
        ("A0", "C"),
        ("A1", "C"),
        ("E0", "A0"),
        ("E1", "A0"),
        ("E2", "A1"),
        ("h0", "E0"),
        ("h1", "E0"),
        ("h2", "E1"),
        ("h4", "E2"),
    ]
    return {
        "hosts": [
            {"name": h, "role": "ps" if h == "h0" else "worker"} for h in ("h0", "h1", "h2", "h4")
        ],
        "switches": [
            {"name": s, **({"ina": True, "aggregation_capacity_gbps": b} if b else {})}
            for s, b in switches.items()
        ]
        + [{"name": "E2"}],
        "links": [{"a": a, "b": b, "capacity_gbps": 100} for a, b in links],
        "jobs": [
            free_task(["h1", "h2", "h4"], ps="h0", rate_cap_gbps=3, ps_aggregation_capacity_gbps=2)
        ],
    }


def two_ps_doc(c: int, a1: int, e1: int) -> dict:
    """`crossing_doc`'s tree with the server h3 under E2 too, and a second PS, h4."""
    doc = crossing_doc()
    for spec, b in zip(doc["switches"][::2], (c, a1, e1), strict=True):
        spec["aggregation_capacity_gbps"] = b
    doc["hosts"] = [{"name": f"h{i}", "role": "ps" if i in (0, 4) else "worker"} for i in range(5)]
    doc["links"].insert(-1, {"a": "h3", "b": "E2", "capacity_gbps": 100})
    task = {**doc["jobs"][0]["tasks"][0], "workers": ["h1", "h2", "h3"]}
    doc["jobs"][0]["tasks"] = [task, {**task, "name": "t1", "ps": "h4"}]
    return doc


def split_doc() -> dict:
    """`two_ps_doc`'s tree with C, A0 and E0 aggregating, each over two pipelines (odd and
    even ports). The joint search may hang E0, the switch of the PS h0, below C, and C's
    merged flow would then cross E0 on its way to h0: no plan realises that tree."""
    doc = two_ps_doc(3, 3, 3)
    caps = {"C": 3, "A0": 1, "E0": 3}
    degree = {"C": 2, "A0": 3, "E0": 3}
    doc["switches"] = [
        {"name": s["name"]}
        if s["name"] not in caps
        else {
            "name": s["name"],
            "ina": True,
            "aggregation_capacity_gbps": caps[s["name"]],
            "pipelines": 2,
            "pipeline_map": {p: (p - 1) % 2 for p in range(1, degree[s["name"]] + 1)},
        }
        for s in doc["switches"]
    ]
    doc["jobs"][0]["tasks"] = [
        {**t, "ps": ps} for t, ps in zip(doc["jobs"][0]["tasks"], ("h0", "h4"), strict=True)
    ]
    return doc


@pytest.mark.parametrize(
    ("scheme", "doc"),
    [
        ("paring", crossing_doc()),
        ("paring", two_ps_doc(4, 4, 2)),  # the same relay, as the first PS's tree
        # the joint search's trees: C, a relay with one child below E1, sends h1 back down
        ("paring-opt", two_ps_doc(1, 4, 3)),
        ("paring-opt", split_doc()),
    ],
)
def test_no_flow_crosses_a_node_that_merges_it_early_or_twice(scheme, doc):
    network = build_network(doc)
    judged(network, solve(network, scheme, options(scheme)))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.data(),
    st.sampled_from(
        [("paring", {}), ("paring", {"fine": True}), ("paring-opt", {"num_workers": 1})]
    ),
)
def test_plans_of_one_or_two_pss_are_consistent(data, scheme):
    """Random capacities, pipelines and port maps; with two PSs the job's model is sharded
    (Sec. IV-C.3) and paring-opt's joint search may return the trees of a feasibility model."""
    doc, _ = fat_doc(data.draw, pipelines=True)
    if data.draw(st.booleans()):
        task = doc["jobs"][0]["tasks"][0]
        doc["jobs"][0]["tasks"].append({**task, "name": "t1", "ps": "h4"})
        doc["hosts"][4]["role"] = "ps"
    network = build_network(doc)
    name, params = scheme
    judged(network, solve(network, name, SolveOptions(seed=0, time_limit=10, params=params)))


# ------------------------------------------------------------------ R = 0, no R


def cap0_doc(rate_cap: float | None, count: int = 1, ps_capacity: float = 2) -> dict:
    """Two INA switches under a plain core, 6 servers; `count` PSs (one task each)."""
    doc = {
        "hosts": [{"name": f"h{i}", "role": "idle"} for i in range(6)],
        "switches": [
            {"name": "E0", "ina": True, "aggregation_capacity_gbps": 2},
            {"name": "E1", "ina": True, "aggregation_capacity_gbps": 2},
            {"name": "C"},
        ],
        "links": [
            {"a": f"h{i}", "b": "E0" if i < 3 else "E1", "capacity_gbps": 10} for i in range(6)
        ]
        + [{"a": "E0", "b": "C", "capacity_gbps": 10}, {"a": "E1", "b": "C", "capacity_gbps": 10}],
        "jobs": [{"name": "j", "tasks": []}],
    }
    for p in range(count):
        task = {
            "name": f"t{p}",
            "ps": f"h{p}",
            "workers": ["h2", "h3", "h4"] if count == 1 else ["h3", "h4"],
            "placement": "free",
            "ps_aggregation_capacity_gbps": ps_capacity,
        }
        if rate_cap is not None:
            task["rate_cap_gbps"] = rate_cap
        doc["jobs"][0]["tasks"].append(task)
        doc["hosts"][p]["role"] = "ps"
    for task in doc["jobs"][0]["tasks"]:
        for w in task["workers"]:
            doc["hosts"][int(w[1:])]["role"] = "worker"
    return doc


@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_zero_rate_cap_is_a_plan_of_rate_zero(scheme, count):
    """R = 0, like any capacity 0, means nothing may be sent: a placed plan of rate 0, which
    the evaluator confirms, and for paring-opt a bound of 0."""
    network = build_network(cap0_doc(0, count))
    plan = solve(network, scheme, options(scheme))
    result = judged(network, plan)
    assert plan.objective == 0 and all(te.rate_gbps == 0 for te in result.tasks)
    assert all(len(tp.paths) == len(network.tasks[0].workers) for tp in plan.tasks)
    if scheme == "paring-opt":
        assert plan.bound == 0


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_zero_ps_capacity_is_a_plan_of_rate_zero(scheme):
    network = build_network(cap0_doc(None, ps_capacity=0))
    plan = solve(network, scheme, options(scheme))
    judged(network, plan)
    assert plan.objective == 0


@pytest.mark.parametrize("scheme", SCHEMES)
def test_two_pss_without_a_rate_cap(scheme):
    """No R: the two shards' rates are bounded by B_v alone (paring-opt's joint search
    included)."""
    network = build_network(cap0_doc(None, count=2))
    plan = solve(network, scheme, options(scheme))
    judged(network, plan)
    assert plan.objective > 0
    if scheme == "paring-opt":
        # E0 and E1 each merge 2 Gbps; each PS takes 2 Gbps: 2 flows x r_p for 2 shards
        # within 2 + 2 at the switches, so r_1 + r_2 <= 4 and no more is claimed.
        assert plan.objective <= plan.bound <= 4 + 1e-9


# ------------------------------------------------------------------ host-host links


def host_link_doc(count: int = 1) -> dict:
    """W1 is cabled straight to the PS's server (no switch in between); the other servers
    hang off an INA switch S. One PS: exactly 3 workers besides it, so W1 must be one. Two
    PSs: the tasks list W2-W4 (W1 reaches one server only) and W1 is idle."""
    workers = ["W1", "W2", "W3"] if count == 1 else ["W2", "W3", "W4"]
    pss = ["PS", "P2"][:count]
    hosts = ["PS", "W1", "W2", "W3"] if count == 1 else ["PS", "P2", "W1", "W2", "W3", "W4"]
    return {
        "hosts": [
            {"name": h, "role": "ps" if h in pss else "worker" if h in workers else "idle"}
            for h in hosts
        ],
        "switches": [{"name": "S", "ina": True, "aggregation_capacity_gbps": 10}],
        "links": [{"a": "W1", "b": "PS", "capacity_gbps": 10}]
        + [{"a": h, "b": "S", "capacity_gbps": 10} for h in hosts if h != "W1"],
        "jobs": [
            {
                "name": "j",
                "tasks": [
                    {
                        "name": f"t{p}",
                        "ps": ps,
                        "workers": workers,
                        "placement": "free",
                        "rate_cap_gbps": 5,
                        "ps_aggregation_capacity_gbps": 10,
                    }
                    for p, ps in enumerate(pss)
                ],
            }
        ],
    }


@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_worker_cabled_to_a_server(scheme, count):
    """A host-host link is a path of its own (it crosses no third host): PARING may use it
    (a PS, its worker cabled to it, and S's merged flow)."""
    network = build_network(host_link_doc(count))
    plan = solve(network, scheme, options(scheme))
    judged(network, plan)
    assert all(len(tp.paths) == 3 for tp in plan.tasks)
    if count == 1:
        # PS (the only server W1 reaches) merges W1's flow and S's: 2 flows in 10 Gbps, R 5.
        assert plan.tasks[0].ps == "PS" and plan.objective == pytest.approx(5)


def test_a_search_the_time_limit_stops_reads_timeout():
    # paring-opt's two-PS joint search on paring-2ps.yaml needs far more than 3 s
    network = load_topology(
        Path(__file__).resolve().parents[1] / "topologies" / "examples" / "paring-2ps.yaml"
    )
    plan = solve(network, "paring-opt", SolveOptions(time_limit=3))
    assert plan.bound > plan.objective and evaluate(network, plan).consistent
    # it said `feasible` however the search ended; a search can also end before the limit
    assert plan.status == ("timeout" if plan.solve_seconds >= 2.9 else "feasible")
