"""`ina solve --progress` on the exact searches of GRID's and PARING's problem (1): `grid-opt`
probes λ by bisection, `paring-opt` tries candidate rates from the highest down (two PSs: rate
pairs). Each reports, as it goes, the best rate in its model and the bound proven so far; the
last report is the plan's own rate and bound."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from controller.model.network import build_network
from controller.model.topogen import leaf_spine
from controller.solvers import SolveOptions, progress, solve
from controller.tools.bench.paring import fat_tree_doc

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "topologies" / "examples"

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


def _solve(topology: Path, scheme: str, *flags: str) -> subprocess.CompletedProcess:
    """`ina solve` cut at 3 s, as a user runs it."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "controller.cli",
            "solve",
            str(topology),
            "--scheme",
            scheme,
            "--time-limit",
            "3",
            *flags,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )


def test_exact_searches_report_their_best_and_bound_on_the_command_line(search):
    scheme, path = search
    err = _solve(path, scheme, "--progress", "--progress-every", "0.5").stderr.splitlines()
    assert err and all(
        re.fullmatch(
            rf"{scheme}: \d+ s of 3 s(, best [\w/ ]+ [\d.]+ Gbps)?"
            r"(, bound [\d.]+ Gbps)?",
            line,
        )
        for line in err
    ), err
    full = [
        re.fullmatch(
            rf"{scheme}: \d+ s of 3 s, best [\w/ ]+ ([\d.]+) Gbps, "
            r"bound ([\d.]+) Gbps",
            line,
        )
        for line in err
    ]
    assert any(full), err
    assert all(float(m[1]) <= float(m[2]) for m in full if m), err
    if scheme == "grid-opt":  # --quiet is the same flag for every scheme
        assert _solve(path, scheme, "--quiet", "--progress-every", "0.5").stderr == ""


@pytest.mark.parametrize("name", ["paring-opt", "paring-opt-2ps"])
def test_the_last_report_of_an_exact_search_is_its_answer(name):
    """What the last line shows is what the plan says: its rate and bound."""
    network = build_network(SEARCHES[name]())
    scheme = name.removesuffix("-2ps")
    with progress.watch(io.StringIO(), scheme, 3, interval=1000):
        plan = solve(network, scheme, SolveOptions(time_limit=3, seed=0))
    found = re.fullmatch(
        rf"{scheme}: 3 s of 3 s, best [\w/ ]+ ([\d.]+) Gbps, "
        r"bound ([\d.]+) Gbps",
        progress.line(scheme, 3, 3),
    )
    assert found, progress.line(scheme, 3, 3)
    best, bound = map(float, found.groups())
    assert best <= bound
    assert best == pytest.approx(plan.objective, rel=1e-3)
    assert bound == pytest.approx(plan.bound, rel=1e-3)


def test_grid_opt_reports_the_bound_it_proves_as_it_goes(monkeypatch):
    """During the search the bound is the task's λ bound in problem (1), which falls as probes
    refute values; each reported bound is at least the one the plan ends with."""
    network = build_network(leaf_spine(seed=0))
    seen = []
    monkeypatch.setattr(
        progress,
        "report",
        lambda best=None, bound=None, what="rate": seen.append((best, bound, what)),
    )
    plan = solve(network, "grid-opt", SolveOptions(time_limit=3, seed=0))
    model = [(b, c) for b, c, w in seen if w == "model rate"]
    (task,) = plan.details["model_bound_gbps"]
    assert model and all(c >= plan.details["model_bound_gbps"][task] for _, c in model)
    assert model[-1][1] == pytest.approx(plan.details["model_bound_gbps"][task])
    assert [c for _, c in model] == sorted((c for _, c in model), reverse=True)
    assert seen[-1] == (plan.objective, plan.bound, "rate")  # the plan's, as it prints them
