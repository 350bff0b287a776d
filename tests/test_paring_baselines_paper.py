"""PARING's DeepSys+SOAR and PANAMA against the paper's numbers (BENCHMARKS.md, PARING).

The search model (`controller.tools.bench.paring_search`) is checked against the evaluator and
against counts by hand; its claims about the paper's values rest on those checks.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from controller.cli import main
from controller.evaluator.evaluate import evaluate
from controller.model.network import build_network
from controller.solvers import SolveOptions, solve
from controller.solvers.baselines.placing import deepsys_tree
from controller.tools.arguments import UserError
from controller.tools.bench.paring import fat_tree_doc, run_sweep, scheme_spec
from controller.tools.bench.paring_search import counter, search, trees

HOP_GB = 1.627  # one 1627 MB gradient over one link


def fat_tree(workers: int, switches: int, layout: str):
    return build_network(fat_tree_doc(workers, switches, 5.0, layout=layout))


def test_tree_count_is_the_hand_count():
    """15 workers: racks E0_1, E0_2 pick one of 3 aggregation switches; E1_0-E1_2 one of 3,
    and each pod-1 aggregation switch used one of its 3 cores: 3^2 × (3 × 3 + 18 × 9 + 6 × 27)
    (1, 2 or 3 distinct pod-1 aggregation switches) = 2997 shortest-path trees."""
    network = fat_tree(15, 8, "spread")
    assert sum(1 for _ in trees(network, network.tasks[0])) == 2997


@pytest.mark.parametrize("layout", ["pods", "spread"])
@pytest.mark.parametrize("scheme", ["deepsys", "deepsys-atp", "deepsys-soar"])
def test_counter_agrees_with_the_evaluator(scheme, layout):
    """On DeepSys's tree, the search's count of a plan (merging where the plan aggregates)
    equals the evaluator's rate and volume."""
    network = fat_tree(15, 8, layout)
    task = network.tasks[0]
    plan = solve(network, scheme, SolveOptions(seed=0))
    te = evaluate(network, plan, gradient_mb=1627).tasks[0]
    merging = {a.switch for a in plan.tasks[0].aggregation}
    rate, hops = counter(deepsys_tree(network, task), task, 5.0)(merging)
    assert float(rate) == pytest.approx(te.rate_gbps)
    assert hops * 1627 == pytest.approx(te.volume_mb)


def test_atp_on_the_spread_layout_by_hand():
    """The hand count of docs/benchmarks/journal.md, PARING: E1_0 merges its 3 workers, E0_0
    the 13 flows left: 10/13 Gbps, 48 gradient-hops (76.3 GiB)."""
    network = fat_tree(15, 8, "spread")
    task = network.tasks[0]
    f = counter(deepsys_tree(network, task), task, 5.0)
    assert f({"E0_0", "E1_0"}) == (Fraction(10, 13), 48)


def test_panama_at_twelve_switches_is_below_every_spread_plan():
    """20 workers, 12 switches, spread: 20 host links, 14 flows up from the racks (3 from
    each of E0_1, E0_2, E1_1, E1_2, one from E1_0, E2_0), one link out of pods 1 and 2 each,
    two into pod 0 (cores do not merge), one to E0_0, one to the PS: at least 40
    gradient-hops, above the paper's PANAMA 60.4 GiB = 38."""
    network = fat_tree(20, 12, "spread")
    found = search(network, Fraction(10, 7), 38)
    assert (found["least_hops"], found["matches"]) == (40, 0)


def test_soar_budget_in_the_bench_by_hand():
    """`--schemes deepsys-soar:k=2`, pods layout, 15 workers: SOAR's best two switches on
    DeepSys's tree are A0_0 (13 flows → 1 over 2 links, saves 24 of 70 gradient-hops) and then
    E1_0 (3 → 1 over 3 links, saves 6): 40 gradient-hops; A0_0 merges E0_1's and E0_2's 6,
    E1_0's 1 and E1_1's, E1_2's 4: 11 flows, 10/11 Gbps."""
    assert scheme_spec("deepsys-soar:k=2") == ("deepsys-soar", {"k": 2})
    assert scheme_spec("marina:rounds=0:ina_weight=1") == ("marina", {"rounds": 0, "ina_weight": 1})
    [row] = run_sweep("workers", [15], ["deepsys-soar:k=2"], 1.0, layout="pods")
    assert row["scheme"] == "deepsys-soar:k=2" and row["paper"] is None
    assert row["rate_gbps"] == pytest.approx(10 / 11)
    assert row["volume_gb"] == pytest.approx(40 * HOP_GB)


def test_a_bad_scheme_entry_is_one_clear_error(capsys):
    with pytest.raises(UserError, match="--schemes deepsys-soar:k=x:k=y: k: given twice"):
        scheme_spec("deepsys-soar:k=x:k=y")
    code = main(
        [
            "bench",
            "paring",
            "--sweep",
            "workers",
            "--values",
            "15",
            "--schemes",
            "deepsys-soar:k=-1",
            "--ratio-instances",
            "0",
            "--pss",
            "",
            "--no-paper-model",
            "--out",
            "/tmp/unused-paring-bench",
        ]
    )
    assert code == 2
    assert "deepsys-soar:k=-1" in capsys.readouterr().out
