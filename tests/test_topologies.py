"""The papers' example files and the validation of hand-written topology files.

The examples are checked twice: their shape matches what each paper says (node and worker
counts, capacities, INA sets), and the independent evaluator reproduces the rates the papers
state for the routes they describe, which is what our reconstruction of each figure rests on.
"""

from __future__ import annotations

import copy
import tracemalloc
from pathlib import Path

import pytest
import yaml
from conftest import EXAMPLES

from controller.evaluator.evaluate import evaluate
from controller.model import inputs
from controller.model.inputs import MAX_EXPANDED_NODES, InputError, _loader, parse_yaml
from controller.model.network import Network, TopologyError, build_network, load_topology
from controller.model.plan import Plan

EXPECTED = {
    # file: (hosts, switches, workers, INA switches)
    "aro-fig1": (6, 6, 5, {"L1", "L2", "S1"}),
    "aro-fig3": (6, 6, 5, {"L0", "L1", "L2", "L3"}),
    "grid-fig1": (9, 3, 8, {"S1", "S2", "S3"}),
    "eina-fig1": (6, 5, 5, {"A0", "A1", "A2", "A3"}),
    "eina-2ps": (6, 4, 4, {"A0", "A1", "A2"}),  # two tasks, one per PS (model sharding)
    "paring-fig1": (
        16,
        20,
        7,
        {"E01", "A00", "E11", "A10", "E20", "E21", "A20", "A21", "E30", "A30", "C0", "C1"},
    ),
    "paring-2ps": (
        16,
        20,
        7,
        {"E01", "A00", "E11", "A10", "E20", "E21", "A20", "A21", "E30", "A30", "C0", "C1"},
    ),  # Fig. 1's network, two PSs
    "paring-fine": (4, 1, 3, {"S"}),  # PARING's fine mode (not a figure)
    "paring-fine-2ps": (5, 1, 3, {"S"}),  # the same with two PSs
}


def _example(name: str) -> Network:
    return load_topology(EXAMPLES / f"{name}.yaml")


