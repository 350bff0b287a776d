"""Accessors the code (and the type checker) relies on: they refuse what callers never pass
with a message that names the mistake, instead of a TypeError deep inside a solver."""

from __future__ import annotations

import pytest
from conftest import EXAMPLES

from controller.model.network import SwitchSpec, load_topology
from controller.solvers import SolveOptions, solve
from controller.solvers.aro.solver import solve_aro
from controller.solvers.eina.solver import solve_eina
from controller.solvers.paring.solver import solve_paring_opt

FIG1 = EXAMPLES / "aro-fig1.yaml"


@pytest.mark.parametrize(
    ("scheme", "topology"),
    [
        (solve_aro, "aro-fig1.yaml"),
        (solve_eina, "eina-fig1.yaml"),
        (solve_paring_opt, "paring-fig1.yaml"),
    ],
)
def test_a_scheme_called_without_solve_says_it_has_no_time_limit(scheme, topology):
    with pytest.raises(ValueError, match="no time limit: call schemes through"):
        scheme(load_topology(EXAMPLES / topology), SolveOptions())


def test_solve_gives_a_scheme_its_default_time_limit():
    plan = solve(load_topology(FIG1), "shortest", SolveOptions())
    assert plan.tasks


def test_switch_spec_reads_a_switch_and_refuses_a_host():
    network = load_topology(FIG1)
    switch, host = network.switches[0], network.hosts[0]
    assert isinstance(network.switch_spec(switch), SwitchSpec)
    with pytest.raises(TypeError, match=f"{host!r} is a host, not a switch"):
        network.switch_spec(host)
