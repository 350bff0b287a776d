"""The `ina` command line as a user meets it: the no-INA pipe, plan JSON keys, clear errors."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import yaml
from conftest import leaf_spine_doc

from controller.cli import main
from controller.model.plan import PLAN_JSON_SCHEMA, Plan


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
    proc = subprocess.run(
        [sys.executable, "-m", "controller.cli", "solve", str(topo)],
        capture_output=True,
        text=True,
        check=False,
    )
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


# --- bad arguments and state files: exit 2, one paragraph naming the argument ---------------

BAD_ARGUMENTS = {
    # name: (extra arguments of `ina solve`, words of the message)
    "--param without =": (["--param", "foo"], ["--param", "'foo' is not KEY=VALUE"]),
    "--param without key": (["--param", "=1"], ["--param", "no key"]),
    "--param without value": (["--param", "k="], ["--param", "no value"]),
    "--time-limit nan": (["--time-limit", "nan"], ["--time-limit", "finite number above 0"]),
    "--time-limit -1": (["--time-limit", "-1"], ["--time-limit", "finite number above 0"]),
    "--time-limit inf": (["--time-limit", "inf"], ["--time-limit", "finite number above 0"]),
    "--time-limit text": (["--time-limit", "soon"], ["--time-limit", "not a number"]),
    "--seed too large": (["--seed", str(2**40)], ["--seed", "from 0 to"]),
}


@pytest.mark.parametrize("name", sorted(BAD_ARGUMENTS))
def test_bad_arguments_exit_2_naming_them(tmp_path, capsys, name):
    extra, words = BAD_ARGUMENTS[name]
    topo = _write(tmp_path, leaf_spine_doc(2, 1, [0, 1]))
    with pytest.raises(SystemExit) as info:
        main(["solve", topo, *extra])
    assert info.value.code == 2
    err = capsys.readouterr().err
    for word in words:
        assert word in err, err


def test_param_given_twice_or_not_finite(tmp_path, capsys):
    topo = _write(tmp_path, leaf_spine_doc(2, 1, [0, 1]))
    assert main(["solve", topo, "--param", "k=1", "--param", "k=2"]) == 2
    assert "--param k: given twice" in capsys.readouterr().out
    assert main(["solve", topo, "--param", "k=1e999"]) == 2
    assert "--param k=1e999: not a finite number" in capsys.readouterr().out


@pytest.mark.parametrize("where", ["directory", "under a file"])
def test_unwritable_json_fails_before_solving(tmp_path, capsys, monkeypatch, where):
    import controller.solvers

    def no_solve(*args, **kwargs):
        raise AssertionError("solved although the output cannot be written")

    monkeypatch.setattr(controller.solvers, "solve", no_solve)
    topo = _write(tmp_path, leaf_spine_doc(2, 1, [0, 1]))
    (tmp_path / "file").write_text("x")
    out = {"directory": tmp_path, "under a file": tmp_path / "file" / "p.json"}[where]
    assert main(["solve", topo, "--json", str(out)]) == 2
    message = capsys.readouterr().out
    assert f"--json {out}" in message
    assert ("is a directory" if where == "directory" else "cannot write there") in message
    assert main(["evaluate", topo, topo, "--json", str(out)]) == 2
    assert f"--json {out}" in capsys.readouterr().out


def test_malformed_warm_start_is_named(tmp_path, capsys):
    topo = _write(tmp_path, leaf_spine_doc(2, 1, [0, 1]))
    warm = tmp_path / "warm.json"
    warm.write_text('{"scheme": "aro", "tasks": [{"paths": {"W1_0": [["L1"]]}}]}')
    assert main(["solve", topo, "--warm-start", str(warm)]) == 2
    out = capsys.readouterr().out
    assert "--warm-start" in out and "warm.json" in out and "not a plan file" in out


def _state(tmp_path) -> dict:
    topo = _write(tmp_path, leaf_spine_doc(2, 1, [0, 1]))
    main(["solve", topo, "--json", str(tmp_path / "p.json")])
    plan = json.loads((tmp_path / "p.json").read_text())
    return {
        "version": 1,
        "topology": "t",
        "plan": plan,
        "dead_links": [],
        "switches": {
            "L0": {
                "address": "127.0.0.1:1",
                "programmed": True,
                "pushes_seconds": [0.1],
                "counters": {"collisions": [1, 2]},
            }
        },
    }


def test_status_shows_a_state_file(tmp_path, capsys):
    state = tmp_path / "state.json"
    state.write_text(json.dumps(_state(tmp_path)))
    capsys.readouterr()
    assert main(["status", str(state)]) == 0
    out = capsys.readouterr().out
    assert "topology t  plan v1 (shortest)" in out and "L0" in out


BAD_STATES = {
    "empty": (b"", "the state file is empty"),
    "partial": (b'{"version": 1, "topology": "t", "plan": {', "not JSON"),
    "non-UTF-8": ('{"topology": "caf\xe9"}'.encode("latin-1"), "not UTF-8"),
    "missing switches": (None, "switches: not a controller state file"),
    "plan without tasks": ("tasks", "not a plan file"),
}


@pytest.mark.parametrize("name", sorted(BAD_STATES))
def test_status_on_a_bad_state_file_exits_2(tmp_path, capsys, name):
    raw, words = BAD_STATES[name]
    if not isinstance(raw, bytes):
        state = _state(tmp_path)
        if raw is None:
            state.pop("switches")
        else:
            state["plan"].pop(raw)
        raw = json.dumps(state).encode()
    path = tmp_path / "state.json"
    path.write_bytes(raw)
    capsys.readouterr()
    assert main(["status", str(path)]) == 2
    out = capsys.readouterr().out
    assert "state.json" in out and words in out, out


HEURISTIC_BAD_PARAMS = {
    "grid, draws not a number": ("grid", ["draws=abc"], "grid: parameter draws='abc'"),
    "grid, draws zero": ("grid", ["draws=0"], "must be an integer from 1"),
    "grid, a typo": ("grid", ["drawz=3"], "grid: unknown parameter(s) drawz"),
    "grid, candidates": ("grid", ["candidates=some"], "must be one of all, shortest"),
    "atp, levels": ("atp", ["levels=2"], "atp: parameter levels=2"),
    "atp, ps_side": ("atp", ["ps_side=3"], "must be true or false"),
    "marina, rounds": ("marina", ["rounds=-1"], "marina: parameter rounds=-1"),
    "marina, weight": ("marina", ["ina_weight=0"], "must be a number from"),
    "geryon, slack": ("geryon", ["slack=1.5"], "geryon: parameter slack=1.5"),
    "spar, aggregators": ("spar", ["aggregators=x"], "spar: parameter aggregators='x'"),
    "deepsys-soar, k": ("deepsys-soar", ["k=-2"], "deepsys-soar: parameter k=-2"),
}


@pytest.mark.parametrize("case", sorted(HEURISTIC_BAD_PARAMS))
def test_heuristic_scheme_parameters_are_checked(tmp_path, capsys, case):
    scheme, params, words = HEURISTIC_BAD_PARAMS[case]
    topo = _write(tmp_path, leaf_spine_doc(4, 2, [0, 2, 2, 1], ina={"L1", "L2", "S1"}))
    args = ["solve", topo, "--scheme", scheme]
    for param in params:
        args += ["--param", param]
    assert main(args) == 2
    out = capsys.readouterr().out
    assert words in out and "Traceback" not in out, out


def test_heuristic_parameters_from_the_topology_are_checked_too(tmp_path, capsys):
    doc = leaf_spine_doc(4, 2, [0, 2, 2, 1], ina={"L1", "L2", "S1"})
    doc["schemes"] = {"grid": {"links": "no"}}
    assert main(["solve", _write(tmp_path, doc), "--scheme", "grid"]) == 2
    assert "grid: parameter links='no'" in capsys.readouterr().out
    doc["schemes"] = {"grid": {"links": False, "draws": 4}}
    assert main(["solve", _write(tmp_path, doc), "--scheme", "grid"]) == 0


def test_solve_table_shows_a_partial_merge_share_and_model_shares(capsys):
    """paring-fine's header works S's share out by hand: 9/11 of W1's and W2's fragments merge
    at S (0.8182); with two PSs each task carries its share of the model, 11/12 : 2/3 of
    the total rate, i.e. 0.5789 : 0.4211. A whole-flow plan shows neither."""
    assert (
        main(
            [
                "solve",
                "topologies/examples/paring-fine.yaml",
                "--scheme",
                "paring",
                "--param",
                "fine=true",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "S:0×2 0.8182" in out and "model share" not in out
    assert (
        main(
            [
                "solve",
                "topologies/examples/paring-fine-2ps.yaml",
                "--scheme",
                "paring",
                "--param",
                "fine=true",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "model share" in out and "0.5789" in out and "0.4211" in out
    assert main(["solve", "topologies/examples/paring-fine.yaml", "--scheme", "paring"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"S:0×2\s+│", out) and "model share" not in out
