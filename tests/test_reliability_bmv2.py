"""Faults at run time on bmv2 (issue 15 items 1, 2 and 6): the tests of test_reliability.py
with `simple_switch_grpc` running p4c's build of p4src/ina.p4 (root, Mininet).

The gradients are smaller than on the embedded target: bmv2 forwards about a tenth of what it
does, so the runner shapes links at 0.5 Mbps per model Gbps (DEFAULT_SCALE_MBPS) instead of 2.
"""

from __future__ import annotations

import time

import pytest
from conftest import EXAMPLES, MININET

from controller.faults.impair import Impairment, LinkImpairments, congest
from controller.mininet_runner import Emulation
from controller.network import load_topology
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


@pytest.mark.xfail(strict=False, reason=(
    "issue 15, open: in the merged full run of 2026-11-25 the new link monitor declared the "
    "untouched L2-S0 dead after the real L1-S1 cut on bmv2 under congestion (plan versions "
    "2, 3, 4 instead of 2); the embedded case passes"))
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
    assert [["L1", "S1"]] == final["dead_links"]
    print("bmv2: resent under congestion", sum(it.retransmissions for it in results),
          "; probes lost but counters moving (link-rounds):",
          final["link_monitor"]["saved_by_traffic"])


@pytest.mark.parametrize("impairment", [Impairment("loss", 5), Impairment("duplicate", 5),
                                        Impairment("reorder", 10, delay_ms=20)],
                         ids=lambda i: i.kind)
def test_every_link_impaired_every_result_exact_each_fragment_once_on_bmv2(fig1, impairment):
    network, plan = fig1
    with (Emulation(network, plan, target="bmv2") as emu,
          LinkImpairments(emu, impairment) as faults):
        results = [emu.iterate(GRADIENT_MB, k, timeout=120)[0] for k in (1, 2)]
        chains = faults.counters()
        state = emu.state()
    assert all(it.exact for it in results)
    for it in results:
        assert it.ps_report["finished"] == it.ps_report["fragments"], "a fragment never completed"
        assert it.ps_report["miscounted"] == 0, "a contribution was counted twice or missed"
    seen = sum(c["seen"] for c in chains.values())
    hit = sum(c["hit"] for c in chains.values())
    assert 0.5 * impairment.percent < 100 * hit / seen < 1.5 * impairment.percent
    if impairment.kind == "loss":
        assert sum(it.retransmissions for it in results) > 0
    elif impairment.kind == "duplicate":  # copies reached a slot or the PS and were ignored
        switch_dups = sum(sum(s["counters"].get("duplicates", [])) for s in
                          state["switches"].values())
        assert switch_dups + sum(it.ps_report["duplicates_ignored"] for it in results) > 0
    else:
        assert sum(s["sent"] for s in faults.delayline_stats.values()) > 0
    assert state["version"] == 1, "an impaired link is not a dead one"
    print(f"bmv2 {impairment.label()}: iterations",
          [round(it.seconds, 2) for it in results], "s, resent",
          sum(it.retransmissions for it in results), ", rule hit", round(100 * hit / seen, 2),
          "%")


def test_long_run_with_a_restart_and_a_cut_stays_exact_on_bmv2(fig1):
    """Item 6, CI-sized: with every=2, S1 restarted at iterations 1 and 3 (bmv2 comes back
    without a program: the controller pushes p4c's JSON and every entry again) and L1-S1 cut
    at 2 and 4 (mended after each), all mid-transfer. Every result exact, every fault done, the
    memory of every process recorded."""
    from controller.faults.longrun import long_run

    network, plan = fig1
    with Emulation(network, plan, target="bmv2") as emu:
        record = long_run(emu, iterations=4, every=2, gradient_mb=GRADIENT_MB, timeout=120,
                          cut=("L1", "S1"), restart="S1")
    assert record["exact"] and record["exact_count"] == 4, record["iterations"]
    assert all(i["finished"] == i["fragments"] and i["miscounted"] == 0
               for i in record["iterations"]), record["iterations"]
    assert [(e["iteration"], e["event"]) for e in record["events"]] == [
        (1, "restart"), (2, "cut"), (3, "restart"), (4, "cut")]
    assert not [e for e in record["events"] if "error" in e], record["events"]
    assert all(e["repush_seconds"] > 0 for e in record["events"] if e["event"] == "restart")
    assert all(e["cut_to_new_plan_seconds"] > 0 for e in record["events"] if e["event"] == "cut")
    assert record["plan_versions"] >= 3  # each cut moved the plan, the first mend moved it back
    agents = {f"worker {w}" for w in plan.tasks[0].paths} | {f"PS {plan.tasks[0].ps}"}
    assert set(record["agent_peak_rss_kb"]) == agents
    assert all(len(s) == 4 for s in record["agent_peak_rss_kb_per_iteration"].values())
    switches = {f"switch {s}" for s in network.switches}
    assert switches | {"controller", "bench (Mininet)"} == set(record["rss_kb"])
    assert all(v["start"] > 0 and v["end"] > 0 for v in record["rss_kb"].values())
    print("bmv2 events:", record["events"], "RSS kB:", record["rss_kb"])
