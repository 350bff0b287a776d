"""`ina solve` shows a long solve's progress on stderr: on a terminal, or with --progress;
never with --quiet, and not when stderr is piped unless asked. The lines carry the elapsed
time against the limit and, where the scheme reports them, its best rate and bound so far."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from controller.bench.paring import fat_tree_doc
from controller.network import build_network, load_topology
from controller.solvers import SolveOptions, progress, solve
from controller.topogen import leaf_spine

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "topologies" / "examples"


@pytest.fixture(scope="module")
def large(tmp_path_factory) -> Path:
    """README's leaf-spine: aro-raw takes a few seconds on it."""
    doc = leaf_spine(seed=0)  # `ina topo gen leaf-spine`'s defaults
    path = tmp_path_factory.mktemp("progress") / "ls.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _solve(topology: Path, *flags: str, scheme: str = "aro-raw") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "controller.cli", "solve", str(topology),
                           "--scheme", scheme, *flags], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, check=True)


def test_progress_lines_give_the_elapsed_time_against_the_limit(large):
    err = _solve(large, "--progress", "--progress-every", "0.2").stderr.splitlines()
    assert err and all(re.fullmatch(r"aro-raw: \d+ s of 120 s(, best .*)?", line)
                       for line in err), err


def test_a_bisection_reports_its_best_rate_and_bound(large):
    network = load_topology(large)
    with progress.watch(io.StringIO(), "aro-raw", 120, interval=1000):
        plan = solve(network, "aro-raw")
    shown = progress.line("aro-raw", 3, 120)
    found = re.fullmatch(r"aro-raw: 3 s of 120 s, best common rate ([\d.]+) Gbps, "
                         r"bound ([\d.]+) Gbps", shown)
    assert found, shown
    best, bound = map(float, found.groups())
    assert best <= bound and bound >= plan.objective * (1 - 1e-3)


def test_no_progress_when_quiet_or_piped(large):
    assert _solve(large, "--quiet", "--progress-every", "0.2").stderr == ""
    assert _solve(large, "--progress-every", "0.2").stderr == ""  # stderr is a pipe here


# grid-opt's and paring-opt's exact searches, each cut at 3 s: per probe, the best value in
# the scheme's model and the bound proven so far
SEARCHES = {
    "grid-opt": lambda: leaf_spine(seed=0),
    "paring-opt": lambda: fat_tree_doc(20, 8, 5.0),  # one PS: candidate rates, highest first
    "paring-opt-2ps": lambda: yaml.safe_load((EXAMPLES / "paring-2ps.yaml").read_text()),
}


@pytest.fixture(scope="module", params=sorted(SEARCHES))
def search(request, tmp_path_factory) -> tuple[str, Path]:
    path = tmp_path_factory.mktemp("search") / f"{request.param}.yaml"
    path.write_text(yaml.safe_dump(SEARCHES[request.param]()))
    return request.param.removesuffix("-2ps"), path


def test_exact_searches_report_their_best_and_bound_on_the_command_line(search):
    scheme, path = search
    err = _solve(path, "--progress", "--progress-every", "0.5", "--time-limit", "3",
                 scheme=scheme).stderr.splitlines()
    assert err and all(re.fullmatch(rf"{scheme}: \d+ s of 3 s(, best .*)?", line)
                       for line in err), err
    full = [re.fullmatch(rf"{scheme}: \d+ s of 3 s, best [\w ]+ ([\d.]+) Gbps, "
                         r"bound ([\d.]+) Gbps", line) for line in err]
    assert any(full), err
    assert all(float(m[1]) <= float(m[2]) for m in full if m), err
    assert _solve(path, "--quiet", "--progress-every", "0.5", "--time-limit", "3",
                  scheme=scheme).stderr == ""


@pytest.mark.parametrize("name", sorted(SEARCHES))
def test_the_last_report_of_an_exact_search_is_its_answer(name):
    """What the last line shows is what the plan says: the model's value and bound."""
    network = build_network(SEARCHES[name]())
    scheme = name.removesuffix("-2ps")
    with progress.watch(io.StringIO(), scheme, 3, interval=1000):
        plan = solve(network, scheme, SolveOptions(time_limit=3, seed=0))
    found = re.fullmatch(rf"{scheme}: 3 s of 3 s, best [\w ]+ ([\d.]+) Gbps, "
                         r"bound ([\d.]+) Gbps", progress.line(scheme, 3, 3))
    assert found, progress.line(scheme, 3, 3)
    best, bound = map(float, found.groups())
    assert best <= bound
    if scheme == "grid-opt":  # one task: its λ in problem (1) and the bound proven on it
        (task,) = plan.details["model_value_gbps"]
        assert best == pytest.approx(plan.details["model_value_gbps"][task], rel=1e-3)
        assert bound == pytest.approx(plan.details["model_bound_gbps"][task], rel=1e-3)
    else:  # the rate of the best trees found and the bound on it
        assert best == pytest.approx(plan.objective, rel=1e-3)
        assert bound == pytest.approx(plan.bound, rel=1e-3)
