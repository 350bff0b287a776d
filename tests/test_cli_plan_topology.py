"""A plan records the topology it was made for (`topology`, the topology's `name`): every
command that takes a plan refuses one made for another topology in one line naming both
(exit 2), instead of a KeyError traceback or a table of nonsense."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from controller.cli import main

ROOT = Path(__file__).resolve().parents[1]
FIG1 = str(ROOT / "topologies/examples/aro-fig1.yaml")
OTHER = str(ROOT / "topologies/examples/eina-fig1.yaml")


@pytest.fixture(scope="module")
def fig1_plan(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("plan") / "aro.json"
    assert main(["solve", FIG1, "--scheme", "aro", "--json", str(path)]) == 0
    return str(path)


def _ina(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "controller.cli", *args],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _one_line_naming_both(out: subprocess.CompletedProcess) -> None:
    text = out.stdout + out.stderr
    assert out.returncode == 2, text
    assert "Traceback" not in text
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    assert "aro-fig1" in lines[0] and "eina-fig1" in lines[0], text


def test_the_plan_is_fine_on_its_own_topology(fig1_plan, tmp_path):
    assert _ina("evaluate", FIG1, fig1_plan).returncode == 0
    assert _ina("show", FIG1, "--plan", fig1_plan, "--png", str(tmp_path / "x.png")).returncode == 0


def test_evaluate_refuses_a_plan_for_another_topology(fig1_plan):
    _one_line_naming_both(_ina("evaluate", OTHER, fig1_plan))


def test_show_refuses_a_plan_for_another_topology(fig1_plan, tmp_path):
    png = tmp_path / "x.png"
    _one_line_naming_both(_ina("show", OTHER, "--plan", fig1_plan, "--png", str(png)))
    assert not png.exists()


def test_solve_refuses_a_warm_start_for_another_topology(fig1_plan):
    _one_line_naming_both(_ina("solve", OTHER, "--scheme", "eina", "--warm-start", fig1_plan))


def test_controller_refuses_a_plan_for_another_topology(fig1_plan, tmp_path):
    switches = tmp_path / "switches.json"
    switches.write_text(json.dumps({"S1": {"address": "127.0.0.1:1", "device_id": 1}}))
    _one_line_naming_both(
        _ina(
            "controller",
            OTHER,
            "--plan",
            fig1_plan,
            "--switches",
            str(switches),
            "--once",
            "--connect-timeout",
            "1",
            "--state",
            str(tmp_path / "state.json"),
        )
    )


def test_show_names_the_nodes_a_same_named_topology_lacks(fig1_plan, tmp_path, capsys):
    """Same name, other nodes (an edited file): the drawing cannot place the plan's nodes."""
    doc = yaml.safe_load(Path(OTHER).read_text())
    doc["name"] = "aro-fig1"
    topo = tmp_path / "edited.yaml"
    topo.write_text(yaml.safe_dump(doc))
    assert main(["show", str(topo), "--plan", fig1_plan, "--png", str(tmp_path / "x.png")]) == 2
    out = capsys.readouterr().out
    assert "S1" in out and "not in" in out
