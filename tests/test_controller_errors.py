"""Bad input to the controller daemon: each a clear message naming the component, exit 1,
nothing left running."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest
import yaml
from conftest import EXAMPLES

from controller.topogen import Workload, leaf_spine


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _controller(tmp_path, topology, switches, *extra, timeout=60):
    path = tmp_path / "switches.json"
    path.write_text(json.dumps(switches))
    return subprocess.run(
        [sys.executable, "-m", "controller.cli", "controller", str(topology), "--switches",
         str(path), "--state", str(tmp_path / "state.json"), "--once", "--connect-timeout", "3",
         "--log-level", "warning", *extra],
        capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture
def embedded_switch():
    address = f"127.0.0.1:{_free_port()}"
    proc = subprocess.Popen([sys.executable, "-m", "controller.cli", "switch", "--grpc-addr",
                             address, "--log-level", "warning"])
    host, port = address.split(":")
    for _ in range(200):
        try:
            socket.create_connection((host, int(port)), timeout=0.1).close()
            break
        except OSError:
            subprocess.run(["sleep", "0.1"], check=False)
    yield address
    proc.terminate()
    proc.wait(timeout=10)


def test_unreachable_switch_is_named(tmp_path):
    address = f"127.0.0.1:{_free_port()}"  # nothing listens there
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
