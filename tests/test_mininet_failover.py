"""Controller failover with a job running: ARO Fig. 1 on Mininet, both targets (root).

The runner's controller (election id 10) is primary; a second `ina controller` with election
id 5 stands by on every switch. Mid-transfer the primary is killed (SIGKILL); the switches have
no primary until the backup advertises an election id at least as high as the highest they
have seen, then it reconciles each switch (nothing to write: the same plan is there) and the
iteration finishes exact.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from conftest import EXAMPLES

from controller.emulation.mininet_runner import Emulation
from controller.model.network import load_topology
from controller.solvers import solve
from dataplane.targets import missing

pytestmark = [
    pytest.mark.mininet,
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="Mininet needs root (CI runs as root)"),
]


def _switches(path) -> dict:
    try:
        return json.loads(path.read_text())["switches"]
    except (OSError, ValueError, KeyError):
        return {}


@pytest.mark.parametrize(("target", "gradient_mb"), [("embedded", 1.0), ("bmv2", 0.2)])
def test_the_backup_takes_over_mid_run_and_the_job_completes_exactly(target, gradient_mb):
    if reason := missing(target):
        pytest.skip(reason)
    network = load_topology(EXAMPLES / "aro-fig1.yaml")
    plan = solve(network, "aro")
    takeover: list[float] = []
    with Emulation(network, plan, target=target) as emu:
        backup_state = emu.workdir / "backup.json"
        backup = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "controller.cli",
                "controller",
                network.source,
                "--plan",
                str(emu.workdir / "plan.json"),
                "--switches",
                str(emu.workdir / "switches.json"),
                "--state",
                str(backup_state),
                "--election-id",
                "5",
                "--log-level",
                "warning",
                *emu.program_args,
            ],
            stdout=emu._log("backup.log"),
            stderr=subprocess.STDOUT,
        )
        emu.procs["backup"] = backup
        deadline = time.monotonic() + 60
        while not (
            len(roles := {s["role"] for s in _switches(backup_state).values()}) == 1
            and roles == {"backup"}
        ):
            assert time.monotonic() < deadline, f"backup never stood by: {roles}"
            time.sleep(0.1)

        def kill_primary() -> None:
            emu.wait_for_traffic()
            killed = time.monotonic()
            emu.procs["controller"].kill()
            while not all(s["programmed"] for s in _switches(backup_state).values()):
                assert time.monotonic() - killed < 30, "the backup did not take over"
                time.sleep(0.01)
            takeover.append(time.monotonic() - killed)

        (it,) = emu.iterate(gradient_mb, 1, timeout=120, during=kill_primary)
        switches = _switches(backup_state)
    assert it.exact
    assert {s["role"] for s in switches.values()} == {"primary"}
    assert all(s["writes"] == [0] for s in switches.values()), {
        n: s["writes"] for n, s in switches.items()
    }
    print(
        f"{target}: takeover of {len(switches)} switches in {takeover[0]:.3f} s after "
        f"SIGKILL; iteration {it.seconds:.2f} s, exact"
    )
