"""GRID's problem (1): `grid-opt` against hand-solved instances and a brute force written here,
the maximum sending rate T, and `grid` (R-GRIA on both LP variants) against each variant."""

from __future__ import annotations

import itertools
import random
from fractions import Fraction

import pytest
from conftest import EXAMPLES, leaf_spine_doc

from controller.cli import main
from controller.evaluator.evaluate import evaluate
from controller.model.network import Network, build_network, load_topology
from controller.model.plan import Plan
from controller.solvers import SolveOptions, solve
from controller.solvers.baselines.inatree import PathCache, rng_for
from controller.solvers.grid.model import build
from controller.solvers.grid.routes import fixed_routes
from controller.solvers.params import SchemeParams


def star(
    caps: list[float], workers: int, b_ps: float, link: float = 100.0, schemes: dict | None = None
) -> Network:
    """Workers, the PS and INA switches A0.. (capacities `caps`) around one plain hub X: only
    C_s, B_α and T matter, as in GRID's model (1)."""
    hosts = [{"name": "PS", "role": "ps"}] + [
        {"name": f"W{i}", "role": "worker"} for i in range(workers)
    ]
    switches = [{"name": "X", "tier": "spine", "ina": False}] + [
        {"name": f"A{i}", "tier": "leaf", "ina": True, "aggregation_capacity_gbps": c}
        for i, c in enumerate(caps)
    ]
    links = [{"a": "PS", "b": "X", "capacity_gbps": b_ps}]
    links += [{"a": h["name"], "b": "X", "capacity_gbps": link} for h in hosts[1:]]
    links += [{"a": s["name"], "b": "X", "capacity_gbps": link} for s in switches[1:]]
    return build_network(
        {
            "name": "star",
            "hosts": hosts,
            "switches": switches,
            "links": links,
            "schemes": schemes or {},
            "jobs": [
                {
                    "name": "job0",
                    "tasks": [
                        {"name": "t0", "ps": "PS", "workers": [h["name"] for h in hosts[1:]]}
                    ],
                }
            ],
        }
    )


def run(network: Network, scheme: str, seed: int = 0, **params) -> Plan:
    return solve(network, scheme, SolveOptions(seed=seed, params=params))


def pure_value(caps: dict[str, float], b_ps: float, t: float, assign: dict[str, str]) -> float:
    """(1) for an integral x, by hand: min(T, C_s / |N_s|, B_α / (|N_α| + |S'|))."""
    per = {s: sum(1 for v in assign.values() if v == s) for s in set(assign.values())}
    to_ps = per.pop("PS", 0)
    return min([t, b_ps / (to_ps + len(per))] + [caps[s] / k for s, k in per.items()])


# ------------------------------------------------------------------ hand-solved


def test_four_even_switches_rgria_misses_the_pairs():
    """4 workers, 4 switches of C = 2, B_α = T = 2. By hand: a switch with k workers caps λ at
    2/k and every used switch or raw worker takes λ of the PS's 2, so λ = 1 exactly when two
    switches take two workers each; every other x gives ≤ 2/3. The LP's optimum is unique:
    λ̃ = 2 = ΣC/N needs every switch full and r̃^α = 0, and Σ_s y_s ≤ 2 with y_s ≥ r̃_n^s then
    forces r̃_n^s = 1/2 everywhere, so R-GRIA draws each worker uniformly over the 4 switches
    and hits the pairs with probability 36/256 only; seed 1's draw is A0, A3, A3, A1: 2/3."""
    network = star([2, 2, 2, 2], 4, 2.0)
    rgria = run(network, "grid", seed=1, links=False, draws=1)
    assert rgria.details["lp_value_gbps"]["job0/t0"] == pytest.approx(2.0)
    drawn = rgria.details["assignment"]["job0/t0"]
    assert drawn == {"W0": "A0", "W1": "A3", "W2": "A3", "W3": "A1"}
    caps = {f"A{i}": 2.0 for i in range(4)}
    assert pure_value(caps, 2.0, 2.0, drawn) == pytest.approx(2 / 3)
    assert rgria.objective == pytest.approx(2 / 3)
    best = run(network, "grid-opt", links=False)
    assert best.status == "optimal" and best.bound == pytest.approx(1.0)
    assert best.objective == pytest.approx(1.0)  # the evaluator's rate for its routes
    assert evaluate(network, best).tasks[0].rate_gbps == pytest.approx(1.0)
    loads = sorted(list(best.details["assignment"]["job0/t0"].values()).count(s) for s in caps)
    assert loads == [0, 0, 2, 2]
    assert best.details["warm_start_gbps"]["job0/t0"] <= 1.0


