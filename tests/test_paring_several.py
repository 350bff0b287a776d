"""PARING with several PSs (Sec. IV-C.3): a job of several `placement: free` tasks, the model
sharded over their PSs. Checked against a hand count and a brute force that shares no code with
the scheme: it enumerates every parent map of every placement, rates a tree with exact
fractions as min(R, B_v / children) and, for two PSs together, solves the rates' LP
(max r1 + r2 under Σ_p r_p k_p(v) ≤ B_v, r1 + r2 ≤ R, at its vertices) over every pair of
trees.
"""

from __future__ import annotations

import copy
import itertools
import random
from fractions import Fraction

import pytest
from conftest import EXAMPLES

from controller.cli import main
from controller.evaluator.evaluate import evaluate
from controller.model.network import build_network, load_topology
from controller.solvers import SchemeInputError, SolveOptions, solve


def sharded(doc: dict, count: int) -> dict:
    """The same demand with `count` PSs: the job's one task repeated, renamed."""
    doc = copy.deepcopy(doc)
    task = doc["jobs"][0]["tasks"][0]
    doc["jobs"][0]["tasks"] = [{**task, "name": f"t{p}"} for p in range(count)]
    return doc


def star_doc(ps_capacity: float = 2, n: int = 3) -> dict:
    """n workers and the PSs behind one plain switch: only the PSs aggregate."""
    hosts = [f"h{i}" for i in range(6)]
    roles = ["ps"] + ["worker"] * n + ["idle"] * (5 - n)
    return {
        "hosts": [{"name": h, "role": role} for h, role in zip(hosts, roles, strict=True)],
        "switches": [{"name": "U"}],
        "links": [{"a": h, "b": "U", "capacity_gbps": 100} for h in hosts],
        "jobs": [
            {
                "name": "j",
                "tasks": [
                    {
                        "name": "t",
                        "ps": "h0",
                        "workers": hosts[1 : n + 1],
                        "placement": "free",
                        "rate_cap_gbps": 10,
                        "ps_aggregation_capacity_gbps": ps_capacity,
                    }
                ],
            }
        ],
    }


def consistent(network, plan):
    result = evaluate(network, plan)
    assert result.consistent, result.problems
    for tp, te in zip(plan.tasks, result.tasks, strict=True):
        assert te.rate_gbps >= tp.rate_gbps * (1 - 1e-9)
    return result


@pytest.mark.parametrize("count", [1, 2, 3])
def test_each_ps_adds_its_capacity_when_only_the_pss_aggregate(count):
    """Hand count: 3 flows into a 2 Gbps PS give 2/3 Gbps; each more PS takes its own shard
    at 2/3, so the job's rate is count * 2/3 and each shard is 1/count of the model."""
    network = build_network(sharded(star_doc(), count))
    plan = solve(network, "paring", SolveOptions(seed=0))
    consistent(network, plan)
    assert [tp.rate_gbps for tp in plan.tasks] == pytest.approx([2 / 3] * count)
    assert plan.objective == pytest.approx(count * 2 / 3)
    if count > 1:
        assert [tp.model_share for tp in plan.tasks] == pytest.approx([1 / count] * count)
        assert len({tp.ps for tp in plan.tasks}) == count
        assert all(set(tp.paths) == set(plan.tasks[0].paths) for tp in plan.tasks)
        assert plan.details["communication_seconds"] == pytest.approx(8 / (count * 2 / 3))


def test_r_caps_a_workers_whole_sending_rate():
    """R = 1 Gbps: the first shard takes 2/3, the second what R leaves, 1/3."""
    doc = sharded(star_doc(), 2)
    for task in doc["jobs"][0]["tasks"]:
        task["rate_cap_gbps"] = 1
    network = build_network(doc)
    plan = solve(network, "paring", SolveOptions(seed=0))
    consistent(network, plan)
    assert [tp.rate_gbps for tp in plan.tasks] == pytest.approx([2 / 3, 1 / 3])
    plan.tasks[1].rate_gbps = 0.5  # 2/3 + 1/2 > R
    assert any("rate cap j" in p for p in evaluate(network, plan).problems)
    for task in doc["jobs"][0]["tasks"]:
        task["rate_cap_gbps"] = 0.5  # the first shard takes all of R: the second sends nothing
    network = build_network(doc)
    plan = solve(network, "paring", SolveOptions(seed=0))
    consistent(network, plan)
    assert [(tp.rate_gbps, tp.model_share) for tp in plan.tasks] == [(0.5, 1.0), (0.0, 0.0)]
    assert set(plan.tasks[1].paths) == set(plan.tasks[0].paths)


