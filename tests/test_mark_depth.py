"""The controller's congestion-mark threshold (`ina controller --mark-depth`, p4src/README.md
"Congestion mark"): what it accepts and that every program it compiles, re-plans included,
carries it on every port; without it every port marks from half of its own queue."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from conftest import EXAMPLES, ROOT, free_port

from controller.compiler.program import CompileError, compile_plan
from controller.model.network import load_topology
from controller.service.daemon import Session, replan
from controller.solvers import solve
from controller.southbound.p4runtime import SwitchTarget


def _depths(program) -> set[int | str]:
    """The depths of `program`'s `mark_threshold` entries ("own queue": `mark_from_queue`)."""
    return {
        e.action.args.get("depth", "own queue")
        for e in program.table_entries
        if e.table_id == "mark_threshold"
    }


def test_the_session_compiles_its_depth_into_every_program_and_every_replan(tmp_path):
    network = load_topology(EXAMPLES / "aro-fig1.yaml")
    targets = {s: SwitchTarget(s, f"127.0.0.1:{free_port()}", 1) for s in ("L0", "S1")}
    session = Session(network, solve(network, "aro"), targets, tmp_path / "s.json", mark_depth=1)
    assert {s: _depths(d.program) for s, d in session.drivers.items()} == {"L0": {1}, "S1": {1}}
    asyncio.run(replan(session, {("L1", "S1")}))
    assert session.version == 2
    assert {s: _depths(d.program) for s, d in session.drivers.items()} == {"L0": {1}, "S1": {1}}
    default = Session(network, solve(network, "aro"), targets, tmp_path / "d.json")
    assert _depths(default.drivers["L0"].program) == {"own queue"}


def test_a_depth_beyond_bmv2s_queue_depth_field_is_refused():
    network = load_topology(EXAMPLES / "aro-fig1.yaml")
    with pytest.raises(CompileError, match="mark depth"):
        compile_plan(network, solve(network, "aro"), mark_depth=1 << 19)


@pytest.mark.parametrize(
    ("value", "says"),
    [("-1", "from 0 to 524287"), ("524288", "from 0 to 524287"), ("two", "not an integer")],
)
def test_the_controller_refuses_a_bad_mark_depth_in_one_line(value, says):
    topology = str(EXAMPLES / "aro-fig1.yaml")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "controller.cli",
            "controller",
            topology,
            "--switches",
            "none.json",
            "--mark-depth",
            value,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "--mark-depth" in done.stderr and says in done.stderr
    assert "Traceback" not in done.stderr
