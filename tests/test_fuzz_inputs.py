"""Hostile and careless inputs, mutated by hypothesis: every document is either accepted and
usable, or rejected with the project's input error (`InputError`): never another exception.

* Topologies: a small valid document, mutated 1-3 times (values swapped for hostile ones,
  fields deleted or added, list items repeated or dropped), or its YAML text with bytes flipped.
  Accepted ones must be solvable by `shortest` with a plan the independent evaluator confirms.
* Plans: a consistent multi-hop aggregation plan, mutated the same way, or its JSON text with
  bytes flipped. Accepted ones are evaluated, and a plan the evaluator calls consistent and
  within the data plane's limits must compile (the compiler is the second, independent judge).
* Two real `ina` processes: exit code 2, one paragraph, no traceback.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest
import yaml
from conftest import leaf_spine_doc
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from controller.compiler.program import CompileError, compile_plan
from controller.evaluator.evaluate import evaluate
from controller.model.inputs import InputError, decode, parse_json, parse_yaml
from controller.model.network import build_network
from controller.model.plan import parse_plan
from controller.solvers import SolveOptions, solve

EXAMPLES = 1000
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

TOPOLOGY = leaf_spine_doc(3, 2, [0, 2, 1], ina={"L1", "S1"})
NETWORK = build_network(TOPOLOGY)
PATHS = {
    "W1_0": ["W1_0", "L1", "S1", "L0", "PS"],
    "W1_1": ["W1_1", "L1", "S1", "L0", "PS"],
    "W2_0": ["W2_0", "L2", "S1", "L0", "PS"],
}
PLAN = {
    "scheme": "hand",
    "status": "feasible",
    "objective": 1.0,
    "bound": None,
    "solve_seconds": 0.0,
    "seed": 0,
    "tasks": [
        {
            "job": "job0",
            "task": "t0",
            "ps": "PS",
            "rate_gbps": 1.0,
            "paths": PATHS,
            "aggregation": [
                {"switch": "L1", "pipeline": 0, "fan_in": 2, "next_hop": "S1"},
                {"switch": "S1", "pipeline": 0, "fan_in": 2, "next_hop": "L0", "workers": None},
            ],
        }
    ],
}

HOSTILE = st.one_of(
    st.sampled_from(
        [
            float("inf"),
            float("-inf"),
            float("nan"),
            5e-324,
            1e-9,
            -1,
            0,
            1,
            2.5,
            10**8,
            10**12,
            2**64,
            True,
            False,
            None,
            "1e3",
            "",
            "PS",
            "W1_0",
            "L1",
            "S1",
            "nope",
            [],
            {},
            [1],
            ["PS"],
            {"a": 1},
            [[1]],
            {"name": "x"},
        ]
    ),
    st.integers(-5, 40),
    st.floats(),
    st.text(max_size=4),
    # and plausible values, so that a fair share of documents stays valid
    st.floats(0.001, 1000),
    st.integers(1, 8),
    st.sampled_from(["worker", "ps", "idle", "leaf", "spine", "W2_0", "L2", "S0"]),
)


def _rejected(exc: InputError, source: str) -> None:
    """A rejection is one paragraph that names the file."""
    message = str(exc)
    assert message.startswith(source) and "\n" not in message, message


def _locations(doc) -> list[tuple[object, object]]:
    """Every (container, key) in the document, containers first."""
    out, stack = [], [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            items = list(node.items())
        elif isinstance(node, list):
            items = list(enumerate(node))
        else:
            continue
        for key, value in items:
            out.append((node, key))
            stack.append(value)
    return out


@st.composite
def mutated(draw, base: dict) -> dict:
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        places = _locations(doc)
        container, key = places[draw(st.integers(0, len(places) - 1))]
        op = draw(st.sampled_from(["replace", "replace", "delete", "add", "repeat"]))
        # a copy: HOSTILE's lists and dicts are shared by every example, and a later "repeat"
        # would grow them (hypothesis then sees its strategy change between examples)
        if op == "replace":
            container[key] = copy.deepcopy(draw(HOSTILE))
        elif op == "delete":
            del container[key]
        elif op == "add" and isinstance(container, dict):
            container[draw(st.sampled_from(["extra", "name", "ports", "workers", "x"]))] = (
                copy.deepcopy(draw(HOSTILE))
            )
        elif op == "repeat" and isinstance(container, list):
            container.insert(draw(st.integers(0, len(container))), copy.deepcopy(container[key]))
    return doc


@st.composite
def flipped(draw, text: str) -> bytes:
    raw = bytearray(text.encode())
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(raw) - 1))
        op = draw(st.sampled_from(["set", "insert", "delete"]))
        if op == "delete":
            del raw[at]
        else:
            byte = draw(
                st.sampled_from(
                    [
                        b"\x00",
                        b"\xff",
                        b"\xe9",
                        b"[",
                        b"{",
                        b"]",
                        b":",
                        b"-",
                        b" ",
                        b"\n",
                        b"\t",
                        b"&",
                        b"*",
                        b"!",
                        b"1",
                        b".",
                    ]
                )
            )
            raw[at : at + (op == "set")] = byte
    return bytes(raw)


def _topology_is_usable_or_rejected(doc) -> None:
    try:
        network = build_network(doc, "fuzz.yaml")
    except InputError as exc:
        _rejected(exc, "fuzz.yaml")
        event("topology rejected")
        return
    event("topology accepted")
    if not network.tasks:
        return
    plan = solve(network, "shortest", SolveOptions(seed=0))
    result = evaluate(network, plan)
    assert result.consistent, result.problems
    assert parse_plan(json.loads(plan.to_json())).to_dict()["tasks"] == plan.to_dict()["tasks"]


@FUZZ
@given(mutated(TOPOLOGY))
def test_mutated_topologies_are_usable_or_rejected(doc):
    _topology_is_usable_or_rejected(doc)


def test_a_node_name_with_a_line_break_is_rejected_in_one_line():
    """A case the fuzzing found: the location names the link by its nodes' names."""
    doc = copy.deepcopy(TOPOLOGY)
    doc["links"][0]["a"] = "\n"
    with pytest.raises(InputError) as exc:
        build_network(doc, "fuzz.yaml")
    _rejected(exc.value, "fuzz.yaml")


