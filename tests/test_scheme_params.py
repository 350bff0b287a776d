"""Scheme parameters have one definition (`controller.solvers.catalog`) that every scheme,
`ina solve --param`, a topology's `schemes:` section and `ina schemes` agree with.

* An unknown key is exit 2 naming the keys the scheme reads, from --param and from the
  topology, for every scheme.
* A value of the wrong type or out of range is exit 2 naming it, for every declared parameter
  (hypothesis draws the values; the reference for "in range" is written here).
* Each declared default is the scheme's own: solving with the default given explicitly makes
  the same plan as solving without it.
* `ina schemes` lists every scheme in 80 columns; `ina schemes NAME` names every parameter.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.cli import main
from controller.model.network import build_network, load_topology
from controller.model.topogen import pool
from controller.solvers import (
    SchemeInputError,
    SolveOptions,
    check_params,
    scheme_names,
    solve,
)
from controller.solvers.catalog import SCHEMES, Param

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "topologies" / "examples"


def _example(scheme: str) -> Path:
    """A small topology the scheme solves in about a second."""
    for prefix, name in (
        ("aro", "aro-fig1"),
        ("eina", "eina-fig1"),
        ("grid", "grid-fig1"),
        ("paring", "paring-fig1"),
        ("deepsys", "paring-fig1"),
        ("marina", "paring-fig1"),
        ("panama", "paring-fig1"),
        ("rr", "eina-fig1"),
    ):
        if scheme.startswith(prefix):
            return EXAMPLES / f"{name}.yaml"
    return EXAMPLES / "aro-fig1.yaml"


def _network(scheme: str):
    if scheme == "atro":
        return build_network(pool(switches=3, max_ports=4, workers=3, capacity_gbps=10.0))
    return load_topology(_example(scheme))


@pytest.mark.parametrize("scheme", scheme_names())
def test_an_unknown_parameter_is_exit_2_naming_what_the_scheme_reads(scheme, capsys):
    assert (
        main(["solve", str(_example(scheme)), "--scheme", scheme, "--param", "quantisation=100"])
        == 2
    )
    out = " ".join(capsys.readouterr().out.split())
    assert f"{scheme}: unknown parameter(s) quantisation" in out
    for param in SCHEMES[scheme].params:
        assert param.name in out


@pytest.mark.parametrize(
    "scheme", ["eina", "eina-iqcp", "eina-plus", "eina-fast", "aro", "shortest"]
)
def test_an_unknown_key_in_the_topologys_section_is_refused(scheme, tmp_path):
    doc = yaml.safe_load((EXAMPLES / "eina-fig1.yaml").read_text())
    doc.setdefault("schemes", {})[scheme] = {"r_maxx": 1}
    network = build_network(doc, "typo.yaml")
    with pytest.raises(
        SchemeInputError,
        match=rf"{scheme}: unknown parameter\(s\) r_maxx "
        rf"\(from typo.yaml, schemes.{scheme}\)",
    ):
        solve(network, "eina" if scheme == "eina-fast" else scheme)


def test_a_section_named_after_no_scheme_is_refused():
    doc = yaml.safe_load((EXAMPLES / "aro-fig1.yaml").read_text())
    doc["schemes"] = {"arro": {"quantization": 10}}
    with pytest.raises(SchemeInputError, match=r"schemes\.arro: there is no scheme 'arro'"):
        solve(build_network(doc, "typo.yaml"), "aro")


def _in_range(param: Param, value) -> bool:
    """The reference: what a value of this parameter may be, written from its definition."""
    if param.kind == "flag":
        return type(value) is bool
    if param.kind == "choice":
        return type(value) is str and value in param.choices
    if param.kind == "text":
        return type(value) is str
    if type(value) not in ((int,) if param.kind == "integer" else (int, float)):
        return False
    if not math.isfinite(value):
        return False
    low_ok = param.minimum is None or (
        value > param.minimum if param.above_minimum else value >= param.minimum
    )
    return low_ok and (param.maximum is None or value <= param.maximum)


PARAMS = [(s.name, p) for s in SCHEMES.values() for p in s.params]
VALUES = st.one_of(
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True),
    st.booleans(),
    st.sampled_from(["", "x", "all", "shortest", "first", "none", "aggregated", "1"]),
    st.sampled_from([0, 1, -1, 0.5, 1.5, 2, 64, 65, 10**9, 10**9 + 1, 1e-9, 1e6, 1e9]),
)


@settings(max_examples=300, deadline=None, database=None)
@given(st.sampled_from(PARAMS), VALUES)
def test_a_value_out_of_type_or_range_is_refused_naming_the_parameter(entry, value):
    scheme, param = entry
    if _in_range(param, value):
        check_params(scheme, {param.name: value})
    else:
        with pytest.raises(SchemeInputError, match=rf"{scheme}: parameter {param.name}="):
            check_params(scheme, {param.name: value})


@pytest.mark.parametrize("value", ["-1", "0", "1.5", "100000000000", '"two"', "true"])
@pytest.mark.parametrize(
    "scheme", ["eina", "eina-iqcp", "eina-plus", "aro", "atro", "paring-opt", "grid-opt"]
)
def test_cp_sat_threads_are_checked_before_the_solver_runs(scheme, value, capsys):
    assert (
        main(
            ["solve", str(_example(scheme)), "--scheme", scheme, "--param", f"num_workers={value}"]
        )
        == 2
    )
    assert "num_workers" in capsys.readouterr().out


@pytest.mark.parametrize(
    "entry",
    [(s, p) for s, p in PARAMS if p.default is not None],
    ids=lambda e: f"{e[0]}:{e[1].name}",
)
def test_each_declared_default_is_the_schemes_own(entry):
    scheme, param = entry
    network = _network(scheme)
    if (
        scheme in SCHEMES
        and SCHEMES[scheme].shares
        and network.schemes.get(SCHEMES[scheme].shares, {}).get(param.name) is not None
    ):
        pytest.skip("the topology's shared section sets it")
    if param.name in network.schemes.get(scheme, {}):
        pytest.skip("the topology sets it")
    options = {"time_limit": 20, "seed": 3}
    plain = solve(network, scheme, SolveOptions(**options))
    given_ = solve(network, scheme, SolveOptions(**options, params={param.name: param.default}))
    assert given_.objective == pytest.approx(plain.objective, rel=1e-9, abs=1e-12)
    assert given_.status == plain.status


def test_ina_schemes_lists_every_scheme_in_80_columns():
    out = subprocess.run(
        [sys.executable, "-m", "controller.cli", "schemes"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    names = [line.split()[0] for line in out.splitlines() if line and not line[0].isspace()]
    assert set(scheme_names()) <= set(names)
    assert max(len(line) for line in out.splitlines()) <= 80


@pytest.mark.parametrize("scheme", scheme_names())
def test_ina_schemes_name_gives_the_paper_time_limit_and_every_parameter(scheme, capsys):
    assert main(["schemes", scheme]) == 0
    out = capsys.readouterr().out
    entry = SCHEMES[scheme]
    assert max(len(line) for line in out.splitlines()) <= 80
    flat = " ".join(out.split())
    assert f"paper: {entry.paper}" in flat
    limit = "none" if entry.time_limit is None else f"{entry.time_limit:g} s"
    assert f"default time limit: {limit}" in flat
    for param in entry.params:
        assert f"{param.name} ({param.wanted()}, default {param.shown_default()})" in flat


def test_ina_schemes_of_an_unknown_name_is_exit_2(capsys):
    assert main(["schemes", "arro"]) == 2
    assert "unknown scheme 'arro'" in capsys.readouterr().out


@pytest.mark.parametrize("scheme", [s for s in scheme_names() if not SCHEMES[s].builds_network])
def test_a_scheme_that_routes_as_is_refuses_a_pool_it_cannot_build(scheme):
    network = build_network(pool(switches=3, max_ports=4, workers=4), "pool.yaml")
    with pytest.raises(
        SchemeInputError,
        match=rf"pool.yaml is a reconfigurable pool: S0 has 7 "
        rf"candidate links for its 4 ports .* {scheme} "
        rf"routes on the topology as it is",
    ):
        solve(network, scheme)


def test_a_pool_whose_every_candidate_fits_is_an_ordinary_network():
    # two switches, one worker and the PS: S0 and S1 have 3 candidates each for 3 ports
    network = build_network(pool(switches=2, max_ports=3, workers=1), "pool.yaml")
    assert solve(network, "shortest").tasks