def test_evaluator_checks_the_placement_of_several_pss():
    network = build_network(sharded(star_doc(), 2))
    plan = solve(network, "paring", SolveOptions(seed=0))
    first, second = plan.tasks
    second.paths.pop(min(second.paths))
    second.paths[first.ps] = [first.ps, "U", second.ps]  # the first PS sends the second a shard
    problems = " ".join(evaluate(network, plan).problems)
    assert "needs the same workers" in problems and "both a PS and a worker" in problems


def test_paring_opt_bounds_several_pss_and_refuses_fine(capsys, tmp_path):
    """Three 2 Gbps PSs on the star: one PS's optimum is 2/3, so Σ r ≤ 3 · 2/3 = 2, which
    PARING's shards reach (rate proven optimal); paring-opt's model is coarse, so `fine`
    (which its bound would not cover) is refused."""
    import yaml

    path = tmp_path / "three.yaml"
    path.write_text(yaml.safe_dump(sharded(star_doc(), 3)))
    assert main(["solve", str(path), "--scheme", "paring-opt", "--param", "num_workers=1"]) == 0
    network = build_network(sharded(star_doc(), 3))
    plan = solve(network, "paring-opt", SolveOptions(seed=0, params={"num_workers": 1}))
    consistent(network, plan)
    assert plan.status == "feasible" and plan.bound == pytest.approx(2)
    assert plan.details["rate_optimal"] and plan.objective == pytest.approx(2)
    with pytest.raises(SchemeInputError, match="paring-opt: `fine` is not modelled"):
        solve(network, "paring-opt", SolveOptions(params={"fine": True}))


def test_fine_mode_with_two_pss_by_hand():
    """paring-fine-2ps.yaml (its header derives it): shard 1 is paring-fine.yaml's tree, S
    merging two workers' fragments below s at rate r: 2 s r = 1.5 (S) and r (3 - s) = 2 (its
    PS) give r = 11/12, s = 9/11, all of S's 1.5 Gbps; shard 2 then finds S spent and its PS
    merges three raw flows: 2/3. Coarse: 3/4 (S full) + 2/3."""
    network = load_topology(EXAMPLES / "paring-fine-2ps.yaml")
    coarse = solve(network, "paring", SolveOptions(seed=0))
    fine = solve(network, "paring", SolveOptions(seed=0, params={"fine": True}))
    consistent(network, coarse)
    consistent(network, fine)
    assert [tp.rate_gbps for tp in coarse.tasks] == pytest.approx([3 / 4, 2 / 3])
    assert [tp.rate_gbps for tp in fine.tasks] == pytest.approx([11 / 12, 2 / 3], rel=1e-7)
    assert fine.objective == pytest.approx(19 / 12, rel=1e-7)
    assert [tp.model_share for tp in fine.tasks] == pytest.approx([11 / 19, 8 / 19], rel=1e-6)
    (point,) = fine.tasks[0].aggregation
    assert point.switch == "S" and point.share == pytest.approx(9 / 11, rel=1e-7)
    assert fine.tasks[1].aggregation == []
    assert list(fine.details["partial_aggregation"]) == ["t0:S:0"]
    result = evaluate(network, fine)
    assert not result.beyond_data_plane
    into = {
        tp.ps: sum(ll.flows for ll in result.link_loads if ll.dst == tp.ps) for tp in fine.tasks
    }
    assert list(into.values()) == pytest.approx([2 * 9 / 11 + 3 * 2 / 11, 3])


def test_paring_opt_proves_two_pss_below_the_sum_of_one_ps_optima():
    """paring-fine-2ps.yaml, coarse: one PS alone reaches 3/4 (S merging two workers), so the
    sum of one-PS optima is 3/2; jointly S's 1.5 Gbps cannot serve both: with k_p of the 3
    workers merged at S by shard p, k_1 r_1 + k_2 r_2 ≤ 3/2 and PS p takes 3 - k_p + 1 flows
    (k_p ≥ 2) or 3 (k_p = 0) within 2 Gbps: (2, 0) gives 3/4 + 2/3 = 17/12, (2, 2) 3/4,
    (0, 0) 4/3, a 3 at S at most 1/2 + 2/3: the optimum is 17/12, PARING's sum, proven."""
    network = load_topology(EXAMPLES / "paring-fine-2ps.yaml")
    opt = solve(network, "paring-opt", SolveOptions(seed=0, params={"num_workers": 1}))
    consistent(network, opt)
    assert opt.objective == pytest.approx(17 / 12) and opt.bound == pytest.approx(17 / 12)
    assert opt.details["rate_optimal"] and opt.details["joint_candidates_probed"] >= 1


