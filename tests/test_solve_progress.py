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

from controller.model.network import load_topology
from controller.model.topogen import leaf_spine
from controller.solvers import progress, solve

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def large(tmp_path_factory) -> Path:
    """README's leaf-spine: aro-raw takes a few seconds on it."""
    doc = leaf_spine(seed=0)  # `ina topo gen leaf-spine`'s defaults
    path = tmp_path_factory.mktemp("progress") / "ls.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _solve(topology: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "controller.cli",
            "solve",
            str(topology),
            "--scheme",
            "aro-raw",
            *flags,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )


def test_progress_lines_give_the_elapsed_time_against_the_limit(large):
    err = _solve(large, "--progress", "--progress-every", "0.2").stderr.splitlines()
    assert err and all(
        re.fullmatch(r"aro-raw: \d+ s of 120 s(, best .*)?", line) for line in err
    ), err


def test_a_bisection_reports_its_best_rate_and_bound(large):
    network = load_topology(large)
    with progress.watch(io.StringIO(), "aro-raw", 120, interval=1000):
        plan = solve(network, "aro-raw")
    shown = progress.line("aro-raw", 3, 120)
    found = re.fullmatch(
        r"aro-raw: 3 s of 120 s, best common rate ([\d.]+) Gbps, "
        r"bound ([\d.]+) Gbps",
        shown,
    )
    assert found, shown
    best, bound = map(float, found.groups())
    assert best <= bound and bound >= plan.objective * (1 - 1e-3)


def test_no_progress_when_quiet_or_piped(large):
    assert _solve(large, "--quiet", "--progress-every", "0.2").stderr == ""
    assert _solve(large, "--progress-every", "0.2").stderr == ""  # stderr is a pipe here
