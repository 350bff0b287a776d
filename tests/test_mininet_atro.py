"""ATRO's chosen network built in Mininet: `ina mininet POOL.yaml --scheme atro` (root)."""

from __future__ import annotations

import json

from conftest import MININET

from controller.cli import main
from controller.evaluator.evaluate import evaluate
from controller.model.network import build_network, dump_topology
from controller.model.patch_panel import chosen_topology
from controller.model.topogen import InaOptions, pool
from controller.solvers import SolveOptions, solve

pytestmark = MININET


def test_pool_of_6_switches_and_12_workers_runs_exact_on_the_chosen_network(tmp_path):
    # 6 ports per switch: no switch holds the 13 hosts, so ATRO cables several together.
    doc = pool(
        switches=6,
        max_ports=6,
        workers=12,
        capacity_gbps=1.0,
        ina=InaOptions(["S0", "S1"], pipelines=1),
    )
    doc["schemes"] = {"atro": {"num_workers": 1}}  # one CP-SAT thread: the CLI solves the same plan
    src = tmp_path / "pool.yaml"
    dump_topology(doc, src)
    plan = solve(build_network(doc), "atro", SolveOptions(time_limit=30))
    chosen = build_network(chosen_topology(build_network(doc), plan))
    into_ps = evaluate(chosen, plan).tasks[0].flows_into_ps
    out = tmp_path / "run.json"
    assert (
        main(
            [
                "mininet",
                str(src),
                "--scheme",
                "atro",
                "--gradient-mb",
                "0.1",
                "--iterations",
                "2",
                "--timeout",
                "120",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    (run,) = json.loads(out.read_text())
    assert all(it["exact"] for it in run["iterations"]) and len(run["iterations"]) == 2
    # Distinct flows per fragment the PS received (its own count, resends excluded): the
    # plan's flows into the PS, so the chosen aggregators merged on the emulated network.
    for it in run["iterations"]:
        assert round(it["ps_flows"]) == into_ps
        print(
            f"iteration {it['iteration']}: {it['seconds']:.2f} s, PS link packets per "
            f"fragment {it['ps_link_flows']:g}, distinct flows at the PS {it['ps_flows']:g}"
        )
