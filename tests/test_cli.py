"""The `ina` command line as a user meets it: the no-INA pipe, plan JSON keys, clear errors."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml
from conftest import leaf_spine_doc

from controller.cli import main
from controller.plan import PLAN_JSON_SCHEMA, Plan


def _write(tmp_path, doc) -> str:
    path = tmp_path / "topo.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_shortest_then_evaluate_gives_one_fifth(tmp_path, capsys):
    topo = _write(tmp_path, leaf_spine_doc(4, 2, [0, 2, 2, 1], ina={"L1", "L2", "S1"}))
    plan_file = tmp_path / "p.json"
    assert main(["solve", topo, "--scheme", "shortest", "--json", str(plan_file)]) == 0
    out_json = tmp_path / "e.json"
    assert main(["evaluate", topo, str(plan_file), "--json", str(out_json)]) == 0
    assert "0.2" in capsys.readouterr().out
    evaluation = json.loads(out_json.read_text())
    assert [t["rate_gbps"] for t in evaluation["tasks"]] == [0.2]


def test_plan_json_has_the_stable_keys(tmp_path):
    topo = _write(tmp_path, leaf_spine_doc(3, 2, [1, 1, 1]))
    plan_file = tmp_path / "p.json"
    main(["solve", topo, "--json", str(plan_file), "--seed", "3"])
    data = json.loads(plan_file.read_text())
    assert set(PLAN_JSON_SCHEMA["required"]) <= set(data)
    task = data["tasks"][0]
    assert {"job", "task", "ps", "rate_gbps", "paths", "aggregation"} <= set(task)
    assert data["seed"] == 3
    assert Plan.from_dict(data).to_dict()["tasks"] == data["tasks"]


def test_same_seed_same_plan(tmp_path):
    topo = _write(tmp_path, leaf_spine_doc(4, 4, [2, 3, 3, 3]))
    outs = []
    for name in ("a", "b"):
        main(["solve", topo, "--seed", "7", "--json", str(tmp_path / f"{name}.json")])
        outs.append(json.loads((tmp_path / f"{name}.json").read_text())["tasks"])
    assert outs[0] == outs[1]


def test_bad_topology_exits_2_naming_file_and_field(tmp_path, capsys):
    doc = leaf_spine_doc(2, 1, [0, 1])
    del doc["links"][0]["capacity_gbps"]
    topo = _write(tmp_path, doc)
    assert main(["solve", topo]) == 2
    out = capsys.readouterr().out
    assert "topo.yaml" in out and "links[0].capacity_gbps" in out and "missing" in out


def test_error_prints_no_traceback_in_a_real_process(tmp_path):
    topo = tmp_path / "broken.yaml"
    topo.write_text("hosts: [\n  {name: a\n")
    proc = subprocess.run([sys.executable, "-m", "controller.cli", "solve", str(topo)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "broken.yaml" in proc.stdout and "YAML syntax error" in proc.stdout


def test_unknown_scheme_and_bad_plan_file_are_user_errors(tmp_path, capsys):
    topo = _write(tmp_path, leaf_spine_doc(2, 1, [0, 1]))
    assert main(["solve", topo, "--scheme", "nope"]) == 2
    assert "unknown scheme 'nope'" in capsys.readouterr().out
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["evaluate", topo, str(bad)]) == 2
    assert "not a plan file" in capsys.readouterr().out


def test_show_writes_a_png(tmp_path):
    topo = _write(tmp_path, leaf_spine_doc(4, 2, [0, 2, 2, 1], ina={"L1", "S1"}))
    main(["solve", topo, "--json", str(tmp_path / "p.json")])
    png = tmp_path / "out.png"
    assert main(["show", topo, "--plan", str(tmp_path / "p.json"), "--png", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 10_000