def test_small_switches_optimum_is_the_ps():
    """2 workers, one switch of C = 1, B_α = T = 4. By hand: both raw to the PS give 4/2 = 2,
    any use of A0 caps λ at 1. The LP mixes A0 in (λ̃ = 2.25: r̃^A = 0.5, r̃^α = 1.75 per
    worker), so R-GRIA sends a worker to A0 with probability 2/9 (seed 0 sends W0)."""
    network = star([1], 2, 4.0)
    rgria = run(network, "grid", seed=0, links=False, draws=1)
    assert rgria.details["lp_value_gbps"]["job0/t0"] == pytest.approx(2.25)
    assert "A0" in rgria.details["assignment"]["job0/t0"].values()
    assert rgria.objective == pytest.approx(1.0)
    best = run(network, "grid-opt")
    assert best.status == "optimal" and best.objective == pytest.approx(2.0)
    assert set(best.details["assignment"]["job0/t0"].values()) == {"PS"}


# ------------------------------------------------------------------ T


def test_max_rate_caps_the_optimum_and_tightens_the_lp():
    """T is Table 1's "maximum sending rate": λ ≤ T in (1), so λ*(T) = min(T, λ*(∞)) (the x
    that are feasible do not depend on T); in the LP r_n^s ≤ x_n^s·T, so a smaller T also
    stops fractional x from carrying full rates: on the four-switch star the LP falls from 2
    (T = B_α, the default) to 1 at T = 1, the integral optimum."""
    network = star([2, 2, 2, 2], 4, 2.0)
    for t, optimum, lp in ((2.0, 1.0, 2.0), (1.0, 1.0, 1.0), (0.5, 0.5, 0.5)):
        plan = run(network, "grid-opt", links=False, max_rate_gbps=t)
        assert plan.details["model_value_gbps"]["job0/t0"] == pytest.approx(optimum)
        assert plan.status == "optimal" and plan.objective == pytest.approx(optimum)
        assert plan.details["max_rate_gbps"]["job0/t0"] == t
        rgria = run(network, "grid", links=False, max_rate_gbps=t)
        assert rgria.details["lp_value_gbps"]["job0/t0"] == pytest.approx(lp)
        assert rgria.objective <= t + 1e-9  # workers never send faster than T


def test_grid_fig1_with_t_the_worker_link():
    """GRID Fig. 1 reasons with T = the worker link (3 Gbps): the optimum stays 3 (every
    worker at its link's rate, Sec. 3.2); T = 2 caps it at 2. T from the topology's
    `schemes.grid` serves `grid-opt` too."""
    network = load_topology(EXAMPLES / "grid-fig1.yaml")
    assert run(network, "grid-opt").objective == pytest.approx(3.0)
    assert run(network, "grid-opt", max_rate_gbps=3).status == "optimal"
    capped = run(network, "grid-opt", max_rate_gbps=2)
    assert capped.objective == pytest.approx(2.0) and capped.status == "optimal"
    network.schemes["grid"] = {"max_rate_gbps": 2}
    assert run(network, "grid-opt").details["max_rate_gbps"]["job0/t0"] == 2.0


def test_warm_start_from_the_lp_with_link_rows():
    """With link rows in the model, the warm start draws from the LP with them too: on GRID
    Fig. 1 the 3 Gbps the paper states (every worker at its 3 Gbps link) is already R-GRIA's
    best draw there, where the paper's LP (no link rows) draws only 1.5 in that model.
    Without link rows the model's LP is the paper's, so the warm start comes from it."""
    network = load_topology(EXAMPLES / "grid-fig1.yaml")
    for seed in (0, 1):
        plan = run(network, "grid-opt", seed=seed, links=True)
        assert plan.details["warm_start_gbps"]["job0/t0"] == pytest.approx(3.0)
        assert plan.details["warm_start_lp"]["job0/t0"] == "with link rows"
        assert plan.status == "optimal" and plan.objective == pytest.approx(3.0)
        pure = run(network, "grid-opt", seed=seed, links=False)
        assert pure.details["warm_start_lp"]["job0/t0"] == "without link rows"