def test_paring_opt_finds_two_trees_the_greedy_misses():
    """fine_doc(seed 0): C 2, E0 3, E2 3 Gbps, PSs 3 Gbps, R 10, 3 workers. One PS alone gets
    at most 3/2 (above it the PS and E0, E2 take one flow each, C less: no merge, so no tree),
    so Σ ≤ 3. PARING's first shard takes E0 and E2 both at 3/2 (E2 merges two workers, E0
    that sum and a third), leaving the second C: 2/2 = 1, sum 5/2. Jointly each shard can use
    one of E0, E2 (2 x 3/2 = 3 each, its PS 2 x 3/2): 3/2 + 3/2 = 3, which paring-opt finds."""
    network = build_network(fine_doc(random.Random(0)))
    greedy = solve(network, "paring", SolveOptions(seed=0))
    opt = solve(network, "paring-opt", SolveOptions(seed=0, params={"num_workers": 1}))
    consistent(network, opt)
    assert greedy.objective == pytest.approx(5 / 2)
    assert [tp.rate_gbps for tp in opt.tasks] == pytest.approx([3 / 2, 3 / 2])
    assert opt.bound == pytest.approx(3) and opt.details["rate_optimal"]
    used = [{a.switch for a in tp.aggregation} for tp in opt.tasks]
    assert sorted(map(sorted, used)) == [["E0"], ["E2"]]


def fine_doc(rng: random.Random) -> dict:
    """tiny_doc's tree with 8 servers, 3 workers, R = 10 and a PS of 2-4 Gbps, so that the
    switches (1-3 Gbps), not the PS or R, bind: where the fine mode has work to do."""
    switches = ["C", "A0", "A1", "E0", "E1", "E2"]
    ina = set(rng.sample(switches, 3))
    specs = [
        {
            "name": s,
            **(
                {"ina": True, "aggregation_capacity_gbps": rng.choice([1, 1.5, 2, 3])}
                if s in ina
                else {}
            ),
        }
        for s in switches
    ]
    links = [("A0", "C"), ("A1", "C"), ("E0", "A0"), ("E1", "A0"), ("E2", "A1")]
    hosts = {
        "h0": "E0",
        "h1": "E0",
        "h2": "E1",
        "h3": "E2",
        "h4": "E2",
        "h5": "E1",
        "h6": "E0",
        "h7": "E2",
    }
    roles = ["ps", "worker", "worker", "worker"] + ["idle"] * 4
    return sharded(
        {
            "hosts": [{"name": h, "role": role} for h, role in zip(hosts, roles, strict=True)],
            "switches": specs,
            "links": [
                {"a": a, "b": b, "capacity_gbps": 100} for a, b in links + list(hosts.items())
            ],
            "jobs": [
                {
                    "name": "j",
                    "tasks": [
                        {
                            "name": "t",
                            "ps": "h0",
                            "workers": ["h1", "h2", "h3"],
                            "placement": "free",
                            "rate_cap_gbps": 10,
                            "ps_aggregation_capacity_gbps": rng.choice([2, 3, 4]),
                        }
                    ],
                }
            ],
        },
        2,
    )


@pytest.mark.parametrize("seed", [0, 2, 3, 4, 8])  # seeds whose fine plan has a share < 1
def test_fine_shards_stay_feasible_and_split_only_where_a_switch_is_full(seed):
    """Random small instances: the fine plan of two PSs is consistent for the evaluator with
    every shard's rate carried, and a point merges a share s < 1 only at a switch whose
    capacity the shards use up together (the evaluator's aggregator loads): no share is
    smaller than the capacity left allows."""
    network = build_network(fine_doc(random.Random(seed)))
    plan = solve(network, "paring", SolveOptions(seed=0, params={"fine": True}))
    consistent(network, plan)
    result = evaluate(network, plan)
    assert not result.beyond_data_plane
    load: dict[str, float] = {}
    for al in result.aggregator_loads:
        load[al.switch] = load.get(al.switch, 0.0) + al.load_gbps
    partial = [(tp, a) for tp in plan.tasks for a in tp.aggregation if a.share < 1]
    assert partial, "the instance made no partial point"
    for _tp, a in partial:
        assert a.share > 0
        cap = network.spec(a.switch).aggregation_capacity_gbps
        assert load[a.switch] == pytest.approx(cap, rel=1e-6), (seed, a)
    assert sum(tp.model_share for tp in plan.tasks) == pytest.approx(1)


