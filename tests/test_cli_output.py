"""What `ina` prints: plain ASCII where the output cannot take more, JSON to stdout with
`--json -`, no silent `mkdir -p` for an output file, `status --json`, readable numbers."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.cli import _fmt, main
from controller.model.plan import Plan

ROOT = Path(__file__).resolve().parents[1]
FIG1 = str(ROOT / "topologies/examples/aro-fig1.yaml")


def _ina(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "controller.cli", *args],
        cwd=ROOT,
        check=False,
        capture_output=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def fig1_plan(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("plan") / "aro.json"
    assert main(["solve", FIG1, "--scheme", "aro", "--json", str(path)]) == 0
    return str(path)


ASCII_ONLY = {
    "PYTHONIOENCODING=ascii": {"PYTHONIOENCODING": "ascii"},
    "LC_ALL=C": {"LC_ALL": "C", "LANG": "C"},
    "LC_ALL=C without UTF-8 mode": {
        "LC_ALL": "C",
        "LANG": "C",
        "PYTHONUTF8": "0",
        "PYTHONCOERCECLOCALE": "0",
    },
}


@pytest.mark.parametrize("env", sorted(ASCII_ONLY))
def test_an_ascii_terminal_gets_ascii_not_a_crash(env, fig1_plan):
    solved = _ina("solve", FIG1, "--scheme", "aro", env=ASCII_ONLY[env])
    assert solved.returncode == 0, solved.stderr.decode(errors="replace")
    text = solved.stdout.decode("ascii")  # raises on any byte beyond ASCII
    assert "L1:0x2" in text  # the pipeline x fan-in sign spelled in ASCII
    for args in (["evaluate", FIG1, fig1_plan], ["schemes"], ["bench", "aro", "--help"]):
        out = _ina(*args, env=ASCII_ONLY[env])
        assert out.returncode == 0, (args, out.stderr.decode(errors="replace"))
        out.stdout.decode("ascii")
        out.stderr.decode("ascii")


def test_json_dash_writes_the_plan_to_stdout_and_the_table_elsewhere(fig1_plan):
    out = _ina("solve", FIG1, "--scheme", "aro", "--json", "-")
    assert out.returncode == 0, out.stderr
    plan = Plan.from_dict(json.loads(out.stdout))
    assert plan.topology == "aro-fig1" and plan.objective == pytest.approx(1.0)
    assert b"status optimal" in out.stderr
    assert not (ROOT / "-").exists()


def test_json_dash_writes_the_evaluation_to_stdout(fig1_plan):
    out = _ina("evaluate", FIG1, fig1_plan, "--json", "-")
    assert out.returncode == 0, out.stderr
    evaluation = json.loads(out.stdout)
    assert [t["rate_gbps"] for t in evaluation["tasks"]] == [pytest.approx(1.0)]
    assert not (ROOT / "-").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["solve", FIG1, "--json"],
        ["evaluate", FIG1, "PLAN", "--json"],
        ["solve", FIG1, "--scheme", "atro", "--topology-out"],
        ["show", FIG1, "--png"],
        ["status", "STATE", "--json"],
        ["bench", "target", "--fragments", "1", "--json"],
    ],
    ids=[
        "solve --json",
        "evaluate --json",
        "solve --topology-out",
        "show --png",
        "status --json",
        "bench target --json",
    ],
)
def test_an_output_in_a_missing_directory_is_an_error(args, tmp_path, fig1_plan, capsys):
    missing = tmp_path / "no" / "such"
    state = _state(tmp_path, fig1_plan)
    named = {"PLAN": fig1_plan, "STATE": str(state)}
    capsys.readouterr()
    code = main([*[named.get(a, a) for a in args], str(missing / "out.x")])
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert code == 2, text
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1 and str(missing) in lines[0] and "does not exist" in lines[0], text
    assert not (tmp_path / "no").exists()


def _state(tmp_path, plan: str) -> Path:
    state = {
        "version": 3,
        "topology": "aro-fig1",
        "plan": json.loads(Path(plan).read_text()),
        "dead_links": [["L1", "S1"]],
        "written_by": "a newer daemon",
        "switches": {
            "S1": {
                "address": "127.0.0.1:1",
                "programmed": True,
                "pushes_seconds": [0.12],
                "counters": {"collisions": [1, 2]},
            }
        },
    }
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    return path


def test_status_json_prints_the_state_as_json(tmp_path, fig1_plan):
    path = _state(tmp_path, fig1_plan)
    out = _ina("status", str(path), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == json.loads(path.read_text())
    written = tmp_path / "copy.json"
    assert _ina("status", str(path), "--json", str(written)).returncode == 0
    assert json.loads(written.read_text()) == json.loads(path.read_text())


def test_status_json_of_a_bad_state_file_is_still_an_error(tmp_path):
    path = tmp_path / "state.json"
    path.write_text('{"version": 1}')
    out = _ina("status", str(path), "--json")
    assert out.returncode == 2 and out.stdout == b""  # stdout is for the JSON alone
    assert out.stderr.decode().startswith("error:")


def test_large_volumes_are_printed_without_an_exponent(fig1_plan):
    out = _ina("evaluate", FIG1, fig1_plan, "--gradient-mb", "209715.2")
    text = out.stdout.decode()
    assert out.returncode == 0, text
    assert not re.search(r"\de\+", text) and "2097152" in text, text


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=1e-3, max_value=1e12))
def test_a_printed_number_is_short_plain_and_within_half_a_permille(value):
    for shown in (_fmt(value), _fmt(-value)):
        assert "e" not in shown and len(shown) <= 14, shown
        assert abs(abs(float(shown)) - value) <= 5e-4 * value, (value, shown)