def test_max_rate_bad_value_is_one_paragraph(tmp_path, capsys):
    topo = str(EXAMPLES / "grid-fig1.yaml")
    assert main(["solve", topo, "--scheme", "grid-opt", "--param", "max_rate_gbps=-1"]) == 2
    assert "grid-opt: parameter max_rate_gbps=-1" in capsys.readouterr().out


# ------------------------------------------------------------------ brute force


def _instance(seed: int) -> Network:
    """A small leaf-spine, 3-5 workers, INA switches with capacities drawn from the seed."""
    rng = random.Random(seed)
    leaves, spines = rng.choice([(3, 2), (4, 2), (3, 3)])
    per_leaf = [rng.randint(0, 2) for _ in range(leaves)]
    per_leaf[rng.randrange(leaves)] += 3 - min(3, sum(per_leaf))
    names = [f"L{i}" for i in range(leaves)] + [f"S{i}" for i in range(spines)]
    ina = set(rng.sample(names, rng.randint(1, 3)))
    doc = leaf_spine_doc(leaves, spines, per_leaf[:5], ina=ina, capacity=1.0)
    for sw in doc["switches"]:
        if sw["ina"]:
            sw["aggregation_capacity_gbps"] = rng.choice([0.5, 1.0, 1.5, 2.0, 3.0])
    for link in doc["links"]:
        link["capacity_gbps"] = rng.choice([1.0, 1.0, 2.0])
    return build_network(doc)


@pytest.mark.parametrize("limit", [None, 2], ids=["default-limit", "fan-in-2"])
@pytest.mark.parametrize("seed", range(12))
def test_grid_opt_matches_brute_force(seed, limit):
    """Every assignment of every worker to an INA switch or the PS, scored here: without link
    rows by (1)'s formula from the file's numbers; with them by the evaluator on the routes
    the model charges (the evaluator counts each flow on each link and each switch's merged
    inflows, which with one pipeline and explicit C_s is exactly (1)'s rows), capped at T.
    With a fan-in limit (`max_fan_in=2`, below the 3-5 workers), only assignments that send
    no switch more than 2 workers count: `optimal` and the bound are within the limit."""
    network = _instance(seed)
    given = {} if limit is None else {"max_fan_in": limit}
    task = network.tasks[0]
    ina = sorted(s for s in network.switches if network.is_ina(s))
    caps = {s: network.spec(s).aggregation_capacity_gbps for s in ina}
    b_ps = sum(network.capacity(u, "PS") for u in network.graph.predecessors("PS"))
    workers = sorted(task.workers)
    for links in (False, True):
        inst = build(network, task, SchemeParams("grid", {}), PathCache(network), rng_for(seed))
        best = 0.0
        for nodes in itertools.product([*ina, "PS"], repeat=len(workers)):
            assign = dict(zip(workers, nodes, strict=True))
            if limit and any(nodes.count(s) > limit for s in ina):
                continue
            if not links:
                best = max(best, pure_value(caps, b_ps, b_ps, assign))
                continue
            model_assign = {n: ("@ps" if s == "PS" else s) for n, s in assign.items()}
            plan = Plan(
                "check",
                "heuristic",
                0.0,
                None,
                0.0,
                seed,
                [fixed_routes(network, inst, model_assign)],
                topology=network.name,
            )
            best = max(best, min(b_ps, evaluate(network, plan).tasks[0].rate_gbps))
        plan = run(network, "grid-opt", seed=seed, links=links, **given)
        # The warm start is an assignment of the model it is given to: its λ there is one
        # of the brute force's (not above λ*), and CP-SAT only improves on it.
        warm = plan.details["warm_start_gbps"]["job0/t0"]
        assert warm is not None and warm <= best + 1e-9, links
        assert plan.details["model_value_gbps"]["job0/t0"] >= warm - 1e-9
        assert plan.details["model_value_gbps"]["job0/t0"] == pytest.approx(best), links
        assert plan.details["model_bound_gbps"]["job0/t0"] == pytest.approx(best), links
        assert plan.details["model_status"]["job0/t0"] == "optimal"
        result = evaluate(network, plan)
        assert result.consistent
        assert all(a.fan_in <= (limit or 64) for a in result.aggregator_loads)
        assert plan.bound >= plan.objective - 1e-9
        if links:  # the routes carry λ* (or more, routed least-loaded)
            assert plan.objective >= best - 1e-9 and plan.status == "optimal"