# ------------------------------------------------------------------ brute force


def tiny_doc(rng: random.Random) -> tuple[dict, int]:
    """A 3-tier tree of 6 switches and 6 servers; 3 random switches aggregate 1-4 Gbps, a PS
    1-4 Gbps, R 1-6 Gbps, n = 2, two PSs."""
    switches = ["C", "A0", "A1", "E0", "E1", "E2"]
    ina = set(rng.sample(switches, 3))
    specs = [
        {
            "name": s,
            **({"ina": True, "aggregation_capacity_gbps": rng.randint(1, 4)} if s in ina else {}),
        }
        for s in switches
    ]
    links = [("A0", "C"), ("A1", "C"), ("E0", "A0"), ("E1", "A0"), ("E2", "A1")]
    hosts = {"h0": "E0", "h1": "E0", "h2": "E1", "h3": "E2", "h4": "E2", "h5": "E1"}
    roles = ["ps", "worker", "worker", "idle", "idle", "idle"]
    doc = {
        "hosts": [{"name": h, "role": role} for h, role in zip(hosts, roles, strict=True)],
        "switches": specs,
        "links": [{"a": a, "b": b, "capacity_gbps": 100} for a, b in links + list(hosts.items())],
        "jobs": [
            {
                "name": "j",
                "tasks": [
                    {
                        "name": "t",
                        "ps": "h0",
                        "workers": ["h1", "h2"],
                        "placement": "free",
                        "rate_cap_gbps": rng.choice([1, 2, 3, 6]),
                        "ps_aggregation_capacity_gbps": rng.randint(1, 4),
                    }
                ],
            }
        ],
    }
    return sharded(doc, 2), 2


def trees(doc: dict, ps: str, workers: tuple[str, ...]):
    """Every aggregation tree of `workers` rooted at `ps`: the children count of each vertex
    that has children (the PS, switches), deduplicated."""
    ina = sorted(s["name"] for s in doc["switches"] if s.get("ina"))
    ups = [ps, *ina]
    seen = set()
    for sw_parent in itertools.product([None, *ups], repeat=len(ina)):
        if any(p == s for s, p in zip(ina, sw_parent, strict=True)):
            continue
        parents = {s: p for s, p in zip(ina, sw_parent, strict=True) if p is not None}
        for w_parent in itertools.product(ups, repeat=len(workers)):
            parent = {**parents, **dict(zip(workers, w_parent, strict=True))}
            used = set()
            ok = True
            for w in workers:
                v, path = w, {w}
                while v != ps and ok:
                    used.add(v)
                    v = parent.get(v)
                    ok = v is not None and v not in path
                    path.add(v)
            if not ok:
                continue
            kids: dict[str, int] = {}
            for child in used:
                kids[parent[child]] = kids.get(parent[child], 0) + 1
            key = tuple(sorted(kids.items()))
            if key not in seen:
                seen.add(key)
                yield dict(kids)


def capacities(doc: dict) -> tuple[dict[str, Fraction], Fraction, Fraction]:
    task = doc["jobs"][0]["tasks"][0]
    cap = {
        s["name"]: Fraction(s["aggregation_capacity_gbps"]) for s in doc["switches"] if s.get("ina")
    }
    return cap, Fraction(task["ps_aggregation_capacity_gbps"]), Fraction(task["rate_cap_gbps"])


def best_rate(doc, ps, workers, cap, ps_cap, r_cap) -> Fraction:
    """One PS: the best min(R, B_v / k_v) over its trees (workers fixed)."""
    return max(
        min([r_cap] + [(ps_cap if v == ps else cap[v]) / k for v, k in kids.items()])
        for kids in trees(doc, ps, workers)
    )


def joint_optimum(doc: dict, n: int) -> Fraction:
    """Two PSs sharing the workers: max r1 + r2 over placements and pairs of trees, an LP in
    (r1, r2) per pair solved at its vertices (exact fractions). A tree whose children counts
    are all at least another's is never better, so only the minimal ones are paired."""
    cap, ps_cap, r_cap = capacities(doc)
    hosts = [h["name"] for h in doc["hosts"]]
    minimal: dict = {}
    best = Fraction(0)
    for ps1, ps2 in itertools.permutations(hosts, 2):
        for workers in itertools.combinations([h for h in hosts if h not in (ps1, ps2)], n):
            for ps in (ps1, ps2):
                if (ps, workers) not in minimal:
                    minimal[ps, workers] = _minimal(list(trees(doc, ps, workers)))
            for k1 in minimal[ps1, workers]:
                for k2 in minimal[ps2, workers]:
                    best = max(best, _lp(k1, k2, ps1, ps2, cap, ps_cap, r_cap))
    return best


