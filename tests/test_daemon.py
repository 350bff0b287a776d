"""The controller daemon as a process: it programs switches and publishes its state; bad input
gives a clear message naming the component, exit 1, and nothing left running."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import yaml
from conftest import EXAMPLES, free_port

from controller.daemon import Session, replan
from controller.network import load_topology
from controller.solvers import solve
from controller.southbound.p4runtime import SwitchTarget
from controller.topogen import Workload, leaf_spine


def _controller(tmp_path, topology, switches, *extra, timeout=60):
    path = tmp_path / "switches.json"
    path.write_text(json.dumps(switches))
    return subprocess.run(
        [sys.executable, "-m", "controller.cli", "controller", str(topology), "--switches",
         str(path), "--state", str(tmp_path / "state.json"), "--once", "--connect-timeout", "3",
         "--log-level", "warning", *extra],
        capture_output=True, text=True, timeout=timeout, check=False)


def test_unreachable_switch_is_named(tmp_path):
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    proc = _controller(tmp_path, EXAMPLES / "aro-fig1.yaml", {"S1": {"address": address}})
    assert proc.returncode == 1
    assert f"switch S1 at {address} cannot be reached" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


def test_switch_refusing_the_pipeline_is_named(tmp_path, embedded_switch):
    # A P4Info the target does not implement (its aggregation table is missing).
    text = (EXAMPLES.parent.parent / "p4src" / "ina.p4info.txtpb").read_text()
    start = text.index('    name: "InaIngress.ina_aggregate"')
    start = text.rindex("tables {", 0, start)
    end = text.index("\ntables {", start + 1)
    bad = tmp_path / "bad.p4info.txtpb"
    bad.write_text(text[:start] + text[end + 1:])
    proc = _controller(tmp_path, EXAMPLES / "aro-fig1.yaml",
                       {"S1": {"address": embedded_switch}}, "--p4info", str(bad))
    assert proc.returncode == 1
    assert f"switch S1 at {embedded_switch} accepts connections but did not take the " \
           "pipeline" in proc.stdout


def test_plan_too_big_for_the_tables_is_named(tmp_path):
    doc = leaf_spine(leaves=44, spines=2, hosts_per_leaf=24, workload=Workload(1, 1, 40), seed=1)
    topology = tmp_path / "big.yaml"
    topology.write_text(yaml.safe_dump(doc))
    proc = _controller(tmp_path, topology, {"L0": {"address": "127.0.0.1:1"}})
    assert proc.returncode == 1
    assert "L0: the plan needs 1056 entries in table ipv4_lpm, which holds 1024" in proc.stdout


def test_programs_a_switch_and_status_shows_it(tmp_path, embedded_switch):
    proc = _controller(tmp_path, EXAMPLES / "aro-fig1.yaml", {"S1": {"address": embedded_switch}},
                       "--scheme", "aro")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["version"] == 1 and state["switches"]["S1"]["programmed"]
    assert state["switches"]["S1"]["problems"] == []
    assert {w["worker"] for w in state["workers"]} == {"W0", "W1", "W2", "W3", "W4"}
    status = subprocess.run([sys.executable, "-m", "controller.cli", "status",
                             str(tmp_path / "state.json")], capture_output=True, text=True,
                            check=False)
    assert status.returncode == 0
    assert "plan v1 (aro)" in status.stdout and "S1" in status.stdout


def test_capacity_edit_in_the_topology_file_triggers_a_replan(tmp_path, embedded_switch):
    topology = tmp_path / "fig1.yaml"
    topology.write_text((EXAMPLES / "aro-fig1.yaml").read_text())
    (tmp_path / "switches.json").write_text(json.dumps({"S1": {"address": embedded_switch}}))
    state = tmp_path / "state.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "controller.cli", "controller", str(topology), "--switches",
         str(tmp_path / "switches.json"), "--state", str(state), "--log-level", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert _wait(lambda: state.exists() and json.loads(state.read_text())["version"] == 1)
        rate = json.loads(state.read_text())["plan"]["tasks"][0]["rate_gbps"]
        assert rate == 0.2  # five flows share the 1 Gbps PS link
        # Every link doubles: the same paths now carry twice the rate.
        topology.write_text(topology.read_text().replace("capacity_gbps: 1}", "capacity_gbps: 2}"))
        assert _wait(lambda: json.loads(state.read_text())["version"] == 2)
        assert json.loads(state.read_text())["plan"]["tasks"][0]["rate_gbps"] == 0.4
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _wait(condition, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return True
        except (OSError, json.JSONDecodeError):
            pass
        time.sleep(0.1)
    return False


def test_a_replan_that_finds_no_plan_keeps_the_current_one_and_says_why(tmp_path):
    """The PS cut off: no scheme can route to it; the daemon must not die (it keeps the
    switches programmed), it keeps plan v1 and publishes the reason."""
    network = load_topology(EXAMPLES / "aro-fig1.yaml")
    targets = {"S1": SwitchTarget("S1", f"127.0.0.1:{free_port()}", 1)}
    session = Session(network, solve(network, "aro"), targets, tmp_path / "state.json")
    asyncio.run(replan(session, {("L0", "PS")}))
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["version"] == 1 and state["replans"] == []
    (failure,) = state["replan_failures"]
    assert failure["dead_links"] == [["L0", "PS"]]
    assert "PS" in failure["error"]