@settings(FUZZ, max_examples=EXAMPLES // 4)
@given(flipped(yaml.safe_dump(TOPOLOGY)))
def test_garbled_topology_text_is_usable_or_rejected(raw):
    try:
        doc = parse_yaml(decode(raw, "fuzz.yaml"), "fuzz.yaml")
    except InputError as exc:
        _rejected(exc, "fuzz.yaml")
        return
    _topology_is_usable_or_rejected(doc)


def _plan_is_judged_or_rejected(doc) -> None:
    try:
        plan = parse_plan(doc, "fuzz.json")
    except InputError as exc:
        _rejected(exc, "fuzz.json")
        event("plan rejected")
        return
    result = evaluate(NETWORK, plan, gradient_mb=1.0)
    event(f"plan {'consistent' if result.consistent else 'inconsistent'}")
    if result.consistent and not result.beyond_data_plane:
        try:
            compile_plan(NETWORK, plan)
        except CompileError as exc:
            raise AssertionError(
                f"deployable per the evaluator, refused by the compiler: {exc}"
            ) from exc


def test_the_unmutated_plan_is_consistent():
    assert evaluate(NETWORK, parse_plan(PLAN)).consistent


@FUZZ
@given(mutated(PLAN))
def test_mutated_plans_are_judged_or_rejected(doc):
    _plan_is_judged_or_rejected(doc)


@settings(FUZZ, max_examples=EXAMPLES // 4)
@given(flipped(json.dumps(PLAN)))
def test_garbled_plan_text_is_judged_or_rejected(raw):
    try:
        doc = parse_json(decode(raw, "fuzz.json"), "fuzz.json")
    except InputError as exc:
        _rejected(exc, "fuzz.json")
        return
    _plan_is_judged_or_rejected(doc)


def _ina(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "controller.cli", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_real_processes_exit_2_with_one_paragraph(tmp_path):
    topo = tmp_path / "deep.yaml"
    topo.write_text("hosts: " + "[" * 200_000 + "]" * 200_000 + "\n")
    proc = _ina("solve", str(topo))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "Traceback" not in out and "deep.yaml" in out and "nested more than" in out
    plan = tmp_path / "plan.json"
    plan.write_bytes('{"scheme": "caf\xe9"}'.encode("latin-1"))
    good = tmp_path / "topo.yaml"
    good.write_text(yaml.safe_dump(TOPOLOGY))
    proc = _ina("evaluate", str(good), str(plan))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "Traceback" not in out and "not UTF-8" in out and len(out.strip().splitlines()) <= 3