def _minimal(all_kids: list[dict]) -> list[dict]:
    def covers(a: dict, b: dict) -> bool:  # a uses every vertex at least as much as b
        return a != b and all(a.get(v, 0) >= k for v, k in b.items())

    return [a for a in all_kids if not any(covers(a, b) for b in all_kids)]


def _lp(k1, k2, ps1, ps2, cap, ps_cap, r_cap) -> Fraction:
    """max r1 + r2 s.t. a r1 + b r2 <= c for every row, r >= 0: the best feasible vertex."""
    rows = [
        (Fraction(1), Fraction(1), r_cap),
        (Fraction(k1.get(ps1, 0)), Fraction(0), ps_cap),
        (Fraction(0), Fraction(k2.get(ps2, 0)), ps_cap),
    ]
    rows += [(Fraction(k1.get(v, 0)), Fraction(k2.get(v, 0)), b) for v, b in cap.items()]
    lines = [
        *rows,
        (Fraction(-1), Fraction(0), Fraction(0)),
        (Fraction(0), Fraction(-1), Fraction(0)),
    ]
    best = Fraction(0)
    for (a1, b1, c1), (a2, b2, c2) in itertools.combinations(lines, 2):
        det = a1 * b2 - a2 * b1
        if det == 0:
            continue
        x, y = (c1 * b2 - c2 * b1) / det, (a1 * c2 - a2 * c1) / det
        if x >= 0 and y >= 0 and all(a * x + b * y <= c for a, b, c in rows):
            best = max(best, x + y)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_each_shard_gets_the_best_rate_left_and_the_sum_stays_feasible(seed):
    """The paper's greedy, checked step by step: shard 1's rate is the best single-PS rate of
    its PS (workers free), shard 2's the best for its PS on the same workers with the B_v the
    brute force computes as left over (B_v - r_1 · fan-in at v) and R - r_1; the total never
    exceeds the joint optimum of two PSs (and is reported against it)."""
    doc, n = tiny_doc(random.Random(seed))
    network = build_network(doc)
    plan = solve(network, "paring", SolveOptions(seed=0))
    consistent(network, plan)
    first, second = plan.tasks
    cap, ps_cap, r_cap = capacities(doc)
    hosts = [h["name"] for h in doc["hosts"] if h["name"] not in (first.ps, second.ps)]
    r1 = max(
        best_rate(doc, first.ps, ws, cap, ps_cap, r_cap) for ws in itertools.combinations(hosts, n)
    )
    assert Fraction(first.rate_gbps).limit_denominator(1000) == r1
    left = dict(cap)
    for a in first.aggregation:
        left[a.switch] -= r1 * a.fan_in
    r2 = best_rate(doc, second.ps, tuple(sorted(second.paths)), left, ps_cap, r_cap - r1)
    assert Fraction(second.rate_gbps).limit_denominator(1000) == max(r2, 0)
    best = joint_optimum(doc, n)
    assert plan.objective <= best * (1 + 1e-9)
    opt = solve(network, "paring-opt", SolveOptions(seed=0, params={"num_workers": 1}))
    assert opt.objective == pytest.approx(float(best))  # joint.py: the joint optimum
    assert opt.bound == pytest.approx(float(best)) and opt.details["rate_optimal"]
    shares = [tp.model_share for tp in plan.tasks]
    assert sum(shares) == pytest.approx(1)
    if plan.objective > 0:
        assert shares[0] == pytest.approx(first.rate_gbps / plan.objective)


def test_two_pss_on_the_papers_fat_tree():
    """Sec. V's k = 6 fat-tree, 15 workers, 8 switches, R = 5: one PS reaches 10/3 Gbps (the
    switches' slots run out); a second PS takes a second shard on what the first tree left."""
    from controller.tools.bench.paring import fat_tree_doc

    one = build_network(fat_tree_doc(15, 8, 5.0))
    two = build_network(sharded(fat_tree_doc(15, 8, 5.0), 2))
    single = solve(one, "paring", SolveOptions(seed=0))
    double = solve(two, "paring", SolveOptions(seed=0))
    consistent(two, double)
    assert double.tasks[0].rate_gbps == pytest.approx(single.tasks[0].rate_gbps)
    assert double.objective > single.objective * 1.2