def test_bound_is_exact_rational():
    """Capacities are read as the decimals written, so λ* = 0.3 / 3 = B_α = 0.1 exactly (in
    floats 0.3 / 3 is 0.09999999999999999, just under B_α)."""
    network = star([0.3], 3, 0.1)
    plan = run(network, "grid-opt", links=False)
    inst = build(network, network.tasks[0], SchemeParams("grid", {}), PathCache(network), None)
    assert inst.cap["A0"] == Fraction(3, 10) and 0.3 / 3 < 0.1
    assert plan.details["model_value_gbps"]["job0/t0"] == 0.1
    assert plan.details["model_bound_gbps"]["job0/t0"] == 0.1


# ------------------------------------------------------------------ grid: both LP variants


@pytest.mark.parametrize(
    "network",
    [
        load_topology(EXAMPLES / "grid-fig1.yaml"),
        load_topology(EXAMPLES / "eina-fig1.yaml"),
        *(_instance(seed) for seed in range(3)),
    ],
    ids=["grid-fig1", "eina-fig1", "ls0", "ls1", "ls2"],
)
def test_grid_at_least_each_lp_variant(network):
    """`grid` runs R-GRIA on both LPs from the seed afresh: exactly each single-variant run,
    so it is never worse than either, and says which won."""
    for seed in (0, 1):
        both = run(network, "grid", seed=seed, draws=4)
        alone = {
            links: run(network, "grid", seed=seed, draws=4, links=links) for links in (True, False)
        }
        assert both.objective == pytest.approx(max(p.objective for p in alone.values()))
        winner = both.details["links_in_lp"]
        assert both.tasks[0].paths == alone[winner].tasks[0].paths
        assert both.details["variant"] == ("with" if winner else "without") + " link rows"
        assert set(both.details["variants"]) == {"with link rows", "without link rows"}


# ------------------------------------------------------------------ benchmark table


def test_compare_reports_rgria_against_the_optimum(tmp_path):
    """`ina bench compare` with `grid-opt`: its solve time in the row, and the table of
    R-GRIA against (1)'s proven optimum (GRID Fig. 1: both reach 3 Gbps)."""
    from controller.tools.bench.compare import compare

    bench = tmp_path / "BENCHMARKS.md"
    result = compare(
        "grid-fig1",
        schemes=("grid", "grid-opt"),
        jobs=1,
        out=tmp_path / "out",
        benchmarks=bench,
        progress=False,
    )
    (row,) = result["grid_optimum"]
    assert row["optimum_gbps"] == pytest.approx(3.0) and row["proven"] == 1
    assert row["rgria_draw_share"] <= 1.0 and row["grid_plan_share"] is None  # with links
    assert row["grid_seeds"] == 1 and row["grid_at_least_variants"] == 1  # 3 Gbps, both 3 / 1.5
    assert row["cpu_seconds_median"] > 0  # the solve's CPU time, recorded beside wall time
    text = bench.read_text()
    assert "GRID's own optimum" in text and "| grid-fig1.yaml | 1 | 3 | 1/1 |" in text


def test_out_of_time_is_timeout_with_a_valid_bound():
    """No time for a single probe: the plan is the warm start (R-GRIA's best draw if GLOP
    finished in its 1 ms, else every worker at the PS), status `timeout`, and the bound is
    the largest value not yet excluded: T = 2, the LP's value."""
    network = star([2, 2, 2, 2], 4, 2.0)
    plan = solve(network, "grid-opt", SolveOptions(time_limit=1e-6, params={"links": False}))
    assert plan.status == "timeout" and plan.details["probes"]["job0/t0"] == []
    warm = plan.details["warm_start_gbps"]["job0/t0"]
    assert plan.objective == pytest.approx(0.5 if warm is None else warm)
    assert plan.bound == pytest.approx(2.0) and plan.gap > 0
    assert evaluate(network, plan).consistent
