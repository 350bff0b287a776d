"""`ina` installed without Mininet: every command that needs no Mininet works, and those that
need it say in one line how to get it (exit 2), never a ModuleNotFoundError traceback.

Each run is a real process in which `import mininet` fails as it does in a venv without
Debian's Mininet linked in (a meta-path finder refuses the package)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIG1 = str(ROOT / "topologies/examples/aro-fig1.yaml")

# Runs `ina ARGS...` with the `mininet` package unimportable.
WITHOUT_MININET = """
import importlib.abc, runpy, sys

class NoMininet(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "mininet" or name.startswith("mininet."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoMininet())
for name in [m for m in sys.modules if m == "mininet" or m.startswith("mininet.")]:
    del sys.modules[name]
sys.argv = ["ina", *sys.argv[1:]]
runpy.run_module("controller.cli", run_name="__main__", alter_sys=True)
"""


def ina(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_MININET, *args],
        cwd=cwd,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_blocker_blocks():
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            WITHOUT_MININET.replace(
                'runpy.run_module("controller.cli", run_name="__main__", alter_sys=True)',
                "import mininet.net",
            ),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "No module named 'mininet" in out.stderr


def test_solve_evaluate_schemes_show_work_without_mininet(tmp_path):
    plan = tmp_path / "p.json"
    solved = ina("solve", FIG1, "--scheme", "shortest", "--json", str(plan))
    assert solved.returncode == 0, solved.stderr
    assert "Traceback" not in solved.stderr
    evaluated = ina("evaluate", FIG1, str(plan))
    assert evaluated.returncode == 0, evaluated.stderr
    listed = ina("schemes")
    assert listed.returncode == 0, listed.stderr
    assert "aro" in listed.stdout
    shown = ina("show", FIG1, "--plan", str(plan), "--png", str(tmp_path / "x.png"))
    assert shown.returncode == 0, shown.stderr
    topo = ina(
        "topo",
        "gen",
        "leaf-spine",
        "--leaves",
        "2",
        "--spines",
        "1",
        "--hosts-per-leaf",
        "2",
        "--workers",
        "3",
        "-o",
        str(tmp_path / "t.yaml"),
    )
    assert topo.returncode == 0, topo.stderr


def test_help_of_every_command_works_without_mininet():
    out = ina("--help")
    assert out.returncode == 0, out.stderr
    for command in ("mininet", "bench"):
        assert command in out.stdout
    for args in (
        ["bench", "e2e", "--help"],
        ["bench", "reliability", "--help"],
        ["mininet", "--help"],
    ):
        out = ina(*args)
        assert out.returncode == 0, out.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["mininet", FIG1, "--scheme", "shortest"],
        ["bench", "e2e", "--topology", FIG1],
        ["bench", "reliability", "--item", "loss"],
    ],
    ids=["mininet", "bench e2e", "bench reliability"],
)
def test_mininet_commands_say_how_to_get_mininet(args, tmp_path):
    out = ina(
        *args,
        "--out" if args[0] == "bench" else "--json",
        str(tmp_path / ("o" if args[0] == "bench" else "o.json")),
    )
    assert out.returncode == 2, out.stdout + out.stderr
    text = out.stdout + out.stderr
    assert "Traceback" not in text
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    assert "Mininet" in text and "make mininet-link" in text


def test_a_solver_benchmark_runs_without_mininet(tmp_path):
    out = ina(
        "bench",
        "aro",
        "--seeds",
        "1",
        "--variants",
        "aro",
        "--time-limit",
        "5",
        "--out",
        str(tmp_path / "aro"),
    )
    assert out.returncode == 0, out.stdout + out.stderr
