"""ARO Fig. 1 end to end on Mininet with the embedded target and real packets (root)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest
from conftest import EXAMPLES, MININET

from controller.emulation.mininet_runner import RunnerError, run
from controller.model.network import load_topology
from controller.solvers import solve

pytestmark = MININET


@pytest.mark.parametrize(("scheme", "flows_into_ps"), [("shortest", 5), ("aro", 1)])
def test_fig1_results_exact_and_ps_link_flows(scheme, flows_into_ps):
    network = load_topology(EXAMPLES / "aro-fig1.yaml")
    plan = solve(network, scheme)
    result = run(network, plan, iterations=2, gradient_mb=0.1, timeout=90)
    assert result.exact
    assert len(result.iterations) == 2
    # The PS receives exactly the plan's flows per fragment (its own count of distinct
    # contributions); its link carries at least those, plus what recovery sends again, which
    # a loaded machine makes more of.
    for it in result.iterations:
        assert it.ps_flows == flows_into_ps, it.ps_flows
        assert it.ps_link_flows >= flows_into_ps * 0.99, it.ps_link_flows
    assert all(len(pushes) == 1 for pushes in result.switch_push_seconds.values())


def test_a_missing_switch_binary_is_a_clear_error():
    network = load_topology(EXAMPLES / "aro-fig1.yaml")
    plan = solve(network, "shortest")
    if shutil.which("simple_switch_grpc"):
        pytest.skip("bmv2 is installed here: this case only exists without it")
    with pytest.raises(RunnerError, match="simple_switch_grpc is not installed"):
        run(network, plan, iterations=1, gradient_mb=0.1, target="bmv2")


def test_switch_restarted_mid_run_is_reprogrammed_and_results_stay_exact():
    from controller.emulation.mininet_runner import Emulation

    network = load_topology(EXAMPLES / "aro-fig1.yaml")
    plan = solve(network, "aro")
    restarts = []

    def restart_s1() -> None:
        emu.wait_for_traffic()
        restarts.append(emu.restart_switch("S1"))

    with Emulation(network, plan) as emu:
        (it,) = emu.iterate(0.25, 1, timeout=90, during=restart_s1)
        pushes = emu.state()["switches"]["S1"]["pushes_seconds"]
    assert it.exact
    assert len(pushes) == 2  # the initial push and the re-push after the restart
    print(
        f"S1 booted in {restarts[0].boot_seconds:.2f} s, re-programmed "
        f"{restarts[0].repush_seconds:.2f} s later (writes {pushes[1]:.3f} s)"
    )


def _cut_l1_s1_mid_run(emu) -> object:
    """One iteration of the ARO plan, whose paths use L1–S1, with that link cut once the
    transfer has started; returns the iteration's result."""
    assert any(p[1:3] == ["L1", "S1"] for p in emu.plan.tasks[0].paths.values())

    def cut() -> None:
        emu.wait_for_traffic()
        emu.set_link("L1", "S1", up=False)

    (it,) = emu.iterate(0.25, 1, timeout=90, during=cut)
    return it


def test_link_cut_mid_run_is_replanned_and_results_stay_exact():
    from controller.emulation.mininet_runner import Emulation

    network = load_topology(EXAMPLES / "aro-fig1.yaml")
    with Emulation(network, solve(network, "aro")) as emu:
        it = _cut_l1_s1_mid_run(emu)
        state = emu.state()
    assert it.exact
    assert state["version"] >= 2
    assert ["L1", "S1"] in state["dead_links"]
    new_paths = state["plan"]["tasks"][0]["paths"].values()
    assert not any(
        "L1" in p and "S1" in p and p.index("S1") == p.index("L1") + 1 for p in new_paths
    )
    print("re-plan:", state["replans"])


