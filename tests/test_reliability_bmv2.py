"""Faults at run time on bmv2 (RELIABILITY.md sections 1, 2 and 6): the tests of test_reliability.py
with `simple_switch_grpc` running p4c's build of p4src/ina.p4 (root, Mininet).

The gradients are smaller than on the embedded target: bmv2 forwards about a tenth of what it
does, so the runner shapes links at 0.5 Mbps per model Gbps (DEFAULT_SCALE_MBPS) instead of 2.
"""

from __future__ import annotations

import time

import pytest
from conftest import EXAMPLES, MININET
from test_reliability import check_impaired_run, check_long_run_of_four

from controller.emulation.faults.impair import Impairment, LinkImpairments, congest
from controller.emulation.mininet_runner import Emulation
from controller.model.network import load_topology
from controller.solvers import solve
from dataplane.targets import missing

pytestmark = MININET
GRADIENT_MB = 0.05


@pytest.fixture(scope="module")
def fig1():
    if reason := missing("bmv2"):
        pytest.skip(reason)
    network = load_topology(EXAMPLES / "aro-fig1.yaml")
    return network, solve(network, "aro")


def test_congestion_is_not_a_failure_but_a_cut_under_it_is_on_bmv2(fig1):
    """Every link at 30 % of the workers' pace with the default queues: the ports keep
    receiving, so the plan stays; a real cut under the same load makes exactly one new plan."""
    network, plan = fig1
    with Emulation(network, plan, target="bmv2") as emu:
        congest(emu, 0.3)
        results = [emu.iterate(GRADIENT_MB, k, timeout=120)[0] for k in (1, 2)]
        congested = emu.state()

        def cut() -> None:
            emu.wait_for_traffic(packets=100)
            emu.set_link("L1", "S1", up=False)

        (after_cut,) = emu.iterate(GRADIENT_MB, 3, timeout=120, during=cut)
        time.sleep(3)  # a second, false verdict would come within a few probe rounds
        final = emu.state()
    assert [it.exact for it in results] == [True, True]
    assert congested["version"] == 1, f"re-planned without a failure: {congested['replans']}"
    assert after_cut.exact
    assert final["version"] == 2, f"one cut, plans: {final['replans']}"
    assert final["dead_links"] == [["L1", "S1"]]
    print(
        "bmv2: resent under congestion",
        sum(it.retransmissions for it in results),
        "; probes lost but counters moving (link-rounds):",
        final["link_monitor"]["saved_by_traffic"],
    )


@pytest.mark.parametrize(
    "impairment",
    [Impairment("loss", 5), Impairment("duplicate", 5), Impairment("reorder", 10, delay_ms=20)],
    ids=lambda i: i.kind,
)
def test_every_link_impaired_every_result_exact_each_fragment_once_on_bmv2(fig1, impairment):
    network, plan = fig1
    with Emulation(network, plan, target="bmv2") as emu, LinkImpairments(emu, impairment) as faults:
        results = [emu.iterate(GRADIENT_MB, k, timeout=120)[0] for k in (1, 2)]
        chains = faults.counters()
        state = emu.state()
    hit_percent = check_impaired_run(impairment, results, chains, faults, state)
    print(
        f"bmv2 {impairment.label()}: iterations",
        [round(it.seconds, 2) for it in results],
        "s, resent",
        sum(it.retransmissions for it in results),
        ", rule hit",
        round(hit_percent, 2),
        "%",
    )


def test_long_run_with_a_restart_and_a_cut_stays_exact_on_bmv2(fig1):
    """Item 6, CI-sized: with every=2, S1 restarted at iterations 1 and 3 (bmv2 comes back
    without a program: the controller pushes p4c's JSON and every entry again) and L1-S1 cut
    at 2 and 4 (mended after each), all mid-transfer. Every result exact, every fault done, the
    memory of every process recorded."""
    from controller.emulation.faults.longrun import long_run

    network, plan = fig1
    with Emulation(network, plan, target="bmv2") as emu:
        record = long_run(
            emu,
            iterations=4,
            every=2,
            gradient_mb=GRADIENT_MB,
            timeout=120,
            cut=("L1", "S1"),
            restart="S1",
        )
    check_long_run_of_four(record, network, plan)
    assert record["plan_versions"] >= 3  # each cut moved the plan, the first mend moved it back
    print("bmv2 events:", record["events"], "RSS kB:", record["rss_kb"])
