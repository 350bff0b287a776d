"""The host agents' modules, one job each: a reader finds the worker, the parameter server,
loss recovery, the fragment arithmetic and the command line by file name, and the PS stands
without the worker's machinery."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from dataplane.__main__ import main

DATAPLANE = Path(__file__).resolve().parents[2] / "dataplane"

HOME = {
    "worker": ["Worker", "WorkerStats", "run_shards", "dispatch", "PACING_BURST"],
    "ps": ["ParameterServer"],
    "recovery": ["InFlight", "CUT_FLOOR", "PEER_WAIT_CAP", "TLP_FLOOR", "CONTROL_RESEND_GAP"],
    "rto": ["RtoEstimator", "BACKOFF_CEILING"],
    "gradients": [
        "fragments",
        "frag_id",
        "split_frag_id",
        "EPOCH_SHIFT",
        "FIXED_POINT_SCALE",
        "synthetic_gradient",
        "to_fixed_point",
        "shard_ranges",
        "segment_rows",
    ],
    "state": ["PlanWatcher", "job_shares", "rows_shares"],
    "plan_api": ["ApiWatcher", "job_rows", "wait_for_job"],
    "agents": ["register", "cmd_worker", "cmd_ps"],
    "frame": ["Task", "BROADCAST"],
    "ports": ["ina_frames"],
}


def _defines(module: str) -> set[str]:
    """Names `dataplane/<module>.py` defines at its top level (not those it imports)."""
    names: set[str] = set()
    for node in ast.parse((DATAPLANE / f"{module}.py").read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def _imports(module: str) -> set[str]:
    tree = ast.parse((DATAPLANE / f"{module}.py").read_text())
    return {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names} | {
        n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
    }


@pytest.mark.parametrize("module", sorted(HOME))
def test_each_piece_lives_in_the_module_named_for_its_job(module):
    assert set(HOME[module]) <= _defines(module)


def test_no_piece_is_defined_twice():
    seen: dict[str, str] = {}
    for module in HOME:
        for name in _defines(module) & {n for names in HOME.values() for n in names}:
            assert seen.setdefault(name, module) == module, name


def test_the_parameter_server_needs_nothing_of_the_worker():
    """The PS answers what arrives: no window, timer or loss recovery of its own."""
    assert not _imports("ps") & {
        "dataplane.worker",
        "dataplane.recovery",
        "dataplane.rto",
        "dataplane.agents",
    }
    assert not _imports("gradients") & {"socket", "dataplane.ports", "dataplane.worker"}


def test_the_agents_reach_the_controller_over_http_only():
    """dataplane/ runs on hosts without the controller's code: no module imports it."""
    for path in DATAPLANE.glob("*.py"):
        assert not {m for m in _imports(path.stem) if m.split(".")[0] == "controller"}, path


@pytest.mark.parametrize("command", ["worker", "ps"])
def test_the_agents_command_lines_are_registered(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0
    assert "--iface" in capsys.readouterr().out