def test_every_example_file_is_listed():
    assert {p.stem for p in EXAMPLES.glob("*.yaml")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_loads_with_the_papers_counts(name):
    hosts, switches, workers, ina = EXPECTED[name]
    net = _example(name)
    assert (len(net.hosts), len(net.switches)) == (hosts, switches)
    assert {len(t.workers) for t in net.tasks} == {workers}
    assert {net.role(t.ps) for t in net.tasks} == {"ps"}
    assert {s for s in net.switches if net.is_ina(s)} == ina


def test_aro_examples_share_the_network_and_differ_in_ina_only():
    fig1, fig3 = _example("aro-fig1"), _example("aro-fig3")
    assert set(fig1.graph.edges) == set(fig3.graph.edges)
    assert {fig1.capacity(u, v) for u, v in fig1.graph.edges} == {1}
    placement = {w: next(iter(fig1.graph.successors(w))) for w in fig1.tasks[0].workers}
    assert placement == {"W0": "L1", "W1": "L1", "W2": "L2", "W3": "L2", "W4": "L3"}
    assert all(fig1.pipelines(s) == 1 for s in fig1.switches)


def test_grid_capacities():
    net = _example("grid-fig1")
    assert net.capacity("S3", "PS") == 9
    assert {net.capacity(u, v) for u, v in net.graph.edges if "PS" not in (u, v)} == {3}
    assert {net.spec(s).aggregation_capacity_gbps for s in net.switches} == {9}


def test_eina_aggregator_capacities_match_their_fabric_links():
    net = _example("eina-fig1")
    a0 = net.spec("A0")
    assert (a0.egress_capacity_gbps, a0.ingress_capacity_gbps, a0.aggregation_capacity_gbps) == (
        0.8,
        1,
        1,
    )
    for agg in ("A0", "A1", "A2", "A3"):
        spec = net.spec(agg)
        assert net.capacity(agg, "DCN") == spec.ingress_capacity_gbps
        assert net.capacity("DCN", agg) == spec.egress_capacity_gbps


def test_paring_fat_tree_and_parameters():
    net = _example("paring-fig1")
    tiers = [net.spec(s).tier for s in net.switches]
    assert (tiers.count("core"), tiers.count("aggregation"), tiers.count("edge")) == (4, 8, 8)
    assert net.spec("PS").aggregation_capacity_gbps == 2
    assert {net.spec(s).aggregation_capacity_gbps for s in net.switches if net.is_ina(s)} == {2}
    task = net.tasks[0]
    assert (task.placement, task.rate_cap_gbps, task.ps_aggregation_capacity_gbps) == ("free", 1, 2)
    assert len(task.free_hosts) == 16 and net.schemes["paring"]["gradient_gb"] == 1


# --- the stated rates, from hand-written routes and the independent evaluator ---------------


def _plan(paths: dict[str, list[str]], points: list[tuple], rate: float) -> Plan:
    """points: (switch, fan_in, next_hop[, workers]) on pipeline 0."""
    aggregation = [
        {
            "switch": p[0],
            "pipeline": 0,
            "fan_in": p[1],
            "next_hop": p[2],
            "workers": p[3] if len(p) > 3 else None,
        }
        for p in points
    ]
    return Plan.from_dict(
        {
            "scheme": "paper",
            "status": "feasible",
            "objective": rate,
            "bound": None,
            "solve_seconds": 0.0,
            "seed": 0,
            "tasks": [
                {
                    "job": "job0",
                    "task": "t0",
                    "ps": "PS",
                    "rate_gbps": rate,
                    "paths": paths,
                    "aggregation": aggregation,
                }
            ],
        }
    )


def _rate(name: str, plan: Plan, gradient_mb: float | None = None) -> tuple[float, float | None]:
    result = evaluate(_example(name), plan, gradient_mb=gradient_mb)
    assert result.consistent, result.problems
    task = result.tasks[0]
    return round(task.rate_gbps, 4), task.volume_mb


def _up(worker: str, leaf: str, spine: str) -> list[str]:
    return [worker, leaf, spine, "L0", "PS"]


def test_aro_fig1_rates():
    ecmp = {
        "W0": _up("W0", "L1", "S0"),
        "W1": _up("W1", "L1", "S1"),
        "W2": _up("W2", "L2", "S0"),
        "W3": _up("W3", "L2", "S1"),
        "W4": _up("W4", "L3", "S0"),
    }
    assert _rate("aro-fig1", _plan(ecmp, [], 0.2))[0] == 0.2
    aro = {
        w: _up(w, leaf, "S1")
        for w, leaf in (("W0", "L1"), ("W1", "L1"), ("W2", "L2"), ("W3", "L2"), ("W4", "L3"))
    }
    points = [("L1", 2, "S1"), ("L2", 2, "S1"), ("S1", 3, "L0")]
    assert _rate("aro-fig1", _plan(aro, points, 1.0))[0] == 1.0


def test_aro_fig3a_atp_rate():
    paths = {
        "W0": _up("W0", "L1", "S0"),
        "W1": _up("W1", "L1", "S0"),
        "W2": _up("W2", "L2", "S1"),
        "W3": _up("W3", "L2", "S1"),
        "W4": _up("W4", "L3", "S1"),
    }
    points = [("L1", 2, "S0"), ("L2", 2, "S1"), ("L0", 3, "PS")]
    assert _rate("aro-fig3", _plan(paths, points, 0.5))[0] == 0.5


def test_grid_fig1_rates():
    geryon = {
        **{w: [w, "S1", "S3", "PS"] for w in ("W1", "W2", "W3")},
        "W4": ["W4", "S1", "S2", "S3", "PS"],
        **{w: [w, "S2", "S3", "PS"] for w in ("W5", "W6")},
        **{w: [w, "S3", "PS"] for w in ("W7", "W8")},
    }
    assert _rate("grid-fig1", _plan(geryon, [], 1.0))[0] == 1.0
    points = [
        ("S1", 3, "S3", ["W1", "W2", "W3"]),
        ("S2", 3, "S3", ["W4", "W5", "W6"]),
        ("S3", 2, "PS", ["W7", "W8"]),
    ]
    assert _rate("grid-fig1", _plan(geryon, points, 3.0))[0] == 3.0


def test_eina_fig1_rates():
    def via(worker: str, *aggs: str) -> list[str]:
        hops = [worker]
        for i, agg in enumerate(aggs):
            hops += [agg] if i == 0 else ["DCN", agg]
        return [*hops, "PS"]

    atp = {
        "W0": via("W0", "A0"),
        **{w: via(w, "A1", "A0") for w in ("W1", "W2")},
        **{w: via(w, "A2", "A0") for w in ("W3", "W4")},
    }
    # EINA's aggregators merge (and are charged for) every entering flow (`aggregates: all`):
    # A0 takes W0's flow and A1's and A2's results, 3r ≤ 1 Gbps, so ATP's routes carry 1/3,
    # not the paper's 0.4 (which needs A0 to pass the two results uncharged).
    assert _rate("eina-fig1", _plan(atp, [("A1", 2, "DCN"), ("A2", 2, "DCN")], 1 / 3))[0] == 0.3333
    eina = {
        "W0": via("W0", "A0"),
        **{w: via(w, "A1", "A3", "A0") for w in ("W1", "W2")},
        **{w: via(w, "A2", "A3", "A0") for w in ("W3", "W4")},
    }
    points = [("A1", 2, "DCN"), ("A2", 2, "DCN"), ("A3", 2, "DCN"), ("A0", 2, "PS")]
    assert _rate("eina-fig1", _plan(eina, points, 0.5))[0] == 0.5


def test_paring_fig1_deepsys_and_atp():
    def path(worker: str, edge: str) -> list[str]:
        if edge == "E00":
            return [worker, "E00", "PS"]
        if edge == "E01":
            return [worker, "E01", "A00", "E00", "PS"]
        return [worker, edge, "A10", "C0", "A00", "E00", "PS"]

    edges = {
        "W1": "E10",
        "W2": "E10",
        "W3": "E11",
        "W4": "E11",
        "W5": "E01",
        "W6": "E01",
        "W7": "E00",
    }
    paths = {w: path(w, e) for w, e in edges.items()}
    rate, volume = _rate("paring-fig1", _plan(paths, [], 2 / 7), gradient_mb=1000)
    assert (rate, volume) == (0.2857, 34_000)
    points = [("E11", 2, "A10"), ("A10", 3, "C0"), ("E01", 2, "A00")]
    rate, volume = _rate("paring-fig1", _plan(paths, points, 2 / 3), gradient_mb=1000)
    assert (rate, volume) == (0.6667, 18_000)


# --- validation of hand-written files --------------------------------------------------------


BASE = {
    "hosts": [
        {"name": "PS", "role": "ps"},
        {"name": "W0", "role": "worker"},
        {"name": "W1", "role": "worker"},
    ],
    "switches": [{"name": "L0"}, {"name": "L1", "ina": True, "pipelines": 2}],
    "links": [
        {"a": "PS", "b": "L0", "capacity_gbps": 1},
        {"a": "W0", "b": "L1", "capacity_gbps": 1},
        {"a": "W1", "b": "L1", "capacity_gbps": 1},
        {"a": "L1", "b": "L0", "capacity_gbps": 1},
    ],
    "jobs": [{"name": "job0", "tasks": [{"name": "t0", "ps": "PS", "workers": ["W0", "W1"]}]}],
}


def _load(tmp_path: Path, doc: dict | str) -> Network:
    path = tmp_path / "topo.yaml"
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return load_topology(path)


def _error(tmp_path: Path, doc: dict | str) -> str:
    with pytest.raises(TopologyError) as info:
        _load(tmp_path, doc)
    message = str(info.value)
    assert str(tmp_path / "topo.yaml") in message
    return message


def _mutated(change) -> dict:
    doc = copy.deepcopy(BASE)
    change(doc)
    return doc


def test_base_document_is_valid(tmp_path):
    net = _load(tmp_path, BASE)
    assert net.ingress_pipeline("W0", "L1") == 0 and net.ingress_pipeline("L0", "L1") == 1


def test_unknown_node_in_a_link(tmp_path):
    msg = _error(tmp_path, _mutated(lambda d: d["links"][3].update(b="L9")))
    assert "links[3] (link L1-L9).b" in msg and "unknown node 'L9'" in msg


def test_negative_capacity(tmp_path):
    msg = _error(tmp_path, _mutated(lambda d: d["links"][1].update(capacity_gbps=-2)))
    assert "links[1].capacity_gbps (link W0-L1)" in msg and "greater than or equal to 0" in msg


def test_missing_capacity(tmp_path):
    msg = _error(tmp_path, _mutated(lambda d: d["links"][0].pop("capacity_gbps")))
    assert "links[0].capacity_gbps (link PS-L0)" in msg and "missing" in msg


def test_yaml_syntax_error(tmp_path):
    msg = _error(tmp_path, "hosts:\n  - {name: PS, role: ps\nswitches: []\n")
    assert "YAML syntax error" in msg and "line " in msg and "column " in msg


def test_duplicate_names(tmp_path):
    msg = _error(tmp_path, _mutated(lambda d: d["switches"].append({"name": "W1"})))
    assert "duplicate node name 'W1'" in msg and "switches[2] repeats hosts[2]" in msg


def test_pipeline_map_must_cover_every_used_port(tmp_path):
    msg = _error(tmp_path, _mutated(lambda d: d["switches"][1].update(pipeline_map={1: 0, 2: 1})))
    assert "switches[1] (L1).pipeline_map" in msg
    assert "does not cover port(s) [3]" in msg and "L0" in msg


def test_worker_without_a_path_to_its_ps(tmp_path):
    def cut(doc):
        doc["links"].pop(3)
        doc["switches"].append({"name": "L2"})
        doc["links"].append({"a": "L2", "b": "L0", "capacity_gbps": 1})

    msg = _error(tmp_path, _mutated(cut))
    assert "jobs[0].tasks[0] (job0/t0).workers[0]" in msg
    assert "worker 'W0' has no path to its PS 'PS'" in msg


def test_unknown_field_is_named(tmp_path):
    msg = _error(tmp_path, _mutated(lambda d: d["switches"][0].update(pipelins=2)))
    assert "switches[0].pipelins (L0)" in msg and "unknown field" in msg


# --- hostile and careless files: one clear error, never a traceback or a hang -------------


def _all_links(**fields):
    return lambda d: [link.update(fields) for link in d["links"]]


REJECTED = {
    # name: (change to BASE, words the message must contain)
    "inf capacity": (
        lambda d: d["links"][0].update(capacity_gbps=float("inf")),
        ["links[0].capacity_gbps (link PS-L0)", "finite number"],
    ),
    "nan capacity": (
        lambda d: d["links"][1].update(capacity_gbps=float("nan")),
        ["links[1].capacity_gbps", "finite number"],
    ),
    "denormal capacity": (
        lambda d: d["links"][2].update(capacity_gbps=5e-324),
        ["links[2].capacity_gbps", "at least 0.001 Gbps"],
    ),
    "all capacities zero": (
        _all_links(capacity_gbps=0),
        ["workers[0]", "crosses a link of capacity 0"],
    ),
    "inf reverse capacity": (
        lambda d: d["links"][3].update(reverse_capacity_gbps=float("inf")),
        ["links[3].reverse_capacity_gbps", "finite number"],
    ),
    "inf aggregation capacity": (
        lambda d: d["switches"][1].update(aggregation_capacity_gbps=float("inf")),
        ["switches[1].aggregation_capacity_gbps (L1)", "finite number"],
    ),
    "beta inf": (
        lambda d: d["jobs"][0].update(beta=float("inf")),
        ["jobs[0].beta (job0)", "finite number"],
    ),
    "port 10^8": (
        lambda d: d["links"][3].update(a_port=10**8),
        ["links[3].a_port (link L1-L0)", "less than or equal to 4096"],
    ),
    "port 10^12": (
        lambda d: d["links"][3].update(b_port=10**12),
        ["links[3].b_port", "less than or equal to 4096"],
    ),
    "ports 10^12": (
        lambda d: d["switches"][0].update(ports=10**12),
        ["switches[0].ports (L0)", "less than or equal to 4096"],
    ),
    "pipeline map with 10^4 ports": (
        lambda d: d["switches"][0].update(pipeline_map=dict.fromkeys(range(1, 10**4), 0)),
        ["switches[0].pipeline_map (L0)", "at most 4096 ports"],
    ),
    "true as a capacity": (
        lambda d: d["links"][0].update(capacity_gbps=True),
        ["links[0].capacity_gbps", "valid number", "got True"],
    ),
    "'1e3' as a capacity": (
        lambda d: d["links"][0].update(capacity_gbps="1e3"),
        ["links[0].capacity_gbps", "valid number", "got '1e3'"],
    ),
    "true as pipelines": (
        lambda d: d["switches"][1].update(pipelines=True),
        ["switches[1].pipelines (L1)", "valid integer"],
    ),
    "2.0 as a port": (
        lambda d: d["links"][3].update(a_port=2.0),
        ["links[3].a_port", "valid integer"],
    ),
    "a list as a scheme parameter": (
        lambda d: d.update(schemes={"aro": {"quantization": [1]}}),
        ["schemes.aro.quantization", "finite number, a boolean"],
    ),
    "NaN as a scheme parameter": (
        lambda d: d.update(schemes={"aro": {"mu": float("nan")}}),
        ["schemes.aro.mu", "got float nan"],
    ),
    "worker reaches the PS only through another host": (
        lambda d: d["links"].__setitem__(2, {"a": "W1", "b": "W0", "capacity_gbps": 1}),
        [
            "jobs[0].tasks[0] (job0/t0).workers[1]",
            "passes through another host",
            "hosts do not forward",
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_hostile_values_are_rejected_naming_the_field(tmp_path, name):
    change, words = REJECTED[name]
    message = _error(tmp_path, _mutated(change))
    for word in words:
        assert word in message, message


REJECTED_TEXT = {
    # name: (file bytes, words the message must contain)
    "duplicate key": (
        b"name: a\nname: b\nhosts: []\n",
        ["line 2, column 1", "duplicate key 'name'"],
    ),
    "duplicate key in a link": (
        b"links:\n- {a: PS, b: L0, capacity_gbps: 1, capacity_gbps: 9}\n",
        ["line 2", "duplicate key 'capacity_gbps'"],
    ),
    "nested 100 000 deep": (
        b"hosts: " + b"[" * 100_000 + b"]" * 100_000,
        ["nested more than 64 levels deep"],
    ),
    "nested block mappings": (
        "".join(" " * i + "a:\n" for i in range(5000)).encode(),
        ["nested more than 64"],
    ),
    "latin-1": ("name: café\n".encode("latin-1"), ["not UTF-8", "byte 0xe9"]),
    "UTF-16": ("name: x\n".encode("utf-16"), ["not UTF-8", "UTF-16"]),
    "binary": (bytes(range(256)), ["not UTF-8"]),
    "NUL byte": (b"name: a\x00\n", ["YAML syntax error", "control characters"]),
}


@pytest.mark.parametrize("name", sorted(REJECTED_TEXT))
def test_hostile_files_are_rejected_naming_the_file(tmp_path, name):
    raw, words = REJECTED_TEXT[name]
    (tmp_path / "topo.yaml").write_bytes(raw)
    with pytest.raises(TopologyError) as info:
        load_topology(tmp_path / "topo.yaml")
    message = str(info.value)
    assert str(tmp_path / "topo.yaml") in message
    for word in words:
        assert word in message, message


def test_yaml_merge_keys_may_override_without_being_duplicates():
    merged = "base: &d {capacity_gbps: 1, a: PS}\nlink: {<<: *d, capacity_gbps: 2}\n"
    assert parse_yaml(merged, "m.yaml")["link"] == {"capacity_gbps": 2, "a": "PS"}


def _laughs(levels: int, where: str = "schemes:\n  aro:\n") -> str:
    """A "billion laughs" document: each anchored list repeats the previous one 9 times."""
    lines = [f"    x0: &a0 [{', '.join(['lol'] * 9)}]"]
    lines += [f"    x{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return where + "\n".join(lines) + "\n"


def _expanded(value) -> int:
    return 1 + sum(_expanded(v) for v in value) if isinstance(value, list) else 1


@pytest.mark.parametrize("libyaml", [True, False], ids=["libyaml", "pure-python"])
@pytest.mark.parametrize("levels", range(2, 12))
def test_aliases_that_multiply_the_document_are_refused_before_anything_walks_it(
    monkeypatch, libyaml, levels
):
    if not libyaml:
        monkeypatch.setattr(inputs, "CParser", None)
    text = _laughs(levels)
    nodes = sum(9**k for k in range(1, levels + 1)) + levels  # what a full walk would visit
    if nodes <= MAX_EXPANDED_NODES:
        doc = parse_yaml(text, "laughs.yaml")  # repeating blocks is allowed while it is small
        assert _expanded(doc["schemes"]["aro"][f"x{levels - 1}"]) == sum(
            9**k for k in range(levels + 1)
        )
        return
    with pytest.raises(InputError) as info:
        parse_yaml(text, "laughs.yaml")
    assert "aliases expand the document past" in str(info.value)


def test_a_scheme_parameter_that_is_a_large_aliased_list_is_named_in_a_short_message(tmp_path):
    doc = _mutated(lambda d: None)
    text = yaml.safe_dump(doc) + _laughs(5)  # 66 000 nodes once expanded: under the bound
    (tmp_path / "topo.yaml").write_text(text)
    with pytest.raises(TopologyError) as info:
        load_topology(tmp_path / "topo.yaml")
    message = str(info.value)
    assert "schemes.aro.x4" in message and "finite number, a boolean" in message
    assert len(message) < 3000, len(message)


def test_the_loader_runs_on_libyaml():
    assert yaml.__with_libyaml__
    assert isinstance(_loader("a: 1\n"), yaml._yaml.CParser)


def test_a_malformed_large_file_reports_ten_problems_and_a_count_in_little_memory(tmp_path):
    doc = copy.deepcopy(BASE)
    doc["links"] += [{} for _ in range(20_000)]  # 60 000 missing fields
    tracemalloc.start()
    with pytest.raises(TopologyError) as info:
        build_network(doc, "big.yaml")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    message = str(info.value)
    assert message.count("this required field is missing") == 10
    assert "(and 59990 more problems)" in message
    assert len(message) < 2000
    assert peak < 10e6, f"peak {peak / 1e6:.0f} MB"
