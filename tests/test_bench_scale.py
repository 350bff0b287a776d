"""`ina bench scale --add`: runs measured in several sessions land in one scale.json, a run
measured again replaces the old one, and a file measured with other settings is refused."""

from __future__ import annotations

import json

import pytest

from controller.tools.bench.scale import earlier, replaced

SETTINGS = {
    "gradient_mb": 0.01,
    "wire_mbps": None,
    "emulate_switches": "plan",
    "agent_processes": 16,
}


def run(target: str, workers: int, scheme: str, seconds: float) -> dict:
    return {"target": target, "workers": workers, "scheme": scheme, "iteration_seconds": seconds}


def test_a_run_measured_again_replaces_the_old_one_and_the_others_stay_in_order():
    runs = [run("embedded", 16, "shortest", 1.0), run("embedded", 16, "aro", 2.0)]
    runs = replaced(runs, run("bmv2", 100, "aro", 9.0))
    runs = replaced(runs, run("bmv2", 50, "aro", 5.0))
    runs = replaced(runs, run("bmv2", 50, "shortest", 4.0))
    runs = replaced(runs, run("embedded", 16, "aro", 3.0))
    assert [(r["target"], r["workers"], r["scheme"], r["iteration_seconds"]) for r in runs] == [
        ("embedded", 16, "shortest", 1.0),
        ("embedded", 16, "aro", 3.0),
        ("bmv2", 50, "shortest", 4.0),
        ("bmv2", 50, "aro", 5.0),
        ("bmv2", 100, "aro", 9.0),
    ]


def test_earlier_runs_are_kept_when_the_settings_match(tmp_path):
    path = tmp_path / "scale.json"
    fresh = {**SETTINGS, "cpus": 2, "runs": []}
    assert earlier(path, fresh) == fresh  # nothing there yet
    path.write_text(json.dumps({**SETTINGS, "runs": [run("embedded", 16, "aro", 2.0)]}))
    assert earlier(path, fresh)["runs"] == [run("embedded", 16, "aro", 2.0)]


def test_a_file_with_other_settings_is_refused_in_one_line(tmp_path, capsys):
    (tmp_path / "scale.json").write_text(
        json.dumps({**SETTINGS, "gradient_mb": 0.1, "runs": [run("embedded", 16, "aro", 2.0)]})
    )
    with pytest.raises(ValueError, match=r"gradient_mb 0\.1 there, 0\.01 here"):
        earlier(tmp_path / "scale.json", {**SETTINGS, "runs": []})
    (tmp_path / "scale.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"not a scale\.json"):
        earlier(tmp_path / "scale.json", {**SETTINGS, "runs": []})