def test_link_cut_mid_run_with_plain_switches_on_open_vswitch_moves_them_too():
    """As above with L0, L3, S0 as OVS bridges: after the cut, L1's traffic can only go up
    through S0, so the new plan's flow ids must be forwarded by OVS, installed before the
    hosts switch (the daemon waits for the OpenFlow controller) and the old ones deleted after
    the drain."""
    from controller.emulation.mininet_runner import Emulation

    network = load_topology(EXAMPLES / "aro-fig1.yaml")
    with Emulation(network, solve(network, "aro"), plain_switches="ovs") as emu:
        it = _cut_l1_s1_mid_run(emu)
        state = emu.state()
        openflow = _wait_retired(emu.ovs.state, state["version"])
        daemon_log = (emu.workdir / "controller.log").read_text()
    assert it.exact
    assert state["version"] >= 2
    assert ["L1", "S1"] in state["dead_links"]
    assert all(
        p[p.index("L1") + 1] == "S0"
        for p in state["plan"]["tasks"][0]["paths"].values()
        if "L1" in p
    )
    assert openflow["version"] == state["version"]
    assert openflow["versions"] == [state["version"]], "the old plan's rules were not deleted"
    assert "did not confirm" not in daemon_log  # hosts switched only once OVS held the plan
    print("re-plan:", state["replans"])


def _wait_retired(path, version: int, timeout: float = 15.0) -> dict:
    """The OpenFlow controller's state once it holds `version` only (or at the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        state = json.loads(path.read_text())
        if state["versions"] == [version] or time.monotonic() > deadline:
            return state
        time.sleep(0.1)


def test_tail_drops_on_every_link_leave_every_iteration_exact():
    """Every link shaped to 30 % of what the workers pace at, with a 2-packet queue: DATA,
    RESULT, ACK and probes are dropped (the link monitor may even re-plan). A partial sum a
    lost ACK leaves behind must never leak into the next iteration's sums. The 2-packet FIFO
    is `congest`'s: Mininet's `max_queue_size` needs netem, which this kernel lacks, and left
    the default 1000-packet queue, where nothing need be dropped."""
    from controller.emulation.faults.impair import congest
    from controller.emulation.mininet_runner import Emulation

    network = load_topology(EXAMPLES / "aro-fig1.yaml")
    with Emulation(network, solve(network, "aro")) as emu:
        congest(emu, 0.3, 2)
        results = [emu.iterate(0.1, k, timeout=90)[0] for k in (1, 2)]
    assert [it.exact for it in results] == [True, True]
    assert sum(it.retransmissions for it in results) > 0, "no drop: the queues were not short"


def test_worker_that_never_finishes_is_named_and_everything_is_torn_down():
    network = load_topology(EXAMPLES / "aro-fig1.yaml")
    plan = solve(network, "shortest")
    with pytest.raises(RunnerError, match=r"worker W\d did not finish iteration 1 in time"):
        run(network, plan, iterations=1, gradient_mb=4.0, timeout=3)
    assert _leftovers_of(network) == []


def _leftovers_of(network) -> list[str]:
    """Agent, controller and switch processes this emulation could have started: those naming
    its run directory (`ina-mininet-*`) or one of its switches' interfaces. Other sessions on a
    shared machine run the same programs, and a bare pgrep counted theirs."""
    listing = subprocess.run(
        ["pgrep", "-af", "(controller.cli|dataplane) (switch|controller|worker|ps)"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    marks = ["ina-mininet-", *(f"@{switch}-eth" for switch in network.switches)]
    return [line for line in listing.splitlines() if any(mark in line for mark in marks)]


@pytest.mark.parametrize(("scheme", "flows_into_ps"), [("shortest", 5), ("aro", 1)])
def test_fig1_with_plain_switches_on_open_vswitch(scheme, flows_into_ps):
    network = load_topology(EXAMPLES / "aro-fig1.yaml")
    plan = solve(network, scheme)
    result = run(network, plan, iterations=1, gradient_mb=0.1, timeout=90, plain_switches="ovs")
    assert result.exact
    assert result.iterations[0].ps_flows == flows_into_ps, result.iterations[0].ps_flows
    assert result.iterations[0].ps_link_flows >= flows_into_ps * 0.99
    # Only the INA switches (L1, L2, S1) run the P4 target; L0, L3, S0 are OVS bridges.
    assert set(result.switch_push_seconds) == {"L1", "L2", "S1"}
